"""KV drift judged at the operating point, against today's peer-gated detector and the naive
Prometheus rule, on 48 h traces of physically simulated engines (rljob.dev.engine_physics).

    .venv/bin/python -m bench.operating_point --seeds 8 --hours 48 --output bench/OPERATING-POINT.md

Each scenario runs in sync (generate/train cycles) and async (continuous) RL. Fault scenarios
fragment a KV cache until the engine's throughput, at the load it is offered, is down by 1.5x
the threshold; the moment the simulator's ground truth (throughput with the fault over without
it, noise-free) first reaches the threshold is when the drop "reaches the threshold". A finding
naming a victim after its fragmentation began detects it (the delay counted from that moment,
zero if earlier); every other finding restarts an engine for nothing and counts as a false
restart, one per engine it restarts (a fleet finding restarts every engine it names). As in
bench.detection, a restarted engine's detectors start over but the trace does not heal, so only
the first finding on a victim counts.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from bench.detection import NaiveRule
from rljob.dev.engine_physics import (
    DEFAULT_HARDWARE,
    Driver,
    Fragmentation,
    PhysicalEngine,
    PhysicalProfile,
    RequestMix,
    Shifts,
    loss_for_drop,
)
from rljob.health import DriftConfig, KVDriftDetector
from rljob.health.drift.point_detector import FragmentationDetector
from rljob.health.evaluation import Evaluation
from rljob.health.samples import EngineSample

HOUR, MINUTE = 3600.0, 60.0
CONFIG = DriftConfig(threshold=0.2, window=30 * MINUTE, warmup=15 * MINUTE, cooldown=HOUR)
MAGNITUDE = 1.5
FAULT_AT = 6 * HOUR
RAMP = 2 * HOUR
MIX = RequestMix(prompt_tokens=1024, generation_tokens=2048, generation_cv=0.6, shared_prefix=0.5)
DETECTORS = ("operating point", "today", "naive rule")
HEADING = (
    "# KV drift at the operating point, today's detector and the naive rule\n\n"
    "Written by `python -m bench.operating_point` (see its docstring for how each cell is "
    "counted); rljob.dev.engine_physics says what the simulated engines model and where its "
    "constants come from."
)


@dataclass(frozen=True)
class Scenario:
    name: str
    driver: str
    profiles: dict[str, PhysicalProfile]
    victims: tuple[str, ...] = ()
    # False: the engines export no prefix-cache or preemption counters (older vLLM, SGLang
    # without them), so only KV usage and request lengths can confirm.
    cache_metrics: bool = True


def _driver(kind: str, index: int) -> Driver:
    return Driver(kind="async" if kind == "async" else "sync", offset=index * 37.0)


def _profile(kind: str, index: int, **changes: object) -> PhysicalProfile:
    base = PhysicalProfile(hardware=DEFAULT_HARDWARE, mix=MIX, driver=_driver(kind, index))
    return replace(base, **changes)  # type: ignore[arg-type]


def _fragmenting(profile: PhysicalProfile, magnitude: float) -> PhysicalProfile:
    loss = loss_for_drop(profile, magnitude * CONFIG.threshold)
    return replace(profile, fragmentation=Fragmentation(start=FAULT_AT, ramp=RAMP, loss=loss))


def _fleet(
    kind: str,
    engines: int,
    victims: tuple[int, ...] = (),
    magnitude: float = MAGNITUDE,
    **changes: object,
) -> dict[str, PhysicalProfile]:
    profiles = {}
    for index in range(engines):
        profile = _profile(kind, index, **changes)
        fault = index in victims
        profiles[f"rollout-{index}"] = _fragmenting(profile, magnitude) if fault else profile
    return profiles


def scenarios(kind: str, magnitude: float = MAGNITUDE) -> list[Scenario]:
    """The matrix for one kind of RL; fault drops are `magnitude` times the threshold."""
    slower = {f"rollout-{i}": _profile(kind, i) for i in range(4)}
    slower["rollout-0"] = _profile(kind, 0, hardware=DEFAULT_HARDWARE.slower(1.3))
    changed = replace(MIX, prompt_tokens=2048, shared_prefix=0.2)
    return [
        Scenario(
            "one engine of 4 fragments", kind, _fleet(kind, 4, (3,), magnitude), ("rollout-3",)
        ),
        Scenario(
            "all 4 fragment together",
            kind,
            _fleet(kind, 4, (0, 1, 2, 3), magnitude),
            tuple(f"rollout-{i}" for i in range(4)),
        ),
        Scenario(
            "2-engine job, one fragments", kind, _fleet(kind, 2, (1,), magnitude), ("rollout-1",)
        ),
        Scenario("1-engine job fragments", kind, _fleet(kind, 1, (0,), magnitude), ("rollout-0",)),
        Scenario(
            "one engine of 4 fragments, 8% noise",
            kind,
            _fleet(kind, 4, (3,), magnitude, noise=0.08),
            ("rollout-3",),
        ),
        Scenario(
            "2-engine job, one fragments, no cache metrics",
            kind,
            _fleet(kind, 2, (1,), magnitude),
            ("rollout-1",),
            cache_metrics=False,
        ),
        Scenario(
            "responses grow 2x over a day",
            kind,
            _fleet(kind, 4, shifts=Shifts(response_growth_per_day=1.0)),
        ),
        Scenario(
            "2 h long-prompt phase",
            kind,
            _fleet(kind, 4, shifts=Shifts(long_prompts_at=8 * HOUR, long_prompts_for=2 * HOUR)),
        ),
        Scenario(
            "prompt-mix change",
            kind,
            _fleet(kind, 4, shifts=Shifts(mix_change_at=8 * HOUR, mix_after=changed)),
        ),
        Scenario(
            "all three shifts at once, 8% noise",
            kind,
            _fleet(
                kind,
                4,
                noise=0.08,
                shifts=Shifts(
                    response_growth_per_day=1.0,
                    long_prompts_at=8 * HOUR,
                    long_prompts_for=2 * HOUR,
                    mix_change_at=20 * HOUR,
                    mix_after=changed,
                ),
            ),
        ),
        Scenario("one engine on a slower node", kind, slower),
        Scenario(
            "counter resets every 5 h",
            kind,
            _fleet(kind, 4, counter_resets_at=tuple(5 * HOUR * k for k in range(1, 10))),
        ),
        Scenario(
            "scrape gaps (10 min every 4 h)",
            kind,
            _fleet(kind, 4, gaps=tuple((4 * HOUR * k, 4 * HOUR * k + 600) for k in range(1, 12))),
        ),
    ]


# ---------------------------------------------------------------- running one trace


@dataclass
class Outcome:
    """One detector on one trace: detection delay per victim, false restarts."""

    delays: dict[str, float] = field(default_factory=dict)
    false_restarts: int = 0


@dataclass
class _Run:
    scenario: Scenario
    engines: dict[str, PhysicalEngine]
    fault_started: dict[str, float]
    reached: dict[str, float] = field(default_factory=dict)

    def judge(self, outcome: Outcome, targets: list[str], now: float) -> None:
        for target in targets:
            if target in outcome.delays:
                continue
            started = self.fault_started.get(target, math.inf)
            if target in self.scenario.victims and now >= started:
                outcome.delays[target] = max(0.0, now - self.reached.get(target, now))
            else:
                outcome.false_restarts += 1


def _rounds(run: _Run, duration: float) -> Iterator[tuple[float, list[tuple[str, EngineSample]]]]:
    steps = int(duration // CONFIG.interval)
    for index in range(1, steps + 1):
        t = index * CONFIG.interval
        batch = []
        for name, engine in run.engines.items():
            victim = name in run.scenario.victims and name not in run.reached
            if victim and engine.throughput_ratio(t) <= 1 - CONFIG.threshold:
                run.reached[name] = t
            sample = engine.sample(t)
            if sample is not None and not run.scenario.cache_metrics:
                sample = replace(
                    sample,
                    prefix_hits_total=None,
                    prefix_queries_total=None,
                    preemptions_total=None,
                )
            if sample is not None:
                batch.append((name, sample))
        yield t, batch


def run(scenario: Scenario, seed: int, duration: float) -> dict[str, Outcome]:
    engines = {
        name: PhysicalEngine(profile, seed=f"{seed}:{name}")
        for name, profile in scenario.profiles.items()
    }
    started = {
        name: profile.fragmentation.start
        for name, profile in scenario.profiles.items()
        if profile.fragmentation is not None
    }
    state = _Run(scenario, engines, started)
    ours, today, naive = FragmentationDetector(CONFIG), KVDriftDetector(CONFIG), NaiveRule(CONFIG)
    outcomes = {name: Outcome() for name in DETECTORS}
    for now, batch in _rounds(state, duration):
        for name, sample in batch:
            ours.observe(name, sample)
            today.observe(name, sample)
            naive.observe(name, sample)
        _findings(state, outcomes[DETECTORS[0]], ours.evaluate(now), ours.note_restart, now)
        _findings(state, outcomes[DETECTORS[1]], today.evaluate(now), today.note_restart, now)
        fired = [name for name, _ in batch if naive.fires(name, now)]
        state.judge(outcomes[DETECTORS[2]], fired, now)
        for name in fired:
            naive.note_restart(name, now)
    return outcomes


def _findings(
    run_state: _Run,
    outcome: Outcome,
    evaluations: list[Evaluation],
    restart: Callable[[str, float], None],
    now: float,
) -> None:
    for evaluation in evaluations:
        if not evaluation.is_finding:
            continue
        engines = str(evaluation.evidence.get("engines", evaluation.target)).split()
        run_state.judge(outcome, engines, now)
        for engine in engines:
            restart(engine, now)


# ---------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Cell:
    """One detector on one scenario over every seed."""

    victims: int  # victim-traces (victims x seeds)
    detected_in_time: int  # within two windows of the drop reaching the threshold
    delays: tuple[float, ...]
    false_restarts: int

    @property
    def recall(self) -> float | None:
        return self.detected_in_time / self.victims if self.victims else None

    @property
    def median_delay(self) -> float | None:
        return statistics.median(self.delays) if self.delays else None


def cell(scenario: Scenario, outcomes: list[Outcome]) -> Cell:
    delays = [d for o in outcomes for d in o.delays.values()]
    in_time = sum(1 for d in delays if d <= 2 * CONFIG.window)
    return Cell(
        victims=len(scenario.victims) * len(outcomes),
        detected_in_time=in_time,
        delays=tuple(delays),
        false_restarts=sum(o.false_restarts for o in outcomes),
    )


def matrix(
    seeds: int, hours: float, only: str | None = None, magnitude: float = MAGNITUDE
) -> list[tuple[Scenario, dict[str, Cell]]]:
    """Every scenario (or those whose name contains `only`), sync then async."""
    rows = []
    for kind in ("sync", "async"):
        for scenario in scenarios(kind, magnitude):
            if only is not None and only not in scenario.name:
                continue
            per_seed = [run(scenario, seed, hours * HOUR) for seed in range(seeds)]
            cells = {d: cell(scenario, [o[d] for o in per_seed]) for d in DETECTORS}
            rows.append((scenario, cells))
            print(f"  {kind:5} {scenario.name}: " + _cells_text(cells), flush=True)
    return rows


def _cells_text(cells: dict[str, Cell]) -> str:
    return " | ".join(f"{name}: {_cell_text(c)}" for name, c in cells.items())


def _cell_text(c: Cell) -> str:
    recall = "-" if c.recall is None else f"{c.recall:.0%}"
    delay = "-" if c.median_delay is None else f"{c.median_delay / MINUTE:.0f} min"
    return f"{recall} / {delay} / {c.false_restarts}"


def table(
    rows: list[tuple[Scenario, dict[str, Cell]]],
    seeds: int,
    hours: float,
    magnitude: float = MAGNITUDE,
) -> str:
    lines = [
        f"Seeds 0..{seeds - 1}, {hours:.0f} h per trace, scrape and evaluation every "
        f"{CONFIG.interval:.0f} s; threshold {CONFIG.threshold:.0%}, window "
        f"{CONFIG.window / MINUTE:.0f} min, warm-up {CONFIG.warmup / MINUTE:.0f} min, "
        f"cooldown {CONFIG.cooldown / MINUTE:.0f} min; fault drops {magnitude}x the threshold.",
        "Each cell: recall within two windows / median delay from the drop reaching the "
        "threshold / false restarts (engines restarted without a fault, over all seeds).",
        "",
        "| RL | scenario | " + " | ".join(DETECTORS) + " |",
        "|---|---|" + "---|" * len(DETECTORS),
    ]
    for scenario, cells in rows:
        values = " | ".join(_cell_text(cells[d]) for d in DETECTORS)
        lines.append(f"| {scenario.driver} | {scenario.name} | {values} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    parser.add_argument("--magnitude", type=float, default=MAGNITUDE, help="drop / threshold")
    parser.add_argument("--output", help="also write the table, under a heading, to this file")
    args = parser.parse_args(argv)
    rows = matrix(args.seeds, args.hours, args.only, args.magnitude)
    text = table(rows, args.seeds, args.hours, args.magnitude)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(f"{HEADING}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
