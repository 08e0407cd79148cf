"""Single-flight work per RLJob: one asyncio task per job uid runs every reconcile pass of that
job, whatever woke it (its own events, a child's event, a requeue deadline, the resync). At most
`max_passes` passes of different jobs run at once, as controller-runtime's
MaxConcurrentReconciles bounds a controller: when 500 jobs arrive together (a fleet applied, an
operator restart, a takeover), each pass in flight holds its job's body, models and rendered
children, and the heap they grow to stays resident after them. A freed slot goes to the most
urgent waiting pass (rljob.runtime.pass_slots): a user's new or changed job first."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from rljob.observability import RECONCILE_WAKES
from rljob.runtime.pass_slots import PassSlots, Urgency

Body = dict[str, Any]
JobKey = tuple[str, str]  # (namespace, name)
PassResult = float | None  # seconds until the job wants another pass; None: only on events
PassFn = Callable[[Body], Awaitable[PassResult]]

log = structlog.get_logger("rljob.workers")

MAX_CONCURRENT_PASSES = 32
# Jobs applied together would resync together, every resync period, in one burst of passes and
# status writes: each waits up to a tenth longer, so the bursts spread and stay spread.
RESYNC_JITTER = 0.1


@dataclass
class _Job:
    key: JobKey
    packed: str  # the newest body as JSON: decoded, a body takes 5 to 8 times the room
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    deleted: bool = False
    # The resourceVersion of our own settled write: its watch event wakes no pass.
    settled_version: str | None = None
    # The most urgent wake since the last pass started, and when the first of them came.
    urgency: Urgency = Urgency.RESYNC
    woken_at: float | None = None

    @property
    def body(self) -> Body:
        """A fresh copy for each pass (a pass may not keep or change the stored one)."""
        body: Body = json.loads(self.packed)
        return body


class JobWorkers:
    """Routes wake-ups to per-job workers; a job's passes never overlap."""

    def __init__(
        self,
        run_pass: PassFn,
        resync_seconds: float = 300.0,
        max_error_backoff: float = 60.0,
        max_passes: int = MAX_CONCURRENT_PASSES,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self._run_pass = run_pass
        self._uniform = uniform
        self._slots = PassSlots(max_passes)
        self._resync = resync_seconds
        self._max_error_backoff = max_error_backoff
        self._jobs: dict[str, _Job] = {}
        self._uids: dict[JobKey, str] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def resync_delay(self) -> float:
        """The wait for the next resync: the period, up to RESYNC_JITTER of it longer (never
        shorter: a healthy job's progress refresh stays at most one write per period)."""
        return self._resync * self._uniform(1.0, 1.0 + RESYNC_JITTER)

    def submit(self, body: Body) -> None:
        """Records the newest body of an RLJob and wakes its worker (starting it if new)."""
        meta = body["metadata"]
        uid = meta["uid"]
        key = (meta["namespace"], meta["name"])
        job = self._jobs.get(uid)
        if job is None:
            job = self._jobs[uid] = _Job(key, packed(body))
            self._uids[key] = uid
            job.task = asyncio.create_task(self._work(uid), name=f"rljob:{key[0]}/{key[1]}")
        else:
            job.packed = packed(body)
            if _version(body) == job.settled_version:
                RECONCILE_WAKES.labels("own_write").inc()  # counted, but no pass
                return
        _wake(job, "rljob", Urgency.USER if user_waits(body) else Urgency.EVENT)

    def refresh(self, body: Body, *, settled: bool = False) -> None:
        """A newer body we got back from our own write: use it without waiting for the watch.
        `settled`: the pass that wrote it has nothing left to do, so the write's own watch
        event would only run the same pass again on the same body."""
        job = self._jobs.get(body.get("metadata", {}).get("uid", ""))
        if job is not None:
            job.packed = packed(body)
            job.settled_version = _version(body) if settled else None

    def wake(self, key: JobKey, cause: str = "child") -> None:
        """Something of (namespace, name) changed (`cause`: a child, a finding, ...): run a
        pass of that job soon."""
        uid = self._uids.get(key)
        if uid is not None and uid in self._jobs:
            _wake(self._jobs[uid], cause, Urgency.EVENT)

    def wake_all(self) -> None:
        for job in self._jobs.values():
            _wake(job, "takeover", Urgency.RESYNC)

    def forget(self, body: Body) -> None:
        """The RLJob is gone: stop its worker after any pass in progress."""
        self._drop(body["metadata"]["uid"])

    def forget_uid(self, uid: str) -> None:
        """As `forget`, by uid alone (a re-list no longer shows the job)."""
        self._drop(uid)

    def _drop(self, uid: str) -> None:
        job = self._jobs.pop(uid, None)
        if job is None:
            return
        if self._uids.get(job.key) == uid:
            del self._uids[job.key]
        job.deleted = True
        job.wake.set()

    def uids(self) -> list[str]:
        return list(self._jobs)

    async def stop(self) -> None:
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._jobs.clear()
        self._uids.clear()

    async def _work(self, uid: str) -> None:
        errors = 0
        delay: float | None = 0.0
        while True:
            job = self._jobs.get(uid)
            if job is None or job.deleted:
                return
            try:
                await asyncio.wait_for(
                    job.wake.wait(), timeout=self.resync_delay() if delay is None else delay
                )
            except TimeoutError:
                if delay != 0.0:  # 0: the first pass, counted by the submit that started it
                    resync = delay is None
                    urgency = Urgency.RESYNC if resync else Urgency.EVENT
                    _wake(job, "resync" if resync else "requeue", urgency)
            job.wake.clear()
            if job.deleted:
                return
            urgency, woken_at = job.urgency, job.woken_at or time.monotonic()
            job.urgency, job.woken_at = Urgency.RESYNC, None
            try:
                async with self._slots.slot(urgency, woken_at):
                    delay = await self._run_pass(job.body)
                errors = 0
            except asyncio.CancelledError:
                raise
            except Exception:
                errors += 1
                delay = min(self._max_error_backoff, 0.5 * 2**errors) * random.uniform(0.8, 1.2)
                log.exception("reconcile pass failed; retrying", uid=uid, retry_in=round(delay, 1))


def _wake(job: _Job, cause: str, urgency: Urgency) -> None:
    RECONCILE_WAKES.labels(cause).inc()
    job.urgency = min(job.urgency, urgency)
    if job.woken_at is None:
        job.woken_at = time.monotonic()
    job.wake.set()


def user_waits(body: Body) -> bool:
    """A user waits on this body: its spec is not yet observed (a new job or a changed spec)
    or it is being deleted."""
    meta = body.get("metadata") or {}
    observed = (body.get("status") or {}).get("observedGeneration")
    return bool(meta.get("deletionTimestamp")) or meta.get("generation") != observed


def _version(body: Body) -> str | None:
    version = body.get("metadata", {}).get("resourceVersion")
    return version if isinstance(version, str) and version else None


def packed(body: Body) -> str:
    """The body as a worker keeps it between passes: compact JSON, without managedFields."""
    return json.dumps(without_managed_fields(body), separators=(",", ":"))


def without_managed_fields(body: Body) -> Body:
    """The body as a pass reads it: metadata.managedFields (the API server's record of every
    writer's fields, often the body's largest part) is read by nothing here, and a body is
    kept per job for the job's lifetime."""
    meta = body.get("metadata") or {}
    if "managedFields" not in meta:
        return body
    return {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
