"""A simulated pod's workload: the listener that serves its metrics page, the model behind the
page, when it started, its scrapes and checkpoint writes, and the rollout engines inside it (a
trainer pod's gang). What the simulation, its control API, drivers, coupling and checkpoint sink
all hold; it imports none of them."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from rljob.dev.sim.gang import GangEngines
from rljob.dev.sim.httpserver import Listener
from rljob.dev.sim.models import Model
from rljob.dev.sim.pods import PodInfo
from rljob.dev.sim.targets import Target


@dataclass
class Workload:
    pod: PodInfo
    listener: Listener
    model: Model
    started: float
    scrapes: int = 0
    pending_write: Future[int] | None = None
    writes_checkpoints: bool = False
    gang: GangEngines | None = None  # rollout engines inside a trainer pod

    @property
    def instance(self) -> str:
        return self.pod.instance

    def targets(self) -> list[Target]:
        pod = self.pod
        listeners = [self.listener, *(self.gang.listeners if self.gang is not None else ())]
        return [
            Target(pod.namespace, pod.name, pod.role, pod.job, listener.port, listener.host)
            for listener in listeners
        ]
