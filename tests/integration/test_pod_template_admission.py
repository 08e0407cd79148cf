"""The chart's admission policy refuses a podTemplate that overrides what the operator owns,
naming the role and the field (the CRD's own rules cannot see into a free-form field); the
operator refuses the same where the policy is not installed (tests/unit/api)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.integration.chart_release import Release, installed, new_release
from tests.integration.conftest import Cluster
from tests.integration.rljobs import admission_refusal, apply_rljob, example

# cluster_wide: the chart's cluster-wide admission policy.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]


@pytest.fixture(scope="module")
def policy(cluster: Cluster) -> Iterator[Release]:
    with installed(new_release(cluster), {}) as release:
        yield release


def with_template(role: str, template: dict[str, Any]) -> dict[str, Any]:
    body = example()
    body["spec"]["roles"][role]["podTemplate"] = template
    body["metadata"]["name"] = f"template-{secrets.token_hex(3)}"
    return body


def main_container(role: str, **fields: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": role, **fields}]}}


@pytest.mark.parametrize(
    ("role", "template", "field"),
    [
        pytest.param("trainer", {"spec": {"restartPolicy": "Always"}}, "spec.restartPolicy",
                     id="restart-policy"),
        pytest.param("rollout", {"spec": None}, "spec", id="null-spec"),
        pytest.param("rollout", {"spec": {"containers": None}}, "spec", id="null-containers"),
        pytest.param("rollout", {"metadata": {"labels": {"rljob.io/job": "other"}}},
                     "metadata.labels", id="the-job-label"),
        pytest.param("trainer", {"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}},
                     "metadata.labels", id="managed-by"),
        pytest.param("rollout", {"metadata": {"annotations": {"rljob.io/spec-hash": "x"}}},
                     "metadata.annotations", id="an-operator-annotation"),
        pytest.param("rollout", {"spec": {"readinessGates": [{"conditionType":
                                                              "rljob.io/policy-current"}]}},
                     "spec.readinessGates", id="the-operators-gate"),
        pytest.param("trainer", main_container("trainer", env=[{"name": "RLJOB_RESUME_URI",
                                                               "value": "s3://elsewhere/x"}]),
                     "spec.containers", id="a-reserved-env-name"),
        pytest.param("trainer", main_container("trainer", env=None), "spec.containers",
                     id="null-env"),
        pytest.param("rollout", main_container("rollout", ports=None), "spec.containers",
                     id="null-ports"),
    ],
)  # fmt: skip
def test_an_override_of_what_the_operator_owns_is_refused_at_admission(
    cluster: Cluster, namespace: str, policy: Release, role: str, template: Any, field: str
) -> None:
    body = with_template(role, template)
    refusal = wait_for(
        lambda: admission_refusal(cluster, namespace, body), 30, f"a refusal of {field}"
    )
    assert f"{policy.name}-rljob-operator-reach" in refusal
    assert f"spec.roles.{role}.podTemplate.{field}: " in refusal


@pytest.mark.parametrize(
    ("role", "template"),
    [
        pytest.param("rollout", {"metadata": {"labels": {"sim.rljob.io/x": "y", "team": "a"}}},
                     id="sub-domain-and-own-labels"),
        pytest.param("trainer", main_container("trainer", env=[{"name": "NCCL_DEBUG",
                                                               "value": "WARN"}]),
                     id="own-env"),
        pytest.param("trainer", {"spec": {"containers": [
            {"name": "sidecar", "image": "busybox", "env": [{"name": "RLJOB_NAME", "value": "x"}]}
        ]}}, id="a-sidecars-env"),
        pytest.param("rollout", {"spec": {"readinessGates": [{"conditionType": "team/ready"}]}},
                     id="a-gate-of-its-own"),
    ],
)  # fmt: skip
def test_what_is_the_users_passes_admission(
    cluster: Cluster, namespace: str, policy: Release, role: str, template: Any
) -> None:
    apply_rljob(cluster, namespace, with_template(role, template))
