"""The fault rules in force and their resolution per workload instance: per kind, the newest
rule that applies (the semantics are in the package docstring)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rljob.dev.host_memory import grown
from rljob.dev.sim.faults.injection import (
    KINDS,
    ROLE_KINDS,
    Fault,
    FaultError,
    Injection,
    Selector,
)

MAX_RULES = 1000


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


@dataclass(frozen=True, slots=True)
class Active:
    """The faults in force for one instance; times are when each started (wall seconds)."""

    drifts: tuple[tuple[float, float, float], ...] = ()  # (start, drop, over_seconds)
    stall_since: float | None = None
    hang_since: float | None = None
    sleep: tuple[float, int] | None = None  # (start, level); level 0 = explicitly awake
    pause: tuple[float, bool] | None = None  # (start, paused); a weight sync pausing requests
    load: tuple[float, int, float | None] | None = None  # (start, waiting, fraction)
    memory_growth: tuple[float, float] | None = None  # (start, GiB an hour)
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

    def memory_grown(self, t: float) -> float:
        """Host memory bytes the engine's processes have kept by t (rljob.dev.host_memory)."""
        if self.memory_growth is None:
            return 0.0
        since, gib_per_hour = self.memory_growth
        return grown(gib_per_hour, since, t)

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
    growth = newest.get("memory_growth")
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
        memory_growth=None
        if growth is None
        else (max(growth.created, started), growth.fault.gib_per_hour),
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
