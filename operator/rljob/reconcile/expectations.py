"""What this operator did that its watches may not show yet (the expectations pattern of
Kubernetes' own controllers): a pass on a stale index must not delete or announce twice."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace

from rljob.reconcile.observed import Observed

EXPECTATION_SECONDS = 60.0  # a watch that lags longer than this is better answered by a retry


@dataclass
class Recent:
    """Keys done within the last `ttl` seconds (times are the caller's clock)."""

    ttl: float = EXPECTATION_SECONDS
    _done_at: dict[str, float] = field(default_factory=dict)

    def add(self, key: str, now: float) -> None:
        self._done_at[key] = now

    def current(self, now: float) -> frozenset[str]:
        self._done_at = {k: t for k, t in self._done_at.items() if now - t < self.ttl}
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
