"""The operator's collector settings: what the imports left alive is frozen, out of every
collection's reach, and the thresholds are the operator's."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from prometheus_client import REGISTRY

from rljob.runtime.garbage_collection import (
    OPERATOR_THRESHOLDS,
    collection_paused,
    count_collection_seconds,
)

# In a fresh interpreter (the test process's own collector stays as it is): the import's objects
# are frozen, a cycle made afterwards is still collected, and the thresholds are set.
AFTER_IMPORTS = """
import gc, weakref
import rljob.handlers
from rljob.runtime.garbage_collection import freeze_imports_and_relax_collection
freeze_imports_and_relax_collection()
class Node: pass
node = Node(); node.self = node; alive = weakref.ref(node); del node
gc.collect()
print(gc.get_freeze_count() > 10_000, alive() is None, *gc.get_threshold())
"""


def test_the_imports_are_frozen_and_later_cycles_still_collected() -> None:
    done = subprocess.run(
        [sys.executable, "-c", AFTER_IMPORTS],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    frozen, collected, *thresholds = done.stdout.split()
    assert (frozen, collected) == ("True", "True")
    assert tuple(map(int, thresholds)) == OPERATOR_THRESHOLDS


def test_each_collection_adds_its_seconds_to_its_generation() -> None:
    count_collection_seconds()
    try:
        before = _full_collection_seconds()
        cycles: list[list[object]] = [[] for _ in range(50_000)]
        for one in cycles:
            one.append(one)
        del cycles
        gc.collect()
        assert _full_collection_seconds() > before
    finally:
        gc.callbacks.pop()


def _full_collection_seconds() -> float:
    return REGISTRY.get_sample_value("rljob_gc_seconds_total", {"generation": "2"}) or 0.0


def test_overlapping_pauses_resume_the_collector_when_the_last_ends() -> None:
    first, second = collection_paused(), collection_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_a_collector_disabled_before_the_pause_stays_disabled() -> None:
    gc.disable()
    try:
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_block_still_resumes_the_collector() -> None:
    with pytest.raises(RuntimeError), collection_paused():
        raise RuntimeError("the round failed")
    assert gc.isenabled()
