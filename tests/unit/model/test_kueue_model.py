"""The action engine (machine.py) on a job queued by Kueue, the operator run with --kueue:
admission, eviction and re-admission join the world's events (model/queueing.py), and every
invariant of the engine holds beside the queue's own; replays of an eviction and a
re-admission."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from rljob.runtime.runtime import RuntimeOptions
from tests.unit.model import harness, queueing
from tests.unit.model.machine import KIND, NAME, ActionEngine, job_body
from tests.unit.model.test_action_engine import EXPLORE, MODEL_SEED, seeded

QUEUED_EXPLORE = settings(EXPLORE, max_examples=150)


class QueuedEngine(ActionEngine):
    OPTIONS: ClassVar[RuntimeOptions] = RuntimeOptions(kueue=True)

    def __init__(self) -> None:
        super().__init__()
        self.kueue = queueing.Kueue(self.cluster)
        self.queue = queueing.QueueChecks(self.cluster)

    def job_body(self) -> dict[str, Any]:
        body = job_body(gated=self.GATED)
        labels = body["metadata"].get("labels") or {}
        body["metadata"]["labels"] = {**labels, **queueing.QUEUE_LABELS}
        return body

    @initialize()
    def user_applies_the_rljob(self) -> None:
        """The queued job is created, its Workload admitted, and it runs."""
        self.uid = self.cluster.create(self.job_body())["metadata"]["uid"]
        for _ in range(3):
            self._round()
        assert self.kueue.admit(), "the operator made no Workload"
        for _ in range(6):
            self._round()

    def _pass(self, replica: harness.Operator | None = None) -> None:
        self.queue.before_pass()
        super()._pass(replica)
        self.queue.after_pass(self.cluster.index.workload())

    @rule()
    def kueue_admits(self) -> None:
        """Kueue's scheduler admits the job's Workload (again, after an eviction)."""
        self.kueue.admit()

    @precondition(lambda self: queueing.admitted(self.kueue.workload()))
    @rule(reason=st.sampled_from(["Preempted", "PodsReadyTimeout", "Preempted"]))
    def kueue_evicts(self, reason: str) -> None:
        """A higher priority job preempts it, or its pods were not ready in time."""
        self.kueue.evict(reason)

    @invariant()
    def invariants_hold(self) -> None:
        super().invariants_hold()
        for check in sorted(queueing.CHECKS):
            found = self.queue.faults(check)
            assert not found, f"{check}: {found[0]}"


@pytest.mark.parametrize("seed", [MODEL_SEED], ids=lambda s: f"seed={s}")
def test_invariants_hold_whatever_happens_to_a_queued_job(seed: int) -> None:
    run_state_machine_as_test(seeded(QueuedEngine), settings=QUEUED_EXPLORE)


def test_an_eviction_stops_the_job_and_a_readmission_starts_the_next_attempt() -> None:
    machine = QueuedEngine()
    try:
        machine.user_applies_the_rljob()
        machine.invariants_hold()
        attempt = machine.cluster.peek(KIND, NAME)["status"]["attempt"]  # type: ignore[index]
        machine.kueue_evicts("Preempted")
        machine.world_settles(rounds=6)
        machine.invariants_hold()
        status = machine.cluster.peek(KIND, NAME)["status"]  # type: ignore[index]
        assert status["queue"]["state"] == "Pending", "its quota given back, it queues again"
        assert status["queue"]["message"].startswith("evicted (Preempted: "), status["queue"]
        assert not [
            j for j in machine.cluster.view("Job") if not j["metadata"].get("deletionTimestamp")
        ]
        workload = machine.kueue.workload()
        assert workload is not None and not queueing.holds(workload, "QuotaReserved")
        machine.kueue_admits()
        machine.world_settles(rounds=6)
        machine.invariants_hold()
        status = machine.cluster.peek(KIND, NAME)["status"]  # type: ignore[index]
        assert status["queue"]["state"] == "Admitted"
        assert status["attempt"] == attempt + 1
        assert (status.get("restarts") or {}).get("counted", 0) == 0
    finally:
        machine.teardown()
