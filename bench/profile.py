"""A readable summary of the operator's cProfile stats (`python -m bench --profile-operator`)."""

from __future__ import annotations

import io
import pstats
from pathlib import Path

TOP = 30


def summary(stats_file: Path) -> str:
    """The top functions by cumulative and by own time, paths relative to site-packages."""
    out = io.StringIO()
    stats = pstats.Stats(str(stats_file), stream=out)
    stats.strip_dirs()
    for order in ("cumulative", "tottime"):
        out.write(f"\n=== by {order} time ===\n")
        stats.sort_stats(order).print_stats(TOP)
    return out.getvalue()
