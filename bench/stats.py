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


def growth(sizes: Sequence[float], values: Sequence[float]) -> str:
    """How `values` grows from the smallest to the largest of `sizes`: "flat", "sublinear",
    "linear" or "worse than linear" (the slope of log(value) over log(size))."""
    if len(sizes) != len(values):
        raise ValueError("sizes and values differ in length")
    points = sorted((s, v) for s, v in zip(sizes, values, strict=True) if not math.isnan(v))
    if len(points) < 2 or points[0][0] == points[-1][0]:
        return "n/a (one size)"
    (size_0, first), (size_n, last) = points[0], points[-1]
    if last <= ZERO:
        return "flat (zero)"
    if first <= ZERO:
        return "grows from zero"
    if abs(last / first - 1) <= FLAT_TOLERANCE or last < first:
        return "flat"
    slope = math.log(last / first) / math.log(size_n / size_0)
    if slope < SUBLINEAR:
        return "sublinear"
    if slope <= LINEAR:
        return "linear"
    return "worse than linear"


def per_minute(count: float, seconds: float) -> float:
    return count * 60 / seconds if seconds > 0 else math.nan


def ratio(value: float, target: float) -> float:
    """value / target: below 1 meets an upper-bound target."""
    return value / target if target else math.nan
