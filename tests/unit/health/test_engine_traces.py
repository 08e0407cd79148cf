"""The stored real-core traces (bench/traces/vllm: vLLM 0.33.0's own scheduler and KV cache
manager, bench/vllm_core/README.md) replayed through every engine detector as the health loop
feeds them (bench.engine_causes): each fault is found with its named cause within two windows of
its onset, and nothing else is found, on the no-fault traces or before an onset."""

from __future__ import annotations

import pytest
from bench.engine_causes import (
    DETECTORS,
    EXPECTED,
    MEMORY_FAULT,
    PHASES,
    SIMULATED_ONLY,
    TRACES,
    WINDOW,
    Outcome,
    Trace,
    load,
    replay,
)

NO_FAULT = ("rl", "rl-no-reset", "weight-sync-inflight", "sleep-wake", "load-shift")
# Host memory growth is decided on the simulator: a 20-minute trace is shorter than its warm-up.
FAULTS = tuple(fault for fault in EXPECTED if fault not in SIMULATED_ONLY)


def _replays(name: str) -> tuple[Trace, list[dict[str, Outcome]]]:
    trace = load(TRACES / f"{name}.jsonl.gz")
    return trace, [replay(trace, phase) for phase in PHASES]


@pytest.mark.parametrize("name", NO_FAULT)
def test_a_no_fault_trace_gives_no_finding(name: str) -> None:
    trace, runs = _replays(name)

    assert trace.fault is None
    found = {(d, o.found_at, o.false_restarts) for run in runs for d, o in run.items()}
    assert found == {(d, None, 0) for d in DETECTORS}


@pytest.mark.parametrize("name", FAULTS)
def test_a_fault_is_found_with_its_cause(name: str) -> None:
    trace, runs = _replays(name)
    detector, named = EXPECTED[name]

    assert trace.fault == name and trace.onset is not None
    for run in runs:
        outcome = run[detector]
        assert outcome.found_at is not None, f"{detector} missed {name}"
        assert outcome.named == named
        assert outcome.found_at - trace.onset <= 2 * WINDOW
        assert sum(o.false_restarts for o in run.values()) == 0


def test_only_the_expected_detectors_find_the_faults() -> None:
    found = {}
    for name in (*FAULTS, MEMORY_FAULT):
        _, runs = _replays(name)
        found[name] = sorted({d for run in runs for d, o in run.items() if o.found_at})

    # Today's stall detector also ends the leak's wedged queue, later and naming it.
    assert found == {
        "leak": ["engine_stall", "kv_leak"],
        "prefix-collapse": ["prefix_collapse"],
        "frozen": ["engine_stall"],
        "memory-growth": [],
    }
