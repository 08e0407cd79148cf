"""Per fleet size: reconcile latency of new RLJobs, then a quiet window over the healthy fleet
(operator writes from the audit log, per-process CPU and memory from /proc, health queries).

The fleet grows from one size to the next; at each size the last `probes` jobs are applied one
at a time and timed from the apply to the moment every child exists and
status.observedGeneration is current (as watch events arrive), so each probe is measured with
the size's other jobs already present.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bench.bed import (
    FLEET_HEALTH_INTERVAL,
    FLEET_NAMESPACE,
    PROBE_NAMESPACE,
    BenchBed,
    apply_job,
    example,
    pod_count,
    ready_jobs,
    rljob_path,
)
from bench.procfs import ProcSample, Usage, machine_sample, sample, usage
from bench.watch import Event, Watcher
from bench.writes import WriteCount, count_writes
from rljob.api import RoleName
from rljob.api.durations import parse_duration
from rljob.dev.controlplane import wait_until
from rljob.dev.kubeapi import KubeApi
from rljob.dev.scrape import HistogramReading, histogram_reading, metric_values, metric_values_by
from rljob.reconcile.names import (
    role_child_name,
    rollout_headless_service_name,
    trainer_job_name,
    trainer_service_name,
)
from rljob.vocabulary.enums import BottleneckRole

Runner = Callable[[Coroutine[Any, Any, Any]], Any]
PROBE_TIMEOUT = 120.0
HEALTH_INTERVAL = parse_duration(FLEET_HEALTH_INTERVAL)
SAMPLE_EVERY = 5.0
OPERATOR = "operator"
MACHINE = "whole machine (all processes)"


@dataclass(frozen=True)
class ScaleSettings:
    sizes: tuple[int, ...]
    probes: int  # timed applies per size (the size's last jobs)
    window: float  # seconds of the quiet window per size (rounded to whole health intervals)
    settle: float  # seconds between the fleet being Ready and the window
    # Longest wait for every job's first bottleneck verdict before the window (0: none): that
    # one-off write and Event is the start-up's, not the steady state's.
    verdict_timeout: float = 0.0


@dataclass(frozen=True)
class SizeResult:
    size: int
    pods: int
    latencies: tuple[float, ...]  # seconds; NaN for a probe that timed out
    writes: WriteCount
    status_changes: Counter[str]  # of the probe jobs in the window, by changed status fields
    usage: dict[str, Usage]  # by process name; OPERATOR is the operator
    queries: QueryCounts  # over the window
    window: float  # seconds, a whole number of health intervals
    fill_seconds: float
    verdicts: Verdicts
    counters: OperatorCounters | None = None  # over the window
    waits: ProbeWaits | None = None  # while the probes ran

    @property
    def intervals(self) -> float:
        return self.window / HEALTH_INTERVAL


def fleet_job(name: str, body: dict[str, Any], prometheus_url: str) -> dict[str, Any]:
    """One engine and a one-node trainer: five children (three Services, a Deployment, the
    trainer's Job) and two pods, health from the fleet's Prometheus."""
    spec = {
        **body["spec"],
        "roles": {
            "rollout": {**body["spec"]["roles"]["rollout"], "replicas": 1},
            "trainer": body["spec"]["roles"]["trainer"],
        },
        "health": {
            "source": {"prometheus": {"url": prometheus_url}},
            "interval": FLEET_HEALTH_INTERVAL,
        },
    }
    return {**body, "metadata": {"name": name}, "spec": spec}


def expected_children(name: str) -> list[tuple[str, str]]:
    return [
        ("Service", role_child_name(name, RoleName.ROLLOUT)),
        ("Service", rollout_headless_service_name(name)),
        ("Service", trainer_service_name(name)),
        ("Deployment", role_child_name(name, RoleName.ROLLOUT)),
        ("Job", trainer_job_name(name, 1)),
    ]


def _present(event: Event) -> bool:
    return event.type != "DELETED"


def _current(event: Event) -> bool:
    meta, status = event.body.get("metadata", {}), event.body.get("status") or {}
    return int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 1)


def reconciled_at(watcher: Watcher, name: str) -> float | None:
    """When the last of the job's children appeared or its status became current, whichever
    came later; None while either is missing."""
    times = [watcher.first(kind, child, _present) for kind, child in expected_children(name)]
    times.append(watcher.first("RLJob", name, _current))
    if any(t is None for t in times):
        return None
    return max(t for t in times if t is not None)


class Fleet:
    """The jobs applied so far, in the fleet and probe namespaces."""

    def __init__(self, bed: BenchBed, settings: ScaleSettings) -> None:
        assert bed.fleet is not None
        self.bed = bed
        self.settings = settings
        self.template = example(bed.repo)
        self.prometheus_url = bed.fleet.prometheus.url
        self.fleet = 0
        self.probes = 0

    def job(self, name: str) -> dict[str, Any]:
        return fleet_job(name, self.template, self.prometheus_url)

    def fill(self, count: int) -> None:
        api = self.bed.api
        while self.fleet < count:
            self.fleet += 1
            apply_job(api, FLEET_NAMESPACE, self.job(f"fleet-{self.fleet:04d}"))

    def wait_ready(self) -> None:
        api = self.bed.api

        def all_ready() -> bool:
            return (
                ready_jobs(api, FLEET_NAMESPACE) >= self.fleet
                and ready_jobs(api, PROBE_NAMESPACE) >= self.probes
            )

        total = self.fleet + self.probes
        wait_until(all_ready, 120 + 2.0 * total, f"{total} RLJobs to be Ready", interval=3.0)

    async def probe(self, watcher: Watcher) -> float:
        self.probes += 1
        name = f"probe-{self.probes:04d}"
        started = time.time()
        await asyncio.to_thread(apply_job, self.bed.api, PROBE_NAMESPACE, self.job(name))
        deadline = time.monotonic() + PROBE_TIMEOUT
        while time.monotonic() < deadline:
            done = reconciled_at(watcher, name)
            if done is not None:
                return done - started
            await asyncio.sleep(0.01)
        return math.nan


@dataclass
class _Window:
    """Readings at the start of a quiet window, and peaks while it runs."""

    pids: dict[str, int]
    started: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    first: dict[str, ProcSample] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)

    def observe(self) -> dict[str, ProcSample]:
        readings = {name: s for name, pid in self.pids.items() if (s := sample(pid)) is not None}
        readings[MACHINE] = machine_sample()
        for name, reading in readings.items():
            self.first.setdefault(name, reading)
            self.peaks[name] = max(self.peaks.get(name, 0.0), reading.rss_mib)
        return readings

    def usage(self, last: dict[str, ProcSample]) -> dict[str, Usage]:
        return {
            name: usage(self.first[name], reading, self.peaks[name])
            for name, reading in last.items()
            if name in self.first
        }


@dataclass(frozen=True)
class QueryCounts:
    """Health queries: as the operator counts them (instant and range), and as Prometheus
    served them by endpoint."""

    operator: float
    instant: float
    range: float

    def __sub__(self, other: QueryCounts) -> QueryCounts:
        return QueryCounts(
            self.operator - other.operator, self.instant - other.instant, self.range - other.range
        )


@dataclass(frozen=True)
class OperatorCounters:
    """The operator's own counters: CPU seconds of its garbage collector, and what woke its
    reconcile passes, by cause."""

    gc_seconds: float
    wakes: dict[str, float]

    def __sub__(self, other: OperatorCounters) -> OperatorCounters:
        wakes = {cause: n - other.wakes.get(cause, 0.0) for cause, n in self.wakes.items()}
        return OperatorCounters(self.gc_seconds - other.gc_seconds, wakes)


def read_counters(bed: BenchBed) -> OperatorCounters:
    assert bed.operator is not None
    url = bed.operator.metrics_url
    gc_seconds = sum(metric_values(url, "rljob_gc_seconds_total"))
    wakes = metric_values_by(url, "rljob_reconcile_wakes_total", "cause")
    return OperatorCounters(gc_seconds, wakes)


URGENCIES = ("user", "event", "resync")  # rljob.runtime.pass_slots.Urgency, lower-cased


@dataclass(frozen=True)
class ProbeWaits:
    """What the operator's work waited on: its event loop's lag (a reading a second) and, by
    urgency, the wait of a woken pass for one of the bounded pass slots."""

    lag: HistogramReading
    queue: dict[str, HistogramReading]

    def __sub__(self, other: ProbeWaits) -> ProbeWaits:
        queue = {u: wait - other.queue[u] for u, wait in self.queue.items()}
        return ProbeWaits(self.lag - other.lag, queue)


def read_waits(bed: BenchBed) -> ProbeWaits:
    assert bed.operator is not None
    url = bed.operator.metrics_url
    queue = "rljob_reconcile_queue_seconds"
    return ProbeWaits(
        histogram_reading(url, "rljob_event_loop_lag_seconds"),
        {u: histogram_reading(url, queue, f'urgency="{u}"') for u in URGENCIES},
    )


def read_queries(bed: BenchBed) -> QueryCounts:
    assert bed.operator is not None and bed.fleet is not None
    prometheus = bed.fleet.prometheus.url + "/metrics"

    def served(handler: str) -> float:
        matcher = f'handler="/api/v1/{handler}"'
        return sum(metric_values(prometheus, "prometheus_http_requests_total", matcher))

    operator = metric_values(
        bed.operator.metrics_url, "rljob_health_queries_total", 'source="prometheus"'
    )
    return QueryCounts(sum(operator), served("query"), served("query_range"))


@dataclass(frozen=True)
class Verdicts:
    """The jobs' first bottleneck verdicts, awaited between Ready and the quiet window: how
    many jobs had one, how long that took, and the operator's writes meanwhile (one-off)."""

    known: int
    jobs: int
    seconds: float
    writes: WriteCount


def known_verdicts(api: KubeApi) -> tuple[int, int]:
    """(jobs whose status.bottleneck names a role other than Unknown, jobs) of both namespaces."""
    jobs = [
        j for ns in (FLEET_NAMESPACE, PROBE_NAMESPACE) for j in api.get(rljob_path(ns))["items"]
    ]
    roles = [((j.get("status") or {}).get("bottleneck") or {}).get("role") for j in jobs]
    return sum(1 for role in roles if role not in (None, BottleneckRole.UNKNOWN.value)), len(jobs)


def await_verdicts(bed: BenchBed, timeout: float) -> Verdicts:
    """Waits (at most `timeout`) for every job's first verdict; counts the writes meanwhile."""
    assert bed.operator is not None
    started, clock = dt.datetime.now(dt.UTC), time.monotonic()
    known, jobs = known_verdicts(bed.api)
    while known < jobs and time.monotonic() - clock < timeout:
        time.sleep(min(10.0, timeout))
        known, jobs = known_verdicts(bed.api)
    ended = dt.datetime.now(dt.UTC)
    writes = count_writes(bed.all_writes(), bed.operator.user, started, ended)
    return Verdicts(known, jobs, time.monotonic() - clock, writes)


def _await_mid_interval() -> None:
    """Sleeps until half-way between two health rounds (they run on a grid of the interval in
    unix time), so a window of whole intervals holds exactly that many rounds."""
    time.sleep((HEALTH_INTERVAL / 2 - time.time()) % HEALTH_INTERVAL)


@dataclass(frozen=True)
class Quiet:
    """What a quiet window measured, and when it ran."""

    writes: WriteCount
    usage: dict[str, Usage]
    queries: QueryCounts
    counters: OperatorCounters
    started: dt.datetime
    ended: dt.datetime


def quiet_window(bed: BenchBed, seconds: float) -> Quiet:
    assert bed.operator is not None
    _await_mid_interval()
    bed.restart_profile()  # a profiled operator: the largest size's window is what is kept
    window = _Window({OPERATOR: bed.operator.process.pid, **bed.processes()})
    before, counted = read_queries(bed), read_counters(bed)
    window.observe()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(SAMPLE_EVERY, max(0.0, deadline - time.monotonic())))
        last = window.observe()
    queries, counters = read_queries(bed) - before, read_counters(bed) - counted
    ended = dt.datetime.now(dt.UTC)
    writes = count_writes(bed.all_writes(), bed.operator.user, window.started, ended)
    return Quiet(writes, window.usage(last), queries, counters, window.started, ended)


def status_changes(watcher: Watcher, since: dt.datetime, until: dt.datetime) -> Counter[str]:
    """The probe jobs' status updates that arrived in [since, until), by the top-level status
    fields each one changed (e.g. "policyGeneration+progress"): what the writes were for."""
    changes: Counter[str] = Counter()
    for (kind, _), events in watcher.events.items():
        if kind != "RLJob":
            continue
        for before, after in itertools.pairwise(events):
            if since.timestamp() <= after.at < until.timestamp():
                old, new = before.body.get("status") or {}, after.body.get("status") or {}
                changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
                changes.update(["+".join(changed)] if changed else [])
    return changes


async def _probe_all(fleet: Fleet, watcher: Watcher, count: int) -> tuple[float, ...]:
    latencies = []
    for _ in range(count):
        latencies.append(await fleet.probe(watcher))
        await asyncio.sleep(0.2)  # one at a time: latency, not throughput
    return tuple(latencies)


def measure_size(
    fleet: Fleet, watcher: Watcher, size: int, run: Runner, log: Callable[[str], None]
) -> SizeResult:
    """`run(coroutine)` runs a coroutine on the loop the watcher lives on."""
    settings = fleet.settings
    started = time.monotonic()
    fleet.fill(max(fleet.fleet, size - settings.probes - fleet.probes))
    fleet.wait_ready()
    fill_seconds = time.monotonic() - started
    log(f"  {fleet.fleet + fleet.probes} jobs Ready after {fill_seconds:.0f}s; probing")
    probes = size - fleet.fleet - fleet.probes
    waited = read_waits(fleet.bed)
    latencies = run(_probe_all(fleet, watcher, probes))
    waits = read_waits(fleet.bed) - waited
    fleet.wait_ready()
    time.sleep(settings.settle)
    verdicts = await_verdicts(fleet.bed, settings.verdict_timeout)
    log(f"  {verdicts.known}/{verdicts.jobs} first verdicts after {verdicts.seconds:.0f}s")
    window = HEALTH_INTERVAL * max(1, round(settings.window / HEALTH_INTERVAL))
    log(f"  quiet window of {window:.0f}s")
    quiet = quiet_window(fleet.bed, window)
    return SizeResult(
        size=size,
        pods=pod_count(fleet.bed.api, FLEET_NAMESPACE, PROBE_NAMESPACE),
        latencies=latencies,
        writes=quiet.writes,
        status_changes=status_changes(watcher, quiet.started, quiet.ended),
        usage=quiet.usage,
        queries=quiet.queries,
        window=window,
        fill_seconds=fill_seconds,
        verdicts=verdicts,
        counters=quiet.counters,
        waits=waits,
    )
