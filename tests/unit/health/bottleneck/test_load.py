"""Engine and verifier load over the window: means, tokens per second across a counter reset,
sleeping and paused time left out, saturation, the KV capacity estimate, verifier queue trend."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljob.health.bottleneck.load import (
    CAPACITY_SECONDS,
    CAPACITY_SUM,
    KV_SECONDS,
    KV_SUM,
    MIN_KV_FOR_CAPACITY,
    RUNNING,
    SATURATED,
    SECONDS,
    TOKENS,
    WAITING,
    EngineLedger,
    LoadInterval,
    LoadRing,
    VerifierLedger,
    steady_in_flight,
)
from rljob.health.samples import EngineSample
from tests.unit.allocations import bytes_kept


def sample(
    t: float,
    tokens: float,
    running: float,
    waiting: float = 0.0,
    kv_usage: float | None = None,
    sleeping: bool | None = None,
) -> EngineSample:
    return EngineSample(
        t=t,
        generated_tokens_total=tokens,
        running=running,
        waiting=waiting,
        kv_usage=kv_usage,
        sleeping=sleeping,
    )


def engine(samples: Sequence[EngineSample], pod: str = "engine-0") -> EngineLedger:
    ledger = EngineLedger(interval=15.0, capacity=100)
    for item in samples:
        ledger.observe(pod, item)
    return ledger


STEADY = [sample(15 * i, 1500 * i, 20, 0, kv_usage=0.25, sleeping=False) for i in range(61)]
RESET = [
    *[sample(15 * i, 1500 * i, 20, sleeping=False) for i in range(31)],
    *[sample(15 * i, 1500 * (i - 30), 20, sleeping=False) for i in range(31, 61)],
]
SLEEPS = [
    sample(15 * i, 1500 * min(i, 30), 20 if i < 30 else 0, sleeping=i >= 30) for i in range(61)
]
QUEUEING = [
    sample(15 * i, 3000 * i, 64, 16 if i >= 30 else 0, kv_usage=0.9, sleeping=False)
    for i in range(61)
]

WINDOWS = [
    # samples, running, waiting, kv, tokens/s, saturated share, capacity
    pytest.param(STEADY, 20, 0, 0.25, 100, 0, 80, id="steady-unsaturated"),
    pytest.param(RESET, 20, 0, None, 100, 0, None, id="counter-reset-reads-as-restart"),
    pytest.param(SLEEPS, 20, 0, None, 100, 0, None, id="sleeping-half-left-out"),
    pytest.param(QUEUEING, 64, 8, 0.9, 200, 0.5, 64 / 0.9, id="queueing-half-the-window"),
]


@pytest.mark.parametrize(
    ("samples", "running", "waiting", "kv", "tokens", "saturated", "capacity"), WINDOWS
)
def test_engine_window(
    samples: Sequence[EngineSample],
    running: float,
    waiting: float,
    kv: float | None,
    tokens: float,
    saturated: float,
    capacity: float | None,
) -> None:
    (found,) = engine(samples).windows(now=900, window=900)
    assert found.running == pytest.approx(running)
    assert found.waiting == pytest.approx(waiting, abs=0.3)
    assert found.kv_usage == (pytest.approx(kv) if kv is not None else None)
    assert found.tokens_per_second == pytest.approx(tokens)
    assert found.saturated == pytest.approx(saturated, abs=0.02)
    assert found.capacity == (pytest.approx(capacity) if capacity is not None else None)


def test_garbage_and_late_engine_samples_never_count() -> None:
    ledger = engine(STEADY[:31])
    for bad in (
        sample(470, math.nan, 20),
        sample(471, 1e6, -1),
        sample(100, 9e9, 500, 500),  # late
        sample(472, 47200, 20, kv_usage=3.0, sleeping=False),  # kv past 1: not a share
    ):
        ledger.observe("engine-0", bad)
    (found,) = ledger.windows(now=500, window=500)
    assert found.running == pytest.approx(20)
    assert found.tokens_per_second == pytest.approx(100)
    assert found.kv_usage == pytest.approx(0.25)


def test_engines_come_busiest_first_and_retain_drops_the_gone() -> None:
    ledger = EngineLedger(interval=15.0, capacity=100)
    for pod, running in (("quiet", 2), ("busy", 40), ("middle", 10)):
        for item in STEADY:
            ledger.observe(
                pod, sample(item.t, item.generated_tokens_total, running, sleeping=False)
            )
    assert [w.pod for w in ledger.windows(900, 900)] == ["busy", "middle", "quiet"]
    ledger.retain({"busy"})
    assert ledger.pods() == ["busy"]


def test_an_engine_without_judged_time_has_no_window() -> None:
    asleep = [sample(15 * i, 0, 0, sleeping=True) for i in range(10)]
    assert engine(asleep).windows(150, 900) == []


VERIFIERS = [
    # depths per pod over 900 s (one per 15 s), mean summed over pods, growth summed
    pytest.param([[0.5] * 61], 0.5, 0.0, id="steady-shallow"),
    pytest.param([[i / 6 for i in range(61)]], 5.0, 10.0, id="growing-by-10-over-the-window"),
    pytest.param([[2.0] * 61, [4.0] * 61], 6.0, 0.0, id="two-pods-summed"),
]


@pytest.mark.parametrize(("depths", "mean", "growth"), VERIFIERS)
def test_verifier_queue_mean_and_growth(
    depths: list[list[float]], mean: float, growth: float
) -> None:
    ledger = VerifierLedger(capacity=100, min_spacing=1.0)
    for pod, series in enumerate(depths):
        for i, depth in enumerate(series):
            ledger.observe(f"verifier-{pod}", 15 * i, depth)
    found = ledger.window(900, 900)
    assert found is not None
    assert found.pods == len(depths)
    assert found.queue_depth == pytest.approx(mean)
    assert found.growth == pytest.approx(growth, abs=1e-6)


def test_verifier_garbage_is_refused_and_latency_sanitized() -> None:
    ledger = VerifierLedger(capacity=10, min_spacing=1.0)
    assert not ledger.observe("v", math.nan, 1.0)
    assert not ledger.observe("v", 10, -1.0)
    assert not ledger.observe("v", 10, math.inf)
    assert ledger.window(10, 900) is None
    assert ledger.observe("v", 10, 3.0)
    assert not ledger.observe("v", 5, 3.0)
    ledger.note_latency(math.nan, 2.5, slow=True)
    found = ledger.window(10, 900)
    assert found is not None
    assert (found.p50, found.p99, found.slow, found.queue_depth) == (None, 2.5, True, 3.0)
    ledger.retain(set())
    found = ledger.window(10, 900)
    assert found is not None and found.queue_depth is None and found.p99 == 2.5


@pytest.mark.parametrize(
    ("first", "second", "steady"),
    [
        pytest.param(20, 20, True, id="unchanged"),
        pytest.param(20, 39, True, id="within-the-factor"),
        pytest.param(20, 41, False, id="past-the-factor"),
        pytest.param(64, 10, False, id="a-batch-draining"),
        pytest.param(0, 2, True, id="a-few-requests-apart-at-small-counts"),
        pytest.param(1, 4, False, id="past-the-slack-at-small-counts"),
    ],
)
def test_steady_in_flight(first: float, second: float, steady: bool) -> None:
    assert steady_in_flight(first, second) is steady
    assert steady_in_flight(second, first) is steady


def test_a_steep_tail_is_unsteady_but_counts_for_load() -> None:
    # A synchronous batch: 64 in flight, then 16 at the next scrape, while tokens flow on.
    ledger = EngineLedger(interval=15.0, capacity=100)
    closed = [
        ledger.observe("engine-0", sample(t, 1500 * i, running, kv_usage=0.25, sleeping=False))
        for i, (t, running) in enumerate([(0, 64), (15, 64), (30, 16)])
    ]
    assert [c.steady if c else None for c in closed] == [None, True, False]
    (found,) = ledger.windows(now=30, window=900)
    assert found.judged_seconds == pytest.approx(30)
    assert found.running == pytest.approx((64 * 15 + 40 * 15) / 30)
    assert found.tokens_per_second == pytest.approx(100)


def test_a_full_engine_ring_keeps_each_interval_in_a_row_of_floats() -> None:
    """Memory per engine is bounded and compact (issue #28): an interval is eleven floats (its
    bounds and the running totals a window is read from), not a LoadInterval and its float
    objects (about 280 bytes an interval before)."""
    capacity = 77  # a 30 min window at a 30 s interval
    samples = [sample(30.0 * i, 9000.0 * i, 8, 2, 0.5) for i in range(3 * capacity)]
    EngineLedger(interval=30.0, capacity=capacity).observe("warm-up", samples[0])
    ledger = EngineLedger(interval=30.0, capacity=capacity)

    def observe_all() -> None:
        for each in samples:
            ledger.observe("e0", each)

    _, held = bytes_kept(observe_all)
    (window,) = ledger.windows(now=samples[-1].t, window=900)
    assert window.tokens_per_second == pytest.approx(300.0)
    assert held / capacity < 11 * 8 * 1.25, held


def _row_by_row(intervals: Sequence[LoadInterval], start: float, end: float) -> list[float]:
    """The window's judged totals summed the plain way, interval by interval."""
    seconds = running = waiting = tokens = saturated = kv_seconds = kv_sum = 0.0
    capacity_seconds = capacity_sum = 0.0
    for load in intervals:
        inside = min(load.end, end) - max(load.start, start)
        if inside <= 0 or not load.judged:
            continue
        seconds += inside
        running += load.running * inside
        waiting += load.waiting * inside
        tokens += load.tokens * inside / load.duration
        saturated += inside if load.saturated else 0.0
        if load.kv_usage is not None:
            kv_seconds += inside
            kv_sum += load.kv_usage * inside
            if load.kv_usage >= MIN_KV_FOR_CAPACITY and load.running >= 1:
                capacity_seconds += inside
                capacity_sum += load.running / load.kv_usage * inside
    return [seconds, running, waiting, tokens, saturated, kv_seconds, kv_sum,
            capacity_seconds, capacity_sum]  # fmt: skip


load_intervals = st.lists(
    st.tuples(
        st.floats(0.5, 90.0),  # its length
        st.floats(0.0, 1e5),  # tokens
        st.floats(0.0, 256.0),  # running
        st.floats(0.0, 64.0),  # waiting
        st.none() | st.floats(0.0, 1.0),  # KV usage
        st.booleans(),  # saturated
        st.booleans(),  # judged
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    made=load_intervals,
    capacity=st.integers(2, 50),
    start=st.floats(-0.1, 1.1),
    length=st.floats(0.0, 1.2),
)
def test_a_window_from_running_totals_equals_the_window_read_row_by_row(
    made: list[tuple[float, float, float, float, float | None, bool, bool]],
    capacity: int,
    start: float,
    length: float,
) -> None:
    """Running totals and the straddling intervals give what summing every interval the ring
    still holds gives, whatever is judged, and after the ring has dropped its oldest."""
    ring, intervals, t = LoadRing(capacity), [], 0.0
    for duration, tokens, running, waiting, kv, saturated, judged in made:
        load = LoadInterval(t, t + duration, tokens, running, waiting, kv, saturated, judged)
        ring.append(load)
        intervals.append(load)
        t += duration
    start, end = start * t, (start + length) * t  # as shares of the time the intervals span
    got = ring.window(start, end)
    want = _row_by_row(intervals[-capacity:], start, end)
    columns = (SECONDS, RUNNING, WAITING, TOKENS, SATURATED, KV_SECONDS, KV_SUM,
               CAPACITY_SECONDS, CAPACITY_SUM)  # fmt: skip
    assert [got[c] for c in columns] == pytest.approx(want, rel=1e-9, abs=1e-6)
