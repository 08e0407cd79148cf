"""Text building blocks of the `kubectl rljob` views: ages, timestamps, names and aligned tables,
shared by the status, checkpoints and diagnose screens."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

Body = dict[str, Any]


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_age(seconds: float) -> str:
    """kubectl-style age: 45s, 12m, 3h20m, 2d4h."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def when(value: object, now: datetime | None) -> str:
    """The timestamp as written, with its age when `now` is given: `2026-05-01T10:00:00Z (3m
    ago)`; `-` when missing."""
    if not value:
        return "-"
    parsed = parse_time(value)
    if now is None or parsed is None:
        return str(value)
    return f"{value} ({format_age((now - parsed).total_seconds())} ago)"


def job_name(job: Body) -> str:
    meta = job["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def namespace_flag(namespace: str | None) -> str:
    """` -n NS` for a command line the user can paste; empty for the kubeconfig's namespace."""
    return f" -n {namespace}" if namespace else ""


def table(rows: Sequence[Sequence[object]], indent: str = "") -> list[str]:
    texts = [[str(cell) if cell not in (None, "") else "-" for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in texts) for i in range(len(texts[0]))]
    return [
        indent
        + "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in texts
    ]
