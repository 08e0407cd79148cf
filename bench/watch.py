"""Watches of a few resource kinds in one namespace, timestamping every event on arrival.

The latencies are differences between these arrival times and the bench's own actions (same
clock), so no benchmark polls the API server while it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from rljob.dev.kubeapi import Credentials

Body = dict[str, Any]
Key = tuple[str, str]  # (kind, name)
RECONNECT_SECONDS = 0.2

KIND_PATHS = {
    "RLJob": "/apis/rljob.io/v1alpha1/namespaces/{ns}/rljobs",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Pod": "/api/v1/namespaces/{ns}/pods",
}


@dataclass(frozen=True)
class Event:
    at: float  # time.time() on arrival
    type: str  # ADDED, MODIFIED, DELETED
    body: Body


class Watcher:
    """Every event of the watched kinds in `namespace`, per (kind, name), in arrival order."""

    def __init__(self, creds: Credentials, namespace: str, kinds: tuple[str, ...]) -> None:
        self.creds = creds
        self.namespace = namespace
        self.kinds = kinds
        self.events: dict[Key, list[Event]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        context = ssl.create_default_context(cafile=str(self.creds.ca_file))
        if self.creds.cert_file and self.creds.key_file:
            context.load_cert_chain(str(self.creds.cert_file), str(self.creds.key_file))
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
        self._tasks = [asyncio.create_task(self._watch(kind)) for kind in self.kinds]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()

    def first(self, kind: str, name: str, test: Callable[[Event], bool]) -> float | None:
        """Arrival time of the first event of (kind, name) that passes `test`."""
        return next((e.at for e in self.events.get((kind, name), []) if test(e)), None)

    async def _watch(self, kind: str) -> None:
        url = self.creds.server + KIND_PATHS[kind].format(ns=self.namespace)
        # Without a resourceVersion a watch starts with ADDED for what exists, so reconnecting
        # never loses an object (first-seen times keep their earliest arrival).
        params = {"watch": "1", "timeoutSeconds": "3600"}
        while True:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                await self._stream(kind, url, params)
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _stream(self, kind: str, url: str, params: dict[str, str]) -> None:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self._session.get(url, params=params, timeout=timeout) as response:
            response.raise_for_status()
            pending = b""
            async for chunk in response.content.iter_any():
                arrived = time.time()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._record(kind, line, arrived)

    def _record(self, kind: str, line: bytes, arrived: float) -> None:
        if not line.strip():
            return
        event = json.loads(line)
        body = event.get("object") or {}
        name = body.get("metadata", {}).get("name")
        if event.get("type") in ("ADDED", "MODIFIED", "DELETED") and name:
            self.events.setdefault((kind, name), []).append(Event(arrived, event["type"], body))
