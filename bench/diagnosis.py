"""Bottleneck diagnosis (status.bottleneck) judged over a matrix of simulated RL jobs whose
bounding role is known by construction, several seeds each.

    .venv/bin/python -m bench.diagnosis --seeds 8 --hours 3 --output bench/DIAGNOSIS.md
    .venv/bin/python -m bench.diagnosis --smoke        # one seed of each, 1.5 h (a few s)

Each run feeds rljob.health.bottleneck.BottleneckMonitor a round per health interval (30 s,
window 15 min: the spec's defaults; `--interval` for another) from a job of bench.diagnosis_job,
as the health loop does, and evaluates every round; bench.diagnosis_judge says how a run is
judged. Where the truth is known: the test bed's knee_truth for the synchronous rollouts (80% of
the lowest concurrency within 5% of the throughput at the KV capacity, times the engines, and
that concurrency as the peak), 51 and 64 for the published sweep.
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable
from dataclasses import replace

from bench.diagnosis_job import (
    INTERVAL,
    WINDOW,
    Engines,
    Garbage,
    Job,
    Pipeline,
    Scrapes,
    SyncRollout,
    Trainer,
    Verifiers,
    batch_seconds,
)
from bench.diagnosis_judge import (
    Cell,
    Role,
    Scenario,
    Truth,
    Verdict,
    cell,
    cell_text,
    judge,
    summary,
    table,
    verdict,
)
from rljob.dev.sim.models.concurrency import Driver, curve_of, knee_truth
from rljob.dev.sim.profiles import EngineProfile
from rljob.health.bottleneck import BottleneckConfig, BottleneckMonitor

HOUR, MINUTE = 3600.0, 60.0
HEADING = (
    "# Bottleneck diagnosis over a scenario matrix\n\n"
    "Written by `python -m bench.diagnosis`: bench/diagnosis_job.py says what the simulated "
    "jobs model, bench/diagnosis_judge.py how each cell is counted."
)


# ---------------------------------------------------------------- the jobs

# An H100-class engine (the test bed's a / b): 5,000 tokens/s with 256 sequences in its cache.
ENGINE = EngineProfile(knee=256, throughput=5000.0)
BATCH = 1024.0


def _async(
    trainer: Trainer,
    per_engine: float = 384.0,
    verifiers: Verifiers | None = None,
    count: int = 4,
) -> Callable[[str, float], Job]:
    curve = curve_of(ENGINE)
    engines = Engines(count, curve.throughput, float(curve.capacity))
    total = per_engine * count
    return lambda seed, _: Pipeline(engines, trainer, lambda _t: total, verifiers, seed)


def _fast_verifiers(slow_from: float = math.inf, factor: float = 8.0) -> Verifiers:
    return Verifiers(2, 8, lambda t: 0.5 * (factor if t >= slow_from else 1.0))


# Synchronous RL: the trainer trains on the batch in half the time it took to generate (the
# rollout side bounds the step) and syncs weights in 10 s, while the engines idle.
SYNC_TRAIN_SHARE, SYNC_SECONDS = 0.5, 10.0


def sync_job(profile: EngineProfile, engines: int, seed: str) -> SyncRollout:
    """The test bed's synchronous driver with the trainer's time set from its batch."""
    batch = batch_seconds(Driver(replace(profile, sync_idle=1.0), f"{seed}:engine-0"))
    train = SYNC_TRAIN_SHARE * batch
    trainer = Trainer(batch=0.0, train=train, sync=SYNC_SECONDS, jitter=0.0)
    return SyncRollout(replace(profile, sync_idle=train + SYNC_SECONDS), engines, trainer, seed)


def under_driven(
    concurrency: int,
    engines: int,
    *,
    knee: int = 256,
    throughput: float = 5000.0,
    ratio: float = 39.2,
    tokens: float = 2048.0,
) -> Scenario:
    profile = EngineProfile(
        concurrency=concurrency,
        knee=knee,
        throughput=throughput,
        step_fixed_batch=ratio,
        sync_tail=True,
        generation_length=tokens,
    )
    truth = knee_truth(profile)
    return Scenario(
        f"under-driven sync rollout, {concurrency} of {knee} per engine x {engines}, "
        f"{tokens / 1024:.0f}k-token responses",
        lambda seed, _: sync_job(profile, engines, seed),
        ((0.0, Role.ROLLOUT_CONCURRENCY),),
        Truth(engines * truth.recommended, engines * truth.plateau_from),
    )


# The published doubling sweep: parallelism -> rollouts/s.
PUBLISHED = ((8, 2.1), (16, 4.0), (32, 7.2), (64, 8.1), (128, 8.3))
SWEEP_HOLD = 600.0
SWEEP_TOKENS = 1000.0  # tokens per rollout: the table read as tokens/s


def published(c: float) -> float:
    """The published points joined on a log2 scale of concurrency, flat past the last."""
    points = [(math.log2(p), r * SWEEP_TOKENS) for p, r in PUBLISHED]
    if c <= 0:
        return 0.0
    x = math.log2(c)
    if x <= points[0][0]:
        return points[0][1] * c / PUBLISHED[0][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def _sweep(seed: str, _hours: float) -> Job:
    levels = [float(p) for p, _ in PUBLISHED] + [16.0]

    def in_flight(t: float) -> float:
        return levels[min(int(t // SWEEP_HOLD), len(levels) - 1)]

    engines = Engines(1, published, None, rollout_tokens=SWEEP_TOKENS)
    return Pipeline(engines, Trainer(batch=512.0, train=30.0, sync=10.0), in_flight, None, seed)


def scenarios(hours: float) -> list[Scenario]:
    """The matrix; a mid-run change happens at half the run."""
    middle = hours * HOUR / 2
    swept = len(PUBLISHED) * SWEEP_HOLD
    rollout_bound = Trainer(batch=BATCH, train=40.0, sync=10.0)
    trainer_bound = Trainer(batch=BATCH, train=240.0, sync=10.0)
    rollout = Scenario(
        "rollout-bound: 4 engines saturated", _async(rollout_bound), ((0.0, Role.ROLLOUT),)
    )
    trainer = Scenario(
        "trainer-bound", _async(trainer_bound, verifiers=_fast_verifiers()), ((0.0, Role.TRAINER),)
    )
    under = [under_driven(c, 4) for c in (16, 32, 64)]
    under += [under_driven(c, 4, tokens=8192.0) for c in (16, 32)]
    under.append(under_driven(12, 2, knee=128, throughput=3000.0, ratio=20.0))
    noisy = [rollout, under[1], trainer]
    matrix = [
        rollout,
        *under,
        Scenario(
            "published doubling sweep replayed, then back to 16",
            _sweep,
            ((0.0, None), (swept, Role.ROLLOUT_CONCURRENCY)),
            Truth(51.0, 64.0),
        ),
        Scenario(
            "verifier-bound: 2 verifier pods, 2 s a rollout",
            _async(rollout_bound, verifiers=Verifiers(2, 8, lambda t: 2.0)),
            ((0.0, Role.VERIFIER),),
        ),
        Scenario(
            "verifier slows 8x mid-run (Rollout -> Verifier)",
            _async(rollout_bound, verifiers=_fast_verifiers(middle)),
            ((0.0, Role.ROLLOUT), (middle, Role.VERIFIER)),
        ),
        trainer,
        Scenario(
            "weight-sync-bound: 150 s sync through storage",
            _async(Trainer(batch=BATCH, train=40.0, sync=150.0)),
            ((0.0, Role.WEIGHT_SYNC),),
        ),
        Scenario(
            "no SDK phase counters, rollout-bound",
            _async(replace(rollout_bound, phases=False)),
            ((0.0, Role.UNKNOWN),),
        ),
        Scenario(
            "no SDK phase counters, trainer-bound",
            _async(replace(trainer_bound, phases=False)),
            ((0.0, Role.UNKNOWN),),
        ),
    ]
    for base in noisy:
        matrix += [
            replace(base, name=f"{base.name}; {label}", garbage=garbage)
            for label, garbage in _garbage(hours).items()
        ]
    return matrix


def _garbage(hours: float) -> dict[str, Garbage]:
    outage = (hours * HOUR * 0.4, 5 * MINUTE)
    engine, trainer = hours * HOUR * 0.3, hours * HOUR * 0.6
    return {
        "scrapes jittered 0-10 s": Garbage(jitter=10.0),
        "15% of scrapes missed, a 5 min outage": Garbage(missed=0.15, outage=outage),
        "an engine's and a trainer's counters reset": Garbage(
            engine_restart=engine, trainer_restart=trainer
        ),
        "all three": Garbage(10.0, 0.15, outage, engine, trainer),
    }


# ---------------------------------------------------------------- running one job


def run(scenario: Scenario, seed: int, hours: float, interval: float = INTERVAL) -> list[Verdict]:
    """Every evaluation of one seeded job, scraped and evaluated every `interval` seconds."""
    job = scenario.build(str(seed), hours)
    monitor = BottleneckMonitor(BottleneckConfig(window=WINDOW, interval=interval))
    verdicts = []
    for now in Scrapes(job, scenario.garbage, seed, interval).rounds(monitor, hours * HOUR):
        found = monitor.evaluate(now)
        if found is not None:
            verdicts.append(verdict(now, found))
    return verdicts


def matrix(
    seeds: int,
    hours: float,
    only: str | None = None,
    log: Callable[[str], None] = print,
    interval: float = INTERVAL,
) -> list[tuple[Scenario, Cell]]:
    """Every scenario (or those whose name contains `only`) over seeds 0..seeds-1."""
    rows = []
    for scenario in scenarios(hours):
        if only is not None and only not in scenario.name:
            continue
        judged = [judge(scenario, run(scenario, seed, hours, interval)) for seed in range(seeds)]
        rows.append((scenario, cell(scenario, judged)))
        log(f"  {scenario.name}: {cell_text(scenario, rows[-1][1])}")
    return rows


SMOKE_HOURS = 1.5


def smoke(log: Callable[[str], None] = print) -> list[tuple[Scenario, Cell]]:
    """One seed of every scenario over a short run: proves the matrix runs (CI, a few s)."""
    return matrix(1, SMOKE_HOURS, log=log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    parser.add_argument("--interval", type=float, default=INTERVAL, help="health interval (s)")
    parser.add_argument("--smoke", action="store_true", help="one seed of a few scenarios (CI)")
    parser.add_argument("--output", help="also write the table, under a heading, to this file")
    args = parser.parse_args(argv)
    if args.smoke:
        rows, seeds, hours = smoke(), 1, SMOKE_HOURS
    else:
        rows = matrix(args.seeds, args.hours, args.only, interval=args.interval)
        seeds, hours = args.seeds, args.hours
    text = table(rows, seeds, hours, args.interval)
    print(text)
    print(summary(rows))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(f"{HEADING}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
