"""The least-squares line through (x, y) points, centred so that unix seconds keep their
precision: the bottleneck's queue trend and step-time fit, the reward-hacking canary's slopes."""

from __future__ import annotations

import math
from collections.abc import Sequence


def least_squares(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(intercept, slope); None without two distinct x."""
    count = len(points)
    if count < 2:
        return None
    mean_x = math.fsum(x for x, _ in points) / count
    mean_y = math.fsum(y for _, y in points) / count
    spread = math.fsum((x - mean_x) ** 2 for x, _ in points)
    if not spread > 0:
        return None
    slope = math.fsum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return mean_y - slope * mean_x, slope
