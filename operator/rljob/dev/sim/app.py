"""The simulator without process concerns: the simulated pods (rljob.dev.sim.simulation) with
their control API's listener and the loops that poll the pods and tick the models. Tests drive it
in-process with a fake pod lister and clock; rljob.dev.sim.server runs it as a process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import cached_property

from rljob.dev.sim.control import ControlApi
from rljob.dev.sim.httpserver import Listener, listen
from rljob.dev.sim.simulation import Simulation

log = logging.getLogger("rljob.dev.sim")

TICK_SECONDS = 1.0


class SimulatorApp(Simulation):
    """The simulation with its control API and loops: tests may drive it in-process with a fake
    pod lister and clock."""

    control: Listener | None = None  # the control API's, once started

    # Made on first use, so the app takes the simulation's arguments as they are.
    @cached_property
    def api(self) -> ControlApi:
        return ControlApi(self)

    @cached_property
    def _stop(self) -> asyncio.Event:
        return asyncio.Event()

    @cached_property
    def _poll_now(self) -> asyncio.Event:
        return asyncio.Event()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.publish()
        self.control = await listen(self.api.handle, self.config.control_port)
        log.info("control API on 127.0.0.1:%d", self.control.port)

    async def run(self) -> None:
        """Polls and ticks until stop() is called."""
        tasks = [asyncio.create_task(self._poll_loop()), asyncio.create_task(self._tick_loop())]
        try:
            await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.close()

    def stop(self) -> None:
        self._stop.set()

    async def close(self) -> None:
        if self.drivers is not None:
            await self.drivers.close()
        for workload in list(self.workloads.values()):
            await workload.listener.close()
            if workload.gang is not None:
                await workload.gang.close()
        self.workloads.clear()
        if self.control is not None:
            await self.control.close()
            self.control = None
        if self.sink is not None:
            self.sink.close()

    async def _poll_loop(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:  # one bad pod or listener must not end the polling for good
                self.metrics.polls.labels("crashed").inc()
                log.exception("applying the pod list failed; retrying next poll")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poll_now.wait(), self.config.poll_interval)
            self._poll_now.clear()

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.advance_all()
            self._checkpoints()
            await self._watchdogs()
