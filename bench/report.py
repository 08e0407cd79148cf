"""bench/RESULTS.md from the measurements: pure rendering, no I/O (unit-tested)."""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.detection import CONFIG as DRIFT
from bench.detection import ScenarioResult, Summary
from bench.procfs import Usage
from bench.recovery import RecoveryResult
from bench.scale import MACHINE, OPERATOR, URGENCIES, SizeResult
from bench.scrape import TARGET_ENDPOINTS_PER_SECOND, ScrapeResult
from bench.stats import growth, percentile, size_at, slope
from bench.writes import allowed_per_minute
from rljob.dev.scrape import HistogramReading
from rljob.health.profiles import TRAINER, VLLM
from rljob.health.profiles.diagnosis import DIAGNOSIS

LATENCY_P50 = 0.5
LATENCY_P99 = 2.0
RSS_MIB = 200.0
CORE_PERCENT = 5.0
RECOVERY_SECONDS = 5.0
# What a bench job's round asks: its engines', its trainer's and the diagnosis' series (no
# verifier), each signal once (the trainer and the diagnosis share the step and generation).
SIGNALS = len(
    {*VLLM.signals().values(), *TRAINER.signals().values(), *DIAGNOSIS.trainer_signals().values()}
)

POLLING_COLUMNS = (
    "RLJobs",
    "pods",
    "intervals",
    "instant queries/interval",
    "range queries (backfill)",
    "operator-counted/interval",
    "signals",
)
SCRAPE_COLUMNS = ("mode", "endpoints", "seconds per round", "endpoints/s", "CPU ms/endpoint")
DETECTION_COLUMNS = (
    "scenario",
    "drop",
    "trace",
    "ours: detected",
    "ours: delay",
    "ours: false restarts",
    "naive: detected",
    "naive: delay",
    "naive: false restarts",
)
VERDICT_COLUMNS = ("RLJobs", "with a verdict", "waited", "writes meanwhile", "by kind")
WRITE_COLUMNS = (
    "RLJobs",
    "window",
    "writes",
    "per minute",
    "allowed per minute",
    "what",
    "status fields changed (probe jobs)",
)
GANG_COLUMNS = (
    "run",
    "crash -> Job failed (kcm)",
    "crash -> delete",
    "teardown",
    "gone -> new Job",
    "operator-attributable",
    "crash -> new Job",
)
HANG_COLUMNS = ("run", "stall timeout", "hang -> delete", "hang -> new Job", "beyond the timeout")


@dataclass
class Results:
    """Everything one run measured; a part that did not run is None or empty."""

    mode: str
    command: str
    sha: str
    machine: str
    started: dt.datetime
    seconds: float
    sizes: tuple[int, ...]
    seeds: int
    scale: list[SizeResult] = field(default_factory=list)
    scrape: list[ScrapeResult] = field(default_factory=list)
    page: tuple[int, int] = (0, 0)
    detection: list[ScenarioResult] = field(default_factory=list)
    recovery: RecoveryResult | None = None
    notes: list[str] = field(default_factory=list)
    analysis: str = ""


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured in this run


# ---------------------------------------------------------------- formatting helpers


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    def cell(value: object) -> str:
        return _number(value) if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    if value == 0 or abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if abs(value) >= 0.01 else f"{value:.4f}"


def _seconds(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f} s"


def _minutes(seconds: Sequence[float]) -> str:
    if not seconds:
        return "-"
    return f"{statistics.median(seconds) / 60:.0f} min (max {max(seconds) / 60:.0f})"


def _mark(met: bool | None) -> str:
    return {True: "met", False: "**missed**", None: "not measured"}[met]


# ---------------------------------------------------------------- verdicts


def _largest(results: Results) -> SizeResult | None:
    return max(results.scale, key=lambda s: s.size) if results.scale else None


def _latency_verdicts(size: SizeResult | None) -> list[Verdict]:
    if size is None:
        return [Verdict("apply -> reconciled p50 <= 0.5 s, p99 <= 2 s", "-", None)]
    p50, p99 = percentile(size.latencies, 50), percentile(size.latencies, 99)
    return [
        Verdict(
            f"apply -> reconciled p50 <= {LATENCY_P50} s ({size.size} jobs)",
            _seconds(p50),
            p50 <= LATENCY_P50,
        ),
        Verdict(
            f"apply -> reconciled p99 <= {LATENCY_P99} s ({size.size} jobs)",
            _seconds(p99),
            p99 <= LATENCY_P99,
        ),
    ]


def _fleet_verdicts(results: Results, size: SizeResult | None) -> list[Verdict]:
    if size is None:
        return []
    worst_writes = max(results.scale, key=lambda s: s.writes.per_minute / allowed(s))
    operator = size.usage.get(OPERATOR)
    queries = max(s.queries.instant / s.intervals for s in results.scale)
    verdicts = [
        Verdict(
            "healthy jobs: writes <= progress refresh (1 per job per 5 min)",
            f"{worst_writes.writes.per_minute:.2f}/min at {worst_writes.size} jobs "
            f"(allowed {allowed(worst_writes):.0f}/min)",
            worst_writes.writes.per_minute <= allowed(worst_writes),
        ),
        Verdict(
            f"one Prometheus query per signal per interval ({SIGNALS} signals)",
            f"{queries:.1f} per interval (most, over all sizes)",
            queries <= SIGNALS + 0.5,
        ),
    ]
    if operator is not None:
        verdicts += [
            Verdict(
                f"operator RSS <= {RSS_MIB:.0f} MiB ({size.size} jobs)",
                f"{operator.rss_mib:.0f} MiB (peak {operator.peak_rss_mib:.0f})"
                f"{_reached(results, lambda s: _operator(s).peak_rss_mib, RSS_MIB)}",
                operator.peak_rss_mib <= RSS_MIB,
            ),
            Verdict(
                f"operator CPU <= {CORE_PERCENT:.0f} % of a core ({size.size} jobs)",
                f"{operator.core_percent:.1f} %"
                f"{_reached(results, lambda s: _operator(s).core_percent, CORE_PERCENT)}",
                operator.core_percent <= CORE_PERCENT,
            ),
        ]
    return verdicts


def _reached(results: Results, figure: Callable[[SizeResult], float], bound: float) -> str:
    """ ", bound reached at ~N jobs" on the line through the smallest and largest size."""
    sizes = [s.size for s in results.scale]
    at = size_at(sizes, [figure(s) for s in results.scale], bound)
    if math.isnan(at):
        return ""
    return "; does not grow" if math.isinf(at) else f"; bound reached at ~{at:.0f} jobs"


def allowed(size: SizeResult) -> float:
    return allowed_per_minute(size.size)


def _scrape_verdict(results: Results) -> Verdict:
    shipped = results.scrape[0] if results.scrape else None
    if shipped is None:
        return Verdict("direct scrape >= 2,000 endpoints per 15 s", "-", None)
    rate = shipped.endpoints_per_second
    return Verdict(
        "direct scrape >= 2,000 endpoints per 15 s (133/s)",
        f"{rate:.0f}/s ({rate * 15:.0f} per 15 s)",
        rate >= TARGET_ENDPOINTS_PER_SECOND,
    )


def _detection_verdicts(results: Results) -> list[Verdict]:
    if not results.detection:
        return [Verdict("detection targets", "-", None)]
    big = [r for r in results.detection if r.scenario.magnitude == 1.5]
    small = [r for r in results.detection if r.scenario.magnitude == 0.5]
    quiet = [r for r in results.detection if r.scenario.victim is None]
    in_time = sum(sum(1 for d in r.ours.delays if d <= 2 * DRIFT.window) for r in big)
    runs = sum(r.ours.runs for r in big)
    small_acted = sum(r.ours.false_restarts for r in small)
    quiet_false = sum(r.ours.false_restarts for r in quiet)
    return [
        Verdict(
            "1.5x threshold acted on within two windows", f"{in_time}/{runs} runs", in_time == runs
        ),
        Verdict("0.5x threshold never acted on", f"{small_acted} restarts", small_acted == 0),
        Verdict(
            "zero false restarts on long noisy traces (sleep, load swings, resets)",
            f"{quiet_false} (naive rule: {sum(r.naive.false_restarts for r in quiet)})",
            quiet_false == 0,
        ),
    ]


def _recovery_verdict(results: Results) -> Verdict:
    gang = results.recovery.gang if results.recovery else ()
    if not gang:
        return Verdict("operator-attributable recovery <= 5 s", "-", None)
    worst = max(g.attributable for g in gang)
    return Verdict(
        f"operator-attributable recovery <= {RECOVERY_SECONDS:.0f} s",
        f"{worst:.2f} s (worst of {len(gang)})",
        worst <= RECOVERY_SECONDS,
    )


def verdicts(results: Results) -> list[Verdict]:
    size = _largest(results)
    return [
        *_latency_verdicts(size),
        *_fleet_verdicts(results, size),
        _scrape_verdict(results),
        *_detection_verdicts(results),
        _recovery_verdict(results),
    ]


# ---------------------------------------------------------------- sections


def _header(results: Results) -> list[str]:
    return [
        "# Benchmark results",
        "",
        "Generated by `bench/` (issue #8); targets from docs/architecture.md section 12.",
        "Figures and ratios, not pass/fail tests: nothing here is asserted.",
        "",
        f"- mode: **{results.mode}**; fleet sizes N = {', '.join(map(str, results.sizes))}; "
        f"detection seeds per scenario: {results.seeds}",
        f"- command: `{results.command}`",
        f"- git SHA: `{results.sha}`",
        f"- machine: {results.machine}",
        f"- run: {results.started:%Y-%m-%d %H:%M} UTC, {results.seconds / 60:.1f} min",
        *(f"- note: {note}" for note in results.notes),
        "",
    ]


def _summary(results: Results) -> list[str]:
    rows = [(v.target, v.measured, _mark(v.met)) for v in verdicts(results)]
    return ["## Targets", "", *table(("target", "measured", "verdict"), rows)]


def _latency(results: Results) -> list[str]:
    rows = [
        (
            s.size,
            len(s.latencies),
            percentile(s.latencies, 50),
            percentile(s.latencies, 99),
            max(s.latencies, default=math.nan),
            sum(1 for x in s.latencies if math.isnan(x)),
        )
        for s in results.scale
    ]
    return [
        "## 1. Reconcile latency: apply -> every child exists and observedGeneration is current",
        "",
        "The size's last jobs are applied one at a time (with the others present) and timed to",
        "the arrival of the watch event that completes them. Seconds.",
        "",
        *table(("RLJobs", "probes", "p50", "p99", "max", "timed out"), rows),
        *_probe_waits(results),
    ]


def _probe_waits(results: Results) -> list[str]:
    """Where a probe's time went inside the operator: a held event loop, or a queue for the
    pass slots (a new job's pass is `user`, a repair's `event`, a resync's `resync`)."""
    rows = [
        (
            s.size,
            f"{w.lag.count:.0f}",
            f"{w.lag.over(0.1):.0f} / {w.lag.over(1):.0f}",
            _upto(w.lag.worst()),
            *(_queue_wait(w.queue[u]) for u in URGENCIES),
        )
        for s in results.scale
        if (w := s.waits) is not None
    ]
    if not rows:
        return []
    return [
        "",
        "The operator while the probes ran: its event loop's lag (a reading a second), and the",
        "wait of a woken reconcile pass for one of the bounded pass slots, by urgency (passes,",
        "mean wait, the largest wait's histogram bucket). Seconds.",
        "",
        *table(
            ("RLJobs", "lag readings", "lag > 0.1 / > 1 s", "worst lag", *URGENCIES),
            rows,
        ),
    ]


def _upto(bound: float) -> str:
    return "-" if math.isnan(bound) else f"<= {bound:g}"


def _queue_wait(wait: HistogramReading) -> str:
    if not wait.count:
        return "none"
    return f"{wait.count:.0f}, {wait.mean():.3f}, {_upto(wait.worst())}"


def _writes(results: Results) -> list[str]:
    rows = [
        (
            s.size,
            f"{s.window:.0f} s",
            s.writes.total,
            s.writes.per_minute,
            allowed(s),
            s.writes.describe(),
            _changes(s.status_changes),
        )
        for s in results.scale
    ]
    one_off = [
        (
            s.size,
            f"{s.verdicts.known}/{s.verdicts.jobs}",
            f"{s.verdicts.seconds:.0f} s",
            s.verdicts.writes.total,
            s.verdicts.writes.describe(),
        )
        for s in results.scale
    ]
    return [
        "## 2. Operator writes with N healthy jobs (audit log, the operator's user)",
        "",
        'The audit log has no bodies; "status fields changed" says what the status updates of',
        "the size's probe jobs changed in the same window (from their watch events).",
        "",
        *table(WRITE_COLUMNS, rows),
        "Before each window the bench waits for every job's first bottleneck verdict (a",
        "one-off status write and BottleneckChanged Event per job), so the window measures the",
        "steady state; the writes while the verdicts arrived, counted apart:",
        "",
        *table(VERDICT_COLUMNS, one_off),
    ]


def _changes(changes: Counter[str]) -> str:
    return ", ".join(f"{fields} x{n}" for fields, n in changes.most_common()) or "none"


def _footprint(results: Results) -> list[str]:
    rows = [
        (s.size, used.rss_mib, used.peak_rss_mib, used.cpu_seconds_per_minute, used.core_percent)
        for s in results.scale
        if (used := s.usage.get(OPERATOR)) is not None
    ]
    names = sorted({n for s in results.scale for n in s.usage if n not in (OPERATOR, MACHINE)})
    plane = [(n, *(_usage_cell(s.usage.get(n)) for s in results.scale)) for n in names]
    plane.append(("all of the bed, operator included", *map(_bed_cell, results.scale)))
    plane.append((MACHINE, *(_usage_cell(s.usage.get(MACHINE)) for s in results.scale)))
    return [
        "## 3. Operator footprint (from /proc/<pid>, the operator process alone)",
        "",
        *table(("RLJobs", "RSS MiB", "peak RSS MiB", "CPU s/min", "% of a core"), rows),
        *_counters(results),
        "Every other process of the bed over the same windows, CPU seconds per minute / RSS MiB",
        "(the whole machine's row is busy CPU of all cores / memory in use: what it shows beyond",
        "the bed is other load on the machine):",
        "",
        *table(("process", *(f"{s.size} jobs" for s in results.scale)), plane),
    ]


def _counters(results: Results) -> list[str]:
    """The operator's garbage collector and reconcile wakes over each size's window."""
    lines = []
    for size in results.scale:
        counters, used = size.counters, size.usage.get(OPERATOR)
        if counters is None or used is None:
            continue
        gc_per_minute = counters.gc_seconds * 60 / size.window
        share = 100 * gc_per_minute / max(used.cpu_seconds_per_minute, 1e-9)
        wakes = ", ".join(f"{c} {n:.0f}" for c, n in counters.wakes.items() if n) or "none"
        lines.append(
            f"- {size.size} jobs: the garbage collector took {gc_per_minute:.2f} CPU s/min "
            f"({share:.0f} % of the operator's); reconcile wakes in the window: {wakes}."
        )
    return ["", *lines, ""] if lines else []


def _usage_cell(used: Usage | None) -> str:
    return "-" if used is None else f"{used.cpu_seconds_per_minute:.1f} / {used.rss_mib:.0f}"


def _bed_cell(size: SizeResult) -> str:
    bed = [used for name, used in size.usage.items() if name != MACHINE]
    cpu = sum(u.cpu_seconds_per_minute for u in bed)
    return f"{cpu:.1f} / {sum(u.rss_mib for u in bed):.0f}"


def _polling(results: Results) -> list[str]:
    rows = [
        (
            s.size,
            s.pods,
            f"{s.intervals:.0f}",
            s.queries.instant / s.intervals,
            f"{s.queries.range:.0f}",
            s.queries.operator / s.intervals,
            SIGNALS,
        )
        for s in results.scale
    ]
    prometheus = [
        "Prometheus source, in the quiet windows (whole health intervals of 30 s): instant",
        "queries Prometheus served per interval, range queries (a new job's backfill) over the",
        "window, and all queries as the operator counts them, per interval.",
        "",
        *table(POLLING_COLUMNS, rows),
    ]
    return ["## 4. Health polling cost", "", *(prometheus if rows else []), *_direct(results)]


def _direct(results: Results) -> list[str]:
    if not results.scrape:
        return []
    size, lines = results.page
    rows = [
        (r.mode, r.endpoints, r.seconds, r.endpoints_per_second, r.cpu_ms_per_endpoint)
        for r in results.scrape
    ]
    return [
        f"Direct scrape (in-process DirectSource against a loopback server, one vLLM page of "
        f"{size / 1024:.0f} KiB / {lines} lines per endpoint, the engine's 8 signals):",
        "",
        *table(SCRAPE_COLUMNS, rows),
    ]


def _summary_cells(summary: Summary) -> tuple[str, str, int]:
    detected = f"{summary.detected}/{summary.runs}"
    return detected, _minutes(summary.delays), summary.false_restarts


def _detection(results: Results) -> list[str]:
    rows = [
        (
            r.scenario.name,
            f"{r.scenario.magnitude:g}x" if r.scenario.victim else "-",
            f"{r.scenario.duration / 3600:.0f} h",
            *_summary_cells(r.ours),
            *_summary_cells(r.naive),
        )
        for r in results.detection
    ]
    return [
        "## 5. Detection quality: KV drift detector vs the naive Prometheus rule",
        "",
        f"Four engines, threshold {DRIFT.threshold:g}, window {DRIFT.window / 60:.0f} min, "
        f"warm-up {DRIFT.warmup / 60:.0f} min, cooldown {DRIFT.cooldown / 60:.0f} min, one "
        "sample per 30 s. Naive rule: `rate(tokens[5m]) < 0.8 * avg_over_time(rate(tokens[5m])"
        "[1h:])` for the window. Delay: from the drop (for slow drift: from the moment the "
        "decline reaches the threshold) to the first restart, median over the runs that "
        "detected. False restarts: restarts of an engine that was not degraded by at least "
        "the threshold, summed over all runs.",
        "",
        *table(DETECTION_COLUMNS, rows),
    ]


def _recovery(results: Results) -> list[str]:
    if results.recovery is None:
        return ["## 6. Recovery time", "", "Not measured in this run.", ""]
    gang = [
        (index + 1, g.job_failed, g.to_delete, g.teardown, g.to_create, g.attributable, g.total)
        for index, g in enumerate(results.recovery.gang)
    ]
    hang = [
        (index + 1, h.stall_timeout, h.to_delete, h.to_create, h.to_create - h.stall_timeout)
        for index, h in enumerate(results.recovery.hang)
    ]
    return [
        "## 6. Recovery time (seconds)",
        "",
        "NCCL watchdog abort of rank 0 (2-node trainer, checkpoints in S3): crash visible -> "
        "old Job delete issued, then pod teardown (not the operator's), then last old pod gone "
        "-> new Job created. The first column is when the Job controller marked the old Job "
        "failed (podFailurePolicy), which the operator's failure detection waits for.",
        "",
        *table(GANG_COLUMNS, gang),
        "Hung trainer (heartbeat stops; trainerStall.timeout below, health interval 1 s, "
        "Prometheus scrape 1 s):",
        "",
        *table(HANG_COLUMNS, hang),
    ]


GROWTH_FIGURES: list[tuple[str, Callable[[SizeResult], float]]] = [
    ("reconcile latency p50 (s)", lambda s: percentile(s.latencies, 50)),
    ("reconcile latency p99 (s)", lambda s: percentile(s.latencies, 99)),
    ("operator writes per minute", lambda s: s.writes.per_minute),
    ("operator RSS (MiB)", lambda s: _operator(s).rss_mib),
    ("operator CPU (s/min)", lambda s: _operator(s).cpu_seconds_per_minute),
    ("Prometheus queries per interval", lambda s: s.queries.instant / s.intervals),
    ("kube-apiserver CPU (s/min)", lambda s: _cpu(s, "kube-apiserver")),
    ("time to fill and be Ready (s)", lambda s: s.fill_seconds),
]


def _operator(size: SizeResult) -> Usage:
    return size.usage.get(OPERATOR) or Usage(math.nan, math.nan, math.nan)


def _cpu(size: SizeResult, name: str) -> float:
    used = size.usage.get(name)
    return used.cpu_seconds_per_minute if used is not None else math.nan


# The figures whose cost per job the CI smoke prints, so the run that adds some shows it.
PER_JOB_FIGURES = ("operator RSS (MiB)", "operator CPU (s/min)", "operator writes per minute")


def per_job_slopes(sizes: Sequence[SizeResult]) -> list[str]:
    """One line per PER_JOB_FIGURES figure: its change per added job between the smallest and
    the largest size (none with one size)."""
    if len({s.size for s in sizes}) < 2:
        return []
    ns = [s.size for s in sizes]
    lines = []
    for name, figure in GROWTH_FIGURES:
        if name in PER_JOB_FIGURES:
            values = [figure(s) for s in sizes]
            lines.append(
                f"per added job, N={ns[0]}..{ns[-1]}: {name} {slope(ns, values):+.4f} "
                f"({' -> '.join(f'{v:.2f}' for v in values)})"
            )
    return lines


def _growth(results: Results) -> list[str]:
    sizes = [s.size for s in results.scale]
    rows = []
    for name, figure in GROWTH_FIGURES:
        values = [figure(s) for s in results.scale]
        rows.append((name, *values, slope(sizes, values), growth(sizes, values)))
    return [
        "## 7. Growth with the number of jobs",
        "",
        "Slope of log(figure) over log(N) from the smallest to the largest size: flat (within "
        "25 %), sublinear (< 0.75), linear (<= 1.25), worse than linear.",
        "",
        *table(("figure", *(f"N={n}" for n in sizes), "per added job", "growth"), rows),
    ]


def render(results: Results) -> str:
    sections = [
        _header(results),
        _summary(results),
        _latency(results) if results.scale else [],
        _writes(results) if results.scale else [],
        _footprint(results) if results.scale else [],
        _polling(results),
        _detection(results) if results.detection else [],
        _recovery(results),
        _growth(results) if results.scale else [],
        ["## Analysis", "", results.analysis.strip(), ""] if results.analysis.strip() else [],
    ]
    return "\n".join(line for section in sections for line in section).rstrip() + "\n"
