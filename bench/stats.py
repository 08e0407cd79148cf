"""Percentiles and how a figure grows with the number of jobs: the pure arithmetic of the
benchmarks (unit-tested in tests/unit/test_bench.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

# A figure whose last value is within this share of its first did not grow.
FLAT_TOLERANCE = 0.25
# log-log slopes between the smallest and the largest size: below SUBLINEAR it is "sublinear",
# up to LINEAR "linear", beyond that "worse than linear".
SUBLINEAR = 0.75
LINEAR = 1.25
# Values at or below this are zero for growth purposes (e.g. no writes at all).
ZERO = 1e-9


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks, as numpy's
    default does; NaN for no values."""
    if not values:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


Point = tuple[float, float]  # (size, value)


def _ends(sizes: Sequence[float], values: Sequence[float]) -> tuple[Point, Point] | None:
    """The (size, value) of the smallest and the largest size with a value; None unless two
    different sizes have one."""
    points = sorted((s, v) for s, v in zip(sizes, values, strict=True) if not math.isnan(v))
    if len(points) < 2 or points[0][0] == points[-1][0]:
        return None
    return points[0], points[-1]


def growth(sizes: Sequence[float], values: Sequence[float]) -> str:
    """How `values` grows from the smallest to the largest of `sizes`: "flat", "sublinear",
    "linear" or "worse than linear" (the slope of log(value) over log(size))."""
    ends = _ends(sizes, values)
    if ends is None:
        return "n/a (one size)"
    (size_0, first), (size_n, last) = ends
    if last <= ZERO:
        return "flat (zero)"
    if first <= ZERO:
        return "grows from zero"
    if abs(last / first - 1) <= FLAT_TOLERANCE or last < first:
        return "flat"
    exponent = math.log(last / first) / math.log(size_n / size_0)
    if exponent < SUBLINEAR:
        return "sublinear"
    if exponent <= LINEAR:
        return "linear"
    return "worse than linear"


def slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    """Change of the value per unit of size from the smallest to the largest size (NaN with
    fewer than two sizes)."""
    ends = _ends(sizes, values)
    if ends is None:
        return math.nan
    (size_0, first), (size_n, last) = ends
    return (last - first) / (size_n - size_0)


def size_at(sizes: Sequence[float], values: Sequence[float], bound: float) -> float:
    """The size at which the value reaches `bound`, extrapolating the line through the smallest
    and the largest size; inf when it does not grow, NaN with fewer than two sizes."""
    ends = _ends(sizes, values)
    if ends is None:
        return math.nan
    (size_0, first), (size_n, last) = ends
    if last <= first:
        return math.inf
    return size_n + (bound - last) * (size_n - size_0) / (last - first)
