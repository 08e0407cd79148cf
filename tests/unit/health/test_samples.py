"""Engine samples: garbage, duplicates and out-of-order arrivals are dropped, counter resets
follow Prometheus' rate semantics, and the cumulative ring answers window sums."""

from __future__ import annotations

import math

import pytest

from rljob.health import CumulativeRing, EngineSample, EngineSeries, counter_delta, sanitize_sample
from rljob.health.samples import ring_capacity


@pytest.mark.parametrize(
    ("previous", "current", "delta"),
    [(10, 25, 15), (10, 10, 0), (100, 30, 30), (100, 0, 0)],
    ids=["increase", "flat", "reset-counts-the-new-value", "reset-to-zero"],
)
def test_counter_delta(previous: float, current: float, delta: float) -> None:
    assert counter_delta(previous, current) == delta


def sample(
    t: float,
    tokens: float = 0.0,
    *,
    running: float = 4,
    waiting: float = 2,
    **optional: float | bool | None,
) -> EngineSample:
    return EngineSample(t, tokens, running, waiting, **optional)  # type: ignore[arg-type]


GARBAGE = [
    pytest.param(sample(math.nan), id="nan-time"),
    pytest.param(sample(1, math.inf), id="infinite-counter"),
    pytest.param(sample(1, -5), id="negative-counter"),
    pytest.param(sample(1, running=math.nan), id="nan-running"),
    pytest.param(sample(1, waiting=-1), id="negative-waiting"),
    pytest.param(sample(1, 1e300), id="implausible-counter"),
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_samples_without_a_usable_core_are_dropped(garbage: EngineSample) -> None:
    assert sanitize_sample(garbage) is None


def test_garbage_optional_values_become_unknown() -> None:
    clean = sanitize_sample(
        sample(1, 5, kv_usage=math.nan, prefix_hits_total=-1.0, preemptions_total=math.inf)
    )

    assert clean is not None
    assert (clean.kv_usage, clean.prefix_hits_total, clean.preemptions_total) == (None, None, None)


@pytest.mark.parametrize(
    "clean",
    [
        pytest.param(sample(1, 5), id="core-only"),
        pytest.param(sample(1, 5, kv_usage=0.4, sleeping=False, paused=True), id="all-plausible"),
    ],
)
def test_a_clean_sample_is_kept_as_it_is(clean: EngineSample) -> None:
    """Each detector sanitizes the same sample: a clean one is not rebuilt."""
    assert sanitize_sample(clean) is clean


def test_duplicates_out_of_order_and_too_close_samples_are_dropped() -> None:
    series = EngineSeries(interval=30)

    assert series.add(sample(0, 0)) is None
    interval = series.add(sample(30, 300))
    assert interval is not None
    assert interval.throughput == 10
    assert series.add(sample(30, 310)) is None
    assert series.add(sample(10, 100)) is None
    assert series.add(sample(40, 400)) is None
    assert series.last is not None
    assert series.last.t == 30


def test_intervals_know_saturation_sleep_gaps_and_resets() -> None:
    series = EngineSeries(interval=30)
    series.add(sample(0, 100, sleeping=False))

    saturated = series.add(sample(30, 200))
    asleep = series.add(sample(60, 200, running=0, waiting=0, sleeping=True))
    gap = series.add(sample(300, 150))

    assert saturated is not None and saturated.saturated and not saturated.excluded
    assert asleep is not None and asleep.excluded and not asleep.saturated
    assert gap is not None and gap.gap and gap.counter_reset and gap.tokens == 150


def test_the_cumulative_ring_interpolates_and_forgets_the_oldest() -> None:
    ring = CumulativeRing(capacity=3, width=1)
    for start in (0.0, 10.0, 20.0, 30.0):
        ring.append(start, start + 10, (10.0,))

    assert len(ring) == 3
    assert ring.at(5.0) == (10.0,)
    assert ring.at(15.0) == (15.0,)
    assert ring.at(40.0) == (40.0,)
    assert ring.at(100.0) == (40.0,)
    assert ring.at(35.0)[0] - ring.at(15.0)[0] == 20.0


def test_ring_capacity_fits_the_window_within_twice_window_over_interval() -> None:
    capacity = ring_capacity(1800, 30)

    assert 1800 / 30 < capacity <= 2 * 1800 / 30
    assert ring_capacity(math.inf, 30) == ring_capacity(1e12, 1)
