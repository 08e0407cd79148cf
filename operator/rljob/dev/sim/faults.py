"""Fault injection rules and their resolution per workload instance (pure).

A rule is (selector, fault, survive_restart). A selector names one pod, or a job's pods of one
role (or of every role). Per kind, the newest rule matching an instance applies, so a pod-level
`sleep {on: false}` after a job-level `sleep` wakes just that engine; a new rule of the same kind
and selector replaces the old one.

An instance is one run of a pod's container (pod uid and restart count): a restarted engine is a
new instance. A rule that does not survive restarts applies only to the instances it matched when
it was injected; one that does also applies to instances started later (its time then starts at
the instance's start). By default `sleep`, `pause` and `load` survive restarts (they are the
driver's and the load's doing), while `drift`, `stall`, `hang`, `latency`, `errors` and
`unreachable` do not (they are the process's own trouble, gone with a fresh process).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rljob.dev.sim.profiles import ROLES

MAX_RULES = 1000

# Which kinds each role understands; `stall` on a trainer is a hang.
ROLE_KINDS: dict[str, frozenset[str]] = {
    "rollout": frozenset({"drift", "stall", "sleep", "pause", "load", "unreachable"}),
    "reference": frozenset({"drift", "stall", "unreachable"}),
    "trainer": frozenset({"hang", "stall", "unreachable"}),
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
            case _:
                return {"kind": self.kind}


@dataclass(slots=True)
class Rule:
    id: str
    selector: Selector
    fault: Fault
    survive_restart: bool
    created: float
    seq: int
    bound: set[str] = field(default_factory=set)

    def applies(self, instance: str, namespace: str, pod: str, job: str, role: str) -> bool:
        return (
            (self.survive_restart or instance in self.bound)
            and self.selector.matches(namespace, pod, job, role)
            and self.fault.kind in ROLE_KINDS.get(role, frozenset())
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "selector": self.selector.as_json(),
            **self.fault.as_json(),
            "survive_restart": self.survive_restart,
            "created": self.created,
            "instances": sorted(self.bound),
        }


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


@dataclass(frozen=True, slots=True)
class Active:
    """The faults in force for one instance; times are when each started (wall seconds)."""

    drifts: tuple[tuple[float, float, float], ...] = ()  # (start, drop, over_seconds)
    stall_since: float | None = None
    hang_since: float | None = None
    sleep: tuple[float, int] | None = None  # (start, level); level 0 = explicitly awake
    pause: tuple[float, bool] | None = None  # (start, paused); a weight sync pausing requests
    load: tuple[float, int, float | None] | None = None  # (start, waiting, fraction)
    p99_seconds: float | None = None
    error_rate: float | None = None
    unreachable: bool = False

    def health(self, t: float) -> float:
        """Capacity left after drift at time t, 1.0 when healthy."""
        health = 1.0
        for start, drop, over in self.drifts:
            if t < start:
                continue
            progress = 1.0 if over <= 0 else min(1.0, (t - start) / over)
            health *= 1 - drop * progress
        return health

    def sleep_level(self, t: float) -> int:
        return self.sleep[1] if self.sleep is not None and t >= self.sleep[0] else 0

    def paused(self, t: float) -> bool:
        return self.pause is not None and t >= self.pause[0] and self.pause[1]

    def stalled(self, t: float) -> bool:
        return self.stall_since is not None and t >= self.stall_since

    def hung(self, t: float) -> bool:
        since = self.hang_since if self.hang_since is not None else self.stall_since
        return since is not None and t >= since

    def load_at(self, t: float) -> tuple[int, float | None] | None:
        if self.load is None or t < self.load[0]:
            return None
        return self.load[1], self.load[2]


NO_FAULTS = Active()


def resolve(
    rules: Iterable[Rule],
    *,
    instance: str,
    namespace: str,
    pod: str,
    job: str,
    role: str,
    started: float,
) -> Active:
    """The newest applicable rule per kind, as the instance's Active faults."""
    newest: dict[str, Rule] = {}
    for rule in rules:
        if rule.applies(instance, namespace, pod, job, role):
            kind = rule.fault.kind
            if kind not in newest or rule.seq > newest[kind].seq:
                newest[kind] = rule
    if not newest:
        return NO_FAULTS

    def since(kind: str) -> float | None:
        rule = newest.get(kind)
        return None if rule is None else max(rule.created, started)

    drift = newest.get("drift")
    sleep, load, pause = newest.get("sleep"), newest.get("load"), newest.get("pause")
    latency, errors = newest.get("latency"), newest.get("errors")
    stall_since = since("stall")
    return Active(
        drifts=()
        if drift is None
        else ((max(drift.created, started), drift.fault.drop, drift.fault.over_seconds),),
        stall_since=stall_since,
        hang_since=since("hang"),
        sleep=None if sleep is None else (max(sleep.created, started), sleep.fault.sleep_level),
        pause=None if pause is None else (max(pause.created, started), pause.fault.sleep_level > 0),
        load=None
        if load is None
        else (max(load.created, started), load.fault.waiting, load.fault.fraction),
        p99_seconds=None if latency is None else latency.fault.p99_seconds,
        error_rate=None if errors is None else errors.fault.rate,
        unreachable="unreachable" in newest,
    )


class RuleBook:
    """The simulator's rules: add (replacing same kind and selector), clear, resolve, prune."""

    def __init__(self, max_rules: int = MAX_RULES) -> None:
        self.max_rules = max_rules
        self._rules: dict[str, Rule] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._rules)

    def rules(self) -> list[Rule]:
        return sorted(self._rules.values(), key=lambda rule: rule.seq)

    def add(self, injection: Injection, now: float, bound: Iterable[str]) -> tuple[Rule, list[str]]:
        """Adds a rule bound to `bound` instances; returns it and the ids it replaced."""
        replaced = [
            rule.id
            for rule in self._rules.values()
            if rule.selector == injection.selector and rule.fault.kind == injection.fault.kind
        ]
        if len(self._rules) - len(replaced) >= self.max_rules:
            raise FaultError(f"at most {self.max_rules} rules; clear some first")
        for rule_id in replaced:
            del self._rules[rule_id]
        self._seq += 1
        rule = Rule(
            id=f"f{self._seq}",
            selector=injection.selector,
            fault=injection.fault,
            survive_restart=injection.survive_restart,
            created=now,
            seq=self._seq,
            bound=set(bound),
        )
        self._rules[rule.id] = rule
        return rule, replaced

    def clear(
        self,
        *,
        rule_id: str | None = None,
        selector: Selector | None = None,
        namespace: str | None = None,
        kind: str | None = None,
    ) -> list[Rule]:
        """Removes the rule `rule_id`; or rules with exactly `selector`; or every rule in
        `namespace`; or every rule; each optionally only of `kind`. Returns what was removed."""
        if kind is not None and kind not in KINDS:
            raise FaultError(f"kind must be one of {', '.join(sorted(KINDS))}")
        removed = [
            rule
            for rule in self._rules.values()
            if (rule_id is None or rule.id == rule_id)
            and (selector is None or rule.selector == selector)
            and (namespace is None or rule.selector.namespace == namespace)
            and (kind is None or rule.fault.kind == kind)
        ]
        for rule in removed:
            del self._rules[rule.id]
        return removed

    def prune(self, live_instances: set[str]) -> list[str]:
        """Drops instances that are gone from the rules' bindings, and rules that apply to
        nothing any more (not surviving restarts, no live instance bound)."""
        dropped = []
        for rule in list(self._rules.values()):
            rule.bound &= live_instances
            if not rule.survive_restart and not rule.bound:
                del self._rules[rule.id]
                dropped.append(rule.id)
        return dropped

    def resolve(
        self, *, instance: str, namespace: str, pod: str, job: str, role: str, started: float
    ) -> Active:
        return resolve(
            self._rules.values(),
            instance=instance,
            namespace=namespace,
            pod=pod,
            job=job,
            role=role,
            started=started,
        )
