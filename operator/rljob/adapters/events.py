"""Kubernetes Events about an RLJob (what `kubectl describe rlj` shows under Events)."""

from __future__ import annotations

import datetime as dt
import socket
from typing import Any

from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.paths import object_path
from rljob.reconcile.events import EventSpec

COMPONENT = "rljob-operator"
_MESSAGE_LIMIT = 1024


def _bounded(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= _MESSAGE_LIMIT else one_line[: _MESSAGE_LIMIT - 1] + "…"


def event_body(
    involved: dict[str, Any], type_: str, reason: str, message: str, now: dt.datetime
) -> dict[str, Any]:
    meta = involved["metadata"]
    stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "type": type_,
        "reason": reason,
        "message": _bounded(message),
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": socket.gethostname()[:128],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def post_event(
    kube: Kube, involved: dict[str, Any], event: EventSpec, now: dt.datetime, name: str = ""
) -> None:
    """Posts an Event; with a `name` at most once (a repeat is answered 409 and ignored)."""
    body = event_body(involved, event.type, event.reason, event.message, now)
    if name:
        body["metadata"] = {"name": name, "namespace": body["metadata"]["namespace"]}
    try:
        await kube.request("post", object_path("v1", "Event", body["metadata"]["namespace"]), body)
    except KubeError as exc:
        if not (name and exc.conflict):
            raise
