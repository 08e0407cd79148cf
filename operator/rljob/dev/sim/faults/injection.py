"""A fault injection request, validated: which pods it selects (a pod, or a job's pods of one role
or of every role), which fault kind with which parameters, and whether it survives restarts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rljob.dev.sim.profiles import ROLES

# Which kinds each role understands; `stall` on a trainer is a hang.
ROLE_KINDS: dict[str, frozenset[str]] = {
    "rollout": frozenset(
        {"drift", "stall", "sleep", "pause", "load", "memory_growth", "unreachable"}
    ),
    "reference": frozenset({"drift", "stall", "unreachable"}),
    # drift, memory_growth: the trainer pod's colocated engines (TrainerProfile.colocated_engines).
    "trainer": frozenset({"hang", "stall", "drift", "memory_growth", "unreachable"}),
    "verifier": frozenset({"latency", "errors", "unreachable"}),
}
KINDS = frozenset().union(*ROLE_KINDS.values())
SURVIVES_RESTART_BY_DEFAULT = frozenset({"sleep", "pause", "load"})

_SELECTOR_KEYS = {"namespace", "pod", "job", "role"}
_PARAMS: dict[str, set[str]] = {
    "drift": {"drop", "over_seconds"},
    "stall": set(),
    "hang": set(),
    "latency": {"p99_seconds"},
    "errors": {"rate"},
    "sleep": {"on", "level"},
    "pause": {"on"},
    "load": {"waiting", "fraction"},
    # Host memory the engine's processes keep from the injection on (rljob.dev.host_memory).
    "memory_growth": {"gib_per_hour"},
    "unreachable": set(),
}


class FaultError(ValueError):
    """An injection or clear request that cannot be applied (bad kind, selector or value)."""


@dataclass(frozen=True, slots=True)
class Selector:
    """One pod (namespace + pod), or a job's pods (namespace + job, optionally one role)."""

    namespace: str
    pod: str | None = None
    job: str | None = None
    role: str | None = None

    def matches(self, namespace: str, pod: str, job: str, role: str) -> bool:
        return (
            self.namespace == namespace
            and (self.pod is None or self.pod == pod)
            and (self.job is None or self.job == job)
            and (self.role is None or self.role == role)
        )

    def as_json(self) -> dict[str, str]:
        fields = {"namespace": self.namespace, "pod": self.pod, "job": self.job, "role": self.role}
        return {key: value for key, value in fields.items() if value is not None}


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault kind with its validated parameters."""

    kind: str
    drop: float = 0.0
    over_seconds: float = 0.0
    p99_seconds: float = 0.0
    rate: float = 0.0
    sleep_level: int = 0  # 0: awake (an explicit wake-up), 1: weights offloaded, 2: discard all
    waiting: int = 0
    fraction: float | None = None
    gib_per_hour: float = 0.0

    def as_json(self) -> dict[str, Any]:
        match self.kind:
            case "drift":
                return {"kind": "drift", "drop": self.drop, "over_seconds": self.over_seconds}
            case "latency":
                return {"kind": "latency", "p99_seconds": self.p99_seconds}
            case "errors":
                return {"kind": "errors", "rate": self.rate}
            case "sleep":
                return {"kind": "sleep", "on": self.sleep_level > 0, "level": self.sleep_level}
            case "pause":
                return {"kind": "pause", "on": self.sleep_level > 0}
            case "load":
                return {"kind": "load", "waiting": self.waiting, "fraction": self.fraction}
            case "memory_growth":
                return {"kind": "memory_growth", "gib_per_hour": self.gib_per_hour}
            case _:
                return {"kind": self.kind}


def _name(body: Mapping[str, Any], key: str, required: bool = False) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise FaultError(f"{key} is required")
        return None
    if not isinstance(value, str) or not value or len(value) > 253:
        raise FaultError(f"{key} must be a non-empty string")
    return value


def parse_selector(body: Mapping[str, Any]) -> Selector:
    """namespace plus pod, or plus job (and optionally role)."""
    selector = Selector(
        namespace=_name(body, "namespace", required=True) or "",
        pod=_name(body, "pod"),
        job=_name(body, "job"),
        role=_name(body, "role"),
    )
    if selector.pod is None and selector.job is None:
        raise FaultError("name a pod, or a job (optionally with a role)")
    if selector.pod is not None and (selector.job is not None or selector.role is not None):
        raise FaultError("name either a pod, or a job and role, not both")
    if selector.role is not None and selector.role not in ROLES:
        raise FaultError(f"role must be one of {', '.join(ROLES)}")
    return selector


def _number(
    params: Mapping[str, Any], key: str, default: float | None, low: float, high: float
) -> float:
    value = params.get(key, default)
    if value is None:
        raise FaultError(f"{key} is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FaultError(f"{key} must be a number")
    if not low <= value <= high:
        raise FaultError(f"{key} must be between {low} and {high}")
    return float(value)


def _on(params: Mapping[str, Any]) -> bool:
    on = params.get("on", True)
    if not isinstance(on, bool):
        raise FaultError("on must be true or false")
    return on


def parse_fault(kind: Any, params: Mapping[str, Any]) -> Fault:
    if kind not in KINDS:
        raise FaultError(f"kind must be one of {', '.join(sorted(KINDS))}")
    unknown = sorted(set(params) - _PARAMS[kind])
    if unknown:
        raise FaultError(f"{kind} takes {sorted(_PARAMS[kind]) or 'no parameters'}, not {unknown}")
    match kind:
        case "drift":
            return Fault(
                "drift",
                drop=_number(params, "drop", None, 0.0, 0.99),
                over_seconds=_number(params, "over_seconds", 0.0, 0.0, 7 * 86400),
            )
        case "latency":
            return Fault("latency", p99_seconds=_number(params, "p99_seconds", None, 0.001, 3600))
        case "errors":
            return Fault("errors", rate=_number(params, "rate", None, 0.0, 1.0))
        case "sleep":
            level = _number(params, "level", 1, 1, 2)
            if level != int(level):
                raise FaultError("level must be 1 or 2")
            return Fault("sleep", sleep_level=int(level) if _on(params) else 0)
        case "pause":
            return Fault("pause", sleep_level=1 if _on(params) else 0)
        case "load":
            waiting = _number(params, "waiting", None, 0, 100_000)
            if waiting != int(waiting):
                raise FaultError("waiting must be a whole number")
            fraction = params.get("fraction")
            return Fault(
                "load",
                waiting=int(waiting),
                fraction=None if fraction is None else _number(params, "fraction", None, 0.01, 1),
            )
        case "memory_growth":
            return Fault(
                "memory_growth", gib_per_hour=_number(params, "gib_per_hour", None, 0.0, 1024.0)
            )
        case _:
            return Fault(kind)


@dataclass(frozen=True, slots=True)
class Injection:
    selector: Selector
    fault: Fault
    survive_restart: bool


def parse_injection(body: Mapping[str, Any]) -> Injection:
    """{namespace, pod | job [, role], kind, <params>, survive_restart?}."""
    if not isinstance(body, Mapping):
        raise FaultError("the body must be a JSON object")
    selector = parse_selector(body)
    kind = body.get("kind")
    params = {
        k: v for k, v in body.items() if k not in {*_SELECTOR_KEYS, "kind", "survive_restart"}
    }
    fault = parse_fault(kind, params)
    if selector.role is not None and fault.kind not in ROLE_KINDS[selector.role]:
        raise FaultError(f"a {selector.role} does not take {fault.kind}")
    survive = body.get("survive_restart", fault.kind in SURVIVES_RESTART_BY_DEFAULT)
    if not isinstance(survive, bool):
        raise FaultError("survive_restart must be true or false")
    return Injection(selector, fault, survive)
