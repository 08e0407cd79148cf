"""The curve feeder: engines' intervals cut into slots, full rounds teach the pooled curve, a
round an engine misses teaches only the engines' own curves, a silent engine holds nothing."""

from __future__ import annotations

import pytest

from rljob.health.bottleneck.curve import CurveFeeder
from rljob.health.bottleneck.load import LoadInterval, steady_in_flight

SLOT = 15.0


def interval(
    start: float,
    end: float,
    in_flight: float,
    rate: float,
    judged: bool = True,
    peak: float | None = None,
) -> LoadInterval:
    return LoadInterval(
        start=start,
        end=end,
        tokens=rate * (end - start),
        running=in_flight,
        waiting=0.0,
        kv_usage=None,
        saturated=False,
        judged=judged,
        peak_in_flight=peak if peak is not None else in_flight,
        steady=steady_in_flight(in_flight, 2 * in_flight - peak) if peak is not None else True,
    )


def feeder() -> CurveFeeder:
    return CurveFeeder(slot=SLOT, min_seconds=60.0, window=900.0)


def test_full_rounds_teach_the_pool_with_totals() -> None:
    feed = feeder()
    for k in range(10):
        feed.add("a", interval(15 * k, 15 * k + 15, 8, 800))
        feed.add("b", interval(15 * k + 5, 15 * k + 20, 8, 800))  # offset scrapes
    feed.flush()
    (pooled,) = feed.curve.points(150)
    assert pooled == pytest.approx((16, 1600))
    assert feed.current() == pytest.approx(16)
    assert feed.highest(150, 900) == pytest.approx(16)


def test_a_round_one_engine_misses_teaches_only_the_engines() -> None:
    feed = feeder()
    for k in range(10):
        feed.add("a", interval(15 * k, 15 * k + 15, 8, 800))
        feed.add("b", interval(15 * k, 15 * k + 15, 8, 800, judged=k < 2))  # asleep from 30 s
    feed.flush()
    assert feed.curve.points(150) == []  # two full rounds: 30 s, under the bin's 60
    (own,) = feed.curve.points(150, "a")
    assert own == pytest.approx((8, 800))


def test_a_silent_engine_stops_holding_rounds_back() -> None:
    feed = feeder()
    feed.add("gone", interval(0, 15, 8, 800))
    for k in range(12):
        feed.add("a", interval(15 * k, 15 * k + 15, 8, 800))
    feed.flush()
    assert feed.curve.points(180, "a")


def test_slots_wait_for_a_lagging_engine_then_become_full_rounds() -> None:
    feed = feeder()
    for k in range(8):
        feed.add("a", interval(15 * k, 15 * k + 15, 8, 800))
    for k in range(6):  # 30 s behind: still active, its slots wait
        feed.add("b", interval(15 * k, 15 * k + 15, 8, 800))
    feed.flush()
    assert [seconds for _, _, seconds in feed.bins(120)] == [pytest.approx(90, rel=1e-2)]
    for k in (6, 7):
        feed.add("b", interval(15 * k, 15 * k + 15, 8, 800))
    feed.flush()
    assert [seconds for _, _, seconds in feed.bins(120)] == [pytest.approx(120, rel=1e-2)]
    (pooled,) = feed.curve.points(120)
    assert pooled == pytest.approx((16, 1600))


def test_retain_forgets_engines() -> None:
    feed = feeder()
    feed.add("a", interval(0, 15, 8, 800))
    feed.retain(set())
    feed.flush()
    assert feed.curve.engines() == []
    assert feed.bins(15) == []


@pytest.mark.parametrize(
    ("peak", "pooled"),
    [
        pytest.param(None, [(16, 1600)], id="steady-ends-teach-the-curve"),
        pytest.param(9.5, [(16, 1600)], id="ends-within-the-factor-teach-the-curve"),
        pytest.param(30, [], id="a-steep-tail-teaches-nothing"),
    ],
)
def test_only_steady_intervals_teach_the_curve_but_all_count_in_flight(
    peak: float | None, pooled: list[tuple[float, float]]
) -> None:
    feed = feeder()
    for k in range(10):
        for engine in ("a", "b"):  # ends `peak` and 2*8 - `peak`: a mean of 8 either way
            feed.add(engine, interval(15 * k, 15 * k + 15, 8, 800, peak=peak))
    feed.flush()
    assert feed.curve.points(150) == [pytest.approx(p) for p in pooled]
    assert feed.current() == pytest.approx(16)
    assert feed.highest(150, 900) == pytest.approx(2 * (peak or 8))


def test_a_round_with_one_engines_tail_teaches_only_the_steady_engine() -> None:
    feed = feeder()
    for k in range(10):
        feed.add("a", interval(15 * k, 15 * k + 15, 8, 800))
        feed.add("b", interval(15 * k, 15 * k + 15, 8, 800, peak=15))  # ends 15 and 1
    feed.flush()
    assert feed.curve.points(150) == []
    assert feed.curve.points(150, "b") == []
    (own,) = feed.curve.points(150, "a")
    assert own == pytest.approx((8, 800))
    assert feed.current() == pytest.approx(16)
