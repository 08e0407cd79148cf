"""Spec hashes come from the user's role spec, not the rendered manifest: the same spec gives
the same hash, and a change rolls only the role it belongs to."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import parse_rljob
from rljob.reconcile import RenderContext, render_children
from rljob.reconcile import pods as pods_module
from tests.unit.reconcile.world import NAMESPACE, example_body, with_role

Hashes = dict[tuple[str, str], str]


def hashes(body: dict[str, Any], **ctx: Any) -> Hashes:
    job = parse_rljob(body)
    ctx.setdefault("attempt", 1)
    context = RenderContext(name=job.metadata.name, namespace=NAMESPACE, uid="u", **ctx)
    return {(c.kind, c.name): c.spec_hash for c in render_children(job, context)}


BASE = example_body()


def test_hashes_are_short_stable_hex() -> None:
    first, second = hashes(BASE), hashes(example_body())
    assert first == second
    assert all(len(digest) == 16 and int(digest, 16) >= 0 for digest in first.values())


def test_explicit_defaults_hash_like_omitted_ones() -> None:
    explicit = with_role(BASE, "verifier", gpus=0, gpuResourceName="nvidia.com/gpu", env=[])
    assert hashes(explicit) == hashes(BASE)


@pytest.mark.parametrize(
    ("edit", "rolled"),
    [
        pytest.param(
            lambda b: with_role(b, "rollout", image="vllm:0.12"), {"rollout"}, id="rollout-image"
        ),
        pytest.param(
            lambda b: with_role(b, "rollout", replicas=6), {"rollout"}, id="rollout-replicas"
        ),
        pytest.param(
            lambda b: with_role(b, "verifier", env=[{"name": "X", "value": "1"}]),
            {"verifier"},
            id="verifier-env",
        ),
        pytest.param(
            lambda b: with_role(b, "trainer", image="trainer:2"), {"trainer-a1"}, id="trainer-image"
        ),
        pytest.param(
            lambda b: with_role(b, "trainer", nodes=4), {"trainer-a1"}, id="trainer-nodes"
        ),
        pytest.param(
            lambda b: {**b, "spec": {**b["spec"], "image": "registry.example.com/rl/grpo:1.5"}},
            {"rollout", "reference", "verifier", "trainer-a1"},
            id="default-image-rolls-roles-without-their-own",
        ),
        pytest.param(
            lambda b: {**b, "spec": {**b["spec"], "health": {"interval": "5s"}}},
            set(),
            id="health-settings-roll-nothing",
        ),
        pytest.param(
            lambda b: with_role(b, "rollout", weightSync="Gated"),
            {"rollout"},
            id="gating-the-engines-rolls-them-once",
        ),
        pytest.param(
            lambda b: with_role(b, "rollout", drainTimeout="10m"),
            set(),
            id="drain-timeout-rolls-nothing",
        ),
        pytest.param(
            lambda b: with_role(b, "rollout", weightSync="Gated", generationFrom="engine"),
            {"rollout"},
            id="reading-the-engine-s-own-version-rolls-no-more-than-gating",
        ),
        pytest.param(
            lambda b: with_role(b, "rollout", generationFrom="engine"),
            set(),
            id="generation-from-rolls-nothing",
        ),
        pytest.param(
            lambda b: with_role(b, "rollout", weightSync="Ungated", drainTimeout="2m"),
            set(),
            id="explicit-ungated-default-rolls-nothing",
        ),
    ],
)
def test_a_change_rolls_only_its_role(edit: Any, rolled: set[str]) -> None:
    before, after = hashes(BASE), hashes(edit(BASE))
    workloads = {
        name.removeprefix("grpo-demo-")
        for (kind, name), digest in after.items()
        if kind in ("Deployment", "Job") and before[(kind, name)] != digest
    }
    assert workloads == rolled


def test_default_image_change_spares_a_role_with_its_own_image() -> None:
    own = with_role(BASE, "verifier", image="verifier:1")
    bumped = {**own, "spec": {**own["spec"], "image": "registry.example.com/rl/grpo:1.5"}}
    assert (
        hashes(own)[("Deployment", "grpo-demo-verifier")]
        == hashes(bumped)[("Deployment", "grpo-demo-verifier")]
    )


@pytest.mark.parametrize(
    ("ctx", "rolled"),
    [
        pytest.param({"attempt": 2}, {"trainer"}, id="attempt"),
        pytest.param({"resume_env": {"RLJOB_RESUME_STEP": "10"}}, {"trainer"}, id="resume-env"),
        pytest.param({"avoid_nodes": ("gpu-1",)}, {"trainer"}, id="avoid-nodes"),
        pytest.param(
            {"policy_env": {"RLJOB_POLICY_URI": "s3://b/rl/j/"}}, {"rollout"}, id="policy-uri"
        ),
        pytest.param(
            {"policy_env": {"RLJOB_POLICY_GENERATION": "3"}},
            set(),
            id="generation-alone-rolls-none",
        ),
        pytest.param({"trainer_master_port": 29600}, set(), id="master-port-only-trainer-service"),
    ],
)
def test_lifecycle_inputs_reach_only_their_role(ctx: dict[str, Any], rolled: set[str]) -> None:
    before, after = hashes(BASE), hashes(BASE, **ctx)
    deployments = {
        name.removeprefix("grpo-demo-")
        for (kind, name), digest in after.items()
        if kind == "Deployment" and before[(kind, name)] != digest
    }
    trainer_changed = before[("Job", "grpo-demo-trainer-a1")] != after.get(
        ("Job", "grpo-demo-trainer-a1"), after.get(("Job", "grpo-demo-trainer-a2"))
    )
    assert deployments | ({"trainer"} if trainer_changed else set()) == rolled


def test_suspend_changes_serving_hashes_and_resume_restores_them() -> None:
    running = hashes(BASE)
    suspended = hashes({**BASE, "spec": {**BASE["spec"], "suspend": True}})
    for (kind, name), digest in suspended.items():
        if kind == "Deployment":
            assert digest != running[(kind, name)]
        if kind == "Service":
            assert digest == running[(kind, name)]
    assert hashes(BASE) == running


def test_rendering_changes_do_not_change_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new operator version that renders differently must not roll running roles."""
    before = hashes(BASE)
    monkeypatch.setattr(pods_module, "STARTUP_SECONDS", 7200)
    monkeypatch.setattr(pods_module, "SHM_VOLUME", "shared-memory")
    after = hashes(BASE)
    job = parse_rljob(BASE)
    context = RenderContext(name="grpo-demo", namespace=NAMESPACE, uid="u", attempt=1)
    rollout = next(c for c in render_children(job, context) if c.kind == "Deployment")
    assert rollout.body["spec"]["template"]["spec"]["volumes"][0]["name"] == "shared-memory"
    assert after == before


def test_drain_timeout_of_a_gated_job_leaves_the_gated_hash() -> None:
    gated = with_role(BASE, "rollout", weightSync="Gated")
    longer = with_role(gated, "rollout", drainTimeout="15m")
    rollout = ("Deployment", "grpo-demo-rollout")
    assert hashes(longer)[rollout] == hashes(gated)[rollout] != hashes(BASE)[rollout]
