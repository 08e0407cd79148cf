"""The weights the rollout engines serve in the model (generationFrom engine, slotServices):

- an engine's container starts with the command line's weights, version 0 (slime's engines
  start at "0"); an in-place restart starts it over at 0;
- the driver syncs its count to the addresses it was given, the slot Services: every Ready
  endpoint of a slot loads it (the model lets a sync reach each holder of a slot held twice; a
  ClusterIP Service would pick one);
- a weight copy the operator starts (harness.RecordedCopies) loads what the source serves as
  the copy begins (its `/model_info`) into the target; the load lands a while later (`land`,
  at the next round of the world), and only into the container the copy found: the target then
  reports it in the readings the model hands to later passes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.slots import WeightCopy
from rljob.vocabulary.labels import ROLE_LABEL, slots_held
from tests.unit.model.cluster import Cluster
from tests.unit.model.in_turn import ready_running

ROLLOUT = "rollout"
COMMAND_LINE_VERSION = 0


def container_started(pod: Mapping[str, Any]) -> str | None:
    """When its newest running container started (as stamped); None: none runs."""
    starts = [
        str(c["state"]["running"]["startedAt"])
        for c in pod["status"].get("containerStatuses") or []
        if "running" in (c.get("state") or {})
    ]
    return max(starts, default=None)


@dataclass(frozen=True)
class Load:
    """A copy's load under way in its target: that container, that version."""

    target: str
    container: str
    generation: int


class EngineWeights:
    """What each engine's running container serves; `reported(pod, generation)` is told what
    an engine reports once a copy landed (drain.DrainChecks.engine_reported)."""

    def __init__(
        self,
        cluster: Cluster,
        readings: MutableMapping[str, EngineReading],
        reported: Callable[[str, int | None], None],
    ) -> None:
        self.cluster = cluster
        self.readings = readings
        self.reported = reported
        self.loaded: dict[str, tuple[str, int]] = {}  # pod uid -> (its container, version)
        self.loading: dict[str, Load] = {}  # target uid -> the load a copy started
        self.driver_count: int | None = None  # the driver's last sync

    def _rollout(self) -> dict[str, Mapping[str, Any]]:
        return {
            p["metadata"]["uid"]: p
            for p in self.cluster.view("Pod")
            if (p["metadata"].get("labels") or {}).get(ROLE_LABEL) == ROLLOUT
        }

    def serves(self, pod: Mapping[str, Any]) -> int | None:
        """The version its running container serves; None: no container runs."""
        container = container_started(pod)
        if container is None:
            return None
        loaded = self.loaded.get(pod["metadata"]["uid"])
        return loaded[1] if loaded is not None and loaded[0] == container else COMMAND_LINE_VERSION

    def _load(self, pod: Mapping[str, Any], generation: int) -> None:
        container = container_started(pod)
        if container is not None:
            self.loaded[pod["metadata"]["uid"]] = (container, generation)

    def sync(self, count: int) -> None:
        """The driver tells every slot's Ready endpoints its count."""
        self.driver_count = count
        for pod in self._rollout().values():
            labels = pod["metadata"].get("labels") or {}
            if ready_running(pod) and slots_held(labels):  # a Service's endpoint
                self._load(pod, count)

    def copy_started(self, copy: WeightCopy) -> None:
        """The copier reads what the source serves now, and the target starts loading it."""
        pods = self._rollout()
        source = next((p for p in pods.values() if p["metadata"]["name"] == copy.source), None)
        target = pods.get(copy.target_uid)
        serving = self.serves(source) if source is not None else None
        container = container_started(target) if target is not None else None
        if serving is None or container is None:
            return  # an engine that does not answer: the copy fails
        self.loading[copy.target_uid] = Load(copy.target, container, serving)

    def land(self, now: dt.datetime) -> None:
        """Every load under way ends: into the container it began in, if that still runs."""
        pods = self._rollout()
        for uid, load in sorted(self.loading.items()):
            pod = pods.get(uid)
            if pod is None or container_started(pod) != load.container:
                continue
            self._load(pod, load.generation)
            self.readings[load.target] = EngineReading(load.target, now, 0, load.generation)
            self.reported(load.target, load.generation)
        self.loading.clear()
