"""The step-time fit and the curve's verdict: a knee found stands; a curve still climbing is
extrapolated to the KV capacity, or doubled without one."""

from __future__ import annotations

import pytest

from rljob.health.bottleneck.extrapolate import fit_step_time, judge_curve
from rljob.health.knee import DEFAULT_RULE, find_knee

Point = tuple[float, float]


def curve(a: float, b: float, concurrencies: list[float], capacity: float = 1e9) -> list[Point]:
    return [(c, min(c, capacity) / (a + b * min(c, capacity))) for c in concurrencies]


FITS = [
    pytest.param(0.01, 0.0002, [1, 2, 4, 8, 16], id="one-engine-low-concurrency"),
    pytest.param(0.03, 0.00001, [4, 6, 8], id="three-bins-one-octave"),
    pytest.param(0.002, 0.001, [16, 32, 64, 128], id="per-sequence-cost-dominant"),
]


@pytest.mark.parametrize(("a", "b", "concurrencies"), FITS)
def test_the_fit_recovers_a_and_b(a: float, b: float, concurrencies: list[float]) -> None:
    fit = fit_step_time(curve(a, b, concurrencies))
    assert fit is not None
    assert (fit.a, fit.b) == pytest.approx((a, b))
    assert fit.error == pytest.approx(0, abs=1e-9)
    assert fit.points == len(concurrencies)


NO_FIT = [
    pytest.param([(1, 100.0), (2, 190.0)], id="two-bins"),
    pytest.param([(8, 100.0), (10, 120.0), (12, 140.0)], id="under-an-octave"),
    pytest.param([(1, 100.0), (2, 200.0), (4, 400.0)], id="linear-no-per-sequence-cost"),
    pytest.param([(1, 100.0), (2, 250.0), (4, 700.0)], id="superlinear"),
    pytest.param([(1, 0.0), (2, 0.0), (4, 0.0)], id="no-throughput"),
    pytest.param([(4, 100.0), (8, 100.0), (16, 100.0)], id="flat-no-fixed-cost"),
]


@pytest.mark.parametrize("points", NO_FIT)
def test_no_fit_without_a_fixed_and_a_per_sequence_cost(points: list[Point]) -> None:
    assert fit_step_time(points) is None


def test_the_peak_is_the_lowest_concurrency_within_tolerance_of_capacity() -> None:
    fit = fit_step_time(curve(0.01, 0.0002, [1, 2, 4, 8]))
    assert fit is not None
    peak = fit.peak(256, 0.05)
    assert fit.throughput(peak, 256) == pytest.approx(0.95 * fit.throughput(256, 256))
    assert fit.peak(40, 0.05) <= 40  # a small cache caps the peak


def test_a_knee_found_stands_as_is() -> None:
    points = [(8, 2.1), (16, 4.0), (32, 7.2), (64, 8.1), (128, 8.3)]
    knee = find_knee(points)
    verdict = judge_curve(knee, points, 1000.0, 16.0, rule=DEFAULT_RULE)
    assert verdict.recommended == pytest.approx(51.2)
    assert (verdict.peak, verdict.extrapolated) == (64, False)
    assert verdict.message == knee.message
    assert verdict.summary == "80% of the peak's 64 in flight"


BEYOND = [
    # capacity, current, recommended (None: computed from the fit), extrapolated text
    pytest.param(256.0, 16.0, None, "the KV cache fills at about 256", id="capacity-known"),
    pytest.param(None, 16.0, 32.0, "no KV capacity estimate", id="no-capacity-doubles"),
    pytest.param(12.0, 16.0, 32.0, "within what was observed", id="capacity-below-observed"),
]


@pytest.mark.parametrize(("capacity", "current", "recommended", "text"), BEYOND)
def test_a_curve_still_climbing_is_extrapolated_or_doubled(
    capacity: float | None, current: float, recommended: float | None, text: str
) -> None:
    points = curve(0.01, 0.0002, [1, 2, 4, 8, 16])
    knee = find_knee(points, unit="tokens/s")
    assert knee.beyond
    verdict = judge_curve(knee, points, capacity, current, rule=DEFAULT_RULE)
    assert verdict.extrapolated
    assert text in verdict.message
    if recommended is None:
        assert verdict.fit is not None and capacity is not None
        assert verdict.recommended == pytest.approx(0.8 * verdict.fit.peak(capacity, 0.05))
        assert verdict.peak is not None and verdict.peak > 16
    else:
        assert verdict.recommended == recommended
        assert "the knee lies beyond 16 in flight, double it to 32" in verdict.message


def test_bins_that_do_not_fit_double_the_current_concurrency() -> None:
    points = [(1.0, 100.0), (2.0, 200.0), (4.0, 400.0), (8.0, 800.0)]
    knee = find_knee(points)
    verdict = judge_curve(knee, points, 256.0, None, rule=DEFAULT_RULE)
    assert verdict.recommended == 16.0  # the top observed, doubled
    assert "do not fit" in verdict.message
