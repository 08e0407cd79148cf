"""The operator's API writes over a window, counted from the apiserver's audit log."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from rljob.dev.audit import AuditWrite

# docs/architecture.md section 12: healthy jobs cause no writes but the progress refresh, at most
# one status patch per job per 5 minutes.
ALLOWED_PER_JOB_PER_MINUTE = 1 / 5


@dataclass(frozen=True)
class WriteCount:
    """Writes of one user over `seconds`, by "verb resource[/subresource]"."""

    seconds: float
    by_kind: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    @property
    def per_minute(self) -> float:
        return self.total * 60 / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        """E.g. "patch rljobs/status x3, create events x1", most frequent first."""
        kinds = [(kind, count) for kind, count in self.by_kind.most_common() if count]
        return ", ".join(f"{kind} x{count}" for kind, count in kinds) or "none"


def _kind(write: AuditWrite) -> str:
    resource = f"{write.resource}/{write.subresource}" if write.subresource else write.resource
    failed = f" (HTTP {write.code})" if write.code >= 300 else ""  # e.g. a stale-copy conflict
    return f"{write.verb} {resource}{failed}"


def count_writes(
    writes: Iterable[AuditWrite], user: str, since: dt.datetime, until: dt.datetime
) -> WriteCount:
    """The writes `user` completed in [since, until)."""
    kinds = Counter(_kind(w) for w in writes if w.user == user and since <= w.time < until)
    return WriteCount((until - since).total_seconds(), kinds)


def allowed_per_minute(jobs: int) -> float:
    return jobs * ALLOWED_PER_JOB_PER_MINUTE
