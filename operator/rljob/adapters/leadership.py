"""One active replica: a coordination.k8s.io Lease held through kubernetes.aio's leader
election. The holder acts; a replica that cannot renew stops acting at once and exits (its
supervisor restarts it as a standby), so two replicas never act together. Writes that start
actions are also resourceVersion-guarded, so even a stale leader's write fails."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes.aio import client
from kubernetes.aio.client import ApiClient
from kubernetes.aio.client.exceptions import ApiException
from kubernetes.aio.leaderelection import electionconfig, leaderelection
from kubernetes.aio.leaderelection.resourcelock.leaselock import LeaseLock

from rljob.adapters.kube import replica_identity

LEASE_NAME = "rljob-operator"
LEASE_SECONDS = 15  # whole seconds: the Lease's leaseDurationSeconds is an integer
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2

log = structlog.get_logger("rljob.leadership")


class _LeaseLock(LeaseLock):
    """kubernetes 37's LeaseLock.create passes pretty=True, which its own pydantic-validated
    API rejects (pretty must be a string): create the Lease without it."""

    async def create(self, name: str, namespace: str, election_record: Any) -> bool:
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=name), spec=self.update_lease(election_record)
        )
        try:
            await self.api_instance.create_namespaced_lease(namespace, body)
        except ApiException as exc:
            log.warning("could not create the Lease", status=exc.status)
            return False
        return True


class Leadership:
    """Whether this replica may act now (always, when leader election is off)."""

    def __init__(self, api: ApiClient | None, namespace: str | None) -> None:
        self.enabled = namespace is not None and api is not None
        self.identity = replica_identity()
        self._elected = asyncio.Event()
        self._election: leaderelection.LeaderElection | None = None
        self._task: asyncio.Task[None] | None = None
        if self.enabled and api is not None and namespace is not None:
            lock = _LeaseLock(LEASE_NAME, namespace, self.identity, api)
            config = electionconfig.Config(
                lock, LEASE_SECONDS, RENEW_DEADLINE_SECONDS, RETRY_SECONDS,
                self._started, self._stopped,
            )  # fmt: skip
            self._election = leaderelection.LeaderElection(config)

    def start(self, on_elected: Callable[[], Awaitable[None]]) -> None:
        self._on_elected = on_elected
        if self._election is not None:
            self._task = asyncio.create_task(self._election.run(), name="rljob:leader-election")
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        log.error("leader election ended", identity=self.identity, error=repr(task.exception()))
        os._exit(1)  # without an election this replica can neither act nor stand by

    def acting(self) -> bool:
        """True while this replica holds a lease it renewed within the renew deadline."""
        if not self.enabled:
            return True
        if not self._elected.is_set() or self._election is None:
            return False
        # The library also refreshes the observed time when it sees ANOTHER holder's record
        # (e.g. just after a frozen leader wakes up): the holder must be this replica.
        record = self._election.observed_record
        if record is None or record.holder_identity != self.identity:
            return False
        renewed_ms = self._election.observed_time_milliseconds
        return time.time() * 1000 - renewed_ms < RENEW_DEADLINE_SECONDS * 1000

    async def _started(self) -> None:
        log.info("elected: this replica acts now", identity=self.identity)
        self._elected.set()
        await self._on_elected()

    async def _stopped(self) -> None:
        self._elected.clear()
        log.error("lost the lease: stopping at once", identity=self.identity)
        os._exit(1)  # a replica that cannot prove leadership must not act another moment

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
