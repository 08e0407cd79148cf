"""The restart ledger in status: what the policy reads of past restarts (the window's history)
and how a carried-out restart is recorded. Bounded, so status stays small."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from rljob.api.durations import parse_duration
from rljob.api.spec import FailurePolicy
from rljob.api.status import MAX_COUNTED_AT, MAX_RECENT_RESTARTS, RestartRecord, RestartsStatus
from rljob.reconcile.policy.rules import Decision
from rljob.vocabulary.enums import FailureAction, FailureReason, RoleName


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class History:
    now: datetime
    window: float
    counted_at: list[datetime]
    recent: list[RestartRecord]

    @classmethod
    def of(cls, ledger: RestartsStatus, now: datetime, window: float) -> History:
        since = now - timedelta(seconds=window)
        return cls(
            now=now,
            window=window,
            counted_at=sorted(t for t in map(utc, ledger.counted_at) if t > since),
            recent=[r for r in ledger.recent if utc(r.time) > since and _policy_made(r)],
        )

    def pod_restarts(self, role: RoleName, reason: FailureReason) -> int:
        """Pod restarts of the role for the reason, whichever pod: a Deployment replaces a
        deleted pod under a new name, so counting by name would never escalate."""
        return sum(
            1
            for r in self.recent
            if r.action == FailureAction.RESTART_POD and r.role == role and r.reason == reason
        )

    def role_restarts(self, role: RoleName) -> int:
        return sum(
            1 for r in self.recent if r.action == FailureAction.RESTART_ROLE and r.role == role
        )

    def last_restart(self, key: str, extra: Mapping[str, datetime]) -> datetime | None:
        times = [utc(r.time) for r in self.recent if _record_key(r) == key]
        if key in extra:
            times.append(utc(extra[key]))
        return max(times, default=None)


def _policy_made(record: RestartRecord) -> bool:
    """A user's restart is in the ledger but not the policy's history: it neither escalates nor
    delays the policy's own restarts."""
    return record.reason != FailureReason.RESTART_REQUESTED


def _record_key(record: RestartRecord) -> str:
    if record.action == FailureAction.RESTART_POD and record.pod:
        return record.pod
    return record.role.value


def backoff_seconds(counted_in_window: int, initial: float, maximum: float) -> float:
    """The backoff before a restart with `counted_in_window` counted restarts before it."""
    if counted_in_window <= 0:
        return 0.0
    return min(initial * 2.0 ** min(counted_in_window - 1, 64), maximum)


def record_restart(
    ledger: RestartsStatus | None, decision: Decision, now: datetime, policy: FailurePolicy
) -> RestartsStatus:
    """The ledger after carrying out `decision` at `now`; unchanged unless it restarts. Bounded:
    countedAt keeps the window (at most MAX_COUNTED_AT), recent the newest MAX_RECENT_RESTARTS."""
    ledger = ledger or RestartsStatus()
    if not decision.restarts:
        return ledger
    now = utc(now)
    since = now - timedelta(seconds=parse_duration(policy.window))
    counted_at = sorted(t for t in map(utc, ledger.counted_at) if t > since)
    if decision.counts:
        counted_at.append(now)
    return _recorded(ledger, _record(decision, now), counted_at)


def record_requested_restart(
    ledger: RestartsStatus | None, role: RoleName, action: FailureAction, nonce: str, now: datetime
) -> RestartsStatus:
    """The ledger after a restart the user requested (`nonce`: the request's id): counted in
    total, byReason (RestartRequested), byRole and recent as the policy's own are, never towards
    maxRestarts."""
    ledger = ledger or RestartsStatus()
    record = RestartRecord(
        time=utc(now),
        role=role,
        reason=FailureReason.RESTART_REQUESTED,
        action=action,
        counted=False,
        message=f"requested ({nonce})",
    )
    return _recorded(ledger, record, ledger.counted_at)


def _recorded(
    ledger: RestartsStatus, record: RestartRecord, counted_at: list[datetime]
) -> RestartsStatus:
    return RestartsStatus(
        total=ledger.total + 1,
        counted=ledger.counted + (1 if record.counted else 0),
        counted_at=counted_at[-MAX_COUNTED_AT:],
        by_reason=_plus_one(ledger.by_reason, record.reason.value),
        by_role=_plus_one(ledger.role_counts(), record.role.value),
        recent=_append_bounded(ledger.recent, record, MAX_RECENT_RESTARTS),
    )


def _plus_one(counts: Mapping[str, int], key: str) -> dict[str, int]:
    return {**counts, key: counts.get(key, 0) + 1}


def _record(decision: Decision, now: datetime) -> RestartRecord:
    pod = decision.target if decision.action == FailureAction.RESTART_POD else None
    return RestartRecord(
        time=now,
        role=decision.role,
        pod=pod,
        reason=decision.reason,
        action=decision.action,
        counted=decision.counts,
        message=decision.message,
    )


def _append_bounded(
    records: Iterable[RestartRecord], record: RestartRecord, limit: int
) -> list[RestartRecord]:
    return [*records, record][-limit:]
