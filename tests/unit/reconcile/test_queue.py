"""A job queued by Kueue, pass by pass against a stand-in for Kueue's controllers: no pod
before admission, the admission's node labels in the pods, PodsReady written by the job side,
an eviction stopping the pods as a suspension (no restart counted) and giving the quota back
once they are gone, a re-admission starting the next attempt, Finished when the job ends."""

from __future__ import annotations

from typing import Any

from rljob.api import JobPhase, QueueState
from rljob.reconcile.decide import Decision, decide
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.lifecycle import EVICTED_END
from rljob.reconcile.names import trainer_job_name
from rljob.reconcile.queue import CreateWorkload, pods_started
from rljob.reconcile.workload import workload_name
from tests.unit.reconcile.kueue_world import FakeKueue
from tests.unit.reconcile.test_policy_suspend import carry_out
from tests.unit.reconcile.world import World, example_body, pod

QUEUE = "team-a"


def queued_body() -> dict[str, Any]:
    """Without checkpoints, so that attempts start without the store's answer (the resume
    from a checkpoint after any suspension is test_policy_suspend's)."""
    body = example_body()
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    body["spec"]["checkpoint"] = None
    return body


def queued_world() -> tuple[World, FakeKueue]:
    return World(queued_body()), FakeKueue()


def run(w: World, kueue: FakeKueue, **inputs: Any) -> Decision:
    """One pass with Kueue's Workloads as they are; its writes carried out."""
    decision = decide(w.job, w.observed, PassInputs(now=w.now, queue=kueue.inputs(), **inputs))
    carry_out(w, decision)
    kueue.carry_out(decision.steps)
    return decision


def pod_bearing(decision: Decision) -> dict[str, dict[str, Any]]:
    """The applied Deployments with replicas and trainer Jobs, by name."""
    return {
        c.name: c.body
        for c in decision.plan.apply
        if c.kind == "Job" or (c.kind == "Deployment" and c.body["spec"]["replicas"] > 0)
    }


def all_pods_started(w: World) -> None:
    """Every role's pods scheduled with their container running (the trainer's ranks too)."""
    w.ready()
    for role, count in (("rollout", 4), ("reference", 1), ("verifier", 2)):
        for i in range(count):
            w.pods[f"{role}-{i}"] = pod(f"{role}-{i}", role, started_at=w.now)
    for name, each in list(w.pods.items()):
        if each.role == "trainer":
            w.pods[name] = each.__class__(**{**each.__dict__, "started_at": w.now})


def test_a_queued_job_makes_its_workload_and_no_pod() -> None:
    w, kueue = queued_world()
    first = run(w, kueue)
    assert [type(s) for s in first.steps if isinstance(s, CreateWorkload)] == [CreateWorkload]
    assert pod_bearing(first) == {}
    for _ in range(3):
        assert pod_bearing(run(w, kueue)) == {}
    queue = w.job.status.queue
    assert queue is not None and (queue.state, queue.workload) == (
        QueueState.PENDING,
        workload_name(w.name, w.uid),
    )
    assert w.job.status.phase == JobPhase.SUSPENDED


def test_a_queue_without_quota_says_why_in_kueues_words() -> None:
    w, kueue = queued_world()
    run(w, kueue)
    kueue.pend("couldn't assign flavors to pod set trainer: insufficient quota for nvidia.com/gpu")
    run(w, kueue)
    queue = w.job.status.queue
    assert queue is not None and "insufficient quota" in queue.message
    assert queue.reason == "Pending"  # Kueue's reason, as its QuotaReserved condition says
    suspended = next(c for c in w.job.status.conditions if c.type == "Suspended")
    assert (suspended.status, suspended.reason) == ("True", "Queued")


def test_an_admitted_job_runs_on_its_flavor_and_reports_pods_ready() -> None:
    w, kueue = queued_world()
    run(w, kueue)
    kueue.admit()
    admitted = run(w, kueue)
    trainer = pod_bearing(admitted)[trainer_job_name(w.name, 1)]
    spec = trainer["spec"]["template"]["spec"]
    labels = trainer["spec"]["template"]["metadata"]["labels"]
    assert spec["nodeSelector"]["gpu.type"] == "h100"
    assert {"key": "gpu", "operator": "Exists"} in spec["tolerations"]
    assert labels["kueue.x-k8s.io/podset"] == "trainer"
    assert kueue.conditions()["PodsReady"] == ("False", "WaitForStart")
    all_pods_started(w)
    run(w, kueue)
    assert kueue.conditions()["PodsReady"] == ("True", "Started")
    assert w.job.status.queue is not None and w.job.status.queue.state == QueueState.ADMITTED


def test_an_eviction_suspends_the_job_and_gives_the_quota_back_once_its_pods_are_gone() -> None:
    w, kueue = queued_world()
    run(w, kueue)
    kueue.admit()
    run(w, kueue)
    all_pods_started(w)
    run(w, kueue)
    kueue.evict("Preempted", "Preempted to accommodate a workload (UID: x) in ClusterQueue gpu")
    stopped = run(w, kueue)
    assert pod_bearing(stopped) == {}
    assert [d.kind for d in stopped.plan.delete] == ["Job"]
    assert (
        "QuotaReserved" in kueue.conditions() and kueue.conditions()["QuotaReserved"][0] == "True"
    )
    status = w.job.status
    assert status.restarts is None or status.restarts.counted == 0
    assert status.attempts[-1].end_reason == EVICTED_END
    assert status.queue is not None and (status.queue.state, status.queue.reason) == (
        QueueState.EVICTED,
        "Preempted",
    )
    w.gone()
    w.pods.clear()
    run(w, kueue)
    assert kueue.conditions()["QuotaReserved"] == ("False", "Pending")
    assert kueue.conditions()["Requeued"] == ("True", "Preempted")
    assert "admission" not in kueue.only()["status"]
    run(w, kueue)  # Evicted stays True until Kueue reserves quota again: the job queues
    queue = w.job.status.queue
    assert queue is not None and queue.state == QueueState.PENDING
    assert queue.message.startswith("evicted (Preempted: Preempted to accommodate"), queue
    kueue.admit()
    resumed = run(w, kueue)
    assert trainer_job_name(w.name, 2) in pod_bearing(resumed)
    assert w.job.status.restarts is None or w.job.status.restarts.counted == 0


def test_an_admission_that_conflicts_with_the_job_fails_it_as_kueue_would() -> None:
    body = queued_body()
    body["spec"]["roles"]["trainer"]["nodeSelector"] = {"gpu.type": "a100"}
    w, kueue = World(body), FakeKueue()
    run(w, kueue)
    kueue.admit()
    failed = run(w, kueue)
    assert pod_bearing(failed) == {}
    assert w.job.status.phase == JobPhase.FAILED
    reason = next(c.reason for c in w.job.status.conditions if c.type == "Failed")
    assert reason == "FailedToStart"
    assert kueue.conditions()["Finished"] == ("True", "FailedToStart")


def test_a_job_without_the_label_runs_as_without_kueue() -> None:
    body = queued_body()
    del body["metadata"]["labels"]
    w, kueue = World(body), FakeKueue()
    first = run(w, kueue)
    assert trainer_job_name(w.name, 1) in pod_bearing(first)
    assert kueue.workloads == {} and w.job.status.queue is None


def test_pods_started_counts_scheduled_pods_with_a_running_container() -> None:
    started = [
        pod(f"t-{i}", "trainer", started_at=None if i else pod("x", "x").created_at)
        for i in range(2)
    ]
    assert not pods_started({"trainer": 2}, tuple(started))
    assert pods_started({"trainer": 1}, tuple(started))
    unscheduled = pod("t-0", "trainer", node="", started_at=started[0].created_at)
    assert not pods_started({"trainer": 1}, (unscheduled,))
