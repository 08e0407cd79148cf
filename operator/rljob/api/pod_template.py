"""What a role's free-form `podTemplate` may not override: what the operator renders and relies
on (rljob.reconcile.pods merges the podTemplate over its rendering by key, see
rljob.reconcile.merge). Each check is a rule of Roles, where a role's name, and so its main
container's (named like the role), is known, applied to every role; pydantic names the offending
value by its full path, e.g. spec.roles.trainer.podTemplate.spec.restartPolicy.

CRD validation rules see none of a free-form field's contents (rljob.api.rules.FreeFormRule):
the chart's ValidatingAdmissionPolicy refuses these but the port collisions at admission (reading
the field dynamically); without it the API server stores such a job, and the operator marks it
Accepted=False, reason InvalidSpec, naming the field."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rljob.api.declared_ports import ENGINE_PORTS, SDK_METRICS_PORTS, declared_ports
from rljob.api.reserved import RESERVED_ENV_MESSAGE, RESERVED_ENV_NAMES
from rljob.api.rules import FreeFormRule, Loc
from rljob.vocabulary.enums import RoleName
from rljob.vocabulary.labels import ANNOTATION_PREFIX, MANAGED_BY_LABEL, POLICY_CURRENT_GATE

OPERATOR_KEY_PREFIX = f"{ANNOTATION_PREFIX}/"
"""Label, annotation and condition-type keys of the operator's own domain; a sub-domain's keys
(team.rljob.io/x, the test bed's sim.rljob.io/...) are the user's."""

Template = dict[str, Any]
Offenders = Callable[[RoleName, Any, Template], Iterator[Loc]]

_MAIN = "podTemplate {what} of the main container (named like the role)"


@dataclass(frozen=True)
class TemplateCheck:
    """One refusal, applied to each role's podTemplate: `offenders(role name, role, template)`
    yields the refused paths inside the template."""

    message: str
    offenders: Offenders

    def rule(self, role_name: RoleName) -> FreeFormRule:
        def offenders(roles: Any) -> Iterator[Loc]:
            role = getattr(roles, role_name.value)
            if role is None or role.pod_template is None:
                return iter(())
            return self.offenders(role_name, role, role.pod_template)

        return FreeFormRule(
            message=self.message, field=f"{role_name.value}.podTemplate", offenders=offenders
        )


# ------------------------------------------------------------------ reading the template


def _spec(template: Template) -> dict[str, Any]:
    spec = template.get("spec")
    return spec if isinstance(spec, dict) else {}


def _main_containers(role_name: RoleName, template: Template) -> Iterator[tuple[int, Template]]:
    """(index, container) of each podTemplate container named like the role (the shape check
    has made containers a list of objects with string names)."""
    containers = _spec(template).get("containers")
    for index, container in enumerate(containers if isinstance(containers, list) else []):
        if isinstance(container, dict) and container.get("name") == role_name.value:
            yield index, container


def _items(parent: Template, key: str) -> Iterator[tuple[int, Template]]:
    """(index, item) of each object in the list parent[key] (anything else is the pod API's)."""
    items = parent.get(key)
    for index, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict):
            yield index, item


def _operator_key(key: object) -> bool:
    return isinstance(key, str) and key.startswith(OPERATOR_KEY_PREFIX)


def _port_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# ------------------------------------------------------------------ the checks


def _spec_null(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
    if "spec" in template and template["spec"] is None:
        yield ("spec",)


def _restart_policy(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
    if "restartPolicy" in _spec(template):
        yield ("spec", "restartPolicy")


def _containers_null(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
    spec = _spec(template)
    if "containers" in spec and spec["containers"] is None:
        yield ("spec", "containers")


def _metadata_keys(field: str, refused: Callable[[str], bool]) -> Offenders:
    def offenders(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
        metadata = template.get("metadata")
        keys = metadata.get(field) if isinstance(metadata, dict) else None
        for key in keys if isinstance(keys, dict) else {}:
            if refused(key):
                yield ("metadata", field, key)

    return offenders


def _readiness_gates(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
    for index, gate in _items(_spec(template), "readinessGates"):
        if _operator_key(gate.get("conditionType")):
            yield ("spec", "readinessGates", index, "conditionType")


def _main_null(key: str) -> Offenders:
    def offenders(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
        for index, container in _main_containers(role_name, template):
            if key in container and container[key] is None:
                yield ("spec", "containers", index, key)

    return offenders


def _reserved_env(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
    for index, container in _main_containers(role_name, template):
        for position, variable in _items(container, "env"):
            if variable.get("name") in RESERVED_ENV_NAMES:
                yield ("spec", "containers", index, "env", position, "name")


def _colliding_ports(role_name: RoleName, role: Any, template: Template) -> Iterator[Loc]:
    declared = declared_ports(role_name, role)
    names = {name for name, _ in declared}
    numbers = {number for _, number in declared}
    for index, container in _main_containers(role_name, template):
        for position, port in _items(container, "ports"):
            where = ("spec", "containers", index, "ports", position)
            if _port_number(port.get("containerPort")) in numbers:
                yield (*where, "containerPort")
            if isinstance(port.get("name"), str) and port["name"] in names:
                yield (*where, "name")


_SDK_PORTS = " or ".join(f"{port} ({role.value})" for role, port in SDK_METRICS_PORTS.items())
_ENGINE_PORTS = " or ".join(f"{port} ({engine.value})" for engine, port in ENGINE_PORTS.items())
_OPERATOR_DOMAIN = f"the operator's domain {OPERATOR_KEY_PREFIX}"
_SUB_DOMAINS = f"sub-domains such as team.{OPERATOR_KEY_PREFIX} are free"

SPEC_NULL = TemplateCheck(
    message="podTemplate.spec must not be null: it would remove the pod spec the operator renders",
    offenders=_spec_null,
)
RESTART_POLICY = TemplateCheck(
    message="podTemplate.spec.restartPolicy must not be set: the operator sets it (Never on "
    "trainer pods, whose failures it handles itself; Always, the Deployments' only policy, on "
    "the others)",
    offenders=_restart_policy,
)
CONTAINERS_NULL = TemplateCheck(
    message="podTemplate.spec.containers must not be null: it would remove the main container "
    "(containers merge by name: list only those to add or change)",
    offenders=_containers_null,
)
OPERATOR_LABELS = TemplateCheck(
    message=f"podTemplate.metadata.labels must not set {MANAGED_BY_LABEL} nor a key of "
    f"{_OPERATOR_DOMAIN}: the operator selects and tracks its pods by them ({_SUB_DOMAINS})",
    offenders=_metadata_keys("labels", lambda key: _operator_key(key) or key == MANAGED_BY_LABEL),
)
OPERATOR_ANNOTATIONS = TemplateCheck(
    message=f"podTemplate.metadata.annotations must not set a key of {_OPERATOR_DOMAIN}: the "
    f"operator writes and reads those ({_SUB_DOMAINS})",
    offenders=_metadata_keys("annotations", _operator_key),
)
OPERATOR_GATES = TemplateCheck(
    message=f"podTemplate.spec.readinessGates must not name a condition type of "
    f"{_OPERATOR_DOMAIN}: the operator adds and sets its own gates ({POLICY_CURRENT_GATE} "
    "under weightSync Gated)",
    offenders=_readiness_gates,
)
MAIN_ENV_NULL = TemplateCheck(
    message=_MAIN.format(what="env") + " must not be null: it would remove the variables the "
    "operator sets (variables merge by name: list only those to add or change)",
    offenders=_main_null("env"),
)
RESERVED_ENV = TemplateCheck(
    message=_MAIN.format(what="env") + f" {RESERVED_ENV_MESSAGE}",
    offenders=_reserved_env,
)
MAIN_PORTS_NULL = TemplateCheck(
    message=_MAIN.format(what="ports") + " must not be null: it would remove the ports the "
    "operator declares (ports merge by containerPort: list only those to add)",
    offenders=_main_null("ports"),
)
COLLIDING_PORTS = TemplateCheck(
    message=_MAIN.format(what="ports") + " must not reuse the containerPort or name of a port "
    f"the operator declares for the role: metrics.port, else the SDK's {_SDK_PORTS}; a rollout "
    f"engine's {_ENGINE_PORTS}; Ray's ports under launcher ray; the gang engines' metrics port",
    offenders=_colliding_ports,
)

CHECKS = (
    SPEC_NULL,
    RESTART_POLICY,
    CONTAINERS_NULL,
    OPERATOR_LABELS,
    OPERATOR_ANNOTATIONS,
    OPERATOR_GATES,
    MAIN_ENV_NULL,
    RESERVED_ENV,
    MAIN_PORTS_NULL,
    COLLIDING_PORTS,
)


def pod_template_rules() -> tuple[FreeFormRule, ...]:
    """Every check on every role's podTemplate, as rules of Roles."""
    return tuple(check.rule(role_name) for role_name in RoleName for check in CHECKS)
