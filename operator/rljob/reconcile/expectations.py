"""What this operator did that its watches may not show yet (the expectations pattern of
Kubernetes' own controllers): a pass on a stale index must not delete or announce twice."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from rljob.reconcile.observed import Observed

EXPECTATION_SECONDS = 60.0  # a watch that lags longer than this is better answered by a retry


@dataclass
class Recent:
    """Keys done within the last `ttl` seconds (times are the caller's clock), and keys done by
    an action for as long as that action is in flight: one action never repeats its own step
    because a watch lagged past the ttl."""

    ttl: float = EXPECTATION_SECONDS
    _done_at: dict[str, float] = field(default_factory=dict)
    _done_by: dict[str, str] = field(default_factory=dict)  # key -> the action that did it

    def add(self, key: str, now: float, action: str | None = None) -> None:
        self._done_at[key] = now
        if action is not None:
            self._done_by[key] = action

    def current(self, now: float, in_flight: str | None = None) -> frozenset[str]:
        self._done_at = {
            k: t
            for k, t in self._done_at.items()
            if now - t < self.ttl or (in_flight is not None and self._done_by.get(k) == in_flight)
        }
        self._done_by = {k: a for k, a in self._done_by.items() if k in self._done_at}
        return frozenset(self._done_at)

    def admit(self, key: str, now: float) -> bool:
        """True, and recorded, unless the key was done within the ttl (a refusal records
        nothing, so it does not extend the wait)."""
        if key in self.current(now):
            return False
        self.add(key, now)
        return True


def with_deletes_issued(observed: Observed, uids: Collection[str]) -> Observed:
    """Children and pods we deleted, seen as deleting even before the watch says so."""
    if not uids:
        return observed
    return replace(
        observed,
        children=tuple(
            replace(c, deleting=True) if c.uid in uids and not c.deleting else c
            for c in observed.children
        ),
        pods=tuple(
            replace(p, deleting=True) if p.uid in uids and not p.deleting else p
            for p in observed.pods
        ),
    )
