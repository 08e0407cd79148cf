"""The operator's view of an OperatorStore: every call runs in a dedicated thread pool (never on
the event loop, never starving the default executor) under a deadline, so a hung store turns into
StoreUnavailable within the timeout."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import ParamSpec, TypeVar

from rljob.checkpoint_protocol.errors import StoreUnavailable
from rljob.checkpoint_protocol.layout import VersionId
from rljob.checkpoint_protocol.models import AttemptMarker, Pointer
from rljob.checkpoint_protocol.s3.transport import DEADLINE, Capabilities
from rljob.checkpoint_protocol.validity import Validity
from rljob.checkpoints.attempt_plan import CandidateCheck
from rljob.checkpoints.lineage import Lineage
from rljob.checkpoints.retention import RetentionListing, RetentionPlan
from rljob.checkpoints.s3.discovery import Discovery
from rljob.checkpoints.s3.store import OperatorStore, RetentionResult

CALL_TIMEOUT = 60.0

P = ParamSpec("P")
T = TypeVar("T")

_EXECUTOR = ThreadPoolExecutor(max_workers=8, thread_name_prefix="rljob-s3")


class AsyncCheckpointStore:
    """The operator's view: every call runs in a dedicated thread pool (never on the event loop,
    never starving the default executor) under a deadline of `timeout` seconds, checked before
    each S3 request; past it, StoreUnavailable. `with_timeout` gives a copy with another one."""

    def __init__(self, store: OperatorStore, *, timeout: float = CALL_TIMEOUT) -> None:
        self.store = store
        self.timeout = timeout

    def with_timeout(self, timeout: float) -> AsyncCheckpointStore:
        return AsyncCheckpointStore(self.store, timeout=timeout)

    @property
    def requests(self) -> int:
        return self.store.requests

    async def _run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        limit = self.timeout
        token = DEADLINE.set(time.monotonic() + limit)
        try:
            context = contextvars.copy_context()
        finally:
            DEADLINE.reset(token)
        loop = asyncio.get_running_loop()
        call = functools.partial(context.run, fn, *args, **kwargs)
        try:
            return await asyncio.wait_for(loop.run_in_executor(_EXECUTOR, call), limit)
        except TimeoutError:
            raise StoreUnavailable(
                f"{getattr(fn, '__name__', 'call')} on {self.store.endpoint.describe()}: "
                f"no answer within {limit:g}s"
            ) from None

    async def read_pointer(self) -> Pointer | None:
        got = await self._run(self.store.read_pointer)
        return None if got is None else got[0]

    async def read_markers(self) -> dict[int, AttemptMarker]:
        return await self._run(self.store.read_markers)

    async def write_marker(self, marker: AttemptMarker) -> AttemptMarker:
        return await self._run(self.store.write_marker, marker)

    async def next_attempt(self) -> int:
        return await self._run(self.store.next_attempt)

    async def probe_capabilities(self, *, force: bool = False) -> Capabilities:
        return await self._run(self.store.probe_capabilities, force=force)

    async def validate(self, version: VersionId) -> Validity:
        return await self._run(self.store.validate, version)

    async def discover(
        self,
        lineage: Lineage,
        *,
        history: Iterable[VersionId] = (),
        pinned: VersionId | None = None,
        full_scan: bool = True,
    ) -> Discovery:
        return await self._run(
            self.store.discover,
            lineage,
            history=tuple(history),
            pinned=pinned,
            full_scan=full_scan,
        )

    async def resume_candidates(
        self,
        lineage: Lineage,
        *,
        history: Iterable[VersionId] = (),
        pinned: VersionId | None = None,
    ) -> tuple[CandidateCheck, ...]:
        return await self._run(
            self.store.resume_candidates, lineage, history=tuple(history), pinned=pinned
        )

    async def recheck(self, version: VersionId) -> CandidateCheck:
        return await self._run(self.store.recheck, version)

    async def retention_listing(self, lineage: Lineage, *, keep: int) -> RetentionListing:
        return await self._run(self.store.retention_listing, lineage, keep=keep)

    async def plan_retention(
        self,
        lineage: Lineage,
        *,
        keep: int,
        incomplete_grace: timedelta,
        in_use: Iterable[VersionId] = (),
        live: bool = True,
    ) -> RetentionPlan:
        return await self._run(
            self.store.plan_retention,
            lineage,
            keep=keep,
            incomplete_grace=incomplete_grace,
            in_use=tuple(in_use),
            live=live,
        )

    async def apply_retention(self, plan: RetentionPlan) -> RetentionResult:
        return await self._run(self.store.apply_retention, plan)
