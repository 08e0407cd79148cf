"""Which pods the simulator serves and what it reads from them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rljob.dev.sim.pods import attachable_pods, parse_pod

LABELS = {
    "app.kubernetes.io/managed-by": "rljob-operator",
    "rljob.io/job": "job1",
    "rljob.io/role": "rollout",
}


def pod(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "namespace": "ns",
            "name": "job1-rollout-abc",
            "uid": "u1",
            "labels": dict(LABELS),
        },
        "spec": {
            "containers": [
                {
                    "name": "engine",
                    "env": [
                        {"name": "RLJOB_ROLE", "value": "rollout"},
                        {"name": "PET_NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
                    ],
                }
            ]
        },
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": 2}]},
    }
    for key, value in changes.items():
        section, _, field = key.partition("__")
        obj[section][field] = value
    return obj


def test_a_running_rollout_pod() -> None:
    info = parse_pod(pod())
    assert info is not None
    assert (info.namespace, info.name, info.uid, info.job, info.role) == (
        "ns", "job1-rollout-abc", "u1", "job1", "rollout",
    )  # fmt: skip
    assert info.restarts == 2 and info.instance == "u1#2" and info.key == "ns/job1-rollout-abc"
    assert info.attachable and info.attempt is None
    assert info.env == {"RLJOB_ROLE": "rollout"}


def test_pods_that_are_not_served() -> None:
    assert parse_pod(pod(metadata__labels={**LABELS, "app.kubernetes.io/managed-by": "x"})) is None
    assert parse_pod(pod(metadata__labels={**LABELS, "rljob.io/role": "driver"})) is None
    pending = parse_pod(pod(status__phase="Pending"))
    assert pending is not None and not pending.attachable
    deleting = parse_pod(pod(metadata__deletionTimestamp="2026-01-01T00:00:00Z"))
    assert deleting is not None and not deleting.attachable


def test_trainer_attempt_and_completion_index() -> None:
    obj = pod()
    obj["metadata"]["labels"] = {**LABELS, "rljob.io/role": "trainer", "rljob.io/attempt": "3"}
    obj["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "1"}
    info = parse_pod(obj)
    assert info is not None and info.attempt == 3 and info.completion_index == 1


def test_profile_from_env_then_annotation() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["env"].append(
        {"name": "RLJOB_SIM_PROFILE", "value": json.dumps({"throughput": 500, "noise": 0})}
    )
    obj["metadata"]["annotations"] = {"sim.rljob.io/profile": json.dumps({"throughput": 900})}
    info = parse_pod(obj)
    assert info is not None and info.profile == {"throughput": 900, "noise": 0}
    obj["metadata"]["annotations"] = {"sim.rljob.io/profile": "{not json"}
    broken = parse_pod(obj)
    assert (
        broken is not None and broken.profile == {} and "not JSON" in (broken.profile_error or "")
    )


@pytest.mark.parametrize(
    ("namespaces", "served"),
    [
        pytest.param((), {"gw0-a", "gw1-a", "other"}, id="every-namespace"),
        pytest.param(("other",), {"other"}, id="a-name"),
        pytest.param(("gw0-*",), {"gw0-a"}, id="a-pattern"),
        pytest.param(("gw0-*", "other"), {"gw0-a", "other"}, id="a-pattern-and-a-name"),
        pytest.param(("gw",), set(), id="a-name-is-no-prefix"),
    ],
)
def test_only_the_pods_of_the_namespaces_named_or_matched(
    namespaces: tuple[str, ...], served: set[str]
) -> None:
    pods = [pod(metadata__namespace=ns, metadata__uid=ns) for ns in ("gw0-a", "gw1-a", "other")]
    seen, _ = attachable_pods(pods, namespaces)
    assert {info.namespace for info in seen.values()} == served
