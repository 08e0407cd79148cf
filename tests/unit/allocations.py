"""What a block of code leaves allocated by the project's own code, as tracemalloc sees it.
Counting every allocation of the process also counts other threads' (pytest-xdist's channel
to the controller), which made a bound of a few kilobytes flaky under `-n 2`."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The operator's modules and the tests' own helpers: their lines are where an allocation of
# theirs is charged, arrays grown by `append` included.
PROJECT = (tracemalloc.Filter(True, "*/rljob/*"), tracemalloc.Filter(True, "*/tests/*"))


def bytes_kept(build: Callable[[], T]) -> tuple[T, int]:
    """`build()`'s result and the bytes the project's code allocated in it and still holds."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(PROJECT)
        result = build()
        after = tracemalloc.take_snapshot().filter_traces(PROJECT)
    finally:
        tracemalloc.stop()
    return result, sum(stat.size_diff for stat in after.compare_to(before, "filename"))
