"""Engine causes judged on vLLM's own core: every engine detector replayed on the real-core traces
(bench/vllm_core, bench/traces/vllm) and on the operating-point simulator's no-fault shifts.

    .venv/bin/python -m bench.engine_causes --output bench/OPERATING-POINT.md

Pure: no bed, no cluster. A trace's page is read as the operator reads it: its rows become
Prometheus series scraped every 15 s (three scrape phases, 0, 5 and 10 s, each a replicate),
and every 30 s (the default interval) the health loop's round feeds the samples it would get
(rljob.health.profiles.engine_samples on the vLLM profile, thinned as the monitor thins them)
to every detector of an engine group, default configurations from `Health()`; today's drift
detectors run at a 5-minute window and 3-minute warm-up (their 30-minute default is longer than
a trace's fault). A finding restarts the engine for that detector (note_restart: its evidence
starts over) but the trace does not heal, so only a detector's first finding after the onset
detects; a finding on a no-fault trace, or before the onset, is a false restart, one per finding.
Recall counts detections within two windows (2 x 5 min, the stall timeout and the prefix window)
of the onset; the delay is from the onset. The simulator's no-fault scenarios
(bench/operating_point.py, rljob.dev.engine_physics) run four engines each, sampled every 30 s.

Host memory (`memory_growth`) is simulated everywhere: the real-core traces' memory column is
bench/vllm_core's HostMemory, and the simulator's engines read rljob.dev.host_memory's model as
their pod's working set. A 20-minute trace is shorter than the detector's warm-up and its
first bucket, so its EngineMemoryGrowth decision rests on the simulator: four engines, one of
them leaking 1, 2 or 4 GiB/h from hour 2 (sync RL sleeping at level 1 between batches, and
async RL), plus two no-fault memory shapes (the pinned weight copies a wake after hour 3 keeps,
vllm #16663; a vLLM without the sleep gauge, its asleep readings read as awake). Its recall
counts a detection within the time the leak takes to reach the threshold (max(25 % of the
baseline, 2 GiB) at its rate) plus an hour (the warm-up's bucket and the tolerance's lag).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from bench.operating_point import MIX
from bench.operating_point import scenarios as simulated_scenarios
from rljob.api.spec import Health
from rljob.dev.engine_physics import (
    DEFAULT_HARDWARE,
    Driver,
    MemoryGrowth,
    PhysicalEngine,
    PhysicalProfile,
)
from rljob.dev.host_memory import GIB, HostMemory
from rljob.health import DriftConfig, EngineStallConfig, EngineStallDetector, KVDriftDetector
from rljob.health.causes import (
    KVLeakConfig,
    KVLeakDetector,
    MemoryGrowthConfig,
    MemoryGrowthDetector,
    PrefixCollapseConfig,
    PrefixCollapseDetector,
)
from rljob.health.drift.point_detector import FragmentationDetector
from rljob.health.evaluation import (
    ENGINE_STALL,
    KV_DRIFT,
    KV_FRAGMENTATION,
    KV_LEAK,
    MEMORY_GROWTH,
    PREFIX_COLLAPSE,
    Evaluation,
)
from rljob.health.profiles import engine_samples
from rljob.health.profiles.signals import MEMORY_WORKING_SET, Series
from rljob.health.profiles.workloads import VLLM
from rljob.health.samples import MIN_SPACING_INTERVALS, EngineSample
from rljob.reconcile.policy import Failure
from rljob.reconcile.policy.rules import match_rule
from rljob.vocabulary.enums import FailureReason, RoleName

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO / "bench" / "traces" / "vllm"
# More seeds, shorter: python -m bench vllm-traces --out bench/traces/vllm/seeds/<seed> ...
SEED_TRACES = TRACES / "seeds"
MINUTE, HOUR = 60.0, 3600.0
HEALTH = Health()
INTERVAL = 30.0
SCRAPE = 15.0
PHASES = (0.0, 5.0, 10.0)
WINDOW = 5 * MINUTE
STALENESS = 15.0
POD = "rollout-0"
SHORT_DRIFT = DriftConfig(window=WINDOW, warmup=3 * MINUTE, interval=INTERVAL)
DETECTORS = (ENGINE_STALL, KV_LEAK, PREFIX_COLLAPSE, MEMORY_GROWTH, KV_DRIFT, KV_FRAGMENTATION)
NEW_CAUSES = (KV_LEAK, PREFIX_COLLAPSE, ENGINE_STALL, MEMORY_GROWTH)
# Which detector a fault is for, and the cause it should name (the stall's evidence `cause`).
MEMORY_FAULT = "memory-growth"
EXPECTED = {
    "leak": (KV_LEAK, "KVCacheLeak"),
    "prefix-collapse": (PREFIX_COLLAPSE, "PrefixCacheCollapse"),
    "frozen": (ENGINE_STALL, "page_frozen"),
    MEMORY_FAULT: (MEMORY_GROWTH, "EngineMemoryGrowth"),
}
# Causes decided on the simulator's fault rows only: host memory is simulated everywhere, and a
# real-core trace is shorter than the detector's warm-up.
SIMULATED_ONLY = frozenset({MEMORY_FAULT})
# The real-core traces' simulated columns, read as the signal they stand for.
SIMULATED_COLUMNS = {MEMORY_WORKING_SET: "sim:container_memory_working_set_bytes"}
MEMORY = MemoryGrowthConfig.from_health(HEALTH)
LEAK_RATES = (1.0, 2.0, 4.0)  # GiB/h
LEAK_ONSET = 2 * HOUR
VICTIM = "rollout-3"
# The real-core scenarios in the table's order: the no-fault matrix first.
ORDER = (
    "rl",
    "rl-no-reset",
    "weight-sync-inflight",
    "sleep-wake",
    "load-shift",
    "leak",
    "prefix-collapse",
    "frozen",
    "memory-growth",
)
MARKER = "## Engine causes on vLLM's own core"
END_MARKER = "<!-- end of engine causes -->"


class Detector(Protocol):
    def observe(self, target: str, sample: EngineSample) -> None: ...

    def note_restart(self, target: str, at: float) -> None: ...

    def evaluate(self, now: float) -> list[Evaluation]: ...


def detectors(names: Sequence[str] = DETECTORS) -> dict[str, Detector]:
    """Fresh detectors, as an engine group makes them from `Health()` (drift shortened)."""
    made: dict[str, Callable[[], Detector]] = {
        ENGINE_STALL: lambda: EngineStallDetector(EngineStallConfig.from_health(HEALTH)),
        KV_LEAK: lambda: KVLeakDetector(KVLeakConfig.from_health(HEALTH)),
        PREFIX_COLLAPSE: lambda: PrefixCollapseDetector(PrefixCollapseConfig.from_health(HEALTH)),
        MEMORY_GROWTH: lambda: MemoryGrowthDetector(MEMORY),
        KV_DRIFT: lambda: KVDriftDetector(SHORT_DRIFT),
        KV_FRAGMENTATION: lambda: FragmentationDetector(SHORT_DRIFT),
    }
    return {name: made[name]() for name in names}


# ---------------------------------------------------------------- real-core traces


@dataclass(frozen=True)
class Trace:
    scenario: str
    seed: int
    seconds: float
    onset: float | None
    fault: str | None
    rows: tuple[dict[str, Any], ...]

    @property
    def no_fault(self) -> bool:
        return self.fault is None


def load(path: Path) -> Trace:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        header, *rows = (json.loads(line) for line in lines)
    scenario = header["scenario"]
    return Trace(
        scenario=scenario["name"],
        seed=int(header["seed"]),
        seconds=float(header["seconds"]),
        onset=header.get("onset_seconds"),
        fault=scenario.get("fault"),
        rows=tuple(rows),
    )


def stored_traces() -> list[Trace]:
    """The stored traces: seed 0 in bench/traces/vllm, more seeds under its seeds/ folder."""
    paths = sorted(TRACES.glob("*.jsonl.gz")) + sorted(SEED_TRACES.glob("*/*.jsonl.gz"))
    return [load(path) for path in paths]


def _row_key(metric: str, matchers: tuple[tuple[str, str], ...]) -> str:
    if not matchers:
        return metric
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in matchers) + "}"


def page_series(trace: Trace, phase: float, until: float) -> dict[str, list[Series]]:
    """The page's series by signal name as Prometheus scraped them every SCRAPE seconds from
    `phase`, up to `until`."""
    rows = [
        r for r in trace.rows if r["t"] <= until and math.isclose((r["t"] - phase) % SCRAPE, 0.0)
    ]
    series: dict[str, list[Series]] = {}
    for name, signal in VLLM.signals().items():
        key = SIMULATED_COLUMNS.get(name, _row_key(signal.metric, signal.matchers))
        points = tuple((float(r["t"]), float(r[key])) for r in rows if key in r)
        if points:
            series[name] = [Series(signal.matchers, points)]
    return series


@dataclass
class Outcome:
    """One detector on one replicate: when it first found the fault after the onset (and what it
    named), and its false restarts."""

    found_at: float | None = None
    named: str = ""
    false_restarts: int = 0
    judged: int = 0  # evaluations with a verdict (healthy or a finding)


def _named(evaluation: Evaluation) -> str:
    cause = evaluation.evidence.get("cause")
    if evaluation.detector == ENGINE_STALL and isinstance(cause, str):
        return cause
    return str(evaluation.reason) if evaluation.reason else ""


def _judge(
    outcome: Outcome,
    evaluation: Evaluation,
    onset: float | None,
    now: float,
    victims: Collection[str] | None = None,
) -> None:
    """A finding after the onset on a victim (None: every target is) detects; any other is a
    false restart."""
    victim = victims is None or evaluation.target in victims
    if onset is not None and now >= onset and victim:
        if outcome.found_at is None:
            outcome.found_at, outcome.named = now, _named(evaluation)
        return
    outcome.false_restarts += 1


def _round(
    found: dict[str, Detector],
    outcomes: dict[str, Outcome],
    onset: float | None,
    now: float,
    victims: Collection[str] | None = None,
) -> None:
    for name, detector in found.items():
        for evaluation in detector.evaluate(now):
            outcomes[name].judged += evaluation.outcome != "insufficient_data"
            if evaluation.is_finding:
                _judge(outcomes[name], evaluation, onset, now, victims)
                detector.note_restart(evaluation.target, now)


def replay(trace: Trace, phase: float, names: Sequence[str] = DETECTORS) -> dict[str, Outcome]:
    """One trace at one scrape phase through fresh detectors, a health round every INTERVAL."""
    found = detectors(names)
    outcomes = {name: Outcome() for name in found}
    fed = -math.inf
    now = phase + INTERVAL
    while now <= trace.seconds:
        series = page_series(trace, phase, now)
        samples = engine_samples(
            VLLM, series, STALENESS, after=fed, min_spacing=INTERVAL * MIN_SPACING_INTERVALS
        )
        for sample in samples:
            for detector in found.values():
                detector.observe(POD, sample)
        if samples:
            fed = samples[-1].t
        _round(found, outcomes, trace.onset, now)
        now += INTERVAL
    return outcomes


# ---------------------------------------------------------------- the simulator's shifts


def simulated(hours: float, seeds: int) -> Iterator[tuple[str, list[dict[str, Outcome]]]]:
    """The operating-point matrix's no-fault scenarios, and the no-fault memory shapes, through
    the stall and cause detectors."""
    for kind in ("sync", "async"):
        for scenario in simulated_scenarios(kind):
            if scenario.victims:
                continue
            runs = [_simulate(scenario.profiles, seed, hours * HOUR) for seed in range(seeds)]
            yield f"{kind} {scenario.name}", runs
    for name, profiles, unknown_sleep in memory_shapes():
        runs = [
            _simulate(profiles, seed, hours * HOUR, unknown_sleep=unknown_sleep)
            for seed in range(seeds)
        ]
        yield name, runs


def physical_profile(kind: str, index: int) -> PhysicalProfile:
    """bench.operating_point's engine: its mix, its driver started `index` x 37 s late."""
    driver = Driver(kind="async" if kind == "async" else "sync", offset=index * 37.0)
    return PhysicalProfile(hardware=DEFAULT_HARDWARE, mix=MIX, driver=driver)


def memory_shapes() -> list[tuple[str, dict[str, PhysicalProfile], bool]]:
    """No-fault host memory the detector must not take for a leak: sync RL whose wake after
    hour 3 leaves the pinned weight copies in PyTorch's host cache for good (vllm #16663), and
    sync RL on a vLLM without the sleep gauge (before 0.11.1), whose asleep readings, the
    weights in host memory, read as awake."""
    fleet = {f"rollout-{i}": physical_profile("sync", i) for i in range(4)}
    kept = {name: replace(p, memory_pinned_from=3 * HOUR) for name, p in fleet.items()}
    return [
        ("sync, a wake keeps the pinned weights (3 h)", kept, False),
        ("sync without a sleep gauge", fleet, True),
    ]


def _simulate(
    profiles: dict[str, Any],
    seed: int,
    duration: float,
    *,
    onset: float | None = None,
    victims: Collection[str] | None = None,
    unknown_sleep: bool = False,
) -> dict[str, Outcome]:
    engines = {name: PhysicalEngine(p, seed=f"{seed}:{name}") for name, p in profiles.items()}
    found = detectors(NEW_CAUSES)
    outcomes = {name: Outcome() for name in found}
    for index in range(1, int(duration // INTERVAL) + 1):
        now = index * INTERVAL
        for name, engine in engines.items():
            sample = engine.sample(now)
            if sample is not None and unknown_sleep:
                sample = replace(sample, sleeping=None)
            if sample is not None:
                for detector in found.values():
                    detector.observe(name, sample)
        _round(found, outcomes, onset, now, victims)
    return outcomes


def leak_deadline(gib_per_hour: float) -> float:
    """From the onset, when a leak of `gib_per_hour` must have been found: the time it takes to
    reach the threshold on the simulated 40 GiB baseline, plus an hour."""
    threshold = MEMORY.threshold(HostMemory().base_bytes) / GIB
    return threshold / gib_per_hour * HOUR + HOUR


def memory_rows(seeds: int) -> list[Row]:
    """One engine of four leaking host memory from LEAK_ONSET, at each rate of LEAK_RATES, in
    sync and async RL: its detection, and the false restarts of all four."""
    rows = []
    for kind in ("sync", "async"):
        for rate in LEAK_RATES:
            started = time.monotonic()
            fleet = {f"rollout-{i}": physical_profile(kind, i) for i in range(4)}
            fleet[VICTIM] = replace(
                fleet[VICTIM], memory_growth=MemoryGrowth(start=LEAK_ONSET, gib_per_hour=rate)
            )
            deadline = leak_deadline(rate)
            duration = LEAK_ONSET + deadline + 2 * HOUR
            runs = [
                _simulate(fleet, seed, duration, onset=LEAK_ONSET, victims=(VICTIM,))
                for seed in range(seeds)
            ]
            cells = {
                d: cell([run[d] for run in runs], LEAK_ONSET, True, deadline=deadline)
                for d in NEW_CAUSES
            }
            name = f"{kind}, 1 of 4 engines leaks {rate:g} GiB/h"
            replicates = f"seeds 0..{seeds - 1}, {duration / HOUR:.0f} h"
            rows.append(Row(name, "simulator", replicates, MEMORY_FAULT, cells))
            took = time.monotonic() - started
            print(f"  {name}: {_cells_text(cells)} ({took:.1f} s)", flush=True)
    return rows


# ---------------------------------------------------------------- the matrix


@dataclass
class Cell:
    """One detector on one scenario over its replicates; a detection counts within `deadline`
    of the onset."""

    replicates: int
    fault: bool
    delays: list[float] = field(default_factory=list)
    named: list[str] = field(default_factory=list)
    false_restarts: int = 0
    judged: int = 0
    deadline: float = 2 * WINDOW

    @property
    def in_time(self) -> int:
        return sum(1 for delay in self.delays if delay <= self.deadline)

    @property
    def recall(self) -> float | None:
        return self.in_time / self.replicates if self.fault and self.replicates else None

    def text(self) -> str:
        if not self.judged:
            return "not judged"
        recall = "-" if self.recall is None else f"{self.recall:.0%}"
        delay = "-" if not self.delays else _duration(statistics.median(self.delays))
        names = sorted(set(self.named))
        said = f" ({', '.join(names)})" if names and self.fault else ""
        return f"{recall} / {delay} / {self.false_restarts}{said}"


def _duration(seconds: float) -> str:
    return f"{seconds / HOUR:.1f} h" if seconds >= 2 * HOUR else f"{seconds / MINUTE:.1f} min"


def cell(
    outcomes: list[Outcome], onset: float | None, fault: bool, deadline: float = 2 * WINDOW
) -> Cell:
    result = Cell(replicates=len(outcomes), fault=fault, deadline=deadline)
    for outcome in outcomes:
        result.false_restarts += outcome.false_restarts
        result.judged += outcome.judged
        if outcome.found_at is not None and onset is not None:
            result.delays.append(outcome.found_at - onset)
            result.named.append(outcome.named)
    return result


@dataclass
class Row:
    scenario: str
    source: str  # "real core" or "simulator"
    replicates: str
    fault: str | None
    cells: dict[str, Cell]

    @property
    def what(self) -> str:
        if self.fault is None:
            return "none"
        if self.fault in EXPECTED:
            return f"{self.fault}, for `{EXPECTED[self.fault][0]}`"
        return f"{self.fault} (no detector here reads it)"


def real_rows(traces: list[Trace]) -> list[Row]:
    by_scenario: dict[str, list[Trace]] = {}
    for trace in traces:
        by_scenario.setdefault(trace.scenario, []).append(trace)
    rows = []
    for scenario, group in sorted(by_scenario.items(), key=lambda item: _order(item[0])):
        started = time.monotonic()
        per_detector: dict[str, list[tuple[Outcome, float | None]]] = {d: [] for d in DETECTORS}
        for trace in group:
            for phase in PHASES:
                for name, outcome in replay(trace, phase).items():
                    per_detector[name].append((outcome, trace.onset))
        fault = group[0].fault
        cells = {name: _cell_of(pairs, fault is not None) for name, pairs in per_detector.items()}
        seeds = sorted({t.seed for t in group})
        lengths = sorted({round(t.seconds / MINUTE) for t in group})
        replicates = (
            f"seeds {','.join(map(str, seeds))} x {len(PHASES)} phases, "
            f"{'/'.join(map(str, lengths))} min"
        )
        rows.append(Row(scenario, "real core", replicates, fault, cells))
        print(
            f"  {scenario}: {_cells_text(cells)} ({time.monotonic() - started:.1f} s)", flush=True
        )
    return rows


def _order(scenario: str) -> int:
    return ORDER.index(scenario) if scenario in ORDER else len(ORDER)


def _cell_of(pairs: list[tuple[Outcome, float | None]], fault: bool) -> Cell:
    result = Cell(replicates=len(pairs), fault=fault)
    for outcome, onset in pairs:
        partial = cell([outcome], onset, fault)
        result.false_restarts += partial.false_restarts
        result.judged += partial.judged
        result.delays += partial.delays
        result.named += partial.named
    return result


def sim_rows(hours: float, seeds: int) -> list[Row]:
    rows = []
    for name, runs in simulated(hours, seeds):
        cells = {d: cell([run[d] for run in runs], None, False) for d in NEW_CAUSES}
        replicates = f"seeds 0..{seeds - 1} x 4 engines, {hours:.0f} h"
        rows.append(Row(name, "simulator", replicates, None, cells))
        print(f"  {name}: {_cells_text(cells)}", flush=True)
    return rows


def _cells_text(cells: dict[str, Cell]) -> str:
    return " | ".join(f"{name}: {c.text()}" for name, c in cells.items())


def decisions(rows: list[Row]) -> dict[str, tuple[str, str]]:
    """Per new cause, the issue's rule: zero false restarts over the no-fault matrix (and before
    the onsets) and recall of at least 90 % within two windows on its fault -> RestartPod."""
    result = {}
    for fault, (detector, named) in EXPECTED.items():
        false = sum(row.cells[detector].false_restarts for row in rows if detector in row.cells)
        simulated_only = fault in SIMULATED_ONLY
        faulty = [
            row.cells[detector]
            for row in rows
            if row.fault == fault and (row.source == "simulator" or not simulated_only)
        ]
        replicates = sum(c.replicates for c in faulty)
        right = sum(
            1
            for c in faulty
            for delay, said in zip(c.delays, c.named, strict=True)
            if delay <= c.deadline and said == named
        )
        recall = right / replicates if replicates else 0.0
        action = "RestartPod" if false == 0 and recall >= 0.9 else "Report"
        why = (
            f"{false} false restarts, recall {recall:.0%} naming {named} ({replicates} replicates)"
        )
        if simulated_only:
            why += "; simulated host memory only (rljob.dev.host_memory)"
        result[f"{detector} ({named})"] = (action, why)
    return result


def table(rows: list[Row]) -> str:
    lines = [
        "Each cell: recall within two windows (10 min) of the onset / median delay from the onset "
        "/ false restarts (findings on a no-fault trace or before the onset, over all replicates); "
        'in brackets what the detections named (the reason, or the stall\'s cause); "not judged": '
        "no verdict on any replicate. "
        "`kv_drift` and `kv_fragmentation` at a 5-minute window and 3-minute warm-up; the "
        "simulator's rows run the stall and cause detectors only (the table above has the drift "
        "detectors on them). `memory_growth` reads simulated host memory on every row (the "
        "real-core traces' memory column is bench/vllm_core's, not vLLM's); on the leak rows its "
        "recall counts detections within the time the leak takes to reach the threshold plus an "
        "hour, and their false restarts are findings on the three engines that do not leak.",
        "",
        "| source | scenario | fault | replicates | "
        + " | ".join(f"`{d}`" for d in DETECTORS)
        + " |",
        "|---|---|---|---|" + "---|" * len(DETECTORS),
    ]
    for row in rows:
        values = " | ".join(row.cells[d].text() if d in row.cells else "" for d in DETECTORS)
        lines.append(
            f"| {row.source} | {row.scenario} | {row.what} | {row.replicates} | {values} |"
        )
    return "\n".join(lines)


def decision_text(rows: list[Row]) -> str:
    lines = [
        "By the issue's rule (zero false restarts over the no-fault matrix and before every "
        "onset, and recall of at least 90 % within two windows naming the cause), the built-in "
        "action of each cause:",
        "",
        "| cause | measured action | the built-in rule today | measured |",
        "|---|---|---|---|",
    ]
    for cause, (action, why) in decisions(rows).items():
        lines.append(f"| {cause} | {action} | {built_in_action(cause)} | {why} |")
    return "\n".join(lines)


def built_in_action(cause: str) -> str:
    """What the operator's built-in rules do today with the cause on a rollout engine (the
    stall's causes share engineStall's rule), so a gap between measurement and policy shows."""
    named = cause.rsplit("(", maxsplit=1)[-1].rstrip(")")
    reasons = {reason.value for reason in FailureReason}
    reason = FailureReason(named) if named in reasons else FailureReason.ENGINE_STALLED
    name, rule = match_rule(Failure(reason, RoleName.ROLLOUT, "engine-0"), ())
    return f"{rule.action.value} (`{name}`)"


def section(rows: list[Row], took: float, notes: str) -> str:
    return (
        f"{MARKER}\n\n"
        "Written by `python -m bench.engine_causes` (its docstring says how each cell is "
        "counted; bench/vllm_core/README.md what the traces are). Issue 32: leaked KV capacity "
        "(`kv_leak`), a prefix-cache collapse at a steady prompt mix (`prefix_collapse`), a "
        "frozen page named by `engine_stall` and host memory growth (`memory_growth`, simulated), "
        "beside today's detectors. "
        f"{notes}Took {took:.0f} s on one core.\n\n"
        f"{table(rows)}\n\n{decision_text(rows)}\n\n{END_MARKER}\n"
    )


def write_section(path: Path, text: str) -> None:
    """Replaces this bench's section of `path` (or appends it), leaving the rest as it is."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    start = old.find(MARKER)
    if start < 0:
        path.write_text(old.rstrip("\n") + "\n\n" + text, encoding="utf-8")
        return
    end = old.find(END_MARKER, start)
    rest = old[end + len(END_MARKER) :].lstrip("\n") if end >= 0 else ""
    path.write_text(old[:start] + text + ("\n" + rest if rest else ""), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sim-hours", type=float, default=24.0)
    parser.add_argument("--sim-seeds", type=int, default=3)
    parser.add_argument("--no-sim", action="store_true", help="the real-core traces only")
    parser.add_argument("--output", type=Path, help="write the section into this markdown file")
    args = parser.parse_args(argv)
    started = time.monotonic()
    traces = stored_traces()
    seeds = sorted({trace.seed for trace in traces})
    print(f"{len(traces)} real-core traces, seeds {seeds}", flush=True)
    rows = real_rows(traces)
    if not args.no_sim:
        rows += sim_rows(args.sim_hours, args.sim_seeds)
        rows += memory_rows(args.sim_seeds)
    took = time.monotonic() - started
    notes = _notes(traces)
    text = section(rows, took, notes)
    print(text)
    if args.output:
        write_section(args.output, text)
    return 0


def _notes(traces: list[Trace]) -> str:
    seeds = sorted({trace.seed for trace in traces})
    if len(seeds) == 1:
        return f"One seed ({seeds[0]}) per real-core trace; the scrape phases are its replicates. "
    return (
        f"Real-core seeds {', '.join(map(str, seeds))} (seed 0 at 20 minutes, the others "
        "shorter, see the replicates column), each at three scrape phases. "
    )


if __name__ == "__main__":
    raise SystemExit(main())
