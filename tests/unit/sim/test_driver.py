"""The simulated rollout driver (issue #17): requests kept in flight on the engines it sends to,
a generation broadcast to its weight group every step, pushes to newcomers, and the NCCL hang
when a collective meets a member that is gone; then the registry that runs it in the simulator
(control API, roster hand-off, trainer generation, the watchdog's trainer failure)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from rljob.dev.sim.driver import DriverSettings, RolloutDriver
from rljob.dev.sim.drivers import Drivers
from rljob.dev.sim.models import EngineModel, TrainerModel
from rljob.dev.sim.profiles import EngineProfile
from tests.unit.sim.test_app import NS, T0, Bed

SETTINGS = DriverSettings(
    step_seconds=3.0, request_seconds=2.0, push_seconds=1.0, watchdog_seconds=10.0, per_engine=4
)


class Fleet:
    """Engines by pod name; a pod removed from it is gone (deleted or unreachable)."""

    def __init__(self, *pods: str) -> None:
        self.engines = {pod: self.engine(pod) for pod in pods}

    @staticmethod
    def engine(pod: str) -> EngineModel:
        return EngineModel(EngineProfile(noise=0.0), pod, T0)

    def driver(self, settings: DriverSettings = SETTINGS) -> RolloutDriver:
        self.lost: dict[str, int] = {}
        driver = RolloutDriver(settings, self.engines.get, lambda pod: T0, T0, self._stopped)
        for pod in sorted(self.engines):
            driver.on_join(pod, T0)
            driver.on_serving(pod, T0)
        return driver

    def _stopped(self, pod: str, at: float) -> None:
        """What the simulator does (SimulatorApp.end_requests): the pod's requests are lost."""
        if pod in self.engines:
            self.lost[pod] = self.engines[pod].weights.requests.abandon(at)


def in_flight(engine: EngineModel, at: float) -> int:
    """The engine's running requests as a scrape at `at` sees them (advancing settles them)."""
    engine.weights.requests.settle(at)
    return engine.weights.requests.in_flight()


def run(driver: RolloutDriver, start: float, end: float, step: float = 0.25) -> list[float]:
    """Ticks from start to end; returns when the watchdog fired."""
    fired, t = [], start
    while t <= end:
        if driver.tick(t).watchdog_fired:
            fired.append(t)
        t += step
    return fired


def test_the_driver_keeps_its_engines_busy_and_broadcasts_every_step() -> None:
    fleet = Fleet("e1", "e2")
    driver = fleet.driver()
    assert run(driver, T0, T0 + 10) == []
    assert driver.generation == 1 + 3  # steps at +3, +6, +9
    assert {pod: e.weights.generation for pod, e in fleet.engines.items()} == {"e1": 4, "e2": 4}
    assert {pod: e.weights.requests.in_flight() for pod, e in fleet.engines.items()} == {
        "e1": 4,
        "e2": 4,
    }
    assert driver.counters.sent["e1"] >= 4 * 5  # each request lasts 2 s: re-sent 5 times in 10 s
    assert (driver.counters.hangs, driver.hung) == (0, False)


def test_a_drained_engine_leaves_cleanly_and_a_synced_newcomer_gets_traffic() -> None:
    fleet = Fleet("e1", "e2", "e3")
    driver = fleet.driver()
    run(driver, T0, T0 + 4)
    driver.on_drain("e1", T0 + 4.1)
    run(driver, T0 + 4.25, T0 + 6.5)
    victim = fleet.engines.pop("e1")
    assert in_flight(victim, T0 + 6.5) == 0  # drained before its deletion
    driver.on_leave("e1", T0 + 6.5)
    assert fleet.lost == {}
    fleet.engines["e4"] = fleet.engine("e4")
    driver.on_join("e4", T0 + 7)
    run(driver, T0 + 7, T0 + 8.5)
    assert fleet.engines["e4"].weights.generation == driver.generation  # synced, not yet sent to
    assert "e4" not in driver.counters.sent
    driver.on_serving("e4", T0 + 8.6)
    run(driver, T0 + 8.75, T0 + 20)
    assert driver.counters.sent_unsynced.get("e4", 0) == 0
    assert driver.counters.first_request_after_creation["e4"] == 8.75
    assert (driver.counters.hangs, driver.group) == (0, {"e2", "e3", "e4"})


def test_a_push_to_a_newcomer_not_yet_attached_lands_once_its_engine_is_reachable() -> None:
    """The simulator attaches a new pod's engine on its next poll, which a loaded machine
    delays past the push: the push waits for the engine instead of being lost."""
    fleet = Fleet("e1")
    driver = fleet.driver()
    driver.on_join("e2", T0 + 0.5)  # its push is due at +1.5; the engine is not there yet
    run(driver, T0 + 0.5, T0 + 4)
    assert "e2" not in driver.synced
    fleet.engines["e2"] = fleet.engine("e2")
    run(driver, T0 + 4.25, T0 + 4.25)
    assert (fleet.engines["e2"].weights.generation, driver.synced) == (2, {"e1", "e2"})
    assert driver.pushes == {}


def test_an_engine_deleted_without_a_drain_hangs_the_group_until_the_watchdog() -> None:
    fleet = Fleet("e1", "e2", "e3")
    driver = fleet.driver()
    run(driver, T0, T0 + 4)
    del fleet.engines["e1"]  # Ungated: deleted; the roster says so only afterwards
    driver.on_leave("e1", T0 + 4.6)
    assert (driver.hung, driver.counters.hangs) == (True, 1)
    sent = dict(driver.counters.sent)
    assert run(driver, T0 + 4.75, T0 + 14.5) == []
    assert driver.counters.sent == sent  # hung: nothing sent
    assert run(driver, T0 + 14.75, T0 + 15) == [T0 + 14.75]  # 10 s after the hang
    assert (driver.counters.watchdog_aborts, driver.group, driver.hung) == (1, {"e2", "e3"}, False)


def test_an_engine_still_attached_when_the_roster_says_it_left_hangs_the_group() -> None:
    """The roster drops a pod once it is being deleted: its engine goes down with it, though
    the simulator detaches it only on its next poll."""
    fleet = Fleet("e1", "e2", "e3")
    driver = fleet.driver()
    run(driver, T0, T0 + 4)
    in_flight_then = in_flight(fleet.engines["e1"], T0 + 4.1)
    driver.on_leave("e1", T0 + 4.1)
    assert (driver.hung, driver.counters.hangs) == (True, 1)
    # Its deletion cancelled them (vLLM on SIGTERM): lost now, however late the sim's poll.
    assert in_flight_then > 0 and fleet.lost == {"e1": in_flight_then}
    assert in_flight(fleet.engines["e1"], T0 + 4.2) == 0


def test_a_serving_newcomer_the_simulator_has_not_attached_waits_instead_of_hanging() -> None:
    fleet = Fleet("e1")
    driver = fleet.driver()
    driver.on_join("e2", T0 + 1)
    driver.on_serving("e2", T0 + 1)  # Ready, the simulator's next poll not done yet
    run(driver, T0 + 1, T0 + 2)
    assert (driver.hung, driver.group) == (False, {"e1"})
    fleet.engines["e2"] = fleet.engine("e2")
    run(driver, T0 + 2, T0 + 2.5)
    assert (driver.hung, driver.group, "e2" in driver.sending) == (False, {"e1", "e2"}, True)


def test_a_broadcast_to_a_member_gone_before_the_roster_knows_hangs() -> None:
    fleet = Fleet("e1", "e2")
    driver = fleet.driver()
    run(driver, T0, T0 + 2)
    del fleet.engines["e2"]
    run(driver, T0 + 2.25, T0 + 3.0)  # the step at +3 broadcasts to e2
    assert driver.hung and driver.counters.hangs == 1
    run(driver, T0 + 3.25, T0 + 5.5)
    assert in_flight(fleet.engines["e1"], T0 + 5.5) == 0  # nothing sent since the hang


def test_traffic_before_the_push_landed_is_counted_unsynced() -> None:
    fleet = Fleet("e1")
    driver = fleet.driver()
    run(driver, T0, T0 + 1.5)
    fleet.engines["e2"] = fleet.engine("e2")
    driver.on_join("e2", T0 + 2)
    driver.on_serving("e2", T0 + 2)  # Ungated: Ready at once, before the push lands
    run(driver, T0 + 2, T0 + 4)
    assert driver.counters.sent_unsynced["e2"] == 4
    assert fleet.engines["e2"].weights.generation == driver.generation


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param({"step_seconds": 0}, "must be > 0", id="no-step"),
        pytest.param({"speed": 1}, "unknown driver settings", id="unknown"),
        pytest.param({"per_engine": True}, "must be a number", id="not-a-number"),
    ],
)
def test_bad_driver_settings_are_refused(body: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        DriverSettings.parse(body)


class FakeRoster:
    def __init__(self, callbacks: dict[str, Callable[[str], None]]) -> None:
        self.callbacks = callbacks
        self.running = False

    def start(self) -> object:
        self.running = True
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.running = False


@pytest.fixture
async def driven(tmp_path: Path) -> AsyncIterator[tuple[Bed, dict[str, FakeRoster], list[str]]]:
    bed = Bed(tmp_path)
    rosters: dict[str, FakeRoster] = {}
    failed: list[str] = []

    def factory(
        namespace: str, job: str, callbacks: dict[str, Callable[[str], None]]
    ) -> FakeRoster:
        rosters[f"{namespace}/{job}"] = FakeRoster(callbacks)
        return rosters[f"{namespace}/{job}"]

    bed.app.drivers = Drivers(bed.app, factory, lambda ns, pod: failed.append(f"{ns}/{pod}"))
    await bed.app.start()
    await bed.app.sync()
    yield bed, rosters, failed
    await bed.app.close()


@pytest.mark.asyncio(loop_scope="session")
async def test_the_registry_runs_a_driver_through_the_control_api(
    driven: tuple[Bed, dict[str, FakeRoster], list[str]],
) -> None:
    bed, rosters, failed = driven
    started = await bed.call("start_driver", namespace=NS, job="job1", per_engine=3, push_seconds=0)
    assert (started["generation"], started["hangs"], rosters[f"{NS}/job1"].running) == (1, 0, True)
    roster = rosters[f"{NS}/job1"]
    for pod in ("r1", "r2"):
        roster.callbacks["join"](pod)
        roster.callbacks["serving"](pod)
    await asyncio.sleep(0.05)  # the hand-off to the loop
    assert bed.app.drivers is not None
    run_ = bed.app.drivers.runs[(NS, "job1")]
    await bed.app.drivers.tick(run_)
    trainer = bed.app.workloads[f"{NS}/t0"].model
    assert isinstance(trainer, TrainerModel) and trainer.generation == 1
    report = await bed.call("driver", namespace=NS, job="job1")
    assert (report["sent"], report["group"]) == ({"r1": 3, "r2": 3}, ["r1", "r2"])
    bed.pods = [p for p in bed.pods if p["metadata"]["name"] != "r1"]  # deleted undrained
    await bed.app.sync()
    roster.callbacks["leave"]("r1")
    await asyncio.sleep(0.05)
    bed.clock.now += 11
    await bed.app.drivers.tick(run_)  # the watchdog
    report = await bed.call("driver", namespace=NS, job="job1")
    assert (report["lost"], report["hangs"], report["watchdog_aborts"]) == ({"r1": 3}, 1, 1)
    assert failed == [f"{NS}/t0"] and report["failed_trainer_pods"] == ["t0"]
    assert await bed.call("stop_driver", namespace=NS, job="job1") is True
    assert roster.running is False
