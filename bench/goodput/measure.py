"""What each arm of the goodput benchmark achieved, from what the bench recorded (pure).

Ground truth is the simulator's: the trainer's step per attempt, sampled (`Sample`), and which
workload instances were attached when (`Presence`). Effective training time is unique steps (the
highest step reached) x the healthy step time (the calibration run's, the same for every arm) /
wall-clock since the job was created. Per failure (`FailureResult`):

- detect: from injection to the arm's first action on what the failure hit (an operator restart
  of the gang, of that pod or its role, from the restart ledger; a JobSet restart, from its
  status), whenever it came; a Report (a Warning naming the failure, no repair) is kept apart;
- recover: to the trainer stepping past the highest step it had reached at injection, after
  the restart that followed (a trainer failure, or an arm restarting everything), and the hit
  engine or verifier replaced (its instance gone) and loaded; None: not repaired by the end;
- steps recomputed: steps of the attempts started in the failure's slot below the highest step
  reached before each (done twice);
- lost seconds: the slot (injection to the next injection, or the end) less the progress made in
  it x the healthy step time; GPU-hours lost: lost seconds x the job's GPUs / 3600.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.goodput.trace import FailureClass, FailureEvent, LostTime, Role, extrapolate
from bench.goodput.world import stops_trainer

# Actions, as the bench names them for every arm.
GANG = "gang-restart"  # the operator's RestartTrainerGang
POD = "pod-restart"  # RestartPod (a serving pod alone)
ROLE = "role-restart"  # RestartRole or RestartRoleInTurn
JOBSET_RESTART = "jobset-restart"  # every Job of the JobSet recreated
JOB_RESTART = "job-restart"  # the operator's RestartJob: the gang and every serving role
WHOLE_JOB = (GANG, JOBSET_RESTART, JOB_RESTART)  # what a trainer failure's repair can be
REPORT = "report"  # a Warning about a finding, nothing restarted
# Ledger and Event timestamps are whole seconds: an action may read up to 1 s early.
TIMESTAMP_SLACK = 1.0


@dataclass(frozen=True)
class Sample:
    """The trainer at time t: its newest attempt's step (the highest of its ranks)."""

    t: float
    attempt: int | None
    step: int
    phase: str = ""


@dataclass(frozen=True)
class Action:
    t: float
    kind: str
    role: str
    reason: str = ""
    pod: str = ""


@dataclass
class Presence:
    """A workload instance (pod uid and container restarts) and when the simulator served it."""

    instance: str
    pod: str
    role: str
    first: float
    last: float


@dataclass(frozen=True)
class Injected:
    """A failure carried out on an arm: when, on which pod and instance, or why not."""

    event: FailureEvent
    t: float
    pod: str = ""
    instance: str = ""
    skipped: str = ""


@dataclass
class ArmRecord:
    name: str
    created: float
    ended: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    injected: list[Injected] = field(default_factory=list)
    presence: dict[str, Presence] = field(default_factory=dict)
    status_goodput: dict[str, object] | None = None
    notes: list[str] = field(default_factory=list)

    def seen(self, t: float, instance: str, pod: str, role: str) -> None:
        known = self.presence.get(instance)
        if known is None:
            self.presence[instance] = Presence(instance, pod, role, t, t)
        else:
            known.last = t


class Progress:
    """The running maximum of the trainer's step over time, read at any time: between two steps
    reached in the normal cadence (at most 2.5 healthy steps apart) linearly, else as a step
    function (a stall is not spread over the steps around it)."""

    def __init__(self, samples: Sequence[Sample], healthy_step_s: float) -> None:
        self.reached: list[tuple[float, int]] = []  # (first time, step) each new maximum
        best = -1
        for sample in samples:
            if sample.step > best:
                best = sample.step
                self.reached.append((sample.t, best))
        self.gap = 2.5 * healthy_step_s

    def at(self, t: float) -> float:
        reached = self.reached
        if not reached or t < reached[0][0]:
            return float(reached[0][1]) if reached else 0.0
        lo, hi = 0, len(reached) - 1
        while lo < hi:  # the last index with time <= t
            mid = (lo + hi + 1) // 2
            if reached[mid][0] <= t:
                lo = mid
            else:
                hi = mid - 1
        t0, s0 = reached[lo]
        if lo + 1 < len(reached):
            t1, s1 = reached[lo + 1]
            if s1 - s0 == 1 and t1 - t0 <= self.gap:
                return s0 + (t - t0) / (t1 - t0)
        return float(s0)

    @property
    def highest(self) -> int:
        return self.reached[-1][1] if self.reached else 0

    def first_above(self, step: float, after: float) -> float | None:
        """When the running maximum first exceeded `step`, at or after `after`."""
        for t, reached in self.reached:
            if t >= after and reached > step:
                return t
        return None


def healthy_step_seconds(samples: Sequence[Sample], skip_steps: int = 1) -> float:
    """Seconds per step of an undisturbed run: from the first step reached after `skip_steps`
    to the last, over the steps between (checkpoint saves included)."""
    reached = Progress(samples, 1.0).reached
    reached = [r for r in reached if r[1] >= (reached[0][1] if reached else 0) + skip_steps]
    if len(reached) < 2 or reached[-1][1] == reached[0][1]:
        raise ValueError("the calibration run reached too few steps to time one")
    (t0, s0), (t1, s1) = reached[0], reached[-1]
    return (t1 - t0) / (s1 - s0)


def attempts_started(samples: Sequence[Sample]) -> list[tuple[float, int | None, int, int]]:
    """Each attempt's first sample after another attempt: (time, attempt, its first step, the
    highest step any attempt had reached before it)."""
    started = []
    best = -1
    previous: int | None = None
    for index, sample in enumerate(samples):
        if index and sample.attempt != previous:
            started.append((sample.t, sample.attempt, sample.step, best))
        previous = sample.attempt
        best = max(best, sample.step)
    return started


@dataclass(frozen=True)
class FailureResult:
    event: FailureEvent
    injected_at: float
    pod: str
    skipped: str
    detect_s: float | None
    action: str
    reported_s: float | None
    recover_s: float | None
    recomputed: int
    slot_s: float
    lost_s: float
    fixed_s: float
    without_gang: bool

    @property
    def lost(self) -> LostTime:
        total = max(self.lost_s, 0.0)
        return LostTime(total, min(self.fixed_s, total))


@dataclass(frozen=True)
class ArmResult:
    name: str
    wall_s: float
    steps: int
    ett: float
    startup_lost_s: float
    failures: list[FailureResult]
    actions: list[Action]
    status_goodput: Mapping[str, object] | None
    notes: list[str]

    def lost_by_class(self) -> dict[FailureClass, float]:
        lost: dict[FailureClass, float] = {}
        for f in self.failures:
            lost[f.event.failure_class] = lost.get(f.event.failure_class, 0.0) + f.lost_s
        return lost

    def per_failure_lost(self) -> dict[FailureClass, LostTime]:
        """Mean seconds lost per failure of each class, with their fixed part."""
        grouped: dict[FailureClass, list[LostTime]] = {}
        for f in self.failures:
            if not f.skipped:
                grouped.setdefault(f.event.failure_class, []).append(f.lost)
        return {
            c: LostTime(sum(x.total_s for x in xs) / len(xs), sum(x.fixed_s for x in xs) / len(xs))
            for c, xs in grouped.items()
        }


@dataclass(frozen=True)
class RoleFacts:
    """What the measurement needs of a role: its pods, and how long a replaced one takes before
    it serves (an engine's model load)."""

    size: int
    load_s: float = 0.0


def _compatible(action: Action, inj: Injected) -> bool:
    """Whether an action can be about a failure: a report on its role; a restart of the whole
    job (the JobSet's, RestartJob) on anything; a gang restart on a trainer failure; a restart
    of that pod, or of its role, on a serving one."""
    event = inj.event
    if action.kind == REPORT:
        return action.role == event.role.value
    if action.kind in (JOBSET_RESTART, JOB_RESTART):
        return True
    if stops_trainer(event):
        return action.kind == GANG
    if action.role != event.role.value:
        return False
    return action.kind == ROLE or (action.kind == POD and action.pod == inj.pod)


def attribute(injected: Sequence[Injected], actions: Iterable[Action]) -> list[list[Action]]:
    """Each action given to the latest failure injected before it (1 s of timestamp slack) that
    it can be about; the actions of each failure, in time order."""
    given: list[list[Action]] = [[] for _ in injected]
    for action in sorted(actions, key=lambda a: a.t):
        candidates = [
            n
            for n, inj in enumerate(injected)
            if not inj.skipped and inj.t - TIMESTAMP_SLACK <= action.t and _compatible(action, inj)
        ]
        if candidates:
            given[max(candidates, key=lambda n: injected[n].t)].append(action)
    return given


def analyse(record: ArmRecord, healthy_step_s: float, roles: Mapping[Role, RoleFacts]) -> ArmResult:
    """The arm's effective training time and per-failure figures (see the module's docstring)."""
    progress = Progress(record.samples, healthy_step_s)
    wall = record.ended - record.created
    steps = progress.highest
    injected = sorted(record.injected, key=lambda i: i.t)
    starts = attempts_started(record.samples)
    actions = sorted(record.actions, key=lambda a: a.t)
    given = attribute(injected, actions)
    results = []
    for n, inj in enumerate(injected):
        end = injected[n + 1].t if n + 1 < len(injected) else record.ended
        context = _Context(record, progress, starts, actions, healthy_step_s, roles)
        results.append(_failure(context, inj, end, given[n]))
    first = injected[0].t if injected else record.ended
    startup_lost = (first - record.created) - progress.at(first) * healthy_step_s
    ett = steps * healthy_step_s / wall if wall > 0 else math.nan
    return ArmResult(
        record.name, wall, steps, ett, startup_lost, results, actions, record.status_goodput,
        list(record.notes),
    )  # fmt: skip


@dataclass(frozen=True)
class _Context:
    record: ArmRecord
    progress: Progress
    starts: Sequence[tuple[float, int | None, int, int]]
    actions: Sequence[Action]
    healthy_step_s: float
    roles: Mapping[Role, RoleFacts]


def full_strength_at(
    record: ArmRecord, role: str, size: int, after: float, without: str = ""
) -> float | None:
    """The first time from `after` at which `size` instances of the role (`without` that one)
    were served at once."""
    spans = [p for p in record.presence.values() if p.role == role and p.instance != without]
    for t in sorted({after, *(p.first for p in spans if p.first >= after)}):
        if sum(1 for p in spans if p.first <= t <= p.last) >= size:
            return t
    return None


def _recovered(ctx: _Context, inj: Injected, end: float) -> float | None:
    """When the failure's effect was gone: the trainer past the step it had reached (after a
    gang restart in the slot), and for a serving pod hit, that instance gone and its role whole
    again and loaded; None if not by the end of the run."""
    event, record = inj.event, ctx.record
    restarted = [s for s in ctx.starts if inj.t <= s[0] < end]
    recover: float | None = inj.t
    if stops_trainer(event) or restarted:
        after_restart = restarted[0][0] if restarted else inj.t
        recover = ctx.progress.first_above(math.floor(ctx.progress.at(inj.t)), after_restart)
    if stops_trainer(event) or not inj.instance:
        return recover
    seen = record.presence.get(inj.instance)
    if seen is None or seen.last >= record.ended - 1.0:
        return None  # still served at the end: never replaced
    facts = ctx.roles.get(event.role, RoleFacts(1))
    whole = full_strength_at(record, event.role.value, facts.size, seen.last, inj.instance)
    if whole is None or recover is None:
        return None
    return max(recover, whole + facts.load_s)


def _failure(ctx: _Context, inj: Injected, end: float, given: Sequence[Action]) -> FailureResult:
    event, record = inj.event, ctx.record
    stopped = stops_trainer(event)
    acted = next((a for a in given if a.kind != REPORT), None)
    reported = next((a for a in given if a.kind == REPORT), None)
    restarted = [s for s in ctx.starts if inj.t <= s[0] < end]
    recomputed = sum(max(0, best - first) for _, _, first, best in restarted)
    recover = None if inj.skipped else _recovered(ctx, inj, end)
    fixed = 0.0
    if acted is not None:
        # The cluster's part, at real time whatever the factor: from the action to the
        # replacement attached (pods deleted, created, scheduled and started by kwok).
        attached = [
            p.first
            for p in record.presence.values()
            if p.first >= acted.t and (p.role == event.role.value or stopped)
        ]
        if attached:
            fixed = min(attached) - acted.t
    done = ctx.progress.at(end) - ctx.progress.at(inj.t)
    gang_in_slot = any(
        a.kind in WHOLE_JOB and inj.t - TIMESTAMP_SLACK <= a.t < end for a in ctx.actions
    )
    without_gang = (
        not stopped and acted is not None and acted.kind in (POD, ROLE) and not gang_in_slot
    )
    return FailureResult(
        event=event,
        injected_at=inj.t - record.created,
        pod=inj.pod,
        skipped=inj.skipped,
        detect_s=None if acted is None else max(0.0, acted.t - inj.t),
        action="" if acted is None else acted.kind,
        reported_s=None if reported is None else max(0.0, reported.t - inj.t),
        recover_s=None if recover is None else max(0.0, recover - inj.t),
        recomputed=recomputed,
        slot_s=end - inj.t,
        lost_s=(end - inj.t) - done * ctx.healthy_step_s,
        fixed_s=max(0.0, fixed),
        without_gang=without_gang,
    )


def event_json(event: FailureEvent) -> dict[str, Any]:
    return {
        "time_s": event.time_s,
        "class": event.failure_class.value,
        "role": event.role.value,
        "index": event.index,
    }


def event_from_json(data: Mapping[str, Any]) -> FailureEvent:
    return FailureEvent(
        float(data["time_s"]), FailureClass(data["class"]), Role(data["role"]), int(data["index"])
    )


def record_json(record: ArmRecord) -> dict[str, Any]:
    """The record as JSON values (re-measured later without a bed: run.py --from-records)."""
    return {
        "name": record.name,
        "created": record.created,
        "ended": record.ended,
        "samples": [[x.t, x.attempt, x.step, x.phase] for x in record.samples],
        "actions": [[a.t, a.kind, a.role, a.reason, a.pod] for a in record.actions],
        "injected": [
            {
                **event_json(i.event),
                "t": i.t,
                "pod": i.pod,
                "instance": i.instance,
                "skipped": i.skipped,
            }
            for i in record.injected
        ],
        "presence": [
            [p.instance, p.pod, p.role, p.first, p.last] for p in record.presence.values()
        ],
        "status_goodput": record.status_goodput,
        "notes": record.notes,
    }


def record_from_json(data: Mapping[str, Any]) -> ArmRecord:
    record = ArmRecord(str(data["name"]), float(data["created"]), float(data["ended"]))
    record.samples = [
        Sample(t, attempt, step, phase) for t, attempt, step, phase in data["samples"]
    ]
    record.actions = [Action(*a) for a in data["actions"]]
    record.injected = [
        Injected(event_from_json(i), i["t"], i["pod"], i["instance"], i["skipped"])
        for i in data["injected"]
    ]
    record.presence = {p[0]: Presence(*p) for p in data["presence"]}
    record.status_goodput = data.get("status_goodput")
    record.notes = list(data.get("notes") or [])
    return record


def gpu_hours(lost_s: float, gpus: int) -> float:
    return lost_s * gpus / 3600.0


def real_lost_per_failure(result: ArmResult, factor: float) -> dict[FailureClass, float]:
    """Real seconds lost per failure of each class, extrapolated to factor 1 (trace.extrapolate)."""
    return extrapolate(result.per_failure_lost(), factor)


def real_ett(
    lost_per_failure: Mapping[FailureClass, float], failures_per_hour: Mapping[FailureClass, float]
) -> float:
    """Effective training time at real rates: 1 - the seconds lost an hour (each class's real
    rate on the job x its real seconds lost per failure) / 3600. Classes not measured count 0."""
    lost = sum(failures_per_hour.get(c, 0.0) * s for c, s in lost_per_failure.items())
    return 1.0 - lost / 3600.0


def mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


__all__ = [
    "GANG",
    "JOBSET_RESTART",
    "JOB_RESTART",
    "POD",
    "REPORT",
    "ROLE",
    "WHOLE_JOB",
    "Action",
    "ArmRecord",
    "ArmResult",
    "FailureResult",
    "Injected",
    "Presence",
    "Progress",
    "RoleFacts",
    "Sample",
    "analyse",
    "attempts_started",
    "attribute",
    "event_from_json",
    "event_json",
    "full_strength_at",
    "gpu_hours",
    "healthy_step_seconds",
    "mean",
    "real_ett",
    "real_lost_per_failure",
    "record_from_json",
    "record_json",
]
