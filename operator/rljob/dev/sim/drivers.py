"""The simulator's rollout drivers (rljob.dev.sim.driver), one per job a test turned on through
the control API (POST /drivers): each follows its job's roster through rljob.sdk.EngineRoster
(the callbacks run on the roster's thread and are handed to the simulator's loop), drives the
job's engines, publishes its policy generation as the job's trainers' rljob_policy_generation,
and when its NCCL watchdog fires fails rank 0 of the job's trainer the way the bed fails one
(rljob.dev.sim.driver_kube). Lost requests come from the simulator's ledger."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from rljob.dev.sim.driver import DriverSettings, RolloutDriver
from rljob.dev.sim.models import EngineModel, TrainerModel

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


@dataclass
class DriverRun:
    namespace: str
    job: str
    driver: RolloutDriver
    roster: Roster | None = None
    failed_pods: tuple[str, ...] = ()


class Drivers:
    """Starts, ticks, reports and stops the drivers."""

    def __init__(
        self, app: Simulated, roster_factory: RosterFactory, fail_trainer: TrainerFailer
    ) -> None:
        self.app = app
        self.roster_factory = roster_factory
        self.fail_trainer = fail_trainer
        self.runs: dict[tuple[str, str], DriverRun] = {}
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
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._tick_loop())
        log.info("driver of %s/%s started: %s", namespace, job, settings)
        return self.report(namespace, job) or {}

    async def stop(self, namespace: str, job: str) -> bool:
        run = self.runs.pop((namespace, job), None)
        if run is None:
            return False
        if run.roster is not None:
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
        return {
            "namespace": namespace,
            "job": job,
            **run.driver.report(),
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
            await asyncio.sleep(TICK_SECONDS)

    async def tick(self, run: DriverRun) -> None:
        now = self.app.clock()
        for workload in self._job_workloads(run):
            model = workload.model
            if isinstance(model, EngineModel):
                model.weights.driven = True
            elif isinstance(model, TrainerModel):
                model.generation, model.generation_driven = run.driver.generation, True
        if run.driver.tick(now).watchdog_fired:
            await self._fail_trainer(run)

    async def _fail_trainer(self, run: DriverRun) -> None:
        trainers = [
            w
            for w in self._job_workloads(run)
            if w.pod.role == "trainer" and w.pod.completion_index == 0
        ]
        if not trainers:
            log.warning("%s/%s: the watchdog fired with no trainer to fail", run.namespace, run.job)
            return
        rank0 = max(trainers, key=lambda w: w.pod.attempt or 0).pod
        log.info("%s/%s: NCCL watchdog: failing %s", run.namespace, run.job, rank0.name)
        await asyncio.to_thread(self.fail_trainer, run.namespace, rank0.name)
        run.failed_pods = (*run.failed_pods, rank0.name)

    def _job_workloads(self, run: DriverRun) -> list[Workload]:
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
