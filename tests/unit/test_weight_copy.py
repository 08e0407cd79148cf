"""Copying a serving SGLang engine's weights into a joining one (slotServices) against two
in-process HTTP servers on 127.0.0.1: the target is POSTed the source's model_path and
weight_version; a refusal, an unreadable source or an unreachable target is a failed copy with
its reason, never an exception; the runtime starts one copy per engine at a time and does not
repeat one for the same generation at once, and says what happened in an Event."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from rljob.adapters.weight_copy import CopyOutcome, WeightCopier
from rljob.reconcile.events import EventSpec
from rljob.reconcile.slots import WeightCopy
from rljob.runtime.weight_copies import COPIED, COPY_FAILED, WeightCopies
from tests.unit.test_metrics_sources import serve
from tests.unit.test_weight_versions import answers

INFO = {"model_path": "/ckpt/step_7", "weight_version": "7"}


def loads(received: list[Any], status: int = 200) -> Any:
    async def route(request: web.Request) -> web.StreamResponse:
        received.append(await request.json())
        ok = status == 200
        return web.json_response({"success": ok, "message": "loaded" if ok else "no such path"},
                                 status=status)  # fmt: skip

    return route


@pytest.mark.parametrize(
    ("source", "status", "ok", "said"),
    [
        pytest.param(answers(INFO), 200, True, "loaded", id="copied"),
        pytest.param(answers(INFO), 400, False, "no such path", id="refused-by-the-target"),
        pytest.param(answers({"weight_version": "7"}), 200, False, "names no checkpoint",
                     id="the-source-names-no-checkpoint"),
        pytest.param(answers(INFO, status=500), 200, False, "HTTP 500", id="the-source-fails"),
    ],
)  # fmt: skip
async def test_copy(source: Any, status: int, ok: bool, said: str) -> None:
    received: list[Any] = []
    copier = WeightCopier()
    try:
        async with (
            serve({"/model_info": source}) as src,
            serve({"/update_weights_from_disk": loads(received, status)}) as dst,
        ):
            outcome = await copier.copy(src, dst)
    finally:
        await copier.close()
    assert (outcome.ok, said in outcome.message) == (ok, True), outcome
    expected = [INFO] if "names no checkpoint" not in said and "500" not in said else []
    assert received == expected


async def test_an_unreachable_target_is_a_failed_copy() -> None:
    async with serve({}) as gone:
        pass
    copier = WeightCopier()
    try:
        async with serve({"/model_info": answers(INFO)}) as src:
            outcome = await copier.copy(src, gone)
    finally:
        await copier.close()
    assert not outcome.ok and outcome.message


class FakeCopier(WeightCopier):
    def __init__(self, ok: bool) -> None:
        super().__init__()
        self.ok, self.calls, self.release = ok, 0, asyncio.Event()

    async def copy(self, source_url: str, target_url: str) -> CopyOutcome:
        self.calls += 1
        await self.release.wait()
        return CopyOutcome(self.ok, "/ckpt", "7", "" if self.ok else "refused")


def step(generation: int = 7, uid: str = "uid-new") -> WeightCopy:
    return WeightCopy("a", "10.0.0.1", "new", uid, "10.0.0.2", 30000, generation)


@pytest.mark.parametrize(("ok", "reason"), [(True, COPIED), (False, COPY_FAILED)])
async def test_one_copy_per_engine_at_a_time_and_its_event(ok: bool, reason: str) -> None:
    copier = FakeCopier(ok)
    copies = WeightCopies(copier)
    told: list[tuple[EventSpec, str]] = []

    async def tell(event: EventSpec, name: str) -> None:
        told.append((event, name))

    assert copies.start("ns/job", step(), tell)
    assert not copies.start("ns/job", step(), tell)  # under way
    assert not copies.start("ns/job", step(8), tell)  # under way, even for a newer generation
    assert copies.start("ns/job", step(uid="uid-other"), tell)  # another engine
    copier.release.set()
    await asyncio.wait_for(copies.idle(), timeout=5)
    assert not copies.start("ns/job", step(), tell)  # ended lately, same generation
    assert copies.start("ns/job", step(8), tell)  # a newer generation
    await asyncio.wait_for(copies.idle(), timeout=5)
    assert copies.running() == 0
    await copies.close()
    assert copier.calls == 3
    assert [event.reason for event, _ in told[:2]] == [reason, reason]
    assert told[0][1] == "ns/job.copy-uid-new-7"
