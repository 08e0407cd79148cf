"""The action engine's invariants (machine.py), explored by a stateful test, and sequences
replayed step by step: the shortest the exploration found breaking an invariant, kept once fixed.

An invariant known to be broken goes into BROKEN with the replays of its defects (strict
xfail): it is explored alone and not shrunk, and leaves BROKEN when they are fixed."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from rljob.api import FailureReason as R
from rljob.health.termination import (
    Classification,
    ContainerTermination,
    RestartPolicy,
    classify_termination,
)
from rljob.reconcile import root_cause
from rljob.vocabulary.labels import RESTART_REQUEST_ANNOTATION as RESTART_REQUEST
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION as RESUME_REQUEST
from tests.unit.model.machine import ALL_CHECKS, ActionEngine

# Per CI run: a fixed budget from a fixed seed (in the test ids, so every run prints it; set
# RLJOB_MODEL_SEED to explore elsewhere, or run bench/model_soak.py for a longer, wider soak).
MODEL_SEED = int(os.environ.get("RLJOB_MODEL_SEED", "20261128"))
EXPLORE = settings(
    max_examples=600,
    stateful_step_count=80,
    derandomize=False,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# A known defect: found (the run stops there), not shrunk; a wide budget keeps finding it when
# the rules change a little.
FIND_ONLY = settings(EXPLORE, max_examples=3000, phases=[Phase.generate])

# Invariant -> the ids of the strict-xfail replays of its known defects (none known today; a
# fixed defect's replay joins test_controls_hold_every_invariant).
BROKEN: dict[str, tuple[str, ...]] = {}
HOLDING = ALL_CHECKS - BROKEN.keys()
EXPLORATION_TIMEOUT = 900


def known(defect: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=defect)


def checking(checks: frozenset[str]) -> type[ActionEngine]:
    class Checking(ActionEngine):
        CHECKS = checks

    return seeded(Checking)


def seeded(machine: type[ActionEngine]) -> type[ActionEngine]:
    """The machine explored from MODEL_SEED (hypothesis's @seed on a state machine)."""
    seeded_machine: type[ActionEngine] = seed(MODEL_SEED)(machine)
    return seeded_machine


@pytest.mark.parametrize(
    "checks",
    [
        pytest.param(HOLDING, id=f"seed={MODEL_SEED}:{len(HOLDING)}-invariants"),
        *(
            pytest.param(
                frozenset({check}),
                id=check,
                marks=known(f"known defects, replayed below: {', '.join(replays)}"),
            )
            for check, replays in sorted(BROKEN.items())
        ),
    ],
)
@pytest.mark.timeout(EXPLORATION_TIMEOUT)
def test_invariants_hold_whatever_happens(checks: frozenset[str]) -> None:
    run_state_machine_as_test(
        checking(checks), settings=EXPLORE if checks == HOLDING else FIND_ONLY
    )


Step = tuple[str, Mapping[str, Any]]


def replay(checks: frozenset[str], steps: Sequence[Step]) -> ActionEngine:
    """Runs the steps on a fresh machine, checking the invariants after each, as the stateful
    test does; returns the machine for further checks."""
    machine = checking(checks)()
    try:
        machine.user_applies_the_rljob()
        machine.invariants_hold()
        for name, arguments in steps:
            getattr(machine, name)(**arguments)
            machine.invariants_hold()
    finally:
        machine.teardown()
    return machine


NCCL_FAILS = ("trainer_rank_fails", {"index": 0, "how": "nccl-timeout"})
OOM_KILLED = ("serving_container_restarts", {"index": 0, "how": "oom-killed"})
EXIT_93 = ("serving_container_restarts", {"index": 0, "how": "exit-93"})
SETTLE = ("world_settles", {"rounds": 1})
CONTROLLERS: Step = ("controllers_step", {})
SAVE: Step = ("trainer_saves_a_checkpoint", {})
CANARY: Step = ("health_round_finds_reward_hacking", {})
RESUME: Step = ("user_requests_a_resume", {})
KIND = "RLJob"


@pytest.mark.parametrize(
    ("steps", "attempt", "restarts", "phase"),
    [
        pytest.param([NCCL_FAILS, ("world_settles", {"rounds": 6})], 2, 1, "Running",
                     id="gang-restart-after-an-nccl-timeout"),
        pytest.param([("user_sets_suspend", {"suspend": True}), SETTLE, SETTLE,
                      # resumed: the ranks bound first, then the engines (a gang that fits)
                      ("user_sets_suspend", {"suspend": False}), ("world_settles", {"rounds": 5})],
                     2, 0, "Running", id="suspend-and-resume"),
        pytest.param([OOM_KILLED, SETTLE, OOM_KILLED, SETTLE, SETTLE, SETTLE], 1, 1, "Running",
                     id="serving-pod-restarted-after-two-oom-kills"),
        pytest.param([("trainer_rank_fails", {"index": 1, "how": "exit-93"}), SETTLE, SETTLE],
                     1, 0, "Failed", id="exit-93-of-a-rank-fails-the-job"),
        pytest.param([NCCL_FAILS, SETTLE, ("user_requests_a_restart", {"role": "trainer"}),
                      ("world_settles", {"rounds": 6}), ("world_settles", {"rounds": 4})],
                     3, 2, "Running", id="manual-trainer-restart-during-a-gang-restart"),
        pytest.param([EXIT_93, EXIT_93, ("world_settles", {"rounds": 2})], 1, 0, "Failed",
                     id="exit-93-crash-loop-of-a-serving-pod-fails-the-job"),
        pytest.param([("trainer_rank_fails", {"index": 0, "how": "exit-93"}),
                      ("health_round_finds", {"index": 2}), ("world_settles", {"rounds": 2})],
                     1, 0, "Failed", id="failjob-wins-over-a-finding-in-the-same-pass"),
        pytest.param([("world_settles", {"rounds": 3}), ("health_round_finds", {"index": 6}),
                      ("world_settles", {"rounds": 3})],
                     1, 1, "Running", id="a-slow-verifier-among-fast-peers-restarts-alone"),
        pytest.param([("world_settles", {"rounds": 3}), ("health_round_finds", {"index": 7}),
                      ("world_settles", {"rounds": 3})],
                     1, 0, "Running", id="a-slow-verifier-without-fast-peers-is-reported"),
        pytest.param([("world_settles", {"rounds": 3}), ("health_round_finds", {"index": 8}),
                      ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="a-collapsed-engine-restarts-the-whole-job-by-rule"),
        pytest.param([("trainer_rank_fails", {"index": 0, "how": "gpu-ecc"}),
                      ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="a-gpu-error-restarts-the-whole-job-by-rule"),
        # Found by the exploration, fixed since:
        pytest.param([*[CONTROLLERS] * 3, SAVE, SETTLE,
                      ("operator_restarts", {"dies_before_write": None}),
                      ("user_requests_a_restart", {"role": "trainer"}), *[CONTROLLERS] * 5,
                      ("s3_misbehaves", {"fault": "lag-3-listings"}),
                      ("user_deletes_a_child", {"index": 0, "what": "trainer-job"}), SAVE,
                      ("user_sets_an_annotation_back", {"back": 1, "which": RESTART_REQUEST}),
                      SETTLE, ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="a-version-a-lagging-listing-hid-is-read-again"),
        pytest.param([("user_deletes_a_child", {"what": "trainer-job", "index": 0}),
                      ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="trainer-job-deleted-by-hand-starts-the-next-attempt"),
        pytest.param([NCCL_FAILS, SETTLE, ("watches_lag", {"deliveries": 1, "kinds": ("Job",)}),
                      ("time_passes", {"seconds": 61}), ("operator_passes", {}),
                      ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="old-job-deleted-once-after-a-long-watch-lag"),
        pytest.param([("s3_misbehaves", {"fault": "fail"}), NCCL_FAILS,
                      ("world_settles", {"rounds": 3}), ("user_sets_suspend", {"suspend": True}),
                      SETTLE, ("user_sets_suspend", {"suspend": False}),
                      ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="attempt-held-back-by-a-store-outage-then-suspended"),
        pytest.param([("trainer_rank_fails", {"index": 0, "how": "exit-93"}),
                      ("watches_lag", {"deliveries": 3, "kinds": ("Pod",)}),
                      ("world_settles", {"rounds": 4})],
                     1, 0, "Failed", id="exit-93-fails-the-job-though-the-pod-watch-lags"),
        pytest.param([("user_deletes_a_child", {"what": "trainer-job", "index": 0}),
                      ("s3_misbehaves", {"fault": "fail"}), SETTLE,
                      ("user_requests_a_restart", {"role": "trainer"}), ("operator_passes", {}),
                      ("operator_restarts", {"dies_before_write": 2}),
                      ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="manual-restart-of-an-unstarted-attempt-is-that-attempt"),
        pytest.param([("controllers_step", {}), ("user_sets_suspend", {"suspend": True}),
                      ("world_settles", {"rounds": 3}), ("user_sets_suspend", {"suspend": False}),
                      ("next_write_fails", {"status": 409}), ("operator_passes", {}),
                      # the resume pass journals attempt 2, then creates its Job (its serving
                      # roles wait for the ranks): the crash falls between the two
                      ("operator_restarts", {"dies_before_write": 1}),
                      ("user_sets_suspend", {"suspend": True}), SETTLE,
                      ("user_sets_suspend", {"suspend": False}), ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="attempt-journaled-then-crashed-then-suspended-is-kept"),
        # The discovery listing of attempt 2's start lagged and missed v100-a1, which latest.json
        # named: attempt 2 resumed from scratch (now: the pointer's version is a candidate).
        pytest.param([("s3_misbehaves", {"fault": "lag-1-listing"}),
                      ("user_requests_a_restart", {"role": "trainer"}), SETTLE,
                      ("trainer_saves_a_checkpoint", {}),
                      ("operator_restarts", {"dies_before_write": None}),
                      ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="resumes-from-a-version-a-lagging-listing-missed"),
        # A leader deposed right after journaling attempt 2's start wrote its marker to S3 (now:
        # every step of a pass is carried out only while the replica leads).
        pytest.param([NCCL_FAILS, ("world_settles", {"rounds": 2}), ("controllers_step", {}),
                      ("lease_moves_to_a_standby", {"after_writes": 1}),
                      ("world_settles", {"rounds": 6})],
                     2, 1, "Running", id="leader-deposed-after-its-journal-writes-no-marker"),
        # Found by the soak: attempt 2's marker, written a moment before, was missing from the
        # lagging markers listing at attempt 3's start, which then resumed from scratch (now:
        # status supplies the marker of an attempt whose Job the operator saw).
        pytest.param([("s3_misbehaves", {"fault": "lag-1-listing"}),
                      ("trainer_saves_a_checkpoint", {}),
                      ("user_requests_a_restart", {"role": "trainer"}),
                      ("world_settles", {"rounds": 4}),
                      ("user_deletes_a_child", {"index": 0, "what": "trainer-job"}),
                      ("world_settles", {"rounds": 6})],
                     3, 1, "Running", id="a-marker-a-lagging-listing-missed-stays-in-lineage"),
        pytest.param([("user_deletes_a_child", {"index": 0, "what": "trainer-job"}),
                      ("trainer_saves_a_checkpoint", {}),
                      ("s3_misbehaves", {"fault": "lag-1-listing"}), SETTLE,
                      ("user_requests_a_restart", {"role": "trainer"}),
                      ("world_settles", {"rounds": 6})],
                     3, 1, "Running", id="so-does-one-of-an-attempt-whose-job-was-not-seen-yet"),
        # The failure policy's Suspend (SUSPEND_RULES) and the resume nonce:
        pytest.param([CANARY, ("world_settles", {"rounds": 3}), RESUME,
                      ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="policy-suspend-then-resume-starts-the-next-attempt"),
        pytest.param([RESUME, SETTLE, CANARY, ("world_settles", {"rounds": 4})],
                     1, 0, "Suspended", id="a-nonce-handled-before-a-suspension-never-ends-it"),
        pytest.param([("next_write_fails", {"status": 409}), CANARY,
                      ("operator_restarts", {"dies_before_write": 1}),
                      ("world_settles", {"rounds": 4})],
                     1, 0, "Suspended", id="suspension-journaled-then-crashed-is-carried-out"),
        pytest.param([CANARY, SETTLE, ("watches_lag", {"deliveries": 2, "kinds": (KIND,)}),
                      RESUME, CANARY, ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="a-finding-on-a-stale-view-suspends-nothing-twice"),
        pytest.param([CANARY, SETTLE, ("user_sets_suspend", {"suspend": True}), RESUME, SETTLE,
                      SETTLE, ("user_sets_suspend", {"suspend": False}),
                      ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="spec-suspend-holds-the-job-after-a-resume"),
        pytest.param([("trainer_rank_fails", {"index": 0, "how": "oom-killed"}),
                      ("world_settles", {"rounds": 3}), RESUME,
                      ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="a-trainer-failure-suspended-resumes-uncounted"),
        pytest.param([CANARY, SETTLE, ("user_edits_a_role", {"edit": "rollout-env"}),
                      ("world_settles", {"rounds": 3})],
                     1, 0, "Suspended", id="a-role-edited-while-suspended-stays-at-zero"),
        pytest.param([CANARY, RESUME, ("world_settles", {"rounds": 6})],
                     2, 0, "Running", id="a-resume-right-after-the-suspension-applies-it-once"),
        pytest.param([CANARY, SETTLE, RESUME, ("world_settles", {"rounds": 6}), CANARY,
                      ("world_settles", {"rounds": 3})],
                     2, 0, "Suspended", id="a-second-suspension-needs-a-new-nonce"),
        pytest.param([NCCL_FAILS, SETTLE, CANARY, ("world_settles", {"rounds": 6})],
                     2, 1, "Suspended", id="a-gang-restart-in-flight-completes-then-suspends"),
    ],
)  # fmt: skip
def test_controls_hold_every_invariant(
    steps: Sequence[Step], attempt: int, restarts: int, phase: str
) -> None:
    """The replays without a defect: every invariant holds, and the job got where it should."""
    job = replay(ALL_CHECKS, steps).cluster.peek("RLJob", "grpo-demo")
    assert job is not None
    status = job["status"]
    assert (status["attempt"], status["restarts"]["total"], status["phase"]) == (
        attempt, restarts, phase
    )  # fmt: skip


FLEET = ("health_round_finds_the_fleet_fragmented", {"index": 0})


@pytest.mark.parametrize(
    ("steps", "restarted", "skipped"),
    [
        pytest.param([FLEET, ("world_settles", {"rounds": 6})], 2, 0,
                     id="fleet-fragmentation-restarts-the-rollout-role-in-turn"),
        pytest.param([FLEET, SETTLE, ("operator_restarts", {"dies_before_write": 1}),
                      ("world_settles", {"rounds": 6})], 2, 0,
                     id="the-next-process-resumes-it-after-a-crash-midway"),
        pytest.param([FLEET, ("watches_lag", {"deliveries": 3, "kinds": ("Pod",)}),
                      ("world_settles", {"rounds": 8})], 2, 0,
                     id="a-lagging-pod-watch-takes-no-second-turn-early"),
        pytest.param([FLEET, ("user_sets_suspend", {"suspend": True}),
                      ("world_settles", {"rounds": 4}), ("user_sets_suspend", {"suspend": False}),
                      ("world_settles", {"rounds": 6})], 1, 1,
                     id="suspended-midway-the-rest-go-with-the-suspension"),
        pytest.param([FLEET, ("user_requests_a_restart", {"role": "rollout"}),
                      ("world_settles", {"rounds": 8})], 2, 0, id="a-manual-roll-waits-for-it"),
        pytest.param([FLEET, ("world_settles", {"rounds": 6}), FLEET, SETTLE], 2, 0,
                     id="a-second-fleet-finding-within-the-cooldown-is-ignored"),
    ],
)  # fmt: skip
def test_an_in_turn_restart_is_counted_once_and_ends_naming_its_pods(
    steps: Sequence[Step], restarted: int, skipped: int
) -> None:
    machine = replay(ALL_CHECKS, steps)
    status = (machine.cluster.peek("RLJob", "grpo-demo") or {})["status"]
    (done,) = machine.cluster.events("RoleRestartedInTurn")
    went, _, gone = done["message"].partition("; not restarted (gone before their turn): ")

    assert "inFlight" not in status
    assert status["restarts"]["byReason"]["FleetKVCacheFragmentation"] == 1
    assert len(went.split(": ", 1)[1].split(", ")) == restarted
    assert (len(gone.split(", ")) if gone else 0) == skipped


def test_a_failed_trainer_ends_an_in_turn_restart_and_its_gang_restarts() -> None:
    """Once the first turn's delete was sent, the trainer's repair goes first: the restart ends,
    naming the engines it left, and the gang restarts."""
    machine = replay(ALL_CHECKS, [FLEET, NCCL_FAILS, ("world_settles", {"rounds": 8})])
    status = (machine.cluster.peek("RLJob", "grpo-demo") or {})["status"]

    (ended,) = machine.cluster.events("RoleRestartInTurnPreempted")
    assert "ended early: trainer attempt 1 failed; not restarted: " in ended["message"]
    assert not machine.cluster.events("RoleRestartedInTurn")
    assert (status["attempt"], status["restarts"]["total"], "inFlight" in status) == (2, 2, False)


LOST = ("trainer_node_is_lost", {"index": 1, "how": "silent"})
MINUTE = ("time_passes", {"seconds": 61})


@pytest.mark.parametrize(
    ("steps", "left"),
    [
        pytest.param([LOST, SETTLE, MINUTE, ("world_settles", {"rounds": 6})], True,
                     id="a-silent-node:-its-pod-left-terminating"),
        pytest.param([("trainer_node_is_lost", {"index": 1, "how": "deleted"}), SETTLE,
                      ("time_passes", {"seconds": 41}), ("world_settles", {"rounds": 6})], False,
                     id="a-deleted-node:-podgc-fails-its-pod"),
        pytest.param([LOST, SETTLE, MINUTE, ("world_settles", {"rounds": 2}),
                      ("node_marked_out_of_service", {"index": 1}),
                      ("world_settles", {"rounds": 4})], False,
                     id="an-out-of-service-node:-podgc-releases-its-pod"),
    ],
)  # fmt: skip
def test_a_trainer_rank_lost_with_its_node_restarts_the_gang(
    steps: Sequence[Step], left: bool
) -> None:
    """The gang restarts with reason NodeLost once the node has been lost for nodeLostTimeout
    (or PodGC failed its rank), the node turns suspect, and the next attempt runs without waiting
    for the old pod that no kubelet will confirm gone; nothing is force-deleted by the operator."""
    machine = replay(ALL_CHECKS, steps)
    status = (machine.cluster.peek("RLJob", "grpo-demo") or {})["status"]
    trainer = [
        p for p in machine.cluster.view("Pod")
        if p["metadata"]["labels"].get("rljob.io/role") == "trainer"
    ]  # fmt: skip
    running = {
        p["metadata"]["labels"]["rljob.io/attempt"] for p in trainer
        if p["status"]["phase"] == "Running" and not p["metadata"].get("deletionTimestamp")
    }  # fmt: skip
    stuck = [p for p in trainer if p["metadata"]["labels"]["rljob.io/attempt"] == "1"]

    assert status["attempt"] == 2 and status["restarts"]["recent"][-1]["reason"] == "NodeLost"
    assert [s["reason"] for s in status["suspectNodes"]] == ["NodeLost"]
    assert running == {"2"}
    assert bool(stuck) is left
    assert not machine.cluster.events("PodForceDeleted")


@pytest.mark.parametrize("which", [RESTART_REQUEST, RESUME_REQUEST])
def test_a_request_annotation_set_back_is_not_a_new_request(which: str) -> None:
    """A GitOps tool re-applying an older manifest puts back a nonce handled before the last
    (found by the exploration: the gang restarted again)."""
    ask = ("user_requests_a_restart", {"role": "trainer"}) if which == RESTART_REQUEST else RESUME
    steps = [ask, ("world_settles", {"rounds": 6}), ask, ("world_settles", {"rounds": 6}),
             ("user_sets_an_annotation_back", {"which": which, "back": 1}),
             ("world_settles", {"rounds": 6})]  # fmt: skip
    machine = replay(ALL_CHECKS, steps)
    status = (machine.cluster.peek("RLJob", "grpo-demo") or {})["status"]
    handled = status["lastRestartRequest" if which == RESTART_REQUEST else "lastResumeRequest"]
    assert (handled["id"], handled["earlier"]) in (("n2", ["n1"]), ("r2", ["r1"]))


def test_a_trainer_job_deleted_by_hand_leaves_pods_the_next_attempt_waits_for() -> None:
    """Found by the exploration when ownership came in: the deleted Job's pods, still running
    until the garbage collector reaches them, are the job's through the Job uid its status
    recorded, so attempt 2 does not start beside them."""
    steps: list[Step] = [("user_deletes_a_child", {"index": 0, "what": "trainer-job"}),
                         ("operator_passes", {}), ("controllers_step", {}),
                         ("world_settles", {"rounds": 6})]  # fmt: skip
    machine = replay(ALL_CHECKS, steps)
    status = (machine.cluster.peek("RLJob", "grpo-demo") or {})["status"]
    assert status["attempt"] == 2 and status["attempts"][0]["endReason"] == "JobDeleted"


def _classified_as_gpu_hardware(
    termination: ContainerTermination, policy: RestartPolicy = "Never"
) -> Classification | None:
    """The classifier, with the ECC ending's reason given: its own tests cover the message."""
    if termination.message and "uncorrectable ECC" in termination.message:
        return Classification(R.GPU_HARDWARE_ERROR, termination.exit_code, termination.message)
    return classify_termination(termination, policy)


ECC_FAILS = ("trainer_rank_fails", {"index": 0, "how": "gpu-ecc"})
EXPIRED = [("time_passes", {"seconds": 300})] * 3 + [SETTLE]


@pytest.mark.parametrize(
    ("steps", "suspects"),
    [
        pytest.param([ECC_FAILS, ("world_settles", {"rounds": 6})], 1, id="marked-and-avoided"),
        pytest.param([ECC_FAILS, ("world_settles", {"rounds": 6}), *EXPIRED], 0, id="expired"),
    ],
)
def test_a_hardware_fault_makes_its_node_a_preference_that_expires(
    steps: Sequence[Step], suspects: int
) -> None:
    with mock.patch.object(root_cause, "classify_termination", _classified_as_gpu_hardware):
        machine = replay(ALL_CHECKS, steps)
    status = (machine.cluster.peek("RLJob", "grpo-demo") or {})["status"]
    marked = [entry["name"] for entry in status.get("suspectNodes", [])]
    in_use = [c for c in status["conditions"] if c["type"] == "SuspectNodeInUse"]
    trainer_nodes = {
        pod["spec"].get("nodeName")
        for pod in machine.cluster.view("Pod")
        if pod["metadata"]["labels"].get("rljob.io/role") == "trainer"
    }
    assert (status["attempt"], len(marked), len(in_use)) == (2, suspects, suspects)
    assert not trainer_nodes & set(marked), "the next attempt avoids the suspect node"
    assert all(c["status"] == "False" for c in in_use)
