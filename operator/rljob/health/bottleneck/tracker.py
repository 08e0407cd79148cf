"""Hysteresis for the role: a verdict naming another role replaces the held one only after it
holds for `confirmations` consecutive evaluations, so a window balanced between two sides does
not flap the status column (or emit an Event per evaluation). While a new role waits, the held
role's latest verdict stands and its evidence says what is pending."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rljob.health.bottleneck.attribution import Verdict
from rljob.vocabulary.enums import BottleneckRole

CONFIRMATIONS = 2


@dataclass(frozen=True, slots=True)
class Tracked:
    verdict: Verdict
    since: float
    # The role this update replaced (an Event's worth); None when it held.
    replaced: BottleneckRole | None = None
    changed: bool = False


class RoleTracker:
    def __init__(self, confirmations: int = CONFIRMATIONS) -> None:
        self._confirmations = max(1, confirmations)
        self._held: Verdict | None = None
        self._since = 0.0
        self._candidate: BottleneckRole | None = None
        self._count = 0

    @property
    def role(self) -> BottleneckRole | None:
        return self._held.role if self._held is not None else None

    def update(self, verdict: Verdict, now: float) -> Tracked:
        held = self._held
        if held is None:
            self._hold(verdict, now)
            return Tracked(verdict, now, None, True)
        if verdict.role == held.role:
            self._held, self._candidate, self._count = verdict, None, 0
            return Tracked(verdict, self._since)
        self._count = self._count + 1 if verdict.role == self._candidate else 1
        self._candidate = verdict.role
        if self._count >= self._confirmations:
            self._hold(verdict, now)
            return Tracked(verdict, now, held.role, True)
        note = (
            f"; {held.role.value} held: the last {self._count} evaluation(s) pointed to "
            f"{verdict.role.value}, which takes over after {self._confirmations} in a row"
        )
        return Tracked(replace(held, evidence=held.evidence + note), self._since)

    def _hold(self, verdict: Verdict, now: float) -> None:
        self._held, self._since, self._candidate, self._count = verdict, now, None, 0
