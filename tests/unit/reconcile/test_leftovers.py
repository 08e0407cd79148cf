"""A deleted and re-created RLJob (same name, new uid) with the old one's children still there
(deleted with --cascade=orphan, or not yet collected): an object is the job's only when its
controller chain ends at its uid, so the leftovers change nothing of the new job; a name a
leftover holds is never taken over: that role or attempt uses the fallback name."""

from __future__ import annotations

import dataclasses

import pytest

from rljob.api import JobPhase
from rljob.reconcile.decide import Decision
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.ownership import owned_by
from rljob.vocabulary.labels import INSTANCE_LABEL
from tests.unit.reconcile.test_decide import decide_now, fail_trainer, running_world
from tests.unit.reconcile.world import World, pod

NEW_UID = "5e7a9c41-0d2b-4f6e-9a1c-3b8d2e6f7a90"
FALLBACK = "grpo-demo-5e7a9"


def recreated(w: World, *, orphaned: bool) -> World:
    """The user deletes the RLJob and applies the same manifest: new uid, empty status; the old
    children (orphaned: no owner left; else still the old uid's, not yet collected) remain."""
    if orphaned:  # the garbage collector removed the owner references
        w.children = {k: dataclasses.replace(c, owner_uid="") for k, c in w.children.items()}
    w.body["metadata"].update(uid=NEW_UID, generation=1)
    w.body["status"] = {}
    return w


def _ended_old_job(w: World, outcome: str) -> None:
    if outcome == "succeeded":
        w.finish_job(1, succeeded=True)
    elif outcome == "failed-nccl":
        fail_trainer(w)
    else:
        w.fail_rank(1, 0, exit_code=93, reason="Error", message="bad config")
        w.finish_job(1, failed=True)


def fresh() -> World:
    """A job just applied: nothing of it exists yet."""
    body = running_world(checkpoint=None).body
    body["status"] = {}
    return World(body)


def created(decision: Decision, kind: str) -> list[str]:
    return [c.name for c in decision.plan.apply if c.kind == kind]


@pytest.mark.parametrize("outcome", ["succeeded", "failed-nccl", "exit-93"])
@pytest.mark.parametrize("orphaned", [True, False], ids=["orphaned", "not-yet-collected"])
def test_a_recreated_rljob_never_takes_its_namesakes_trainer_job(
    outcome: str, orphaned: bool
) -> None:
    """p10: the old attempt-1 Job made the new RLJob Succeeded, counted a restart, or Failed."""
    w = running_world(checkpoint=None)  # attempts number from 1 again
    _ended_old_job(w, outcome)
    recreated(w, orphaned=orphaned)

    decision = decide_now(w)

    status = decision.plan.status
    assert status.phase == JobPhase.PENDING and status.attempt == 1
    assert status.in_flight is None and (status.restarts is None or status.restarts.total == 0)
    assert not [c for c in status.conditions if c.type in ("Succeeded", "Failed")]
    assert status.renamed == ["rollout", "trainer", "reference", "verifier", "trainer-a1"]
    assert created(decision, "Job") == [f"{FALLBACK}-trainer-a1"]
    assert not decision.plan.delete, "a leftover is never deleted"
    said = [e.message for e in decision.events if e.reason == "ChildNameTaken"]
    assert any(f"Job {trainer_job_name('grpo-demo', 1)} is held by" in m for m in said)


def test_a_renamed_role_selects_only_its_own_pods() -> None:
    w = running_world(checkpoint=None)
    recreated(w, orphaned=True)

    decision = decide_now(w)

    bodies = {(c.kind, c.name): c.body for c in decision.plan.apply}
    service = bodies[("Service", f"{FALLBACK}-rollout")]["spec"]["selector"]
    deployment = bodies[("Deployment", f"{FALLBACK}-rollout")]["spec"]
    assert service[INSTANCE_LABEL] == "5e7a9"
    assert deployment["selector"]["matchLabels"][INSTANCE_LABEL] == "5e7a9"
    assert deployment["template"]["metadata"]["labels"][INSTANCE_LABEL] == "5e7a9"
    trainer = bodies[("Job", f"{FALLBACK}-trainer-a1")]["spec"]["template"]["spec"]
    assert trainer["subdomain"] == f"{FALLBACK}-trainer", "rank 0's name under its own Service"


def test_the_fallback_names_are_kept_once_journaled() -> None:
    w = running_world(checkpoint=None)
    recreated(w, orphaned=True)
    w.body["status"] = decide_now(w).plan.status.model_dump(mode="json", by_alias=True)
    w.children = {}  # the leftovers removed by the user

    decision = decide_now(w)

    assert f"{FALLBACK}-rollout" in created(decision, "Deployment")
    assert not [e for e in decision.events if e.reason == "ChildNameTaken"], "said once"


@pytest.mark.parametrize(
    ("leftover", "renamed"),
    [
        pytest.param(pod("grpo-demo-rollout-old", "rollout", owner_uid="rs-of-another"),
                     ["rollout"], id="a-namesake's-engine-still-running"),
        pytest.param(pod("grpo-demo-rollout-old", "rollout", owner_uid="rs", deleting=True),
                     [], id="a-pod-going-away-leaves-the-endpoints"),
    ],
)  # fmt: skip
def test_leftover_pods_of_a_role_rename_it(leftover: ObservedPod, renamed: list[str]) -> None:
    w = fresh()
    w.pods[leftover.name] = leftover

    decision = decide_now(w)

    assert [s for s in decision.plan.status.renamed if s == "rollout"] == renamed


def test_a_name_held_by_an_object_without_the_jobs_labels_renames() -> None:
    """The executor found it when it came to create the child (PassInputs.taken)."""
    w = fresh()

    decision = decide_now(w, taken=(("Service", "grpo-demo-verifier"),))

    assert decision.plan.status.renamed == ["verifier"]
    (said,) = [e.message for e in decision.events if e.reason == "ChildNameTaken"]
    assert said.startswith("Service grpo-demo-verifier is held by an object no RLJob owns")


def test_a_running_role_keeps_its_names() -> None:
    w = running_world(checkpoint=None)
    foreign = ObservedChild("Deployment", "grpo-demo-rollout", "x", "rollout", "h", None,
                            owner_uid="someone-else")  # fmt: skip
    w.children[("Deployment", "stray")] = foreign

    decision = decide_now(w)

    assert decision.plan.status.renamed == []


def _child(name: str, owner: str, kind: str = "Deployment") -> ObservedChild:
    return ObservedChild(kind, name, f"uid-{name}", "rollout", "h", None, owner_uid=owner)


def _pod(name: str, owner: str) -> ObservedPod:
    return pod(name, "rollout", uid=f"uid-{name}", owner_uid=owner)


@pytest.mark.parametrize(
    ("observed", "ours", "theirs"),
    [
        pytest.param(Observed((_child("d", "job"),), (_pod("p", "rs"),), (("rs", "uid-d"),)),
                     ["d", "p"], [], id="pod-replicaset-deployment-rljob"),
        pytest.param(Observed((_child("j", "job", "Job"),), (_pod("p", "uid-j"),)),
                     ["j", "p"], [], id="pod-job-rljob"),
        pytest.param(Observed((_child("d", "old"),), (_pod("p", "rs"),), (("rs", "uid-d"),)),
                     [], ["d", "p"], id="a-namesake's-not-yet-collected"),
        pytest.param(Observed((_child("d", ""),), (_pod("p", "rs"),), (("rs", "uid-d"),)),
                     [], ["d", "p"], id="orphaned"),
        pytest.param(Observed((), (_pod("p", "rs"),), (("rs", ""),)), [], ["p"],
                     id="a-pod-of-an-orphaned-replicaset"),
        pytest.param(Observed((), (_pod("p", ""),)), [], ["p"], id="a-bare-pod"),
        pytest.param(Observed((), (_pod("p", "recorded-job"),)), ["p"], [],
                     id="a-pod-of-its-trainer-job-deleted-by-hand-status-recorded"),
        pytest.param(Observed((), (_pod("p", "unknown-job"),)), [], ["p"],
                     id="a-pod-of-a-job-it-never-recorded"),
    ],
)  # fmt: skip
def test_an_object_is_the_jobs_when_its_controller_chain_ends_at_its_uid(
    observed: Observed, ours: list[str], theirs: list[str]
) -> None:
    mine, leftovers = owned_by(observed, "job", recorded=("recorded-job",))

    def names(o: Observed) -> list[str]:
        return sorted([*(c.name for c in o.children), *(p.name for p in o.pods)])

    assert (names(mine), names(leftovers)) == (ours, theirs)
