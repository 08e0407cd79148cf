"""The trainer's default grace period is torchrun's SIGTERM -> SIGKILL window plus a margin
(torch 2.15.0, torch/distributed/launcher/api.py: TORCH_ELASTIC_SHUTDOWN_TIMEOUT, default 30),
never past failurePolicy.teardownTimeout; a role's own terminationGracePeriodSeconds wins."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import parse_rljob
from rljob.reconcile import RenderContext, render_children, trainer_job_name
from rljob.reconcile.render import trainer_grace_default
from tests.unit.reconcile.world import NAMESPACE, example_body, with_role


def trainer_job(env: list[dict[str, Any]], teardown: str = "10m", **role: Any) -> Any:
    body = with_role(example_body(), "trainer", env=env, **role)
    if not role:  # the example sets its own; these tests are about the default
        body["spec"]["roles"]["trainer"].pop("terminationGracePeriodSeconds", None)
    body["spec"].setdefault("failurePolicy", {})["teardownTimeout"] = teardown
    return parse_rljob(body)


def env(value: str) -> list[dict[str, Any]]:
    return [{"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "value": value}]


@pytest.mark.parametrize(
    ("given", "teardown", "grace"),
    [
        pytest.param([], "10m", 45, id="torchrun-default-30s-plus-15"),
        pytest.param(env("120"), "10m", 135, id="longer-torchrun-window-from-env"),
        pytest.param(env("5"), "10m", 20, id="shorter-torchrun-window-from-env"),
        pytest.param(env("120"), "90s", 90, id="capped-at-teardown-timeout"),
        pytest.param([], "20s", 20, id="short-teardown-caps-the-default"),
        pytest.param(env("soon"), "10m", 45, id="unparsable-env-torchrun-default"),
        pytest.param(
            [{"name": "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "valueFrom": {"fieldRef": {"x": "y"}}}],
            "10m",
            45,
            id="env-from-a-source-torchrun-default",
        ),
    ],
)
def test_trainer_grace_default(given: list[dict[str, Any]], teardown: str, grace: int) -> None:
    assert trainer_grace_default(trainer_job(given, teardown)) == grace


@pytest.mark.parametrize(
    ("role", "grace"),
    [
        pytest.param({}, 45, id="rendered-default"),
        pytest.param({"terminationGracePeriodSeconds": 200}, 200, id="role-setting-wins"),
    ],
)
def test_trainer_pods_get_the_grace(role: dict[str, Any], grace: int) -> None:
    job = trainer_job([], **role)
    ctx = RenderContext(name=job.metadata.name, namespace=NAMESPACE, uid="job-uid", attempt=1)
    children = {(c.kind, c.name): c for c in render_children(job, ctx)}
    trainer = children[("Job", trainer_job_name(job.metadata.name, 1))]
    assert trainer.body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace
