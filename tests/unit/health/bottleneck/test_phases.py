"""The trainer's phase ledger: shares and seconds per step over a window, counter restarts, step
resumes, garbage, out-of-order samples, thinning and several pods combined."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rljob.health.bottleneck.phases import PhaseLedger, PhaseSample, _accrued, clean_sample
from rljob.vocabulary.phases import PHASES
from tests.unit.allocations import bytes_kept

Sample = tuple[float, Mapping[str, float], float | None]


def ledger(
    samples: Sequence[Sample], pod: str = "trainer-0", spacing: float = 1.0, capacity: int = 200
) -> PhaseLedger:
    found = PhaseLedger(capacity=capacity, min_spacing=spacing)
    for t, seconds, step in samples:
        found.observe(pod, t, seconds, step)
    return found


def steady(
    waiting: float, training: float, start: float = 0.0, count: int = 61, step_every: int = 4
) -> list[Sample]:
    """Every 15 s: `waiting` and `training` seconds accrued, a step every `step_every` samples."""
    return [
        (
            start + 15 * i,
            {"waiting_for_rollouts": waiting * i, "training": training * i},
            i // step_every,
        )
        for i in range(count)
    ]


SHARES = [
    # samples, now, window, share of waiting, steps, seconds per step of training
    pytest.param(steady(6, 9), 900, 900, 0.4, 15, 36.0, id="steady-40-60"),
    pytest.param(steady(15, 0), 900, 900, 1.0, 15, 0.0, id="only-waiting"),
    pytest.param(steady(6, 9), 450, 300, 0.4, 5, 36.0, id="a-window-inside-the-samples"),
    pytest.param(
        [
            *steady(6, 9, count=31),
            *[(450 + 15 * i, {"waiting_for_rollouts": 15.0 * i}, 0) for i in range(1, 31)],
        ],
        900,
        900,
        0.4 * 0.5 + 0.5,
        7,
        36 * 7.5 / 7,
        id="restart-counts-from-zero-and-step-resumes-at-0",
    ),
]


@pytest.mark.parametrize(("samples", "now", "window", "waiting", "steps", "training"), SHARES)
def test_shares_steps_and_seconds_per_step(
    samples: list[Sample], now: float, window: float, waiting: float, steps: float, training: float
) -> None:
    found = ledger(samples).breakdown(now, window, min_coverage=0.5)
    assert found is not None
    assert found.shares["waiting_for_rollouts"] == pytest.approx(waiting)
    assert found.steps == pytest.approx(steps)
    assert found.seconds_per_step.get("training", 0.0) == pytest.approx(training)


def test_an_interval_straddling_the_window_counts_by_its_share_inside() -> None:
    samples: list[Sample] = [(0, {"training": 0.0}, None), (100, {"training": 100.0}, None)]
    pods = ledger(samples).per_pod(now=100, window=30)
    assert pods[0].seconds["training"] == pytest.approx(30)
    assert pods[0].covered == pytest.approx(30)
    assert pods[0].steps is None


GARBAGE = [
    pytest.param((math.nan, {"training": 1.0}, None), id="nan-time"),
    pytest.param((-5.0, {"training": 1.0}, None), id="negative-time"),
    pytest.param((10.0, {"training": math.nan}, None), id="nan-value"),
    pytest.param((10.0, {"training": -1.0}, None), id="negative-value"),
    pytest.param((10.0, {"training": math.inf}, None), id="infinite-value"),
    pytest.param((10.0, {"starting": 4.0}, None), id="unknown-phase-only"),
    pytest.param((10.0, {}, None), id="no-phase"),
]


@pytest.mark.parametrize("sample", GARBAGE)
def test_garbage_samples_are_refused(sample: Sample) -> None:
    assert clean_sample(*sample) is None


def test_garbage_values_beside_good_ones_are_dropped_alone() -> None:
    found = clean_sample(
        10.0, {"training": 3.0, "syncing_weights": math.nan, "bogus": 1.0}, math.nan
    )
    assert found is not None
    assert dict(found.seconds) == {"training": 3.0}
    assert found.step is None


def test_out_of_order_duplicate_and_too_close_samples_are_dropped() -> None:
    phases = PhaseLedger(capacity=10, min_spacing=12.0)
    assert phases.observe("p", 100, {"training": 10.0}, 1)
    assert not phases.observe("p", 100, {"training": 10.0}, 1)  # duplicate
    assert not phases.observe("p", 50, {"training": 1.0}, 0)  # late
    assert not phases.observe("p", 105, {"training": 15.0}, 1)  # closer than the spacing
    assert phases.observe("p", 115, {"training": 25.0}, 2)


def test_an_interval_accruing_far_more_than_it_lasted_is_garbage_and_a_little_more_is_scaled() -> (
    None
):
    samples: list[Sample] = [
        (0, {"training": 0.0, "syncing_weights": 0.0}, None),
        (15, {"training": 18.0, "syncing_weights": 0.0}, None),  # clock skew: scaled to 15
        (30, {"training": 5000.0, "syncing_weights": 0.0}, None),  # garbage: dropped
        (45, {"training": 5000.0, "syncing_weights": 15.0}, None),
    ]
    pod = ledger(samples).per_pod(now=45, window=45)[0]
    assert pod.seconds["training"] == pytest.approx(15)
    assert pod.seconds["syncing_weights"] == pytest.approx(15)
    assert pod.covered == pytest.approx(30)


def test_pods_are_combined_by_the_mean_of_their_shares_and_thin_ones_left_out() -> None:
    phases = ledger(steady(6, 9), pod="trainer-0")
    for t, seconds, step in steady(12, 3):
        phases.observe("trainer-1", t, seconds, step)
    for t, seconds, step in steady(15, 0, start=800, count=7):
        phases.observe("trainer-2", t, seconds, step)  # spans 90 s of 900: left out
    found = phases.breakdown(900, 900, min_coverage=0.5)
    assert found is not None
    assert found.pods == ("trainer-0", "trainer-1")
    assert found.shares["waiting_for_rollouts"] == pytest.approx((0.4 + 0.8) / 2)
    assert found.describe_pods() == "the mean of 2 trainer pods: trainer-0, trainer-1"
    assert found.coverage == pytest.approx(1.0)


def test_no_pod_covering_enough_gives_no_breakdown_but_its_coverage() -> None:
    phases = ledger(steady(6, 9, count=11))
    assert phases.breakdown(900, 900, min_coverage=0.5) is None
    assert phases.coverage(900, 900) == pytest.approx(150 / 900)


def test_the_ring_is_bounded_and_retain_drops_pods() -> None:
    phases = PhaseLedger(capacity=8, min_spacing=1.0)
    for t, seconds, step in steady(6, 9, count=100):
        phases.observe("trainer-0", t, seconds, step)
    assert phases.per_pod(1500, 10_000)[0].covered == pytest.approx(7 * 15)
    phases.retain({"trainer-9"})
    assert phases.pods() == []


def test_many_pods_are_named_up_to_three_and_counted() -> None:
    phases = PhaseLedger(capacity=100, min_spacing=1.0)
    for pod in range(5):
        for t, seconds, step in steady(6, 9):
            phases.observe(f"trainer-{pod}", t, seconds, step)
    found = phases.breakdown(900, 900, min_coverage=0.5)
    assert found is not None
    assert found.describe_pods() == (
        "the mean of 5 trainer pods: trainer-0, trainer-1, trainer-2 and 2 more"
    )


def test_a_full_ring_keeps_each_sample_in_a_few_floats() -> None:
    """Memory per trainer pod is bounded and compact (issue #28): a sample is two rows of six
    floats and its time and step, not two dictionaries (about 740 bytes a sample before)."""
    capacity = 77  # a 30 min window at a 30 s interval
    samples = steady(20.0, 10.0, count=3 * capacity)
    ledger(samples[:3])  # the first use's one-off allocations are not the ring's
    full, held = bytes_kept(lambda: ledger(samples, capacity=capacity))
    assert full.pods() == ["trainer-0"]
    assert held / capacity < 200, held


def _row_by_row(
    samples: Sequence[Sample], start: float, end: float
) -> tuple[dict[str, float], float, float | None]:
    """The window read the plain way, interval by interval, from the accepted samples."""
    accepted: list[PhaseSample] = []
    for t, seconds, step in samples:
        sample = clean_sample(t, seconds, step)
        if sample is not None and (not accepted or sample.t >= accepted[-1].t + 1.0):
            accepted.append(sample)
    seconds_in = dict.fromkeys(PHASES, 0.0)
    covered, steps, stepped = 0.0, 0.0, False
    for previous, current in itertools.pairwise(accepted):
        inside = min(current.t, end) - max(previous.t, start)
        amounts = _accrued(previous, current)
        if inside <= 0 or not amounts:
            continue
        share = inside / (current.t - previous.t)
        covered += inside
        for phase, amount in amounts.items():
            seconds_in[phase] += amount * share
        if previous.step is not None and current.step is not None:
            stepped = True
            steps += max(0.0, current.step - previous.step) * share
    return seconds_in, covered, steps if stepped else None


phase_samples = st.lists(
    st.tuples(
        st.floats(0.5, 90.0),  # seconds since the previous sample
        st.dictionaries(st.sampled_from(PHASES), st.floats(0.0, 500.0), min_size=1),
        st.none() | st.floats(0.0, 50.0),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(gaps=phase_samples, start=st.floats(-0.1, 1.1), length=st.floats(0.0, 1.2))
def test_a_window_from_running_totals_equals_the_window_read_row_by_row(
    gaps: list[tuple[float, dict[str, float], float | None]], start: float, length: float
) -> None:
    """Running totals and the two straddling intervals give what summing every interval
    inside the window gives, whatever the counters do (restarts, garbage, missing steps)."""
    samples: list[Sample] = []
    t = 0.0
    for gap, seconds, step in gaps:
        t += gap
        samples.append((t, seconds, step))
    start, length = start * t, length * t  # as shares of the time the samples span
    end = start + length
    (got,) = ledger(samples).per_pod(end, length)
    want_seconds, want_covered, want_steps = _row_by_row(samples, start, end)
    assert got.seconds == pytest.approx(want_seconds, rel=1e-9, abs=1e-6)
    assert got.covered == pytest.approx(want_covered, rel=1e-9, abs=1e-6)
    assert (got.steps is None) == (want_steps is None)
    if want_steps is not None:
        assert got.steps == pytest.approx(want_steps, rel=1e-9, abs=1e-6)
