"""The health scheduler against a real Prometheus (Debian's package, 1 s scrapes) scraping
simulated vLLM engines (the simulator's EngineModel pages, one loopback port each), and against
the same pages scraped directly. No control plane: pods are given to the scheduler as observed.

Shows: range-vector queries with real scrape timestamps reach the detectors; a new job is
backfilled with range queries so its baselines exist at its first round; one engine's 40 %
drop is found on that engine only, by both sources; with Prometheus down every evaluation of
its job is insufficient data while the direct job carries on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rljob.adapters.metrics import MetricsSources
from rljob.api import RLJob, parse_rljob
from rljob.dev.processes import free_ports
from rljob.dev.prometheus import PrometheusServer, prometheus_bin_dir
from rljob.dev.sim.exposition import CONTENT_TYPE
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import EngineProfile
from rljob.health import INSUFFICIENT_DATA, Evaluation
from rljob.health.monitor import JobKey
from rljob.runtime.health_loop import HealthScheduler

pytestmark = pytest.mark.integration

NAMESPACE = "rl-health"
ENGINES = 4
DRIFTING = "sim-rollout-3"
WINDOW = 12.0
THRESHOLD = 0.2
KV_DRIFT = {"window": "12s", "warmup": "6s", "threshold": THRESHOLD, "cooldown": "10m"}
# Prometheus scrapes every second; its newest sample may be that much older than the round.
SCRAPE_LAG = 2.0
HISTORY_SECONDS = 20  # in 1 s scrapes: more than kvDrift's warm-up and window (18 s)


def _scraped_seconds(prometheus: PrometheusServer) -> int:
    """The fewest 1 s samples Prometheus holds of an engine over the last half minute."""
    counts = prometheus.values("count_over_time(vllm:generation_tokens_total[30s])")
    return int(min(counts.values())) if len(counts) == ENGINES else 0


class Engine:
    """One simulated engine serving its page on its own loopback port."""

    def __init__(self, pod: str) -> None:
        self.pod = pod
        self.model = EngineModel(EngineProfile(throughput=1000.0), seed=pod, start=time.time())
        self.lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with engine.lock:
                    engine.model.advance(time.time())
                    body = engine.model.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def slow_down(self, factor: float) -> None:
        with self.lock:
            self.model.advance(time.time())
            profile = self.model.profile
            self.model.set_profile(
                dataclasses.replace(profile, throughput=profile.throughput * factor)
            )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclasses.dataclass(frozen=True)
class Pod:
    name: str
    phase: str = "Running"
    ready: bool = True


@pytest.fixture(scope="module")
def engines() -> Iterator[list[Engine]]:
    started = [Engine(f"sim-rollout-{index}") for index in range(ENGINES)]
    yield started
    for engine in started:
        engine.stop()


@pytest.fixture(scope="module")
def prometheus(
    engines: list[Engine], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    run_dir = tmp_path_factory.mktemp("prometheus")
    targets = run_dir / "targets.json"
    groups = [
        {
            "targets": [engine.address],
            "labels": {"namespace": NAMESPACE, "pod": engine.pod, "role": "rollout", "job": "sim"},
        }
        for engine in engines
    ]
    targets.write_text(json.dumps(groups))
    server = PrometheusServer(
        run_dir, prometheus_bin_dir(), free_ports(1)[0], "1s", "1s", targets_file=targets
    )
    server.start()
    yield server
    server.stop()


def make_job(name: str, source: dict[str, Any]) -> RLJob:
    return parse_rljob(
        {
            "apiVersion": "rljob.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
            "spec": {
                "image": "img",
                "roles": {"rollout": {"replicas": ENGINES}, "trainer": {"nodes": 1}},
                "health": {"interval": "1s", "source": source, "kvDrift": KV_DRIFT},
            },
        }
    )


class Recorder:
    def __init__(self) -> None:
        self.rounds: list[tuple[float, JobKey, list[Evaluation]]] = []

    async def __call__(self, key: JobKey, evaluations: list[Evaluation]) -> None:
        self.rounds.append((time.time(), key, evaluations))

    def of(self, name: str, since: float = 0.0) -> list[tuple[float, list[Evaluation]]]:
        return [(t, e) for t, k, e in self.rounds if k == (NAMESPACE, name) and t >= since]

    def findings(self, name: str, since: float = 0.0) -> list[tuple[float, Evaluation]]:
        return [(t, e) for t, evals in self.of(name, since) for e in evals if e.is_finding]


async def wait_until(probe: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out after {seconds:.0f}s waiting for {what}")


async def test_scheduler_on_real_prometheus_and_direct_scrapes(
    engines: list[Engine], prometheus: PrometheusServer, tmp_path: Path
) -> None:
    urls = {(NAMESPACE, e.pod): f"http://{e.address}/metrics" for e in engines}
    factory = MetricsSources(direct_resolver=lambda ns, pod: urls.get((ns, pod)), timeout=3.0)
    recorder = Recorder()
    scheduler = HealthScheduler(factory, recorder)
    prom_job = make_job("via-prometheus", {"prometheus": {"url": prometheus.url}})
    direct_job = make_job("via-direct", {"direct": {}})
    pods = {"rollout": [Pod(engine.pod) for engine in engines]}

    # Prometheus holds more than warm-up plus window of history before the scheduler starts:
    # counted in samples, since a loaded machine starts scraping late (the engines' age is not it).
    await wait_until(
        lambda: _scraped_seconds(prometheus) >= HISTORY_SECONDS,
        90,
        f"Prometheus to hold {HISTORY_SECONDS} s of every engine's samples",
    )
    for job in (prom_job, direct_job):
        scheduler.register(job, pods)
    task = asyncio.create_task(scheduler.run())
    try:
        first = await wait_until(lambda: recorder.of("via-prometheus"), 15, "a first round")
        drift = [e for e in first[0][1] if e.detector == "kv_drift"]
        assert len(drift) == ENGINES
        # Backfilled: every engine has its baseline at the first round.
        assert not [e for e in drift if "warming up" in e.message], drift
        assert all(e.outcome == "healthy" for e in drift), [e.message for e in drift]
        throughput = [float(e.evidence["throughput"]) for e in drift]
        assert all(900 <= value <= 1100 for value in throughput), throughput

        await asyncio.sleep(8)  # the direct job's engines warm up (no history to backfill)
        dropped_at = time.time()
        next(e for e in engines if e.pod == DRIFTING).slow_down(0.6)

        for name in ("via-prometheus", "via-direct"):
            found = await wait_until(
                lambda name=name: recorder.findings(name), 2 * WINDOW + 15, f"{name}'s finding"
            )
            when, finding = found[0]
            assert finding.target == DRIFTING
            assert when - dropped_at <= 2 * WINDOW + 10
            # The first finding's window may still hold a second or two from before the drop.
            assert float(finding.evidence["change"]) <= -THRESHOLD
            settled = await wait_until(
                lambda name=name: recorder.findings(name, since=dropped_at + WINDOW + SCRAPE_LAG),
                WINDOW + 15,
                f"{name}'s finding over a window wholly after the drop",
            )
            assert float(settled[0][1].evidence["change"]) == pytest.approx(-0.4, abs=0.1)
            assert {e.target for _, e in recorder.findings(name)} == {DRIFTING}
            assert scheduler.source_error((NAMESPACE, name)) is None

        # The lead restarts the engine: cooldown, so no more findings for it.
        for name in ("via-prometheus", "via-direct"):
            scheduler.note_restart((NAMESPACE, name), "rollout", DRIFTING, time.time())

        await asyncio.to_thread(prometheus.stop)
        await wait_until(
            lambda: scheduler.source_error((NAMESPACE, "via-prometheus")), 15, "the source error"
        )
        down_since = time.time()
        await asyncio.sleep(4)
        dark = [evals for t, evals in recorder.of("via-prometheus", down_since)]
        assert len(dark) >= 3
        for evaluations in dark:
            assert {e.outcome for e in evaluations} == {INSUFFICIENT_DATA}
            assert all("source_error" in e.evidence for e in evaluations)
        lit = recorder.of("via-direct", down_since)
        assert lit
        assert all(
            e.outcome != INSUFFICIENT_DATA
            for _, evals in lit
            for e in evals
            if e.detector == "engine_stall"
        )
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
