"""The suspect-node invariant of the model (machine.py's suspect-nodes-are-expiring-preferences):
after every pass, status.suspectNodes holds only nodes with hardware-like evidence, each with its
`until` at most the TTL after marking, none expired if the pass wrote the status; and no trainer
Job requires that a node be avoided (a preferred term only), so a suspect node never makes a
trainer pod unschedulable."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rljob.vocabulary.labels import ROLE_LABEL

# The reasons that point at a node (reconcile/suspects.py).
NODE_REASONS = frozenset({"GPUHardwareError", "NCCLNetworkError", "NodeLost"})
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def suspect_faults(
    before: Mapping[str, Any] | None,
    after: Mapping[str, Any] | None,
    jobs: Sequence[Mapping[str, Any]],
    now: dt.datetime,
    ttl: dt.timedelta,
) -> list[str]:
    """What a pass that took the RLJob's status from `before` to `after` at `now` got wrong."""
    status = (after or {}).get("status") or {}
    written = before is None or (before.get("status") or {}) != status
    faults = []
    for entry in status.get("suspectNodes") or []:
        name, marked = entry["name"], _time(entry["markedAt"])
        until = _time(entry["until"]) if "until" in entry else None
        if entry["reason"] not in NODE_REASONS:
            faults.append(f"{name} suspect for {entry['reason']}, which does not point at it")
        if until is None or until > marked + ttl:
            faults.append(f"{name} suspect until {until}, not within {ttl} of {marked}")
        elif written and until <= now:
            faults.append(f"{name} suspect until {until}, still listed by a write at {now}")
    for job in jobs:
        if (job["metadata"].get("labels") or {}).get(ROLE_LABEL) != "trainer":
            continue
        affinity = job["spec"]["template"]["spec"].get("affinity") or {}
        if (affinity.get("nodeAffinity") or {}).get(REQUIRED):
            faults.append(f"Job {job['metadata']['name']} requires node affinity: {affinity}")
    return faults
