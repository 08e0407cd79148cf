"""A simulated RL rollout driver for one job (issue #17), the trainer side of disaggregated
engines: it follows the operator's engine roster (rljob.sdk.EngineRoster's callbacks), keeps
requests in flight on the engines it sends to, and publishes a new policy generation every
training step by broadcasting it to its weight group, as a trainer with an NCCL weight group
does.

- on_join: push the current weights to the newcomer once (done `push_seconds` later, longer than
  a step in the e2e; the engine then reports the generation current at that moment, at least the
  one the operator required when it joined). A newcomer the simulator has not attached yet is not
  listening: the push is retried every tick until it lands, as a trainer retries a refused
  connection, rather than lost.
- on_serving: add it to the weight group and send to it.
- on_drain: send nothing new to it and drop it from the group (its requests finish).
- on_leave: forget it; a member still in the group is dropped from it first.

NCCL has no membership change: a broadcast, or re-forming the group without a member, is a
collective over every member, and one whose process is gone hangs it. The simulator treats both
alike: a collective with a member gone (deleted, detached or unreachable) hangs the driver, which
then sends nothing; after `watchdog_seconds` its trainer fails with torch's NCCL watchdog
abort. A drained member takes part in re-forming the group and leaves cleanly; an engine deleted
without a drain (Ungated) is learned of only after it is gone, so the group it was in hangs.
That makes the Ungated hang deterministic here, where on a cluster it is a race between the next
broadcast and the roster update. The driver is pure: `engines(pod)` looks an engine up and the
caller acts on what `tick` returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rljob.dev.sim.models import EngineModel

# How a driver finds one of its job's engines: the model serving that pod now, or None when the
# pod is gone or unreachable; and when that pod was created (unix seconds).
EngineLookup = Callable[[str], EngineModel | None]
CreatedLookup = Callable[[str], float | None]
EngineStopper = Callable[[str, float], None]  # (pod, when): its engine process ended then


@dataclass(frozen=True)
class DriverSettings:
    step_seconds: float = 3.0  # one training step: a new policy generation
    request_seconds: float = 2.0  # how long each request runs on its engine
    push_seconds: float = 1.0  # a weight push to a newcomer
    watchdog_seconds: float = 10.0  # torch's NCCL watchdog timeout, scaled down
    per_engine: int = 0  # requests kept in flight per engine; 0: its batch plus its queue
    first_generation: int = 1  # published to the engines the driver starts with

    @classmethod
    def parse(cls, body: dict[str, Any]) -> DriverSettings:
        fields = cls.__dataclass_fields__
        unknown = sorted(set(body) - set(fields))
        if unknown:
            raise ValueError(f"unknown driver settings {unknown}; known: {sorted(fields)}")
        values = {key: body[key] for key in fields if key in body}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{key} must be a number >= 0")
        settings = cls(**values)
        if min(settings.step_seconds, settings.request_seconds) <= 0:
            raise ValueError("step_seconds and request_seconds must be > 0")
        return settings


@dataclass
class Counters:
    sent: dict[str, int] = field(default_factory=dict)
    sent_unsynced: dict[str, int] = field(default_factory=dict)  # before its first push landed
    first_request_after_creation: dict[str, float] = field(default_factory=dict)
    hangs: int = 0
    watchdog_aborts: int = 0
    steps: int = 0
    roster: list[tuple[float, str, str]] = field(default_factory=list)  # (t, event, pod)


@dataclass(frozen=True)
class TickOutcome:
    watchdog_fired: bool = False


class RolloutDriver:
    """The driver's state; callers feed it roster events and ticks (see the module docstring)."""

    def __init__(
        self,
        settings: DriverSettings,
        engines: EngineLookup,
        created: CreatedLookup,
        now: float,
        stopped: EngineStopper | None = None,
    ) -> None:
        self.settings = settings
        self.engines = engines
        self.created = created
        self.stopped = stopped
        self.generation = settings.first_generation
        self.group: set[str] = set()
        self.sending: set[str] = set()
        self.synced: set[str] = set()  # engines a push of this driver reached
        self.pushes: dict[str, float] = {}  # pod -> when its push lands
        self.unattached: set[str] = set()  # serving, its engine not attached by the sim yet
        self.hung_since: float | None = None
        self.next_step = now + settings.step_seconds
        self.counters = Counters()

    @property
    def hung(self) -> bool:
        return self.hung_since is not None

    # ------------------------------------------------------------------ roster callbacks

    def on_join(self, pod: str, now: float) -> None:
        self._log(now, "join", pod)
        self.pushes[pod] = now + self.settings.push_seconds

    def on_serving(self, pod: str, now: float) -> None:
        self._log(now, "serving", pod)
        if self.engines(pod) is None:
            # A Ready pod is reachable on a cluster; the simulator attaches a new pod's engine
            # on its next poll: wait for it rather than take it for a member gone.
            self.unattached.add(pod)
            return
        self._admit(pod, now)

    def _admit(self, pod: str, now: float) -> None:
        self.unattached.discard(pod)
        if not self.hung:
            self._collective({*self.group, pod}, now)
        self.group.add(pod)
        self.sending.add(pod)

    def on_drain(self, pod: str, now: float) -> None:
        self._log(now, "drain", pod)
        self.sending.discard(pod)
        self._leave_group(pod, now)
        self.synced.discard(pod)  # no more pushes: it only finishes its requests

    def on_leave(self, pod: str, now: float) -> None:
        self._log(now, "leave", pod)
        if self.stopped is not None:
            # It left the roster once its deletion was asked: its engine cancelled what it ran
            # then (vLLM on SIGTERM), however late the simulator's poll finds the pod gone.
            self.stopped(pod, now)
        self.sending.discard(pod)
        self.pushes.pop(pod, None)
        self.unattached.discard(pod)
        # A pod leaves the roster once it is being deleted: its engine is going down with it,
        # so a group it is still in (never drained out) re-forms with a member gone.
        self._leave_group(pod, now, gone=True)
        self.synced.discard(pod)

    def _leave_group(self, pod: str, now: float, *, gone: bool = False) -> None:
        if pod in self.group and not self.hung:
            # The old group, the leaver included.
            self._collective(self.group, now, missing={pod} if gone else set())
        self.group.discard(pod)

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> TickOutcome:
        self._land_pushes(now)
        for pod in sorted(self.unattached):
            if self.engines(pod) is not None:
                self._admit(pod, now)
        if self.hung_since is not None:
            if now - self.hung_since < self.settings.watchdog_seconds:
                return TickOutcome()
            self._restarted(now)
            return TickOutcome(watchdog_fired=True)
        while now >= self.next_step and not self.hung:
            self.next_step += self.settings.step_seconds
            self.generation += 1
            self.counters.steps += 1
            if self._collective(self.group, now):
                for pod in self.group:
                    self._push(pod)
        if not self.hung:
            self._send(now)
        return TickOutcome()

    def _restarted(self, now: float) -> None:
        """The watchdog aborted the trainer; the driver restarts with it (its generation from
        the last step) and forms a new group of the engines it can reach."""
        self.counters.watchdog_aborts += 1
        self.hung_since = None
        self.group = {pod for pod in self.sending if self.engines(pod) is not None}
        self.sending = set(self.group)
        self.next_step = now + self.settings.step_seconds

    def _collective(self, members: set[str], now: float, missing: set[str] | None = None) -> bool:
        """A collective over `members`: hangs (False) when one of them is gone (`missing`: known
        gone although the simulator has not detached it yet)."""
        gone = {p for p in members if p in (missing or set()) or self.engines(p) is None}
        if not gone:
            return True
        self.hung_since = now
        self.counters.hangs += 1
        self._log(now, "hang", ",".join(sorted(gone)))
        return False

    def _push(self, pod: str) -> bool:
        """Push the current generation to `pod`; False when its engine is not reachable."""
        engine = self.engines(pod)
        if engine is None:
            return False
        engine.weights.push(self.generation)
        self.synced.add(pod)
        return True

    def _land_pushes(self, now: float) -> None:
        for pod, lands in list(self.pushes.items()):
            if now >= lands and self._push(pod):
                del self.pushes[pod]

    def _send(self, now: float) -> None:
        for pod in sorted(self.sending):
            engine = self.engines(pod)
            if engine is None:
                continue  # gone without a drain: its connections are refused
            engine.weights.driven = True
            engine.weights.requests.settle(now)
            target = self.settings.per_engine or engine.profile.max_running + round(
                engine.profile.waiting
            )
            missing = target - engine.weights.requests.in_flight()
            if missing <= 0:
                continue
            engine.weights.requests.send(now, self.settings.request_seconds, missing)
            counters = self.counters
            if pod not in counters.sent:
                created = self.created(pod)
                if created is not None:
                    counters.first_request_after_creation[pod] = round(now - created, 3)
            counters.sent[pod] = counters.sent.get(pod, 0) + missing
            if pod not in self.synced:
                counters.sent_unsynced[pod] = counters.sent_unsynced.get(pod, 0) + missing

    def _log(self, now: float, event: str, pod: str) -> None:
        self.counters.roster.append((round(now, 3), event, pod))
        del self.counters.roster[:-200]

    def report(self) -> dict[str, Any]:
        counters = self.counters
        return {
            "generation": self.generation,
            "group": sorted(self.group),
            "sending": sorted(self.sending),
            "synced": sorted(self.synced),
            "pushes_pending": sorted(self.pushes),
            "unattached": sorted(self.unattached),
            "hung": self.hung,
            "sent": dict(counters.sent),
            "sent_unsynced": dict(counters.sent_unsynced),
            "first_request_after_creation": dict(counters.first_request_after_creation),
            "hangs": counters.hangs,
            "watchdog_aborts": counters.watchdog_aborts,
            "steps": counters.steps,
            "roster": [list(entry) for entry in counters.roster],
        }
