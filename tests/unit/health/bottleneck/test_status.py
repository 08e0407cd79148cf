"""status.bottleneck from a diagnosis: bounded lists, busiest engines first, garbage-free."""

from __future__ import annotations

import math

import pytest

from rljob.api.diagnosis import MAX_CURVE_POINTS, MAX_ENGINE_LOADS
from rljob.health.bottleneck.attribution import Observations, Verdict
from rljob.health.bottleneck.extrapolate import judge_curve
from rljob.health.bottleneck.load import EngineWindow, VerifierWindow
from rljob.health.bottleneck.phases import PhaseBreakdown
from rljob.health.bottleneck.status import curve_status, to_status
from rljob.health.bottleneck.tracker import Tracked
from rljob.health.knee import DEFAULT_RULE, find_knee
from rljob.vocabulary.enums import BottleneckRole
from rljob.vocabulary.phases import PHASES

WINDOW = 900.0


def test_every_list_is_bounded_and_values_kept_in_range() -> None:
    load = [
        EngineWindow(
            f"engine-{i:03}", WINDOW, 100.0 - i, 0.0, 1.2 if i == 0 else 0.5, 10.0, 1.5, None
        )
        for i in range(MAX_ENGINE_LOADS + 10)
    ]
    shares = dict.fromkeys(PHASES, 1 / len(PHASES))
    breakdown = PhaseBreakdown(WINDOW, ("t",), shares, dict.fromkeys(PHASES, 150.0), 0.0, 1.0)
    verifier = VerifierWindow(1, math.nan, None, None, math.inf, False)
    points = [(2.0 ** (k / 4), 100.0 * k) for k in range(1, MAX_CURVE_POINTS + 20)]
    knee = find_knee(points)
    bins = [(c, t, 300.0 + k) for k, (c, t) in enumerate(points)]
    curve = curve_status(judge_curve(knee, points, None, 8.0, rule=DEFAULT_RULE), bins, math.nan)
    seen = Observations(WINDOW, breakdown, 1.0, load, verifier, None, None)
    tracked = Tracked(Verdict(BottleneckRole.TRAINER, "x" * 5000, "advice"), 100.0)
    status = to_status(tracked, 160.0, seen, curve)
    assert len(status.engines) == MAX_ENGINE_LOADS
    assert status.engines[0].pod == "engine-000"
    assert status.engines[0].kv_usage == 1.0 and status.engines[0].saturated == 1.0
    assert len(status.phases) == len(PHASES)
    assert all(p.seconds_per_step is None for p in status.phases)  # no step ended
    assert status.step_seconds is None
    assert status.verifier is not None
    assert (status.verifier.queue_depth, status.verifier.p99_seconds) == (None, None)
    assert status.curve is not None and len(status.curve.points) == MAX_CURVE_POINTS
    # The bins with the most time are kept, lowest concurrency first.
    kept = [p.concurrency for p in status.curve.points]
    assert kept == sorted(kept) and kept[-1] == pytest.approx(points[-1][0])
    assert status.curve.current is None
    assert len(status.evidence) == 1024
    assert status.since.timestamp() == 100.0 and status.updated_at.timestamp() == 160.0
    assert status.window_seconds == WINDOW
