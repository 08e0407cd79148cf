"""RESERVED_ENV_NAMES is exactly the set of variables the operator renders into pods: a name it
starts to inject is refused from users at once, and no stale name is refused for nothing."""

from __future__ import annotations

from typing import Any

from rljob.api import RESERVED_ENV_NAMES, RLJob, parse_rljob
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId, policy_env, resume_env
from rljob.reconcile import RenderContext, render_children
from tests.unit.api.verdicts import job

USER_ENV = [{"name": "NCCL_DEBUG", "value": "WARN"}]


def everything_job(launcher: str = "torchrun") -> RLJob:
    """Every role, a checkpoint store with every optional setting, user env in every role."""
    roles: dict[str, Any] = {
        role: {"env": USER_ENV} for role in ("rollout", "trainer", "reference", "verifier")
    }
    roles["trainer"].update(launcher=launcher, command=["python", "driver.py"])
    checkpoint = {
        "uri": "s3://bucket/ckpt",
        "endpoint": "https://s3.example.com",
        "region": "eu-west-1",
        "addressingStyle": "path",
    }
    return parse_rljob(job(roles=roles, checkpoint=checkpoint))


def rendered_env_names(rljob: RLJob) -> set[str]:
    location = CheckpointLocation.from_uri("s3://bucket/ckpt", "rl", rljob.metadata.name)
    context = RenderContext(
        name=rljob.metadata.name,
        namespace="rl",
        uid="uid",
        attempt=2,
        resume_env=resume_env(location, VersionId(step=100, attempt=1)),
        policy_env=policy_env(location, generation=7),
    )
    names = set()
    for child in render_children(rljob, context):
        template = child.body["spec"].get("template")
        for container in (template or {}).get("spec", {}).get("containers", []):
            names |= {variable["name"] for variable in container.get("env", [])}
    return names


def test_reserved_names_are_what_the_operator_renders() -> None:
    rendered = rendered_env_names(everything_job()) | rendered_env_names(everything_job("ray"))
    user = {variable["name"] for variable in USER_ENV}
    assert rendered - user == set(RESERVED_ENV_NAMES)


def test_reserved_names_are_unique() -> None:
    assert len(set(RESERVED_ENV_NAMES)) == len(RESERVED_ENV_NAMES)
