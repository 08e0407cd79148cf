"""Durations that contradict each other are refused, by the model and by the CRD alike, at the
field to change: a health window or timeout shorter than the interval it is evaluated at."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.crd_emulator import CEL_RULES, node_at
from tests.unit.api.verdicts import both_refusals, job, model_messages

HEALTH = "spec.health"

HEALTH_SETTINGS = [
    pytest.param({}, set(), id="defaults"),
    pytest.param({"interval": "2s", "kvDrift": {"window": "30s"}}, set(), id="demo-like"),
    pytest.param(
        {
            "interval": "1h",
            "kvDrift": {"window": "1h"},
            "verifierLatency": {"window": "60m"},
            "engineStall": {"timeout": "3600s"},
        },
        set(),
        id="all-equal-to-the-interval",
    ),
    pytest.param(
        {"interval": "10m"}, {f"{HEALTH}.engineStall.timeout"}, id="interval-above-default-stall"
    ),
    pytest.param(
        {"interval": "1m", "kvDrift": {"window": "30s"}},
        {f"{HEALTH}.kvDrift.window"},
        id="kv-drift-window-short",
    ),
    pytest.param(
        {"interval": "1m", "verifierLatency": {"window": "59s"}},
        {f"{HEALTH}.verifierLatency.window"},
        id="verifier-window-short",
    ),
    pytest.param(
        {"interval": "1m", "engineStall": {"timeout": "59.999999999s"}},
        {f"{HEALTH}.engineStall.timeout"},
        id="stall-timeout-short-by-a-nanosecond",
    ),
    pytest.param(
        {"interval": "1h", "kvDrift": {"window": "30m"}, "verifierLatency": {"window": "1h"}},
        {f"{HEALTH}.kvDrift.window", f"{HEALTH}.engineStall.timeout"},
        id="two-at-once",
    ),
]


@pytest.mark.parametrize(("health", "refused_at"), HEALTH_SETTINGS)
def test_health_windows_are_not_shorter_than_the_interval(
    health: dict[str, Any], refused_at: set[str]
) -> None:
    assert both_refusals(job(health=health)) == (refused_at, refused_at)


def test_the_refusal_names_both_durations() -> None:
    (message,) = model_messages(job(health={"interval": "1m", "kvDrift": {"window": "30s"}}))
    assert message == (
        "kvDrift.window must not be shorter than interval: health is evaluated once per interval"
    )


@pytest.mark.parametrize(
    "bound", ["kvDrift.window", "verifierLatency.window", "engineStall.timeout"]
)
def test_the_crd_has_the_rule_on_health_naming_the_bound(bound: str) -> None:
    (rule,) = [r for r in node_at(HEALTH)[CEL_RULES] if r["fieldPath"] == f".{bound}"]
    assert rule["rule"].endswith(f"duration(self.interval) <= duration(self.{bound})")
    # The API server checks the default {} before nested defaults fill it: every read is guarded.
    assert "!has(self.interval)" in rule["rule"]
    assert f"!has(self.{bound})" in rule["rule"]


GRACE = "spec.roles.trainer.terminationGracePeriodSeconds"

GRACE_SETTINGS = [
    pytest.param(None, None, set(), id="grace-unset"),
    pytest.param(60, None, set(), id="grace-under-default-teardown"),
    pytest.param(600, "10m", set(), id="grace-equal-to-teardown"),
    pytest.param(60, "1m0.5s", set(), id="teardown-with-a-fraction"),
    pytest.param(0, "1ns", set(), id="no-grace"),
    pytest.param(601, None, {GRACE}, id="grace-over-default-teardown"),
    pytest.param(60, "30s", {GRACE}, id="grace-over-teardown"),
    pytest.param(60, "59.999999999s", {GRACE}, id="grace-over-teardown-by-a-nanosecond"),
]


@pytest.mark.parametrize(("grace", "teardown", "refused_at"), GRACE_SETTINGS)
def test_trainer_grace_fits_in_the_teardown_timeout(
    grace: int | None, teardown: str | None, refused_at: set[str]
) -> None:
    trainer: dict[str, Any] = {} if grace is None else {"terminationGracePeriodSeconds": grace}
    policy = {} if teardown is None else {"teardownTimeout": teardown}
    body = job(roles={"rollout": {}, "trainer": trainer}, failurePolicy=policy)
    assert both_refusals(body) == (refused_at, refused_at)


def test_only_the_trainer_grace_is_bound_by_the_teardown() -> None:
    body = job(
        roles={"rollout": {"terminationGracePeriodSeconds": 600}, "trainer": {}},
        failurePolicy={"teardownTimeout": "30s"},
    )
    assert both_refusals(body) == (set(), set())


def test_the_crd_has_the_grace_rule_on_spec() -> None:
    (rule,) = [r for r in node_at("spec")[CEL_RULES] if r.get("fieldPath") == f".{GRACE[5:]}"]
    assert "duration(self.failurePolicy.teardownTimeout).getSeconds()" in rule["rule"]
