"""The action engine (machine.py) on a Gated job whose trainer attempt fails while the rollout
restarts in turn: the failure is acted on within a few passes (a gang restart journaled, the
in-turn restart ended with a Warning), every invariant checked after each step. The exploration
(test_drain_model.py) reaches these interleavings among all others; these replays pin them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.unit.model.machine import NAME
from tests.unit.model.test_drain_model import FLEET, IDLE, SETTLE, Step, replay

NCCL_FAILS: Step = ("trainer_rank_fails", {"index": 0, "how": "nccl-timeout"})
MANUAL: Step = ("user_requests_a_restart", {"role": "rollout"})
PREEMPTED = "RoleRestartInTurnPreempted"


@pytest.mark.parametrize(
    ("steps", "left"),
    [
        pytest.param([FLEET, NCCL_FAILS, ("world_settles", {"rounds": 4})],
                     "stopped draining", id="while-the-first-engine-drains"),
        pytest.param([FLEET, SETTLE, IDLE, SETTLE, NCCL_FAILS, ("world_settles", {"rounds": 4})],
                     "not restarted: ", id="while-a-replacement-awaits-its-gate"),
        pytest.param([FLEET, IDLE, NCCL_FAILS, ("world_settles", {"rounds": 4})],
                     "not restarted: ", id="as-a-drain-ends"),
        pytest.param([MANUAL, SETTLE, NCCL_FAILS, ("operator_restarts", {"dies_before_write": 1}),
                      ("world_settles", {"rounds": 4})],
                     "not restarted: ", id="a-manual-restart-through-an-operator-crash"),
    ],
)  # fmt: skip
def test_a_trainer_failure_preempts_a_gated_in_turn_restart(
    steps: Sequence[Step], left: str
) -> None:
    machine = replay(steps)

    messages = [e["message"] for e in machine.cluster.events(PREEMPTED)]
    assert messages and left in messages[0], messages
    job = machine.cluster.peek("RLJob", NAME) or {}
    assert job["status"]["attempt"] == 2, "the gang restart was journaled"
