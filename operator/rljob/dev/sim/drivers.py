"""The simulator's rollout drivers, one per job a test turned on through the control API
(POST /drivers). The roster-following one (rljob.dev.sim.driver) follows its job's roster
through rljob.sdk.EngineRoster (the callbacks run on the roster's thread and are handed to the
simulator's loop) and when its NCCL watchdog fires fails rank 0 of the job's trainer the way the
bed fails one (rljob.dev.sim.driver_kube). The slime-like one (rljob.dev.sim.slot_driver,
"addressing": "slots") keeps the job's slot Services as its addresses, reads their ready
endpoints once per tick (rljob.dev.sim.driver_kube.KubeSlots), and when an update fails fails
rank 0 with slime's exception.
Both drive the job's engines and publish their policy generation as the job's trainers'
rljob_policy_generation. Lost requests come from the simulator's ledger."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from rljob.dev.sim.driver import DriverSettings, RolloutDriver
from rljob.dev.sim.models import EngineModel, TrainerModel
from rljob.dev.sim.slot_driver import SlotAddress, SlotDriver, SlotSettings

if TYPE_CHECKING:
    from rljob.dev.sim.faults import Active
    from rljob.dev.sim.weights import LostRequests
    from rljob.dev.sim.workload import Workload

log = logging.getLogger("rljob.dev.sim")

TICK_SECONDS = 0.25
ROSTER_EVENTS = ("join", "serving", "drain", "leave")


class Simulated(Protocol):
    """What the drivers read and change of the simulation (rljob.dev.sim.simulation, which
    holds the drivers, so is not imported)."""

    clock: Callable[[], float]
    lost: LostRequests

    @property
    def workloads(self) -> Mapping[str, Workload]: ...

    def faults_of(self, workload: Workload) -> Active: ...

    def end_requests(self, key: str, at: float) -> None: ...


class Roster(Protocol):
    def start(self) -> object: ...
    def stop(self, timeout: float = 5.0) -> None: ...


# (namespace, job, callbacks by event name, each taking the engine's pod name) -> a roster to
# start; blocking (it may create credentials), so it runs in a thread.
RosterFactory = Callable[[str, str, dict[str, Callable[[str], None]]], Roster]
# (namespace, trainer pod) -> fails that pod with the NCCL watchdog abort; blocking.
TrainerFailer = Callable[[str, str], None]


class SlotCluster(Protocol):
    """What a slot driver reads of the API server and how it fails a trainer; blocking."""

    def slot_addresses(self, namespace: str, job: str) -> list[SlotAddress]: ...

    def ready_endpoints(
        self, namespace: str, services: Sequence[str]
    ) -> dict[str, tuple[str, ...]]: ...

    def fail_process(self, namespace: str, pod: str, message: str) -> None: ...


class DriverUnavailableError(RuntimeError):
    """A driver cannot start (yet): no API access, or the job has no slot Services."""


@dataclass
class DriverRun:
    namespace: str
    job: str
    driver: RolloutDriver
    roster: Roster | None = None
    failed_pods: tuple[str, ...] = ()


@dataclass
class SlotRun:
    """A slot driver and the ready endpoints it routes on, read at its last tick."""

    namespace: str
    job: str
    driver: SlotDriver | None = None
    ready: dict[str, tuple[str, ...]] = field(default_factory=dict)
    read_errors: int = 0
    failed_pods: tuple[str, ...] = ()


AnyRun = DriverRun | SlotRun


class Drivers:
    """Starts, ticks, reports and stops the drivers."""

    def __init__(
        self,
        app: Simulated,
        roster_factory: RosterFactory,
        fail_trainer: TrainerFailer,
        slots: SlotCluster | None = None,
        *,
        tick_seconds: float = TICK_SECONDS,
    ) -> None:
        self.app = app
        self.roster_factory = roster_factory
        self.fail_trainer = fail_trainer
        self.slots = slots
        self.tick_seconds = tick_seconds  # tests tick by hand with a long one
        self.runs: dict[tuple[str, str], AnyRun] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self, namespace: str, job: str, settings: DriverSettings) -> dict[str, Any]:
        await self.stop(namespace, job)
        driver = RolloutDriver(
            settings,
            lambda pod: self._engine(namespace, pod),
            lambda pod: self._created(namespace, pod),
            self.app.clock(),
            lambda pod, at: self.app.end_requests(f"{namespace}/{pod}", at),
        )
        run = DriverRun(namespace, job, driver)
        self.runs[(namespace, job)] = run
        loop = asyncio.get_running_loop()
        callbacks = {
            event: self._handoff(loop, run, event) for event in ROSTER_EVENTS
        }  # fmt: skip
        roster = await asyncio.to_thread(self.roster_factory, namespace, job, callbacks)
        run.roster = roster
        await asyncio.to_thread(roster.start)
        self._ticking()
        log.info("driver of %s/%s started: %s", namespace, job, settings)
        return self.report(namespace, job) or {}

    async def start_slots(self, namespace: str, job: str, settings: SlotSettings) -> dict[str, Any]:
        """A slot driver for the job: its addresses are the job's slot Services now."""
        if self.slots is None:
            raise DriverUnavailableError("this simulator has no API access for slot drivers")
        await self.stop(namespace, job)
        addresses = await asyncio.to_thread(self.slots.slot_addresses, namespace, job)
        if not addresses:
            raise DriverUnavailableError(f"{namespace}/{job} has no slot Services (yet)")
        run = SlotRun(namespace, job)
        await self._read_endpoints(run, [a.service for a in addresses])
        run.driver = SlotDriver(
            settings,
            addresses,
            lambda service: run.ready.get(service, ()),
            lambda pod: self._engine(namespace, pod),
            self.app.clock(),
        )
        self.runs[(namespace, job)] = run
        self._ticking()
        log.info("slot driver of %s/%s started on %s: %s", namespace, job, addresses, settings)
        return self.report(namespace, job) or {}

    def _ticking(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._tick_loop())

    async def stop(self, namespace: str, job: str) -> bool:
        run = self.runs.pop((namespace, job), None)
        if run is None:
            return False
        if isinstance(run, DriverRun) and run.roster is not None:
            await asyncio.to_thread(run.roster.stop)
        return True

    async def close(self) -> None:
        for namespace, job in list(self.runs):
            await self.stop(namespace, job)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def report(self, namespace: str, job: str) -> dict[str, Any] | None:
        run = self.runs.get((namespace, job))
        if run is None:
            return None
        lost = self.app.lost.of(namespace, job)
        if isinstance(run, SlotRun):
            assert run.driver is not None
            own = {**run.driver.report(), "endpoint_read_errors": run.read_errors}
        else:
            own = run.driver.report()
        return {
            "namespace": namespace,
            "job": job,
            **own,
            "lost": lost,
            "lost_total": sum(lost.values()),
            "failed_trainer_pods": list(run.failed_pods),
        }

    def _handoff(
        self, loop: asyncio.AbstractEventLoop, run: DriverRun, event: str
    ) -> Callable[[str], None]:
        def deliver(pod: str) -> None:
            if self.runs.get((run.namespace, run.job)) is run:
                getattr(run.driver, f"on_{event}")(pod, self.app.clock())

        def handoff(pod: str) -> None:
            loop.call_soon_threadsafe(deliver, pod)

        return handoff

    async def _tick_loop(self) -> None:
        while self.runs:
            for run in list(self.runs.values()):
                try:
                    await self.tick(run)
                except Exception:  # one driver's defect must not stop the others
                    log.exception("driver of %s/%s failed a tick", run.namespace, run.job)
            await asyncio.sleep(self.tick_seconds)

    async def tick(self, run: AnyRun) -> None:
        if isinstance(run, SlotRun):
            await self._tick_slots(run)
            return
        now = self.app.clock()
        self._drive(run, run.driver.generation)
        if run.driver.tick(now).watchdog_fired:
            await self._fail_trainer(run, "NCCL watchdog", self.fail_trainer)

    async def _tick_slots(self, run: SlotRun) -> None:
        driver = run.driver
        assert driver is not None
        await self._read_endpoints(run, [a.service for a in driver.addresses])
        failed = driver.tick(self.app.clock()).failed
        self._drive(run, driver.generation)
        if failed is not None and self.slots is not None:
            slots = self.slots

            def fail(namespace: str, pod: str) -> None:
                slots.fail_process(namespace, pod, failed)

            await self._fail_trainer(run, "a weight update failed", fail)

    async def _read_endpoints(self, run: SlotRun, services: list[str]) -> None:
        """The Services' ready endpoints, once per tick; a failed read keeps the last ones
        (kube-proxy keeps its rules while its watch reconnects)."""
        assert self.slots is not None
        try:
            run.ready = await asyncio.to_thread(self.slots.ready_endpoints, run.namespace, services)
        except Exception as exc:
            run.read_errors += 1
            log.warning("%s/%s: reading EndpointSlices: %s", run.namespace, run.job, exc)

    def _drive(self, run: AnyRun, generation: int) -> None:
        """The job's engines show the driver's requests; its trainers its generation."""
        for workload in self._job_workloads(run):
            model = workload.model
            if isinstance(model, EngineModel):
                model.weights.driven = True
            elif isinstance(model, TrainerModel):
                model.generation, model.generation_driven = generation, True

    async def _fail_trainer(self, run: AnyRun, why: str, fail: TrainerFailer) -> None:
        trainers = [
            w
            for w in self._job_workloads(run)
            if w.pod.role == "trainer" and w.pod.completion_index == 0
        ]
        if not trainers:
            log.warning("%s/%s: %s with no trainer to fail", run.namespace, run.job, why)
            return
        rank0 = max(trainers, key=lambda w: w.pod.attempt or 0).pod
        log.info("%s/%s: %s: failing %s", run.namespace, run.job, why, rank0.name)
        await asyncio.to_thread(fail, run.namespace, rank0.name)
        run.failed_pods = (*run.failed_pods, rank0.name)

    def _job_workloads(self, run: AnyRun) -> list[Workload]:
        return [
            w
            for w in self.app.workloads.values()
            if (w.pod.namespace, w.pod.job) == (run.namespace, run.job)
        ]

    def _engine(self, namespace: str, pod: str) -> EngineModel | None:
        workload = self.app.workloads.get(f"{namespace}/{pod}")
        if workload is None or not isinstance(workload.model, EngineModel):
            return None
        return None if self.app.faults_of(workload).unreachable else workload.model

    def _created(self, namespace: str, pod: str) -> float | None:
        workload = self.app.workloads.get(f"{namespace}/{pod}")
        return None if workload is None else workload.pod.created
