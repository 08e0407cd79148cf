"""The verifier's queue: requests in flight settle by Little's law while workers keep up, grow
(bounded) once a slowdown takes the service below the arrivals, and each request's latency
includes its wait, as the SDK's exporter (rljob.sdk.verifier) times and counts them."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim import models
from rljob.dev.sim.models import VerifierModel
from rljob.dev.sim.models.queue import Service, advance
from rljob.dev.sim.profiles import ProfileError, VerifierProfile, override
from rljob.sdk import verifier as sdk_verifier

T0 = 1_800_000_000.0


def test_series_names_are_the_sdks() -> None:
    assert models.VERIFIER_QUEUE_DEPTH == sdk_verifier.QUEUE_DEPTH
    assert models.VERIFIER_DURATION == sdk_verifier.DURATION
    assert models.VERIFIER_ERRORS == sdk_verifier.ERRORS + "_total"


@pytest.mark.parametrize(
    ("service", "seconds", "depth", "completed"),
    [
        pytest.param(Service(20, 0.25, 0, 1000), 60, 5.0, 20 * 60 - 5, id="no-worker-limit"),
        pytest.param(Service(20, 0.25, 16, 1000), 60, 5.0, 20 * 60 - 5, id="workers-keep-up"),
        # capacity 8 / 1 s = 8 a second: the backlog grows 12 a second
        pytest.param(Service(20, 1.0, 8, 1000), 60, 8 + 12 * (60 - 0.511), None, id="grows"),
        pytest.param(Service(20, 1.0, 8, 300), 600, 300.0, None, id="bounded"),
    ],
)
def test_the_fluid_queue(
    service: Service, seconds: int, depth: float, completed: float | None
) -> None:
    after, done = advance(0.0, seconds, service)
    assert after == pytest.approx(depth, rel=1e-3)
    if completed is not None:
        assert done == pytest.approx(completed, rel=1e-3)
    else:  # every worker busy nearly all the time
        assert done == pytest.approx(service.capacity * seconds, rel=0.05)
    # Any split of the interval gives the same answer.
    stepped, stepped_done = 0.0, 0.0
    for _ in range(seconds):
        stepped, one = advance(stepped, 1.0, service)
        stepped_done += one
    assert (stepped, stepped_done) == pytest.approx((after, done), rel=1e-6)


def test_a_backlog_drains_when_the_slowdown_ends() -> None:
    slow, fast = Service(20, 1.0, 8, 1000), Service(20, 0.2, 8, 1000)
    depth, _ = advance(0.0, 30, slow)
    assert depth > 300 and slow.wait(depth) > 30
    depth, _ = advance(depth, 60, fast)  # capacity 40 a second: drains 20 a second
    assert depth == pytest.approx(20 * 0.2, rel=0.01) and fast.wait(depth) == 0


def page_values(model: VerifierModel) -> dict[str, float]:
    return {
        s.name: s.value
        for f in text_string_to_metric_families(model.render())
        for s in f.samples
        if not s.labels
    }


def run(model: VerifierModel, seconds: int) -> list[float]:
    depths = []
    for _ in range(seconds):
        model.advance(model.t + 1)
        depths.append(page_values(model)["rljob_verifier_queue_depth"])
    return depths


def test_a_healthy_verifier_reports_its_requests_in_flight() -> None:
    verifier = VerifierModel(VerifierProfile(workers=16), "s", T0)
    depths = run(verifier, 30)
    mean_latency = 0.2 * math.exp(0.5**2 / 2)
    assert depths[-1] == pytest.approx(20 * mean_latency, abs=2)
    assert all(d == int(d) for d in depths)  # whole requests, as the SDK's gauge counts
    assert verifier.delay() == pytest.approx(mean_latency, rel=0.01)


@pytest.mark.parametrize(
    ("changes", "growing"),
    [
        pytest.param({"slowdown": 10, "workers": 8}, True, id="slow-with-few-workers-queues"),
        pytest.param({"slowdown": 10}, False, id="slow-without-a-worker-limit-does-not"),
        pytest.param({"slowdown": 1, "workers": 8}, False, id="fast-enough-workers"),
    ],
)
def test_the_slowdown_switch_grows_a_bounded_queue(
    changes: dict[str, float], growing: bool
) -> None:
    profile = override(VerifierProfile(max_queue=500), changes)
    verifier = VerifierModel(profile, "s", T0)
    depths = run(verifier, 120)
    if not growing:  # in flight: arrivals (+-20%) x the mean latency, 45 at 10 x 0.227 s
        assert max(depths) <= 1.2 * 20 * 2.27 + 1 and verifier.waiting == 0
        assert depths[-30:] != sorted(depths[-30:])  # it wanders, it does not grow
        return
    # 20 a second arrive, 8 workers finish 8 / 2.27 s = 3.5 a second: 16.5 a second more queue
    assert depths[9] > 100 and depths[10:40] == sorted(depths[10:40])
    assert depths[-1] == 500  # the driver stops submitting at the bound
    assert verifier.p99() > 100
    assert verifier.delay() == pytest.approx(2.27 + (500 - 8) / 3.52, rel=0.02)


def test_queued_requests_show_their_wait_in_the_latency_histogram() -> None:
    verifier = VerifierModel(VerifierProfile(slowdown=5, workers=4, max_queue=200), "s", T0)
    run(verifier, 300)
    start = list(verifier.counts)
    run(verifier, 60)
    served = [now - before for now, before in zip(verifier.counts, start, strict=True)]
    # capacity 4 / 1.13 s = 3.5 a second; the wait (200 - 4) / 3.5 = 56 s puts nearly every
    # request above the 40 s bucket
    assert served[-1] == pytest.approx(4 / (1.0 * math.exp(0.125)) * 60, rel=0.05)
    below_40 = served[verifier.bounds.index(40.0)]
    assert below_40 < 0.01 * served[-1]


def test_bad_verifier_profiles_are_refused() -> None:
    with pytest.raises(ProfileError, match="slowdown"):
        override(VerifierProfile(), {"slowdown": 0})
