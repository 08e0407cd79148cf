"""NCCL and CUDA failures as an 8-GPU node's container log reads (tests/fixtures/nccl: real
torchrun output with upstream ProcessGroupNCCL, NCCL and CUDA messages spliced in, README.md
cites each). Read through the entrypoint wrapper's evidence, each gives the root-cause rank's
reason; without the wrapper the kubelet's log tail often lacks the NCCL lines (they come before
torchrun's long summary), which the second expectation records."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from rljob.health import ContainerTermination, classify_termination
from rljob.sdk.evidence import SUMMARY_LIMIT, Evidence
from rljob.vocabulary.enums import FailureReason
from tests.fixtures.nccl.splice import RECIPES, build
from tests.upstream.torchrun_bed import fallback_tail

R = FailureReason
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl"
TORCHRUN_FAILED = 1


@dataclass(frozen=True)
class Seen:
    reason: FailureReason
    rank: int
    exit_code: int
    primary: bool = True


CASES = [
    pytest.param(
        "user-error-behind-watchdog-timeouts",
        Seen(R.CONTAINER_FAILED, 5, 1),
        Seen(R.CONTAINER_FAILED, 5, 1),
        id="user-error-behind-watchdog-timeouts",
    ),
    pytest.param(
        "watchdog-timeouts-only",
        Seen(R.NCCL_TIMEOUT, 0, 134, primary=False),
        Seen(R.CONTAINER_FAILED, 0, 134),
        id="watchdog-timeouts-only",
    ),
    pytest.param(
        "older-watchdog-wording",
        Seen(R.NCCL_TIMEOUT, 0, 134, primary=False),
        Seen(R.CONTAINER_FAILED, 0, 134),
        id="older-watchdog-wording",
    ),
    pytest.param(
        "heartbeat-monitor-watchdog-stuck",
        Seen(R.NCCL_TIMEOUT, 3, 134),
        Seen(R.CONTAINER_FAILED, 0, 134),
        id="heartbeat-monitor-watchdog-stuck",
    ),
    pytest.param(
        "nccl-unhandled-system-error",
        Seen(R.NCCL_NETWORK_ERROR, 5, 1),
        Seen(R.NCCL_NETWORK_ERROR, 5, 1),
        id="nccl-unhandled-system-error",
    ),
    pytest.param(
        "cuda-out-of-memory",
        Seen(R.CUDA_OUT_OF_MEMORY, 5, 1),
        Seen(R.CUDA_OUT_OF_MEMORY, 5, 1),
        id="cuda-out-of-memory",
    ),
    pytest.param(
        "cuda-illegal-memory-access",
        Seen(R.CUDA_ERROR, 5, 1),
        Seen(R.CUDA_ERROR, 5, 1),
        id="cuda-illegal-memory-access",
    ),
    pytest.param(
        "gpu-uncorrectable-ecc",
        Seen(R.GPU_HARDWARE_ERROR, 5, 1),
        Seen(R.GPU_HARDWARE_ERROR, 5, 1),
        id="gpu-uncorrectable-ecc",
    ),
]


def seen(message: str) -> Seen:
    classified = classify_termination(ContainerTermination(TORCHRUN_FAILED, "Error", message))
    assert classified is not None and classified.rank is not None, message
    assert classified.exit_code is not None
    return Seen(classified.reason, classified.rank, classified.exit_code, classified.primary)


def wrapper_summary(log: str) -> str:
    evidence = Evidence()
    for line in log.splitlines(keepends=True):
        evidence.feed(line)
    return evidence.summary(TORCHRUN_FAILED)


@pytest.mark.parametrize(("name", "with_wrapper", "from_tail"), CASES)
def test_nccl_fixtures_give_the_root_cause_ranks_reason(
    name: str, with_wrapper: Seen, from_tail: Seen
) -> None:
    log = (FIXTURES / f"{name}.log").read_text()

    summary = wrapper_summary(log)

    assert len(summary.encode()) <= SUMMARY_LIMIT
    assert seen(summary) == with_wrapper
    assert seen(fallback_tail(log)) == from_tail


def test_every_recipe_has_a_case_and_the_fixtures_are_current() -> None:
    assert {case.values[0] for case in CASES} == set(RECIPES)
    for name, recipe in RECIPES.items():
        assert (FIXTURES / f"{name}.log").read_text() == build(recipe), name
