"""Direct-scrape throughput: the operator's DirectSource collecting the engine signals from
realistic vLLM pages, with its prefilter (the shipped path) and without it (every line parsed).

The pages come from `bench.pages` in a separate process on loopback; the client runs in this
process on its own event loop, as the operator's health scheduler would run it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from bench.pages import vllm_page
from rljob.adapters import metrics
from rljob.adapters.metrics import direct
from rljob.dev.controlplane import wait_until
from rljob.dev.processes import free_ports, terminate
from rljob.health.profiles import VLLM

NAMESPACE = "bench"
WARMUP_ENDPOINTS = 50
# A full parse costs ~20x the prefiltered path: fewer pages and rounds give the same per-page
# figure in bounded time.
UNFILTERED_SHARE = 10
# docs/architecture.md section 12: 2,000 endpoints per 15 s.
TARGET_ENDPOINTS_PER_SECOND = 2000 / 15


@dataclass(frozen=True)
class ScrapeResult:
    """One mode over `endpoints` pages: the median round's throughput and CPU per page."""

    mode: str
    endpoints: int
    seconds: float
    cpu_ms_per_endpoint: float

    @property
    def endpoints_per_second(self) -> float:
        return self.endpoints / self.seconds


class PageServer:
    """`python -m bench.pages` on a free loopback port."""

    def __init__(self, repo: Path) -> None:
        self.port = free_ports(1)[0]
        env = {**os.environ, "PYTHONPATH": str(repo)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.pages", f"--port={self.port}"],
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, 30, "the page server")

    def url(self, pod: str) -> str:
        return f"http://127.0.0.1:{self.port}/metrics/{pod}"

    def _answers(self) -> bool:
        with urllib.request.urlopen(self.url("probe"), timeout=2) as response:
            return bool(response.status == 200)

    def stop(self) -> None:
        terminate(self.process.pid, grace=5)


def _queries(endpoints: int) -> metrics.Queries:
    pods = [f"engine-{index}" for index in range(endpoints)]
    return {signal: {NAMESPACE: pods} for signal in VLLM.signals().values()}


async def _rounds(server: PageServer, endpoints: int, rounds: int) -> list[tuple[float, float]]:
    """(wall seconds, CPU seconds) of each round, after a small warm-up round."""
    source = metrics.DirectSource(lambda _, pod: server.url(pod))
    timings = []
    try:
        await source.collect(_queries(WARMUP_ENDPOINTS), lookback=60, at=time.time())
        queries = _queries(endpoints)
        for _ in range(rounds):
            wall, cpu = time.perf_counter(), time.process_time()
            collected = await source.collect(queries, lookback=60, at=time.time())
            timings.append((time.perf_counter() - wall, time.process_time() - cpu))
            _check(collected, endpoints)
    finally:
        await source.close()
    return timings


def _check(collected: metrics.Collected, endpoints: int) -> None:
    """Every signal the page exports is answered for every pod; the profile's fallback names
    (vLLM's pre-0.9 gpu_ metrics, which this page of a current vLLM lacks) for none."""
    served = _served_metrics()
    for signal, answer in collected.items():
        expected = endpoints if signal.metric in served else 0
        if isinstance(answer, metrics.SourceError) or len(answer) != expected:
            raise RuntimeError(f"direct scrape of {signal.metric} failed: {answer!r:.300}")


@functools.cache
def _served_metrics() -> frozenset[str]:
    lines = (line for line in vllm_page().splitlines() if line and not line.startswith("#"))
    return frozenset(line.split("{")[0].split(" ")[0] for line in lines)


def _unfiltered(text: str, _: object) -> list[str]:
    return text.splitlines()


def measure(repo: Path, endpoints: int, rounds: int) -> list[ScrapeResult]:
    server = PageServer(repo)
    try:
        results = [_measure("prefiltered (shipped)", server, endpoints, rounds)]
        with mock.patch.object(direct, "prefilter", _unfiltered):
            fewer = max(WARMUP_ENDPOINTS, endpoints // UNFILTERED_SHARE)
            results.append(_measure("full parse (no prefilter)", server, fewer, 1))
    finally:
        server.stop()
    return results


def _measure(mode: str, server: PageServer, endpoints: int, rounds: int) -> ScrapeResult:
    timings = asyncio.run(_rounds(server, endpoints, rounds))
    wall = statistics.median(t[0] for t in timings)
    cpu = statistics.median(t[1] for t in timings)
    return ScrapeResult(mode, endpoints, wall, cpu * 1000 / endpoints)


def page_size() -> tuple[int, int]:
    """(bytes, lines) of one page."""
    from bench.pages import vllm_page

    page = vllm_page()
    return len(page.encode()), len(page.splitlines())
