"""The operator process's cyclic garbage collector: what was alive once the operator is imported
is frozen, the young generations are collected less often, and every collection's CPU seconds are
counted (rljob_gc_seconds_total{generation}).

CPython's collector scans a generation each time enough container objects were allocated (700,
then every tenth, then every tenth again with the old generation grown by a quarter). A health
round at 500 jobs decodes and parses tens of thousands of series, so collections came many times
a round, and each full one traversed the whole heap: the modules, classes and pydantic schemas of
the imports (most of the objects) and every job's state. Objects alive after the imports are
never garbage, so `gc.freeze` moves them where no collection looks; the larger thresholds let a
round's transient objects die by reference count before a collection sees them. Cyclic garbage
is still collected, by the young generations soon after it forms and by the full collection for
what outlived them. While a health round runs the collector is paused: the round's answers die
by reference count when it ends, before any collection scans them (cyclic garbage made
meanwhile waits for the round's end). bench/analysis.md has the measurements."""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from typing import Any

from rljob.observability import GC_SECONDS

# Container allocations between young collections, young collections between middle ones, and
# middle collections between full ones (CPython's defaults: 700, 10, 10).
OPERATOR_THRESHOLDS = (5_000, 20, 10)


def freeze_imports_and_relax_collection() -> None:
    """Collects once, freezes what survives (the imported modules' objects) and sets the
    operator's thresholds; call after the imports and before the first job is read."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*OPERATOR_THRESHOLDS)


class _Pauses:
    """Rounds of several sources overlap: the collector runs again when the last one ends, and
    only if it ran before the first began."""

    depth = 0
    resume = False


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection inside the block (see the module docstring)."""
    if _Pauses.depth == 0:
        _Pauses.resume = gc.isenabled()
        gc.disable()
    _Pauses.depth += 1
    try:
        yield
    finally:
        _Pauses.depth -= 1
        if _Pauses.depth == 0 and _Pauses.resume:
            gc.enable()


def count_collection_seconds() -> None:
    """Adds each collection's CPU seconds to rljob_gc_seconds_total{generation}."""
    by_generation = [GC_SECONDS.labels(generation=str(g)) for g in range(3)]
    started = 0.0

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        nonlocal started
        if phase == "start":
            started = time.thread_time()
        else:
            by_generation[info["generation"]].inc(time.thread_time() - started)

    gc.callbacks.append(on_collection)
