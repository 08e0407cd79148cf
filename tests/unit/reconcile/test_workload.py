"""The Kueue Workload of a queued RLJob: Kueue's own name for it, one pod set per pod-bearing
role with only what admission reads, which priority wins, and when a change of the job means
its admission no longer covers it."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import RLJob, parse_rljob
from rljob.reconcile import RenderContext, render_children
from rljob.reconcile.workload import (
    Priority,
    equivalent,
    pod_sets,
    priority_source,
    queue_name,
    workload_manifest,
    workload_name,
)
from tests.unit.reconcile.world import NAMESPACE, example_body, with_role

UID = "0b9a7c1e-1111-2222-3333-444455556666"


def _job(labels: dict[str, str] | None = None, body: dict[str, Any] | None = None) -> RLJob:
    body = body or example_body()
    meta = {**body["metadata"], "uid": UID, "namespace": NAMESPACE}
    meta["labels"] = {**meta.get("labels", {}), **(labels or {})}
    return parse_rljob({**body, "metadata": meta})


def _sets(job: RLJob, attempt: int = 1, avoid: tuple[str, ...] = ()) -> Any:
    context = RenderContext(
        name=job.metadata.name, namespace=NAMESPACE, uid=UID, attempt=attempt, avoid_nodes=avoid
    )
    return pod_sets(render_children(job, context))


# Kueue's own GetWorkloadNameForOwnerWithGVK (pkg/controller/jobframework/workload_names.go at
# v0.17.0) run for the RLJob GVK on these names and uids gave these Workload names.
@pytest.mark.parametrize(
    ("name", "uid", "expected"),
    [
        pytest.param("demo", UID, "rljob-demo-495a5", id="short"),
        pytest.param(
            "rl-run-7", "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab", "rljob-rl-run-7-2dad6", id="dashes"
        ),
        pytest.param(
            "a" * 253,
            "11111111-2222-3333-4444-555555555555",
            "rljob-" + "a" * 241 + "-06bff",
            id="truncated-to-253",
        ),
    ],
)
def test_the_workload_is_named_as_kueue_names_it(name: str, uid: str, expected: str) -> None:
    assert workload_name(name, uid) == expected


def test_one_pod_set_per_pod_bearing_role_in_render_order() -> None:
    sets = _sets(_job())
    assert [(s.name, s.count) for s in sets] == [
        ("rollout", 4),
        ("trainer", 2),
        ("reference", 1),
        ("verifier", 2),
    ]


def test_a_pod_set_keeps_requests_and_placement_and_drops_the_rest() -> None:
    trainer = next(s for s in _sets(_job()) if s.name == "trainer")
    container = trainer.template["spec"]["containers"][0]
    assert set(container) == {"name", "image", "resources"}
    assert (
        container["resources"]["limits"]["nvidia.com/gpu"] == 4
    )  # examples/rljob-demo.yaml: gpus: 4 a node
    assert trainer.template["metadata"] == {}  # the operator's labels name an attempt


@pytest.mark.parametrize(
    ("labels", "trainer_class", "expected"),
    [
        pytest.param({}, None, None, id="none"),
        pytest.param({}, "train-high", ("PriorityClass", "train-high"), id="trainer-class"),
        pytest.param(
            {"kueue.x-k8s.io/priority-class": "rl-urgent"},
            "train-high",
            ("WorkloadPriorityClass", "rl-urgent"),
            id="workload-priority-class-wins",
        ),
    ],
)
def test_which_priority_wins(
    labels: dict[str, str], trainer_class: str | None, expected: tuple[str, str] | None
) -> None:
    body = example_body()
    if trainer_class is not None:
        body = with_role(body, "trainer", priorityClassName=trainer_class)
    assert priority_source(_job(labels, body)) == expected


def test_the_manifest_is_owned_by_the_job_and_queued_where_its_label_says() -> None:
    job = _job(
        {"kueue.x-k8s.io/queue-name": "team-a", "kueue.x-k8s.io/max-exec-time-seconds": "3600"}
    )
    manifest = workload_manifest(job, _sets(job), Priority("WorkloadPriorityClass", "rl", 100))
    meta, spec = manifest["metadata"], manifest["spec"]
    assert queue_name(job) == "team-a"
    assert meta["name"] == workload_name(job.metadata.name, UID)
    assert meta["labels"] == {"kueue.x-k8s.io/job-uid": UID}
    assert meta["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    owner = meta["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("RLJob", UID, True)
    assert spec["queueName"] == "team-a"
    assert spec["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "rl",
    }
    assert (spec["priority"], spec["maximumExecutionTimeSeconds"], spec["active"]) == (
        100,
        3600,
        True,
    )


def test_a_job_without_the_queue_label_is_not_queued() -> None:
    assert queue_name(_job()) is None


@pytest.mark.parametrize(
    ("change", "same"),
    [
        pytest.param(lambda b: b, True, id="unchanged"),
        pytest.param(lambda b: with_role(b, "rollout", replicas=6), False, id="more-engines"),
        pytest.param(
            lambda b: with_role(
                b, "trainer", resources={"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "8"}}
            ),
            False,
            id="other-requests",
        ),
        pytest.param(
            lambda b: with_role(b, "trainer", nodeSelector={"gpu": "h100"}), False, id="placement"
        ),
    ],
)
def test_a_change_that_admission_reads_makes_the_workload_out_of_sync(
    change: Any, same: bool
) -> None:
    admitted = workload_manifest(_job(), _sets(_job()), None)
    changed = _job(body=change(example_body()))
    assert equivalent(_sets(changed), admitted) is same


def test_a_new_attempt_keeps_the_workload_in_sync() -> None:
    """A gang restart renders a new trainer Job (attempt label, resume env, nodes to avoid):
    the admission still covers it, so the job is not queued again."""
    admitted = workload_manifest(_job(), _sets(_job()), None)
    assert equivalent(_sets(_job(), attempt=3), admitted)
