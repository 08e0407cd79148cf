"""Operator metrics (prometheus-client) and JSON logs (structlog) with the object on every line."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

RECONCILE_SECONDS = Histogram(
    "rljob_reconcile_duration_seconds",
    "Time spent in one reconcile pass of one RLJob.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RECONCILE_ERRORS = Counter(
    "rljob_reconcile_errors_total", "Reconcile passes that ended in an error, by kind.", ["kind"]
)
API_ERRORS = Counter(
    "rljob_api_errors_total", "Kubernetes API calls that failed, by HTTP status.", ["status"]
)
JOBS_BY_PHASE = Gauge("rljob_jobs", "RLJobs known to this operator, by phase.", ["phase"])
CHECKPOINT_ERRORS = Counter(
    "rljob_checkpoint_store_errors_total", "Checkpoint store calls that failed, by kind.", ["kind"]
)
RESTARTS = Counter(
    "rljob_restarts_total",
    "Restarts the operator carried out, by job, reason, role and action.",
    ["namespace", "job", "reason", "role", "action"],
)
ACTION_LATENCY = Histogram(
    "rljob_action_latency_seconds",
    "From journaling a repair (status.inFlight) to its completion, by action.",
    ["action"],
    buckets=(1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)
SPEC_REJECTIONS = Counter(
    "rljob_spec_rejections_total",
    "RLJob specs the operator could not accept, by reason.",
    ["reason"],
)

GC_SECONDS = Counter(
    "rljob_gc_seconds_total",
    "CPU seconds of the Python cyclic garbage collector, by generation (0, 1, 2); the event loop "
    "waits while it runs.",
    ["generation"],
)

RECONCILE_WAKES = Counter(
    "rljob_reconcile_wakes_total",
    "What asked for a job's next reconcile pass, by cause (wakes before a pass starts share it): "
    "rljob, child, finding, diagnosis, checkpoint, engines, workload, takeover, requeue, resync; "
    "own_write: the watch event of a write whose pass had nothing left to do (no pass).",
    ["cause"],
)

RECONCILE_QUEUE_SECONDS = Histogram(
    "rljob_reconcile_queue_seconds",
    "From the wake that asked for a reconcile pass to the pass getting one of the bounded slots, "
    "by urgency: user (a new or changed spec, a deletion), event, resync.",
    ["urgency"],
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
EVENT_LOOP_LAG = Histogram(
    "rljob_event_loop_lag_seconds",
    "How late a one-second timer of the operator's event loop ran: work that holds the loop "
    "delays every watch event, pass and health round behind it.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)


# Health signals and detectors (rljob.adapters.metrics, rljob.runtime.health_loop). Labels are
# bounded: source is prometheus|direct, signal a fixed quantity name (never a metric name, which
# a custom engine chooses), detector the spec field names, outcome a fixed set.
HEALTH_QUERIES = Counter(
    "rljob_health_queries_total",
    "Queries to health metrics sources (direct scrapes: one per pod page), by outcome.",
    ["source", "signal", "outcome"],
)
HEALTH_QUERY_SECONDS = Histogram(
    "rljob_health_query_duration_seconds",
    "Time one health metrics query or page scrape took.",
    ["source"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
HEALTH_REJECTED = Counter(
    "rljob_health_rejected_total",
    "Series, points or lines from a metrics source that were dropped as garbage, by kind.",
    ["source", "kind"],
)
DETECTOR_EVALUATIONS = Counter(
    "rljob_detector_evaluations_total",
    "Detector evaluations (one per target and evaluation), by outcome.",
    ["detector", "outcome"],
)


@dataclass(frozen=True)
class JobFamily:
    """A per-job gauge family that JOB_SERIES serves: its labels are namespace, job and, when
    it has one, `label`."""

    name: str
    documentation: str
    label: str = ""

    @property
    def labels(self) -> list[str]:
        return ["namespace", "job", self.label] if self.label else ["namespace", "job"]


DETECTOR_VALUE = JobFamily(
    "rljob_detector_value",
    "Worst value per job and detector at its last evaluation: kv_drift the lowest throughput "
    "change against baseline (-0.3 = 30 % down), engine_stall the longest flat-counter seconds, "
    "trainer_stall the heartbeat age in seconds, verifier_latency the highest p99 seconds.",
    "detector",
)
DETECTOR_JUDGED = JobFamily(
    "rljob_detector_targets_judged",
    "Targets (engines, ranks) per job and detector given a verdict, healthy or a finding, at its "
    "last evaluation; the others still learn or wait for data (kv_fragmentation: each engine's "
    "throughput model).",
    "detector",
)
STEP_PHASE_SECONDS = JobFamily(
    "rljob_job_step_phase_seconds",
    "Mean seconds of each trainer step spent in each phase over spec.health.bottleneck.window "
    "(from the SDK's rljob_trainer_phase_seconds_total).",
    "phase",
)
BOTTLENECK = JobFamily(
    "rljob_job_bottleneck",
    "1 for the role bounding the job's trainer step (status.bottleneck.role), 0 for the others.",
    "role",
)
CHECKPOINT_STEP = JobFamily(
    "rljob_checkpoint_step", "Step of the checkpoint the current attempt resumed from."
)
CHECKPOINT_SAVED = JobFamily(
    "rljob_checkpoint_saved_timestamp_seconds",
    "When the newest known checkpoint was saved (age = time() - this).",
)
TRAINER_STEP = JobFamily(
    "rljob_job_trainer_step",
    "The trainer's latest step, as the operator's health rounds read it.",
)
TRAINER_STEP_RATE = JobFamily(
    "rljob_job_trainer_steps_per_second",
    "Trainer steps per second between the operator's last two readings of a new step.",
)
GOODPUT_RATIO = JobFamily(
    "rljob_job_goodput_ratio",
    "Effective training time: status.goodput.ratio, the share of wall-clock since the job's "
    "creation (suspensions aside) that advanced training.",
)
PRODUCTIVE_SECONDS = JobFamily(
    "rljob_job_productive_seconds", "Seconds of trainer time that advanced training."
)
LOST_SECONDS = JobFamily(
    "rljob_job_lost_seconds",
    "Seconds of trainer time lost, by cause: detection, teardown, scheduling, startup, "
    "recomputation (status.goodput.total.lostSeconds).",
    "cause",
)
SUSPENDED_SECONDS = JobFamily(
    "rljob_job_suspended_seconds", "Seconds the job was suspended, by user or by queue.", "by"
)
GOODPUT_FAMILIES = (GOODPUT_RATIO, PRODUCTIVE_SECONDS, LOST_SECONDS, SUSPENDED_SECONDS)
# The health loop's families (rljob.runtime.health_series): a finished job's go, its
# checkpoint's stay until it is deleted.
HEALTH_FAMILIES = (DETECTOR_VALUE, DETECTOR_JUDGED, STEP_PHASE_SECONDS, BOTTLENECK)
JobKey = tuple[str, str]  # (namespace, name)
Slot = tuple[JobFamily, str]  # one series of a job: its family and its last label's value ("")


class JobSeries(Collector):
    """Every per-job gauge as plain floats in one dictionary, turned into families at each
    scrape: a prometheus_client child per series (its lock and value object) took several
    times the room, two dozen series a job. Written on the event loop, read by the metrics
    server's thread from copies; a deleted job's series go with it (`forget`)."""

    FAMILIES = (
        *HEALTH_FAMILIES,
        CHECKPOINT_STEP,
        CHECKPOINT_SAVED,
        TRAINER_STEP,
        TRAINER_STEP_RATE,
        *GOODPUT_FAMILIES,
    )

    def __init__(self) -> None:
        self.values: dict[JobKey, dict[Slot, float]] = {}

    def set(self, key: JobKey, family: JobFamily, value: float, label: str = "") -> None:
        self.values.setdefault(key, {})[family, label] = value

    def forget(self, key: JobKey, families: Iterable[JobFamily] | None = None) -> None:
        """Drops the job's series (only those of `families`, when given)."""
        if families is None:
            self.values.pop(key, None)
            return
        dropped, held = set(families), self.values.get(key, {})
        for slot in [slot for slot in held if slot[0] in dropped]:
            del held[slot]
        if not held:
            self.values.pop(key, None)

    def collect(self) -> Iterator[Metric]:
        families = {
            family: GaugeMetricFamily(family.name, family.documentation, labels=family.labels)
            for family in self.FAMILIES
        }
        for key, held in list(self.values.items()):
            for (family, label), value in list(held.items()):
                families[family].add_metric([*key, label] if family.label else [*key], value)
        yield from families.values()


JOB_SERIES = JobSeries()
REGISTRY.register(JOB_SERIES)


def _kopf_object(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # kopf's per-object loggers put the object reference into `k8s_ref`: lift it to top level.
    record = event.get("_record")
    ref = getattr(record, "k8s_ref", None) if record is not None else None
    if isinstance(ref, dict):
        event.setdefault("namespace", ref.get("namespace"))
        event.setdefault("name", ref.get("name"))
    return event


def configure_logging(level: str = "INFO") -> None:
    """JSON lines on stderr for both structlog and stdlib (kopf) loggers."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, _kopf_object],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Per-event "Handler succeeded" lines and probe access logs would drown the useful ones;
    # botocore at DEBUG logs each request's Authorization header (the access key id).
    for noisy in ("kopf.objects", "aiohttp.access", "botocore", "boto3", "s3transfer", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def serve_metrics(port: int, address: str = "0.0.0.0") -> None:
    """Serves /metrics from a background thread (prometheus-client's own server)."""
    start_http_server(port, addr=address)
