"""Counting API writes from the apiserver's audit log: how tests prove the operator is quiet."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True)
class AuditWrite:
    """One completed write request."""

    time: dt.datetime
    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    user_agent: str = ""


def _parse_time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _to_write(event: dict[str, Any]) -> AuditWrite | None:
    if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
        return None
    ref = event.get("objectRef") or {}
    return AuditWrite(
        time=_parse_time(event["stageTimestamp"]),
        user=event.get("user", {}).get("username", ""),
        verb=event["verb"],
        resource=ref.get("resource", ""),
        subresource=ref.get("subresource", ""),
        namespace=ref.get("namespace", ""),
        name=ref.get("name", ""),
        code=int(event.get("responseStatus", {}).get("code", 0)),
        user_agent=str(event.get("userAgent", "")),
    )


def read_writes(log: Path) -> Iterator[AuditWrite]:
    """Every completed write in the audit log, oldest first; partial last lines are skipped."""
    with log.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            write = _to_write(event)
            if write is not None:
                yield write


def writes_by_user(
    log: Path,
    user: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> list[AuditWrite]:
    """Writes in [since, until), optionally only by one user."""
    return [
        w
        for w in read_writes(log)
        if (user is None or w.user == user)
        and (since is None or w.time >= since)
        and (until is None or w.time < until)
    ]


def count_writes(
    log: Path,
    user: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
) -> Counter[str]:
    """Write verbs counted over a window, e.g. Counter({'create': 2, 'patch': 1})."""
    return Counter(w.verb for w in writes_by_user(log, user, since, until))
