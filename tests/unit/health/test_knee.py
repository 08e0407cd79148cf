"""The rollout parallelism knee: find_knee on curves of known shape (a published doubling sweep
among them), the passive curve's bins, pooling, decay and bounds, and the terminal plot."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from rljob.health.knee import BIN_OCTAVES, MAX_CONCURRENCY, ConcurrencyCurve, find_knee
from rljob.vocabulary.knee import Knee, plot

Point = tuple[float, float]

# A published doubling sweep (parallelism, rollouts/s): gains flatten at 64.
PUBLISHED = [(8, 2.1), (16, 4.0), (32, 7.2), (64, 8.1), (128, 8.3)]
SCRAPE = 15.0
HOUR = 3600.0

KNEE_CASES = [
    # points, knee, peak, degrading_from, recommended, beyond
    pytest.param(PUBLISHED, 64, 64, None, 51.2, False, id="published-sweep-knee-at-64"),
    pytest.param(
        [(8, 1.0), (16, 2.0), (32, 4.0), (64, 7.9), (128, 15.0)],
        None,
        128,
        None,
        None,
        True,
        id="still-doubling-at-the-top",
    ),
    pytest.param(
        [(8, 5.0), (16, 5.1), (32, 5.15), (64, 5.1)], 8, 8, None, 6.4, False, id="flat-from-start"
    ),
    pytest.param(
        [(8, 2.0), (16, 4.0), (32, 7.0), (64, 8.0), (128, 6.0)],
        64,
        64,
        128,
        51.2,
        False,
        id="degrades-past-the-peak",
    ),
    pytest.param(
        [(8, 2.0), (16, 4.0), (32, 8.0), (64, 5.0)],
        32,
        32,
        64,
        25.6,
        False,
        id="drops-right-after-climbing",
    ),
    pytest.param(
        [(8, 2.0), (16, 4.0), (32, 7.0), (64, 8.0), (128, 9.0), (256, 9.2)],
        64,
        128,
        None,
        102.4,
        False,
        id="knee-below-a-slow-peak",
    ),
    pytest.param(
        [(8, 2.0), (16, 2.2), (32, 4.4), (64, 8.8)],
        None,
        64,
        None,
        None,
        True,
        id="early-flat-step-then-climbing",
    ),
    pytest.param([(8, 2.1), (16, 4.0)], None, 16, None, None, False, id="two-bins-no-claim"),
    pytest.param(
        [(8, 2.0), (9.5, 2.3), (11.3, 2.7)], None, 11.3, None, None, False, id="under-an-octave"
    ),
    pytest.param([], None, None, None, None, False, id="nothing-observed"),
]


@pytest.mark.parametrize(
    ("points", "knee", "peak", "degrading", "recommended", "beyond"), KNEE_CASES
)
def test_find_knee(
    points: list[Point],
    knee: float | None,
    peak: float | None,
    degrading: float | None,
    recommended: float | None,
    beyond: bool,
) -> None:
    verdict = find_knee(points)
    assert verdict.knee == knee
    assert verdict.peak_concurrency == peak
    assert verdict.degrading_from == degrading
    assert verdict.recommended == (None if recommended is None else pytest.approx(recommended))
    assert verdict.beyond is beyond
    assert verdict.describe()


MESSAGE_CASES = [
    pytest.param(
        PUBLISHED,
        "throughput 8.1 rollouts/s at 64 in flight, +12% from 32 to 64 and +2% from 64 to 128: "
        "the knee is at 64; run at 51 (80% of the peak's 64)",
        id="published-sweep",
    ),
    pytest.param(
        [(8, 1.0), (16, 2.0), (32, 4.0), (64, 8.0), (128, 16.0)],
        "throughput 16 rollouts/s at 128 in flight, +100% from 64 to 128: the knee lies beyond "
        "128: the job never ran above 128 in flight",
        id="beyond",
    ),
    pytest.param(
        [(8, 5.0), (16, 5.1), (32, 5.15)],
        "throughput 5 rollouts/s at 8 in flight, +2% from 8 to 16: the knee is at or below 8, "
        "the lowest observed; run at 6.4 (80% of the peak's 8)",
        id="flat-from-start",
    ),
    pytest.param(
        [(8, 2.0), (16, 4.0), (32, 7.0), (64, 8.0), (128, 6.0)],
        "throughput 8 rollouts/s at 64 in flight, +14% from 32 to 64 and -25% from 64 to 128: "
        "the knee is at 64; run at 51 (80% of the peak's 64); past the peak throughput falls 25% "
        "below its highest by 128 in flight",
        id="degrading",
    ),
]


@pytest.mark.parametrize(("points", "message"), MESSAGE_CASES)
def test_describe_is_one_readable_sentence(points: list[Point], message: str) -> None:
    assert find_knee(points).describe() == message


def test_published_sweep_is_confident() -> None:
    confidence = find_knee(PUBLISHED).confidence
    assert (confidence.bins, confidence.coverage) == (5, 1.0)


CONFIDENCE_CASES = [
    # points, observed span, bins, coverage, claims a knee
    pytest.param(PUBLISHED, None, 5, 1.0, True, id="doubling-sweep-covers-its-span"),
    pytest.param(PUBLISHED, (4, 128), 5, 0.8, True, id="thin-bin-below-widens-the-span"),
    pytest.param(PUBLISHED[2:], (2, 128), 3, 2 / 6, False, id="mostly-thin-span"),
    pytest.param([(8, 2.1), (64, 8.1), (128, 8.3)], None, 3, 0.5, True, id="gap-counts-one-octave"),
    pytest.param([(8, 2.1), (128, 8.3)], None, 2, 0.25, False, id="two-far-bins"),
]


@pytest.mark.parametrize(("points", "span", "bins", "coverage", "claims"), CONFIDENCE_CASES)
def test_confidence(
    points: list[Point],
    span: tuple[float, float] | None,
    bins: int,
    coverage: float,
    claims: bool,
) -> None:
    verdict = find_knee(points, span=span)
    assert verdict.confidence.bins == bins
    assert verdict.confidence.coverage == pytest.approx(coverage)
    assert (verdict.knee is not None or verdict.beyond) is claims
    if not claims:
        assert verdict.recommended is None
        assert "too few to place the knee" in verdict.describe()


def sweep(
    curve: ConcurrencyCurve,
    levels: Sequence[Point],
    start: float,
    *,
    engine: str = "rollout-0",
    scrapes: int = 80,
    seed: int = 7,
) -> float:
    """Each level held `scrapes` scrapes, noise in antithetic pairs (exact means); the end."""
    rng = random.Random(seed)
    at = start
    for concurrency, throughput in levels:
        for _ in range(scrapes // 2):
            jitter, noise = rng.uniform(-0.08, 0.08), rng.uniform(-0.3, 0.3)
            for sign in (1, -1):
                at += SCRAPE
                c, t = concurrency * (1 + sign * jitter), throughput * (1 + sign * noise)
                curve.observe(engine, c, t, SCRAPE, at)
    return at


def test_noisy_scrapes_bin_into_the_sweep_means() -> None:
    curve = ConcurrencyCurve(unit="rollouts/s")
    now = sweep(curve, PUBLISHED, 0.0)
    points = curve.points(now, "rollout-0")
    assert [c for c, _ in points] == pytest.approx([c for c, _ in PUBLISHED], rel=1e-3)
    assert [t for _, t in points] == pytest.approx([t for _, t in PUBLISHED], rel=1e-3)
    verdict = curve.knee(now, "rollout-0")
    assert verdict.knee == pytest.approx(64, rel=1e-3)
    assert verdict.recommended == pytest.approx(51.2, rel=1e-3)


def test_pooled_curve_sums_the_role() -> None:
    curve = ConcurrencyCurve()
    engines = ["rollout-0", "rollout-1", "rollout-2", "rollout-3"]
    at = 0.0
    for concurrency, throughput in PUBLISHED:
        for _ in range(40):
            at += SCRAPE
            share = {name: (concurrency / 4, throughput / 4) for name in engines}
            curve.observe_round(share, SCRAPE, at)
    assert curve.knee(at).knee == pytest.approx(64)
    assert [curve.knee(at, name).knee for name in engines] == [pytest.approx(16)] * 4
    assert curve.engines() == engines


def test_a_garbled_engine_keeps_the_round_out_of_the_pool() -> None:
    curve = ConcurrencyCurve()
    curve.observe_round({"a": (8.0, 2.0), "b": (math.nan, 2.0)}, SCRAPE, 0.0)
    assert (curve.points(0.0, "a"), curve.points(0.0)) == ([], [])
    assert curve.retained_bins() == 1


def test_decay_forgets_an_old_regime() -> None:
    curve = ConcurrencyCurve(unit="rollouts/s")
    old = [(8, 2.0), (16, 4.0), (32, 4.2), (64, 4.3), (128, 4.3), (256, 4.2)]
    end = sweep(curve, old, 0.0)
    assert curve.knee(end, "rollout-0").knee == pytest.approx(32, rel=1e-3)
    later = sweep(curve, PUBLISHED, end + 48 * HOUR, seed=11)
    points = curve.points(later, "rollout-0")
    # 256 was run only in the old regime: two days on it is no longer a point, nor observed.
    assert [round(c) for c, _ in points] == [8, 16, 32, 64, 128]
    assert [t for _, t in points] == pytest.approx([t for _, t in PUBLISHED], rel=0.01)
    verdict = curve.knee(later, "rollout-0")
    assert verdict.knee == pytest.approx(64, rel=1e-3)
    assert verdict.confidence.highest == pytest.approx(128, rel=1e-3)


def test_too_few_bins_claim_nothing() -> None:
    curve = ConcurrencyCurve()
    now = sweep(curve, PUBLISHED[:2], 0.0)
    now = sweep(curve, [(64, 8.1)], now, scrapes=4)  # a brief visit: observed, not enough time
    verdict = curve.knee(now, "rollout-0")
    assert (verdict.knee, verdict.beyond, verdict.recommended) == (None, False, None)
    assert verdict.confidence.bins == 2
    assert verdict.confidence.highest == pytest.approx(64, rel=0.1)


IGNORED_CASES = [
    pytest.param(0.5, 2.0, SCRAPE, id="idle-under-one-in-flight"),
    pytest.param(8.0, math.nan, SCRAPE, id="nan-throughput"),
    pytest.param(math.inf, 2.0, SCRAPE, id="inf-concurrency"),
    pytest.param(8.0, -1.0, SCRAPE, id="negative-throughput"),
    pytest.param(8.0, 2.0, 0.0, id="no-time"),
    pytest.param(MAX_CONCURRENCY * 2, 2.0, SCRAPE, id="above-the-bins"),
]


@pytest.mark.parametrize(("concurrency", "throughput", "seconds"), IGNORED_CASES)
def test_garbage_is_ignored(concurrency: float, throughput: float, seconds: float) -> None:
    curve = ConcurrencyCurve()
    curve.observe("a", concurrency, throughput, seconds, 0.0)
    assert curve.retained_bins() == 0


def test_memory_is_bounded_and_engines_go() -> None:
    curve = ConcurrencyCurve()
    rng = random.Random(3)
    for step in range(4000):
        engine = f"rollout-{step % 3}"
        curve.observe(engine, 2 ** rng.uniform(0, 20), rng.uniform(0, 10), SCRAPE, step * SCRAPE)
    per_curve = math.log2(MAX_CONCURRENCY) / BIN_OCTAVES + 1
    assert curve.retained_bins() <= 3 * per_curve
    curve.forget("rollout-0")
    curve.retain(["rollout-1", "rollout-9"])
    assert curve.engines() == ["rollout-1"]


PLOT_CASES = [
    pytest.param(PUBLISHED, 60, 12, "KR", id="published-sweep"),
    pytest.param(PUBLISHED, 20, 4, "KR", id="small"),
    pytest.param([(8, 1.0), (16, 2.0), (32, 4.0), (64, 8.0)], 60, 12, "", id="beyond-no-marks"),
]


@pytest.mark.parametrize(("points", "width", "height", "marks"), PLOT_CASES)
def test_plot_shape(points: list[Point], width: int, height: int, marks: str) -> None:
    lines = plot(points, find_knee(points), width=width, height=height)
    assert len(lines) == height + 2
    assert len({len(line) for line in lines[:-1]}) == 1  # rows and axis line up
    axis = lines[height]
    assert sorted(c for c in axis if c.isalpha()) == sorted(marks)
    assert sum(line.count("*") for line in lines[:height]) == len(points)
    assert lines[-1].endswith("in flight")


def test_plot_puts_the_recommendation_below_the_knee() -> None:
    lines = plot(PUBLISHED, find_knee(PUBLISHED))
    axis = lines[-2]
    assert axis.index("R") < axis.index("K")  # 51 in flight sits left of 64


@pytest.mark.parametrize("knee", [None, find_knee([])], ids=["no-verdict", "empty-verdict"])
def test_plot_of_nothing(knee: Knee | None) -> None:
    assert len(plot([], knee)) == 1
