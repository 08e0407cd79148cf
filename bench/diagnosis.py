"""Bottleneck diagnosis (status.bottleneck) judged over a matrix of simulated RL jobs whose
bounding role is known by construction (bench.diagnosis_job), several seeds each.

    .venv/bin/python -m bench.diagnosis --seeds 8 --hours 3 --output bench/DIAGNOSIS.md

Each run feeds rljob.health.bottleneck.BottleneckMonitor a round per health interval (30 s,
window 15 min: the spec's defaults) as the health loop does and evaluates every round. A
scenario says which role is right from when (`Scenario.expected`; None: not judged, e.g. during
the published sweep). Per seed: whether the last evaluation names the right role; the share of
judged evaluations naming it, counted from the first answer that is not Unknown (from the first
evaluation when Unknown is right), so the transition after a mid-run change counts against it;
the time to a confident answer, from the moment the last expected role starts (0, or the
change) to the first evaluation from which every later one is right (none if the last is
wrong). Where the truth is known, the last evaluation's recommended concurrency and the
curve's knee (or extrapolated peak) against it: the test bed's knee_truth for the synchronous
rollouts (80% of the lowest concurrency within 5% of the throughput at the KV capacity, times
the engines), 64 and 51 for the published sweep.
"""

from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from bench.diagnosis_job import (
    Engines,
    Garbage,
    Job,
    Pipeline,
    Reading,
    SyncRollout,
    Trainer,
    Verifiers,
    batch_seconds,
)
from rljob.api.diagnosis import Bottleneck, BottleneckRole
from rljob.dev.sim.models.concurrency import Driver, curve_of, knee_truth
from rljob.dev.sim.profiles import EngineProfile
from rljob.health.bottleneck import BottleneckConfig, BottleneckMonitor
from rljob.health.samples import EngineSample

Role = BottleneckRole
HOUR, MINUTE = 3600.0, 60.0
INTERVAL, WINDOW = 30.0, 900.0
HEADING = (
    "# Bottleneck diagnosis over a scenario matrix\n\n"
    "Written by `python -m bench.diagnosis` (its docstring says how each cell is counted; "
    "bench/diagnosis_job.py what the simulated job models)."
)


@dataclass(frozen=True)
class Truth:
    recommended: float
    peak: float  # the lowest concurrency within 5% of the highest throughput


@dataclass(frozen=True)
class Scenario:
    name: str
    build: Callable[[str, float], Job]  # (seed, hours) -> the job
    expected: tuple[tuple[float, Role | None], ...]  # (from, role): the last one from <= t
    truth: Truth | None = None
    garbage: Garbage = field(default_factory=Garbage)

    def role_at(self, t: float) -> Role | None:
        role = None
        for start, expected in self.expected:
            if t >= start:
                role = expected
        return role

    @property
    def since(self) -> float:
        return self.expected[-1][0]


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


@dataclass(frozen=True)
class Verdict:
    """One evaluation, as much of it as the bench judges."""

    t: float
    role: Role
    recommended: int | None
    knee: float | None  # the curve's peak (observed or extrapolated), else its knee


def _verdict(t: float, found: Bottleneck) -> Verdict:
    curve = found.curve
    knee = None
    if curve is not None:
        knee = curve.peak if curve.peak is not None else curve.knee
    return Verdict(t, found.role, found.recommended_concurrency, knee)


@dataclass
class _Counters:
    """What a restarted process's counters read: they start over at the restart."""

    at: float | None
    tokens: float | None = None
    seconds: dict[str, float] | None = None
    step: float = 0.0

    def engine(self, t: float, tokens: float) -> float:
        if self.at is None or t < self.at:
            return tokens
        if self.tokens is None:
            self.tokens = tokens
        return tokens - self.tokens

    def trainer(
        self, t: float, seconds: dict[str, float], step: float
    ) -> tuple[dict[str, float], float]:
        if self.at is None or t < self.at:
            return seconds, step
        if self.seconds is None:
            self.seconds, self.step = dict(seconds), step
        since = {phase: value - self.seconds.get(phase, 0.0) for phase, value in seconds.items()}
        return since, max(0.0, step - 2)  # resumed from a checkpoint two steps back


class Scrapes:
    """Feeds `monitor` one round per health interval from `job`, through `garbage`."""

    def __init__(self, job: Job, garbage: Garbage, seed: int, interval: float = INTERVAL) -> None:
        self.job, self.garbage, self.interval = job, garbage, interval
        self.rng = random.Random(f"{seed}:scrapes")
        self.engines = [f"rollout-{i}" for i in range(len(job.tokens))]
        trainer = job.trainer.spec
        self.trainers = [f"trainer-{i}" for i in range(trainer.pods)] if trainer.phases else []
        verifiers = job.verifiers
        self.verifiers = [f"verifier-{i}" for i in range(verifiers.pods)] if verifiers else []
        self.engine_counters = _Counters(garbage.engine_restart)
        self.trainer_counters = _Counters(garbage.trainer_restart)

    def rounds(self, monitor: BottleneckMonitor, duration: float) -> Iterator[float]:
        """Advances the job round by round; yields each round's end once it was fed."""
        end = float(self.rng.randint(1, int(self.interval)))
        while end <= duration:
            planned = self._plan(end)
            while self.job.t < end:
                self.job.tick()
                for pod in planned.get(self.job.t, []):
                    self._scrape(monitor, pod)
            yield end
            end += self.interval

    def _plan(self, end: float) -> dict[float, list[str]]:
        garbage, planned = self.garbage, dict[float, list[str]]()
        for pod in self.engines + self.trainers + self.verifiers:
            at = end - math.floor(self.rng.uniform(0, garbage.jitter))
            lost = self.rng.random() < garbage.missed
            if lost or _in_outage(at, garbage.outage):
                continue
            planned.setdefault(at, []).append(pod)
        return planned

    def _scrape(self, monitor: BottleneckMonitor, pod: str) -> None:
        job, t = self.job, self.job.t
        kind, index = pod.rsplit("-", 1)
        if kind == "rollout":
            reading: Reading = job.engine(int(index))
            tokens = reading.tokens
            if index == "0":
                tokens = self.engine_counters.engine(t, tokens)
            sample = EngineSample(
                t=t,
                generated_tokens_total=tokens,
                running=reading.running,
                waiting=reading.waiting,
                kv_usage=reading.kv_usage,
                sleeping=False,
            )
            monitor.observe_engine(pod, sample)
        elif kind == "trainer":
            seconds, step = dict(job.trainer.seconds), job.trainer.step
            if index == "0":
                seconds, step = self.trainer_counters.trainer(t, seconds, step)
            monitor.observe_trainer(pod, t, seconds, step)
        elif isinstance(job, Pipeline):
            monitor.observe_verifier(pod, t, job.verifier_depth())
            if index == "0":
                monitor.note_verifier_latency(*job.verifier_latency())


def _in_outage(t: float, outage: tuple[float, float] | None) -> bool:
    return outage is not None and outage[0] <= t < outage[0] + outage[1]


def run(scenario: Scenario, seed: int, hours: float, interval: float = INTERVAL) -> list[Verdict]:
    """Every evaluation of one seeded job, scraped and evaluated every `interval` seconds."""
    job = scenario.build(str(seed), hours)
    monitor = BottleneckMonitor(BottleneckConfig(window=WINDOW, interval=interval))
    verdicts = []
    for now in Scrapes(job, scenario.garbage, seed, interval).rounds(monitor, hours * HOUR):
        found = monitor.evaluate(now)
        if found is not None:
            verdicts.append(_verdict(now, found))
    return verdicts


# ---------------------------------------------------------------- judging


@dataclass(frozen=True)
class Judged:
    """One seed's evaluations against the scenario."""

    last_role: Role | None
    right_at_end: bool
    share_right: float | None  # judged evaluations right, from the first answer on
    confident_after: float | None  # seconds from `since` to the answer that stays right
    recommended: int | None
    knee: float | None


def judge(scenario: Scenario, verdicts: Sequence[Verdict]) -> Judged:
    if not verdicts:
        return Judged(None, False, None, None, None, None)
    last = verdicts[-1]
    right_at_end = last.role == scenario.role_at(last.t)
    unknown_right = scenario.expected[-1][1] is Role.UNKNOWN
    first = next(
        (i for i, v in enumerate(verdicts) if unknown_right or v.role is not Role.UNKNOWN),
        len(verdicts),
    )
    judged = [v for v in verdicts[first:] if scenario.role_at(v.t) is not None]
    right = [v for v in judged if v.role == scenario.role_at(v.t)]
    share = len(right) / len(judged) if judged else None
    return Judged(
        last.role,
        right_at_end,
        share,
        _confident_after(scenario, verdicts) if right_at_end else None,
        last.recommended,
        last.knee,
    )


def _confident_after(scenario: Scenario, verdicts: Sequence[Verdict]) -> float | None:
    since = scenario.since
    settled = None
    for verdict in reversed(verdicts):
        if verdict.t < since or verdict.role != scenario.role_at(verdict.t):
            break
        settled = verdict
    return settled.t - since if settled is not None else None


@dataclass(frozen=True)
class Cell:
    """One scenario over every seed."""

    seeds: int
    right_at_end: int
    shares: tuple[float, ...]
    confident: tuple[float, ...]  # seconds, the seeds right at the end
    wrong_roles: tuple[str, ...]  # the last role of each seed that ended wrong
    recommendation_errors: tuple[float, ...]  # relative, signed
    knee_errors: tuple[float, ...]
    recommended: tuple[int, ...]


def cell(scenario: Scenario, results: Sequence[Judged]) -> Cell:
    truth = scenario.truth
    recommended = tuple(r.recommended for r in results if r.recommended is not None)
    knees = tuple(r.knee for r in results if r.knee is not None)
    return Cell(
        seeds=len(results),
        right_at_end=sum(r.right_at_end for r in results),
        shares=tuple(r.share_right for r in results if r.share_right is not None),
        confident=tuple(r.confident_after for r in results if r.confident_after is not None),
        wrong_roles=tuple(
            r.last_role.value if r.last_role else "none" for r in results if not r.right_at_end
        ),
        recommendation_errors=_errors(recommended, truth.recommended) if truth else (),
        knee_errors=_errors(knees, truth.peak) if truth else (),
        recommended=recommended,
    )


def _errors(values: Sequence[float], truth: float) -> tuple[float, ...]:
    return tuple((value - truth) / truth for value in values)


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
        log(f"  {scenario.name}: {_cell_text(scenario, rows[-1][1])}")
    return rows


# ---------------------------------------------------------------- the table


def _expected_text(scenario: Scenario) -> str:
    return " -> ".join(role.value for _, role in scenario.expected if role is not None)


def _minutes(seconds: Sequence[float]) -> str:
    if not seconds:
        return "-"
    median, worst = statistics.median(seconds) / MINUTE, max(seconds) / MINUTE
    return f"{median:.1f} / {worst:.1f} min"


def _share(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.mean(values):.0%} (min {min(values):.0%})"


def _relative(errors: Sequence[float]) -> str:
    if not errors:
        return "-"
    worst = max(errors, key=abs)
    return f"{statistics.median(abs(e) for e in errors):.1%} / {worst:+.1%}"


def _recommended(scenario: Scenario, c: Cell) -> str:
    if scenario.truth is None:
        return "-"
    found = f"{statistics.median(c.recommended):.0f}" if c.recommended else "none"
    return f"{found} vs {scenario.truth.recommended:.1f}"


def _right(c: Cell) -> str:
    wrong = f" (else {', '.join(sorted(set(c.wrong_roles)))})" if c.wrong_roles else ""
    return f"{c.right_at_end}/{c.seeds}{wrong}"


def _cell_text(scenario: Scenario, c: Cell) -> str:
    return (
        f"right {_right(c)}, share {_share(c.shares)}, confident after {_minutes(c.confident)}, "
        f"recommended {_recommended(scenario, c)} (error {_relative(c.recommendation_errors)}), "
        f"knee error {_relative(c.knee_errors)}"
    )


COLUMNS = (
    "scenario",
    "right role",
    "right at the end",
    "share right after the first answer: mean (min)",
    "time to a confident answer: median / worst",
    "recommended (median) vs truth",
    "recommendation error: median / worst",
    "knee or peak error: median / worst",
)


def table(
    rows: Sequence[tuple[Scenario, Cell]], seeds: int, hours: float, interval: float = INTERVAL
) -> str:
    defaults = " (the spec's defaults)" if interval == INTERVAL else ""
    lines = [
        f"Seeds 0..{seeds - 1}, {hours:g} h of simulated job per seed, a scrape round and an "
        f"evaluation every {interval:g} s, window {WINDOW / MINUTE:.0f} min{defaults}; a "
        "mid-run change at half the run. Errors are relative to the truth (signed for the "
        "worst).",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for scenario, c in rows:
        values = (
            scenario.name,
            _expected_text(scenario),
            _right(c),
            _share(c.shares),
            _minutes(c.confident),
            _recommended(scenario, c),
            _relative(c.recommendation_errors),
            _relative(c.knee_errors),
        )
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines)


SMOKE_HOURS = 1.5
SMOKE_ONLY = ("rollout-bound: 4 engines saturated", "16 of 256", "verifier slows", "all three")


def smoke(log: Callable[[str], None] = print) -> list[tuple[Scenario, Cell]]:
    """One seed of a few scenarios over a short run: proves the matrix runs (CI)."""
    rows: list[tuple[Scenario, Cell]] = []
    for only in SMOKE_ONLY:
        rows += matrix(1, SMOKE_HOURS, only, log)
    return rows


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
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(f"{HEADING}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
