"""A role's podTemplate may not override what the operator owns: its restart policy, the main
container's reserved env and declared ports, its labels, annotations and readiness gates. The
model refuses, naming the offending value by its full path; the CRD cannot (its rules see nothing
inside a free-form field), so the API server stores the job and the operator refuses it. What the
user owns passes both."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import RESERVED_ENV_NAMES, RoleName
from rljob.api.pod_template import (
    CHECKS,
    COLLIDING_PORTS,
    CONTAINERS_NULL,
    MAIN_ENV_NULL,
    MAIN_PORTS_NULL,
    OPERATOR_ANNOTATIONS,
    OPERATOR_GATES,
    OPERATOR_LABELS,
    RESERVED_ENV,
    RESTART_POLICY,
    SPEC_NULL,
    TemplateCheck,
)
from rljob.api.ray_ports import RAY_PORTS
from tests.unit.api.crd_emulator import node_at, rules_at
from tests.unit.api.verdicts import both_refusals, job, model_messages

ROLES = ("rollout", "trainer", "reference", "verifier")


def with_template(role: str, template: Any, **fields: Any) -> dict[str, Any]:
    """Every role, `role` with `template` as its podTemplate and `fields` besides."""
    roles: dict[str, dict[str, Any]] = {name: {} for name in ROLES}
    roles[role] = {**fields, "podTemplate": template}
    return job(roles=roles)


def main(role: str, **fields: Any) -> dict[str, Any]:
    """A podTemplate giving the main container of `role` these fields."""
    return {"spec": {"containers": [{"name": role, **fields}]}}


def at(role: str, path: str = "") -> str:
    return f"spec.roles.{role}.podTemplate" + (f".{path}" if path else "")


MAIN = "spec.containers[0]"
GATED = {"conditionType": "rljob.io/policy-current"}
RAY = {"launcher": "ray", "command": ["python", "driver.py"]}


def refused(case_id: str, role: str, template: Any, where: str, **fields: Any) -> Any:
    """A podTemplate of `role` (with `fields` besides) the model refuses at `where` inside it."""
    return pytest.param(role, template, fields, where, id=case_id)


CUSTOM = {"generationTokensTotal": "a", "requestsRunning": "b", "requestsWaiting": "c"}
SIDECAR_THEN_MAIN = [{"name": "log"}, {"name": "trainer", "env": [{"name": "RLJOB_NAME"}]}]

REFUSED = [
    refused("restart-policy-trainer", "trainer", {"spec": {"restartPolicy": "OnFailure"}},
            "spec.restartPolicy"),
    refused("restart-policy-rollout-even-the-default", "rollout",
            {"spec": {"restartPolicy": "Always"}}, "spec.restartPolicy"),
    refused("restart-policy-null", "verifier", {"spec": {"restartPolicy": None}},
            "spec.restartPolicy"),
    refused("spec-null", "trainer", {"spec": None}, "spec"),
    refused("containers-null", "reference", {"spec": {"containers": None}}, "spec.containers"),
    refused("label-job", "trainer", {"metadata": {"labels": {"rljob.io/job": "other"}}},
            "metadata.labels.rljob.io/job"),
    refused("label-any-operator-key", "rollout", {"metadata": {"labels": {"rljob.io/x": "y"}}},
            "metadata.labels.rljob.io/x"),
    refused("label-managed-by", "rollout",
            {"metadata": {"labels": {"app.kubernetes.io/managed-by": "me"}}},
            "metadata.labels.app.kubernetes.io/managed-by"),
    refused("annotation-spec-hash", "trainer",
            {"metadata": {"annotations": {"rljob.io/spec-hash": "x"}}},
            "metadata.annotations.rljob.io/spec-hash"),
    refused("gate-policy-current", "rollout",
            {"spec": {"readinessGates": [{"conditionType": "example.com/a"}, GATED]}},
            "spec.readinessGates[1].conditionType"),
    refused("gate-any-operator-condition", "verifier",
            {"spec": {"readinessGates": [{"conditionType": "rljob.io/x"}]}},
            "spec.readinessGates[0].conditionType"),
    refused("main-env-null", "trainer", main("trainer", env=None), f"{MAIN}.env"),
    refused("main-ports-null", "rollout", main("rollout", ports=None), f"{MAIN}.ports"),
    refused("main-env-reserved-trainer", "trainer",
            main("trainer", env=[{"name": "A"}, {"name": "PET_NODE_RANK"}]),
            f"{MAIN}.env[1].name"),
    refused("main-env-reserved-verifier", "verifier",
            main("verifier", env=[{"name": "RLJOB_ROLE", "value": "x"}]),
            f"{MAIN}.env[0].name"),
    refused("main-env-reserved-second-container", "trainer",
            {"spec": {"containers": SIDECAR_THEN_MAIN}}, "spec.containers[1].env[0].name"),
    refused("port-trainer-sdk-metrics-9400", "trainer",
            main("trainer", ports=[{"containerPort": 9400}]),
            f"{MAIN}.ports[0].containerPort"),
    refused("port-verifier-sdk-metrics-9100", "verifier",
            main("verifier", ports=[{"containerPort": 9100}]),
            f"{MAIN}.ports[0].containerPort"),
    refused("port-name-metrics", "trainer",
            main("trainer", ports=[{"name": "metrics", "containerPort": 1234}]),
            f"{MAIN}.ports[0].name"),
    refused("port-declared-metrics-port", "trainer",
            main("trainer", ports=[{"containerPort": 9500}]),
            f"{MAIN}.ports[0].containerPort", metrics={"port": 9500}),
    refused("port-vllm-8000", "rollout", main("rollout", ports=[{"containerPort": 8000}]),
            f"{MAIN}.ports[0].containerPort"),
    refused("port-sglang-30000", "rollout", main("rollout", ports=[{"containerPort": 30000}]),
            f"{MAIN}.ports[0].containerPort", engine="sglang"),
    refused("port-ray-gcs-under-launcher-ray", "trainer",
            main("trainer", ports=[{"containerPort": 6379}]),
            f"{MAIN}.ports[0].containerPort", **RAY),
    refused("port-gang-engines-metrics", "trainer",
            main("trainer", ports=[{"containerPort": 8001}]),
            f"{MAIN}.ports[0].containerPort",
            engines={"exporter": "engine", "port": 8001}),
]  # fmt: skip


@pytest.mark.parametrize(("role", "template", "fields", "where"), REFUSED)
def test_refused_by_the_model_naming_the_field(
    role: str, template: Any, fields: dict[str, Any], where: str
) -> None:
    model, crd = both_refusals(with_template(role, template, **fields))

    assert model == {at(role, where)}
    assert crd == set()  # stored by the API server; the operator sets Accepted=False


def test_a_port_reusing_both_number_and_name_is_named_twice() -> None:
    template = main("trainer", ports=[{"name": "metrics", "containerPort": 9400}])
    model, _ = both_refusals(with_template("trainer", template))

    port = at("trainer", f"{MAIN}.ports[0]")
    assert model == {f"{port}.containerPort", f"{port}.name"}


def allowed(case_id: str, role: str, template: Any, **fields: Any) -> Any:
    return pytest.param(role, template, fields, id=case_id)


SIDECAR = {"name": "log", "env": [{"name": "RLJOB_NAME"}], "ports": [{"containerPort": 9400}]}
MALFORMED = {"readinessGates": "x", "containers": [{"name": "rollout", "env": "x", "ports": [5]}]}

ALLOWED = [
    allowed("test-bed-sub-domain-annotation", "trainer",
            {"metadata": {"annotations": {"sim.rljob.io/fail-after": "1s"}}}),
    allowed("sub-domain-and-look-alike-labels", "trainer",
            {"metadata": {"labels": {"team.rljob.io/x": "y", "myrljob.io/z": "w"}}}),
    allowed("other-app-kubernetes-io-labels", "rollout",
            {"metadata": {"labels": {"app.kubernetes.io/name": "engine"}}}),
    allowed("managed-by-as-an-annotation", "rollout",
            {"metadata": {"annotations": {"app.kubernetes.io/managed-by": "x"}}}),
    allowed("own-readiness-gate", "rollout",
            {"spec": {"readinessGates": [{"conditionType": "example.com/warm"}]}}),
    allowed("native-sidecar-restart-policy", "trainer",
            {"spec": {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}]}}),
    allowed("main-env-own-name", "trainer",
            main("trainer", env=[{"name": "NCCL_DEBUG", "value": "INFO"}])),
    allowed("sidecar-may-use-reserved-env-and-ports", "trainer",
            {"spec": {"containers": [SIDECAR]}}),
    allowed("container-named-like-another-role-is-a-sidecar", "trainer",
            main("rollout", env=[{"name": "RLJOB_NAME"}], ports=None)),
    allowed("init-container-named-like-the-role", "trainer",
            {"spec": {"initContainers": [{"name": "trainer", "env": None}]}}),
    allowed("main-new-port", "trainer",
            main("trainer", ports=[{"name": "debug", "containerPort": 5678}])),
    allowed("ray-port-under-torchrun", "trainer", main("trainer", ports=[{"containerPort": 6379}])),
    allowed("reference-declares-no-port", "reference",
            main("reference", ports=[{"name": "http", "containerPort": 8000}])),
    allowed("custom-engine-declares-no-port", "rollout",
            main("rollout", ports=[{"containerPort": 8000}]), engine="custom", metricNames=CUSTOM),
    allowed("vllm-port-when-metrics-port-is-declared-instead", "rollout",
            main("rollout", ports=[{"containerPort": 8000}]), metrics={"port": 9000}),
    allowed("main-mounts-and-volumes-are-the-users", "trainer",
            main("trainer", volumeMounts=[{"name": "d", "mountPath": "/dev/shm"}])),
    allowed("malformed-lists-left-to-the-pod-api", "rollout", {"spec": MALFORMED}),
]  # fmt: skip


@pytest.mark.parametrize(("role", "template", "fields"), ALLOWED)
def test_allowed(role: str, template: Any, fields: dict[str, Any]) -> None:
    assert both_refusals(with_template(role, template, **fields)) == (set(), set())


@pytest.mark.parametrize("name", RESERVED_ENV_NAMES)
def test_every_reserved_name_is_refused_in_the_main_container(name: str) -> None:
    template = main("rollout", env=[{"name": name, "value": "x"}])
    model, _ = both_refusals(with_template("rollout", template))

    assert model == {at("rollout", f"{MAIN}.env[0].name")}


@pytest.mark.parametrize(("name", "port"), RAY_PORTS.values())
def test_every_ray_port_is_refused_under_launcher_ray(name: str, port: int) -> None:
    template = main("trainer", ports=[{"containerPort": port}, {"name": name, "containerPort": 1}])
    model, _ = both_refusals(with_template("trainer", template, **RAY))

    ports = at("trainer", f"{MAIN}.ports")
    assert model == {f"{ports}[0].containerPort", f"{ports}[1].name"}


@pytest.mark.parametrize(
    ("check", "template", "message"),
    [
        pytest.param(RESTART_POLICY, {"spec": {"restartPolicy": "Always"}},
                     "podTemplate.spec.restartPolicy must not be set: the operator sets it (Never "
                     "on trainer pods, whose failures it handles itself; Always, the Deployments' "
                     "only policy, on the others)", id="restart-policy"),
        pytest.param(SPEC_NULL, {"spec": None},
                     "podTemplate.spec must not be null: it would remove the pod spec the "
                     "operator renders", id="spec-null"),
        pytest.param(CONTAINERS_NULL, {"spec": {"containers": None}},
                     "podTemplate.spec.containers must not be null: it would remove the main "
                     "container (containers merge by name: list only those to add or change)",
                     id="containers-null"),
        pytest.param(OPERATOR_LABELS, {"metadata": {"labels": {"rljob.io/role": "x"}}},
                     "podTemplate.metadata.labels must not set app.kubernetes.io/managed-by nor a "
                     "key of the operator's domain rljob.io/: the operator selects and tracks its "
                     "pods by them (sub-domains such as team.rljob.io/ are free)", id="labels"),
        pytest.param(OPERATOR_ANNOTATIONS, {"metadata": {"annotations": {"rljob.io/x": "y"}}},
                     "podTemplate.metadata.annotations must not set a key of the operator's domain "
                     "rljob.io/: the operator writes and reads those (sub-domains such as "
                     "team.rljob.io/ are free)", id="annotations"),
        pytest.param(OPERATOR_GATES, {"spec": {"readinessGates": [GATED]}},
                     "podTemplate.spec.readinessGates must not name a condition type of the "
                     "operator's domain rljob.io/: the operator adds and sets its own gates "
                     "(rljob.io/policy-current under weightSync Gated)", id="readiness-gates"),
        pytest.param(MAIN_ENV_NULL, main("trainer", env=None),
                     "podTemplate env of the main container (named like the role) must not be "
                     "null: it would remove the variables the operator sets (variables merge by "
                     "name: list only those to add or change)", id="main-env-null"),
        pytest.param(RESERVED_ENV, main("trainer", env=[{"name": "RLJOB_ATTEMPT"}]),
                     "podTemplate env of the main container (named like the role) must be none of "
                     "the names the operator sets: RLJOB_NAME, ", id="main-env-reserved"),
        pytest.param(MAIN_PORTS_NULL, main("trainer", ports=None),
                     "podTemplate ports of the main container (named like the role) must not be "
                     "null: it would remove the ports the operator declares (ports merge by "
                     "containerPort: list only those to add)", id="main-ports-null"),
        pytest.param(COLLIDING_PORTS, main("trainer", ports=[{"containerPort": 9400}]),
                     "podTemplate ports of the main container (named like the role) must not "
                     "reuse the containerPort or name of a port the operator declares for the "
                     "role: metrics.port, else the SDK's 9400 (trainer) or 9100 (verifier); a "
                     "rollout engine's 8000 (vllm) or 30000 (sglang); Ray's ports under launcher "
                     "ray; the gang engines' metrics port", id="colliding-ports"),
    ],
)  # fmt: skip
def test_messages(check: TemplateCheck, template: Any, message: str) -> None:
    (refusal,) = model_messages(with_template("trainer", template))

    assert refusal == check.message
    assert refusal.startswith(message)


def test_every_check_is_applied_to_every_role() -> None:
    for role in RoleName:
        for check in CHECKS:
            assert check.rule(role).field == f"{role.value}.podTemplate"


def test_the_crd_carries_no_rule_over_a_pod_template() -> None:
    """CRD rules cannot read a free-form field's contents (the API server refuses the CRD:
    "undefined field"), so none is generated, and podTemplate stays free-form."""
    for role in ROLES:
        assert node_at(f"spec.roles.{role}.podTemplate") == {
            "type": "object",
            "description": node_at(f"spec.roles.{role}.podTemplate")["description"],
            "x-kubernetes-preserve-unknown-fields": True,
        }
    assert not [rule for rule in rules_at("spec.roles") if "podTemplate" in rule["rule"]]
