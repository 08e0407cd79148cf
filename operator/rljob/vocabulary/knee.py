"""The knee's verdict on a throughput-versus-concurrency curve, and its terminal plot: the operator
finds the knee (rljob.health.knee) and writes it into status, the kubectl plugin draws it back
from there."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# (requests in flight, throughput)
Point = tuple[float, float]


@dataclass(frozen=True, slots=True)
class Confidence:
    """How much of the curve the verdict stands on."""

    bins: int  # bins with enough seconds (the points)
    coverage: float  # share of the log2 span lowest..highest observed that they cover
    lowest: float  # the span observed, thin bins included
    highest: float


@dataclass(frozen=True, slots=True)
class Knee:
    """The curve's verdict: concurrencies are requests in flight, throughput in `unit`."""

    knee: float | None
    peak_concurrency: float | None
    peak_throughput: float | None
    degrading_from: float | None  # lowest concurrency past the peak where throughput fell
    recommended: float | None  # None when there is no knee to keep headroom below
    confidence: Confidence
    beyond: bool  # still climbing at the top: the knee lies above what the job ran
    message: str

    def describe(self) -> str:
        return self.message


def format_count(concurrency: float) -> str:
    """Requests in flight: whole from ten up, two significant digits below."""
    return f"{concurrency:.0f}" if concurrency >= 10 else f"{concurrency:.2g}"


def format_amount(throughput: float) -> str:
    return f"{throughput:.0f}" if throughput >= 100 else f"{throughput:.3g}"


def plot(
    points: Sequence[Point], knee: Knee | None, width: int = 60, height: int = 12
) -> list[str]:
    """A terminal plot of throughput against log2 concurrency: `height` rows of points, then the
    x axis with K at the knee and R at the recommendation, then the axis' range."""
    curve = sorted((c, t) for c, t in points if c > 0 and math.isfinite(c) and math.isfinite(t))
    if not curve:
        return ["(no concurrency has enough time observed to plot)"]
    width, height = max(width, 16), max(height, 2)
    wanted = (("K", knee.knee), ("R", knee.recommended)) if knee else ()
    marks = [(mark, c) for mark, c in wanted if c is not None and c > 0]
    xs = [c for c, _ in curve] + [c for _, c in marks]
    low, high = math.log2(min(xs)), math.log2(max(xs))
    spread = high - low or 1.0
    top = max(t for _, t in curve) or 1.0

    def column(c: float) -> int:
        return round((math.log2(c) - low) / spread * (width - 1))

    grid = [[" "] * width for _ in range(height)]
    for c, t in curve:
        grid[height - 1 - round(max(t, 0.0) / top * (height - 1))][column(c)] = "*"
    labels = [format_amount(top), *[""] * (height - 2), "0"]
    pad = max(len(label) for label in labels)
    lines = [f"{label:>{pad}} |{''.join(row)}" for label, row in zip(labels, grid, strict=True)]
    axis = ["-"] * width
    for mark, c in marks:
        spot = column(c)
        # K and R a column apart at worst: the recommendation yields, it is the knee's shadow.
        axis[spot if axis[spot] == "-" else max(spot - 1, 0)] = mark
    lines.append(f"{' ' * pad} +{''.join(axis)}")
    left, right = format_count(2**low), f"{format_count(2**high)} in flight"
    lines.append(f"{' ' * (pad + 2)}{left}{right.rjust(width - len(left))}")
    return lines
