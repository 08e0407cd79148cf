"""Manual restarts: the annotation `rljob.io/restart-request: <role>/<nonce>` (written by
`kubectl rljob restart`) is honoured exactly once per nonce, remembered in
status.lastRestartRequest. A trainer restart is a new gang attempt (attempt + 1: the reconcile
then retires the old Job and creates the next one with the resume checkpoint); a serving role
restart rolls its Deployment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from rljob.api import RestartRequest, RLJobStatus, RoleName
from rljob.api.labels import RESTART_REQUEST_ANNOTATION

# The annotation's name stays importable from here, where the request is read.
__all__ = [
    "RESTART_REQUEST_ANNOTATION",
    "RestartOrder",
    "malformed_restart",
    "mark_handled",
    "pending_restart",
]
_REQUEST = re.compile(
    r"^(?P<role>rollout|trainer|reference|verifier)/(?P<nonce>[A-Za-z0-9._-]{1,64})$"
)


@dataclass(frozen=True)
class RestartOrder:
    """A request that has not been carried out yet."""

    role: RoleName
    nonce: str

    @property
    def gang(self) -> bool:
        return self.role == RoleName.TRAINER


def pending_restart(annotations: Mapping[str, str], status: RLJobStatus) -> RestartOrder | None:
    """The annotated request, unless it is malformed or its nonce was already handled."""
    match = _REQUEST.match(annotations.get(RESTART_REQUEST_ANNOTATION, ""))
    if match is None:
        return None
    done = status.last_restart_request
    if done is not None and done.id == match["nonce"]:
        return None
    return RestartOrder(RoleName(match["role"]), match["nonce"])


def malformed_restart(annotations: Mapping[str, str]) -> str | None:
    """A one-line reason when the annotation is present but unusable, else None."""
    value = annotations.get(RESTART_REQUEST_ANNOTATION)
    if value is None or _REQUEST.match(value):
        return None
    return f"{RESTART_REQUEST_ANNOTATION}={value[:80]!r}: expected <role>/<nonce>"


def mark_handled(status: RLJobStatus, order: RestartOrder, now: datetime) -> RLJobStatus:
    """The status recording the request as carried out; a trainer restart starts attempt + 1."""
    update: dict[str, object] = {
        "last_restart_request": RestartRequest(id=order.nonce, role=order.role, handled_at=now)
    }
    if order.gang:
        update["attempt"] = (status.attempt or 1) + 1
    return status.model_copy(update=update)
