"""Engine metrics of vLLM engines that run as Ray actors inside the trainer gang, read through
Ray's metrics agent: real Ray (ray[default] 2.60.0 from the upstream venv) on loopback, CPU only.

One Ray head node stands for one trainer pod (trainer-a1-0). A driver starts two actors in it,
each one vLLM engine logging through vLLM's RayPrometheusStatLogger (the metrics made exactly
as its wrappers make them), on phases the test writes to a file the actors poll:

A both engines generate; B one engine's token counter stops while its gauges still say 4
running; C neither generates, gauges unchanged; D neither records at all (vLLM calls its stat
logger only when an engine step's outputs arrive, so a wedged engine records nothing).

The operator's side runs in-process as the health loop would: a JobMonitor for an RLJob with
spec.roles.trainer.engines (engine vllm, exporter ray), its queries answered by DirectSource
scraping the node's --metrics-export-port page, fed and evaluated by monitor_answers. Shown:
the names and labels Ray exports are the ones engine_metrics(GangEngines(), through_ray=True)
asks for; the two engines of the pod are two series told apart by WorkerId, summed into one
engine sample per scrape (KV usage averaged); the token total grows while they generate; the
pod's sample still grows while only one engine stalls; both stalled with requests pending is an
EngineStalled finding for the pod; and, of Ray itself, that a gauge no longer set leaves the
page within two report intervals while counters stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rljob.adapters.metrics.base import Collected, Selectors, SourceError
from rljob.adapters.metrics.direct import DirectSource
from rljob.api import RLJob, parse_rljob
from rljob.api.roles import GangEngines
from rljob.health import ENGINE_STALL, Evaluation
from rljob.health.monitor import JobMonitor
from rljob.health.monitor_answers import evaluate
from rljob.health.profiles import (
    GENERATION_TOKENS,
    KV_CACHE_USAGE,
    PREEMPTIONS,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    EngineMetrics,
    Series,
    engine_metrics,
    engine_samples,
)
from rljob.health.samples import EngineSample
from rljob.runtime.health_loop import answers_of
from rljob.vocabulary.enums import FailureReason
from tests.helpers import wait_for
from tests.unit.reconcile.world import example_body, pod
from tests.upstream.test_ray_launcher import free_ports, host_address

T = TypeVar("T")

NAMESPACE = "ns"
POD = "trainer-a1-0"
# Ray's metrics report interval (default 10 s): the page follows the actors within a second.
REPORT_INTERVAL_MS = 1000
WORKER_PORTS = 12
START_TIMEOUT = 60.0
PHASE_TIMEOUT = 20.0
# Scrapes this far apart in phase A see both counters grow.
GROWTH_SECONDS = 3.0
# What each engine records every 0.1 s while generating (vLLM's record() per engine step).
RUNNING, WAITING = 4.0, 2.0
KV_USAGE = (0.25, 0.75)
ENGINE_SIGNALS = (
    GENERATION_TOKENS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    KV_CACHE_USAGE,
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    PREEMPTIONS,
)
GAUGE_SIGNALS = (REQUESTS_RUNNING, REQUESTS_WAITING, KV_CACHE_USAGE)

DRIVER = """\
# Two actors, each one vLLM engine logging through RayPrometheusStatLogger:
# vllm/v1/metrics/ray_wrappers.py @02579a5f38c5ed5211c01da7207a5c6fbc921423 (RayGaugeWrapper,
# RayCounterWrapper: ray.util.metrics.Gauge/Counter named re.sub(r"[^a-zA-Z0-9_]", "_", name),
# tag_keys (*labelnames, "ReplicaId"), tags with ReplicaId "" outside Ray Serve; inc(0) is not
# recorded) and vllm/v1/metrics/loggers.py @005a810bc40faa25b8870fbc8559c3462581eee3
# (PrometheusStatLogger: these names, labelnames model_name and engine; record() sets the
# scheduler gauges and increments the counters each time an engine step's outputs arrive).
import json, re, sys, time
from pathlib import Path

import ray
from ray.util import metrics

PHASE = Path(sys.argv[1])
LABELNAMES = ("model_name", "engine")
COUNTERS = ("vllm:generation_tokens", "vllm:prefix_cache_hits", "vllm:prefix_cache_queries",
            "vllm:num_preemptions")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


def sanitized(name):
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


@ray.remote(num_cpus=1)
class Engine:
    def __init__(self, kv_usage):
        keys = (*LABELNAMES, "ReplicaId")
        self.counters = {n: metrics.Counter(name=sanitized(n), description=n, tag_keys=keys)
                         for n in COUNTERS}
        self.gauges = {n: metrics.Gauge(name=sanitized(n), description=n, tag_keys=keys)
                       for n in GAUGES}
        self.tags = {"model_name": "m", "engine": "0", "ReplicaId": ""}
        self.kv_usage = kv_usage

    def worker(self):
        return ray.get_runtime_context().get_worker_id()

    def inc(self, name, value):
        if value:
            self.counters[name].inc(value, tags=self.tags)

    def run(self, index):
        while (phase := PHASE.read_text().strip()) != "end":
            if phase in ("A", "B", "C"):  # record(): scheduler stats of one engine step
                self.gauges["vllm:num_requests_running"].set(4, tags=self.tags)
                self.gauges["vllm:num_requests_waiting"].set(2, tags=self.tags)
                self.gauges["vllm:kv_cache_usage_perc"].set(self.kv_usage, tags=self.tags)
                generating = phase == "A" or (phase == "B" and index == 0)
                self.inc("vllm:generation_tokens", 10 if generating else 0)
                self.inc("vllm:prefix_cache_queries", 10 if generating else 0)
                self.inc("vllm:prefix_cache_hits", 5 if generating else 0)
                self.inc("vllm:num_preemptions", 1 if generating else 0)
            time.sleep(0.1)


ray.init()
engines = [Engine.remote(kv) for kv in (0.25, 0.75)]
print("ENGINES", json.dumps(ray.get([engine.worker.remote() for engine in engines])), flush=True)
ray.get([engine.run.remote(index) for index, engine in enumerate(engines)])
print("DRIVER-DONE", flush=True)
"""


def kill_session(leader: int) -> None:
    """SIGKILL to every process of the session `leader` started (ray start --block and the
    daemons and workers it spawned)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getsid(int(proc.name)) == leader:
                os.kill(int(proc.name), signal.SIGKILL)


@dataclass
class RayNode:
    """One Ray head node (ray start --block in its own session) and the driver run in it."""

    workdir: Path
    venv: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        ports = free_ports(9 + WORKER_PORTS)
        self.metrics_port = ports[0]
        self.address = host_address(self.venv)
        # Short: Ray's Unix socket paths under it must stay below 108 bytes.
        self.root = Path(tempfile.mkdtemp(prefix="rm", dir="/tmp"))
        self.gcs = f"{self.address}:{ports[1]}"
        self.env = {
            "PATH": f"{self.venv / 'bin'}:{os.environ['PATH']}",
            "HOME": os.environ.get("HOME", "/tmp"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_metrics_report_interval_ms": str(REPORT_INTERVAL_MS),
        }
        flags = {
            "metrics-export-port": ports[0],
            "port": ports[1],
            "node-manager-port": ports[2],
            "object-manager-port": ports[3],
            "dashboard-agent-grpc-port": ports[4],
            "dashboard-agent-listen-port": ports[5],
            "runtime-env-agent-port": ports[6],
            "ray-client-server-port": ports[7],
            "dashboard-port": ports[8],
            "worker-port-list": ",".join(map(str, ports[9:])),
            "node-ip-address": self.address,
            "temp-dir": self.root,
            "num-cpus": 2,
        }
        command = [str(self.venv / "bin" / "ray"), "start", "--head", "--block"]
        command += [f"--{flag}={value}" for flag, value in flags.items()]
        command += ["--include-dashboard=false", "--disable-usage-stats"]
        self._spawn(command, "head.log")

    def _spawn(self, command: list[str], log: str) -> subprocess.Popen[bytes]:
        with (self.workdir / log).open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {n}:\n{self.log(n)[-3000:]}" for n in ("head.log", "driver.log"))

    def wait(self, probe: Callable[[], T | None], timeout: float, what: str) -> T:
        """wait_for, failing with the head's and the driver's logs."""
        try:
            return wait_for(probe, timeout, what, interval=0.5)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.logs()}") from None

    def started(self) -> bool:
        if self.procs[0].poll() is not None:
            raise AssertionError(f"ray start exited {self.procs[0].returncode}:\n{self.logs()}")
        return "Ray runtime started" in self.log("head.log")

    def phase(self, name: str) -> None:
        staged = self.workdir / "phase.tmp"
        staged.write_text(name)
        staged.replace(self.workdir / "phase")

    def start_driver(self) -> subprocess.Popen[bytes]:
        (self.workdir / "driver.py").write_text(DRIVER)
        self.env["RAY_ADDRESS"] = self.gcs
        python = str(self.venv / "bin" / "python")
        return self._spawn([python, "driver.py", str(self.workdir / "phase")], "driver.log")

    def engines(self) -> list[str] | None:
        """The actors' worker ids, once the driver printed them."""
        if self.procs[-1].poll() is not None:
            raise AssertionError(f"the driver exited {self.procs[-1].returncode}:\n{self.logs()}")
        for line in self.log("driver.log").splitlines():
            if line.startswith("ENGINES "):
                found: list[str] = json.loads(line.removeprefix("ENGINES "))
                return found
        return None

    def close(self) -> None:
        for proc in self.procs:
            kill_session(proc.pid)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def ray_node(tmp_path: Path, torch_venv: Path) -> Iterator[RayNode]:
    node = RayNode(tmp_path, torch_venv)
    try:
        node.wait(node.started, START_TIMEOUT, "the Ray head to start")
        yield node
    finally:
        node.close()


def gang_job() -> RLJob:
    """An RLJob whose engines run inside the trainer gang (no rollout Deployment), evaluated
    every second, an engine stalled after 3 s."""
    body = example_body()
    spec = body["spec"]
    del spec["roles"]["rollout"]
    spec["roles"]["trainer"].update(
        launcher="ray", nodes=1, gpus=0, command=["python", "driver.py"], engines={}
    )
    spec["health"].update(interval="1s", engineStall={"timeout": "3s"})
    rules = spec["failurePolicy"]["rules"]
    spec["failurePolicy"]["rules"] = [r for r in rules if "rollout" not in r.get("roles", [])]
    return parse_rljob(body)


@dataclass(frozen=True)
class Round:
    """One health round: what the source answered for the pod and what the detectors said."""

    at: float
    collected: Collected
    evaluations: list[Evaluation]
    profile: EngineMetrics
    staleness: float

    def series(self, signal_name: str) -> list[Series]:
        (signal,) = [s for s in self.collected if s.name == signal_name]
        data = self.collected[signal]
        if isinstance(data, SourceError):  # not an AssertionError: wait_for tries again
            raise LookupError(f"{signal.metric}: {data}")
        return data.get((NAMESPACE, POD), [])

    @property
    def complete(self) -> bool:
        """Every engine signal answered with one series per engine."""
        try:
            return all(len(self.series(name)) == 2 for name in ENGINE_SIGNALS)
        except LookupError:
            return False

    def by_worker(self, signal_name: str) -> dict[str, float]:
        """The signal's value per WorkerId (one point per series: one scrape)."""
        found: dict[str, float] = {}
        for one in self.series(signal_name):
            worker = one.label("WorkerId")
            assert worker is not None and worker not in found, one
            found[worker] = one.points[-1][1]
        return found

    def samples(self) -> list[EngineSample]:
        """The pod's engine samples, as monitor_answers builds them from the answers."""
        by_name = {name: self.series(name) for name in self.profile.signals()}
        return engine_samples(self.profile, by_name, self.staleness)

    def stall(self) -> Evaluation:
        (found,) = [e for e in self.evaluations if e.detector == ENGINE_STALL and e.target == POD]
        return found


class Operator:
    """The operator's health path for the one gang pod, against the node's metrics page."""

    def __init__(self, metrics_port: int) -> None:
        self.url = f"http://127.0.0.1:{metrics_port}/metrics"
        job = gang_job()
        self.monitor: JobMonitor[Any] = JobMonitor("uid", (NAMESPACE, "job"), job, time.time())
        self.monitor.update(job, {"trainer": [pod(POD, "trainer")]}, time.time(), None)
        profile = self.monitor.gang.metrics
        assert profile is not None, self.monitor.gang.error
        assert profile == engine_metrics(GangEngines(), through_ray=True)
        self.profile = profile
        self.rounds: list[Round] = []

    async def _collect(self, queries: Mapping[Any, Selectors]) -> Collected:
        def resolve(namespace: str, name: str) -> str | None:
            return self.url if (namespace, name) == (NAMESPACE, POD) else None

        source = DirectSource(resolve)
        try:
            return await source.collect(queries, lookback=30, at=time.time())
        finally:
            await source.close()

    def round(self) -> Round:
        targets = self.monitor.targets()
        queries = {s: {NAMESPACE: pods} for s, pods in self.monitor.queries(targets).items()}
        collected = asyncio.run(self._collect(queries))
        at = time.time()
        evaluations = evaluate(self.monitor, targets, answers_of(collected), None, at)
        done = Round(at, collected, evaluations, self.profile, self.monitor.staleness)
        self.rounds.append(done)
        return done

    def complete_round(self) -> Round | None:
        """A round, if every engine signal answered for both engines."""
        done = self.round()
        return done if done.complete else None

    def round_after(self, at: float) -> Callable[[], Round | None]:
        """A probe: a complete round taken at `at` or later."""

        def probe() -> Round | None:
            done = self.complete_round()
            return done if done is not None and done.at >= at else None

        return probe


def test_vllm_engines_as_ray_actors_feed_the_gang_engine_detectors(ray_node: RayNode) -> None:
    operator = Operator(ray_node.metrics_port)
    ray_node.phase("A")
    driver = ray_node.start_driver()
    workers = ray_node.wait(ray_node.engines, START_TIMEOUT, "the driver's two engine actors")
    both_generate(ray_node, operator, workers)
    one_stalls(ray_node, operator, workers)
    flat = both_stall(ray_node, operator)
    none_record(ray_node, operator, flat)
    ray_node.phase("end")
    assert driver.wait(timeout=PHASE_TIMEOUT) == 0, ray_node.logs()
    assert "DRIVER-DONE" in ray_node.log("driver.log")


def both_generate(node: RayNode, operator: Operator, workers: list[str]) -> None:
    """A: every engine signal answers with one series per actor, named and labelled as the
    profile expects; one engine sample sums them; the token total grows."""
    first = node.wait(operator.complete_round, START_TIMEOUT, "both engines' metrics on the page")
    for name in ENGINE_SIGNALS:
        labels = [dict(one.labels) for one in first.series(name)]
        assert {one["WorkerId"] for one in labels} == set(workers), (name, labels)
        for one in labels:
            assert one["engine"] == "0" and one["model_name"] == "m" and one["ReplicaId"] == ""
            assert one["NodeAddress"] == node.address and one["Version"] == "2.60.0"
        # The two engines of the pod differ only by the worker process Ray runs each in.
        rest = [{k: v for k, v in one.items() if k != "WorkerId"} for one in labels]
        assert rest[0] == rest[1], (name, rest)
    assert operator.profile.engine_label == "WorkerId"
    (sample,) = first.samples()
    tokens = first.by_worker(GENERATION_TOKENS)
    assert sample.generated_tokens_total == sum(tokens.values()) > 0
    assert sample.running == 2 * RUNNING and sample.waiting == 2 * WAITING
    assert sample.kv_usage == pytest.approx(sum(KV_USAGE) / 2)  # averaged, not summed
    assert sorted(first.by_worker(KV_CACHE_USAGE).values()) == list(KV_USAGE)
    assert sample.prefix_hits_total == sum(first.by_worker(PREFIX_CACHE_HITS).values()) > 0
    assert sample.prefix_queries_total == sum(first.by_worker(PREFIX_CACHE_QUERIES).values())
    assert sample.preemptions_total == sum(first.by_worker(PREEMPTIONS).values()) > 0
    assert sample.sleeping is None  # no sleep gauge recorded: read as awake

    later = node.wait(operator.round_after(first.at + GROWTH_SECONDS), PHASE_TIMEOUT, "a scrape")
    grown = later.by_worker(GENERATION_TOKENS)
    assert all(grown[w] > tokens[w] for w in workers), (tokens, grown)
    (then,) = later.samples()
    assert then.generated_tokens_total == sum(grown.values()) > sample.generated_tokens_total
    assert not later.stall().is_finding, later.stall()


def one_stalls(node: RayNode, operator: Operator, workers: list[str]) -> None:
    """B: the second engine stops generating while its gauges still say 4 running; the pod's
    sample grows by the first engine's tokens alone."""
    generating, stalled = workers
    node.phase("B")
    switched = time.time()

    def flat_pair() -> tuple[Round, Round] | None:
        done = operator.complete_round()
        if done is None:
            return None
        counter = done.by_worker(GENERATION_TOKENS)[stalled]
        for earlier in operator.rounds:
            if (
                earlier.complete
                and switched + 1 <= earlier.at <= done.at - 2
                and earlier.by_worker(GENERATION_TOKENS)[stalled] == counter
            ):
                return earlier, done
        return None

    before, after = node.wait(flat_pair, PHASE_TIMEOUT, "one engine's counter to stay flat")
    old, new = before.by_worker(GENERATION_TOKENS), after.by_worker(GENERATION_TOKENS)
    moved = {worker: new[worker] - old[worker] for worker in workers}
    assert moved[generating] > 0 and moved[stalled] == 0, moved
    assert after.by_worker(REQUESTS_RUNNING) == {generating: RUNNING, stalled: RUNNING}
    (was,), (now,) = before.samples(), after.samples()
    assert now.generated_tokens_total - was.generated_tokens_total == moved[generating]
    assert now.running == 2 * RUNNING
    # Detection is per pod (its engines summed): the other engine's tokens keep it generating.
    assert not after.stall().is_finding, after.stall()


def both_stall(node: RayNode, operator: Operator) -> dict[str, float]:
    """C: neither engine generates, both still report requests running and waiting: the pod
    is stalled. Returns the engines' flat token counters."""
    node.phase("C")

    def finding() -> Evaluation | None:
        found = operator.round().stall()
        return found if found.is_finding else None

    stall = node.wait(finding, PHASE_TIMEOUT, "an EngineStalled finding for the pod")
    assert stall.reason == FailureReason.ENGINE_STALLED, stall
    assert stall.evidence["running"] == 2 * RUNNING and stall.evidence["waiting"] == 2 * WAITING
    assert float(stall.evidence["flat_seconds"]) >= 3.0, stall.evidence
    assert POD in stall.message
    return operator.rounds[-1].by_worker(GENERATION_TOKENS)


def none_record(node: RayNode, operator: Operator, flat: dict[str, float]) -> None:
    """D: neither engine records any more (a wedged engine core returns no outputs, so vLLM
    calls no stat logger). Ray keeps their counters on the page but drops every gauge not set
    for two report intervals (ray/_private/telemetry/open_telemetry_metric_recorder.py)."""
    node.phase("D")

    def gauges_gone() -> Round | None:
        done = operator.round()
        return None if any(done.series(name) for name in GAUGE_SIGNALS) else done

    gone = node.wait(gauges_gone, PHASE_TIMEOUT, "the gauges to leave the page")
    assert gone.by_worker(GENERATION_TOKENS) == flat
