"""Reading an engine's own weight version (generationFrom engine) against an in-process HTTP
server on 127.0.0.1: the paths in order until one answers a generation, and no generation,
never an exception, for 404s, garbage, oversized bodies, slow and unreachable engines."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from rljob.adapters.weight_versions import WeightVersions
from rljob.health.weight_version import weight_version_paths
from rljob.vocabulary.enums import Engine
from tests.unit.test_metrics_sources import serve

Route = Callable[[web.Request], Awaitable[web.StreamResponse]]
SGLANG = weight_version_paths(Engine.SGLANG)
VLLM = weight_version_paths(Engine.VLLM)


def answers(body: object, status: int = 200) -> Route:
    async def route(request: web.Request) -> web.StreamResponse:
        return web.json_response(body, status=status)

    return route


def text(body: str) -> Route:
    async def route(request: web.Request) -> web.StreamResponse:
        return web.Response(text=body, content_type="application/json")

    return route


DEPRECATED = answers({"error": "deprecated, use /model_info"}, status=404)


@pytest.mark.parametrize(
    ("routes", "paths", "generation"),
    [
        pytest.param({"/model_info": answers({"model_path": "/m", "weight_version": "4"})},
                     SGLANG, 4, id="sglang-model-info"),
        pytest.param({"/model_info": answers({"weight_version": "default"}),
                      "/get_weight_version": DEPRECATED},
                     SGLANG, None, id="sglang-before-its-first-update"),
        pytest.param({"/model_info": answers({"model_path": "/m"}),
                      "/get_weight_version": answers({"weight_version": "9"})},
                     SGLANG, 9, id="older-sglang-falls-back-to-get-weight-version"),
        pytest.param({"/get_weight_version": answers({"weight_version": "2"})},
                     SGLANG, 2, id="no-model-info-at-all"),
        pytest.param({"/model_info": answers({"weight_version": "3"}),
                      "/get_weight_version": answers({"weight_version": "8"})},
                     SGLANG, 3, id="the-first-path-that-answers-wins"),
        pytest.param({"/weight_info": answers({"weight_version": "5"})}, VLLM, 5, id="vllm"),
        pytest.param({}, VLLM, None, id="vllm-without-dev-mode:-404"),
        pytest.param({"/weight_info": answers({"weight_version": "5"}, status=500)}, VLLM, None,
                     id="a-server-error"),
        pytest.param({"/weight_info": text("{not json")}, VLLM, None, id="not-json"),
        pytest.param({"/weight_info": text('"5"')}, VLLM, None, id="not-an-object"),
        pytest.param({"/weight_info": text('{"weight_version": "' + "1" * 300_000 + '"}')},
                     VLLM, None, id="an-oversized-body"),
    ],
)  # fmt: skip
async def test_read(
    routes: dict[str, Route], paths: tuple[str, ...], generation: int | None
) -> None:
    reader = WeightVersions()
    try:
        async with serve(routes) as url:
            assert await reader.read(url, paths) == generation
    finally:
        await reader.close()


async def test_a_slow_engine_is_no_reading_within_the_timeout() -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return web.json_response({"weight_version": "1"})

    reader = WeightVersions(timeout=0.3)
    try:
        async with serve({"/weight_info": slow}) as url:
            assert await reader.read(url, VLLM) is None
            release.set()
    finally:
        await reader.close()


async def test_an_unreachable_engine_is_no_reading() -> None:
    async with serve({}) as url:
        gone = url  # the server is gone after the block
    reader = WeightVersions(timeout=2)
    try:
        assert await reader.read(gone, SGLANG) is None
        assert await reader.read("http://[not-an-address", SGLANG) is None
    finally:
        await reader.close()
