"""Gather reads without deciding: an attempt whose number the store has not settled yet (a new
RLJob of an old name) is never started as attempt 1 when the store comes back mid-pass."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rljob.checkpoint_protocol.errors import StoreUnavailable
from rljob.checkpoint_protocol.layout import DefaultStore
from rljob.runtime.gather import Gatherer
from rljob.runtime.memory import JobMemory
from tests.unit.reconcile.world import T0, World, example_body


class Checkpoints:
    """The store answers the marker listing only after the first call fails."""

    defaults = DefaultStore()

    def __init__(self) -> None:
        self.gathered: list[int] = []

    async def first_attempt(self, job: Any) -> int:
        raise StoreUnavailable("Connection was closed")

    async def gather_attempt(self, job: Any, attempt: int, journaled: Any, now: Any) -> Any:
        self.gathered.append(attempt)
        return object()

    async def newest(self, job: Any, now: dt.datetime) -> None:
        return None


async def test_an_unsettled_attempt_number_waits_for_the_store() -> None:
    body = example_body()
    body["spec"]["checkpoint"] = {"uri": "s3://bucket/prefix"}
    world = World(body)
    store = Checkpoints()
    gatherer = Gatherer(kube=None, checkpoints=store)  # type: ignore[arg-type]

    inputs = await gatherer.inputs(
        world.job, world.observed, JobMemory(("rl", "grpo-demo")), T0, None
    )

    assert inputs.attempt is not None and inputs.attempt.inputs is None
    assert "Connection was closed" in inputs.attempt.error
    assert store.gathered == [], "attempt 1 must not be planned before the markers are read"
