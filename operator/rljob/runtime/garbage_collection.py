"""The operator process's cyclic garbage collector: what was alive once the operator is imported
is frozen, and the young generations are collected less often.

CPython's collector scans a generation each time enough container objects were allocated (700,
then every tenth, then every hundredth with the old generation grown by a quarter). A health round
at 500 jobs allocates hundreds of thousands of short-lived tuples, dictionaries and series, so
the full collections came every few rounds and each traversed the whole heap: the modules,
classes and pydantic schemas of the imports (most of the objects) and every job's state. They
took about 15 % of the health loop's CPU and stalled the event loop for a quarter of a second
each (bench/analysis.md). Objects alive after the imports are never garbage, so `gc.freeze`
moves them where no collection looks; the larger thresholds let the round's transient objects
die by reference count before a collection ever sees them. Cyclic garbage is still collected, by
the young generations soon after it forms and by the full collection for what outlived them."""

from __future__ import annotations

import gc

# Container allocations between young collections, young collections between middle ones, and
# middle collections between full ones (CPython's defaults: 700, 10, 10).
OPERATOR_THRESHOLDS = (5_000, 20, 10)


def freeze_imports_and_relax_collection() -> None:
    """Collects once, freezes what survives (the imported modules' objects) and sets the
    operator's thresholds; call after the imports and before the first job is read."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*OPERATOR_THRESHOLDS)
