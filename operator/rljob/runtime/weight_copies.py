"""The weight copies a pass starts (slotServices, reconcile/slots.py), run in the background: a
copy waits for a model load (minutes), which no pass may hold its job's worker for. One copy
per engine at a time; one that ended is not started again for the same generation within
RETRY_SECONDS (the gate's rechecks re-plan it every few seconds while the engine is behind).
What a copy did is told in an Event on the RLJob; the gate then opens on the engine's own
report (health loop), never on the copy's answer. Memory only: after a restart a copy may run
once more, which loads the same checkpoint again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from rljob.adapters.metrics import metrics_url
from rljob.adapters.weight_copy import CopyOutcome, WeightCopier
from rljob.reconcile.events import EventSpec
from rljob.reconcile.slots import WeightCopy

log = structlog.get_logger("rljob.weight_copies")

RETRY_SECONDS = 30.0
COPIED = "EngineWeightsCopied"
COPY_FAILED = "EngineWeightCopyFailed"

Tell = Callable[[EventSpec, str], Awaitable[None]]  # (Event, its name): posts it on the RLJob


@dataclass
class _Started:
    generation: int
    at: float
    task: asyncio.Task[None]


class WeightCopies:
    """Copies under way and lately ended, by target pod uid."""

    def __init__(self, copier: WeightCopier | None = None) -> None:
        self._copier = copier or WeightCopier()
        self._started: dict[str, _Started] = {}

    def start(self, job: str, copy: WeightCopy, tell: Tell) -> bool:
        """Starts the copy unless one into that engine runs or lately ended for that
        generation; True when started."""
        now = time.monotonic()
        last = self._started.get(copy.target_uid)
        if last is not None and (
            not last.task.done()
            or (last.generation == copy.generation and now - last.at < RETRY_SECONDS)
        ):
            return False
        self._forget_old(now)
        task = asyncio.create_task(self._run(job, copy, tell))
        self._started[copy.target_uid] = _Started(copy.generation, now, task)
        return True

    def running(self) -> int:
        return sum(1 for s in self._started.values() if not s.task.done())

    async def idle(self) -> None:
        """Returns once every copy under way ended."""
        await asyncio.gather(*(s.task for s in self._started.values()), return_exceptions=True)

    async def close(self) -> None:
        for started in self._started.values():
            started.task.cancel()
        await self._copier.close()

    async def _run(self, job: str, copy: WeightCopy, tell: Tell) -> None:
        source = metrics_url(copy.source_ip, copy.port, "")
        target = metrics_url(copy.target_ip, copy.port, "")
        if source is None or target is None:
            return
        outcome = await self._copier.copy(source, target)
        log.info(
            "weight copy",
            job=job,
            source=copy.source,
            target=copy.target,
            ok=outcome.ok,
            version=outcome.version,
            message=outcome.message,
        )
        try:
            await tell(
                copied_event(copy, outcome), f"{job}.copy-{copy.target_uid[:8]}-{copy.generation}"
            )
        except Exception as error:  # the Event is the story, not the copy
            log.warning("weight copy event not posted", job=job, error=str(error))

    def _forget_old(self, now: float) -> None:
        for uid, started in list(self._started.items()):
            if started.task.done() and now - started.at >= RETRY_SECONDS:
                del self._started[uid]


def copied_event(copy: WeightCopy, outcome: CopyOutcome) -> EventSpec:
    if outcome.ok:
        message = (
            f"{copy.target}: loaded {outcome.model_path} (weight version {outcome.version}) "
            f"as {copy.source} serves it; it takes a slot once its gate opens"
        )
        return EventSpec("Normal", COPIED, message[:1000])
    message = (
        f"{copy.target}: copying {copy.source}'s weights (generation {copy.generation}) "
        f"failed: {outcome.message or 'no answer'}; retried while it stays behind"
    )
    return EventSpec("Warning", COPY_FAILED, message[:1000])
