"""The read-only half of a pass: what decide() needs from outside the RLJob and its children
(the checkpoint store, the nodes of stuck pods, the job's memory). Reads only; a store that
cannot answer becomes an input saying so, never an exception that stops the pass."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from rljob.adapters.checkpoints import Checkpoints
from rljob.adapters.kube import Kube, KubeError
from rljob.adapters.paths import object_path
from rljob.api import CheckpointRef, JobPhase, RLJob
from rljob.checkpoint_protocol.errors import StoreError
from rljob.observability import CHECKPOINT_ERRORS
from rljob.reconcile.attempt_start import AttemptGathered, attempt_to_start
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.nodes import (
    GONE,
    NOT_READY,
    OUT_OF_SERVICE_TAINT,
    READY,
    UNKNOWN,
    UNREAD,
    NodeState,
    lost_nodes,
    nodes_to_read,
)
from rljob.reconcile.observed import Observed
from rljob.reconcile.remediation import stuck_pods
from rljob.reconcile.serving import crash_findings
from rljob.reconcile.suspended import suspended
from rljob.runtime.memory import JobMemory

log = structlog.get_logger("rljob.runtime")


MAX_NODES_KEPT = 4096
NODE_READ_SECONDS = 5.0  # a node read serves every job's passes this long (a gang starting)


@dataclass(frozen=True)
class Gatherer:
    kube: Kube
    checkpoints: Checkpoints
    # node -> (monotonic time read, state): one read serves every pass for NODE_READ_SECONDS,
    # far inside nodeLostTimeout's scale.
    nodes: dict[str, tuple[float, NodeState]] = field(default_factory=dict)

    async def inputs(
        self,
        job: RLJob,
        observed: Observed,
        memory: JobMemory,
        now: dt.datetime,
        signals_error: str | None,
    ) -> PassInputs:
        self._note_crashes(job, observed, memory, now)
        try:
            continued, unsettled = await self._continued_attempt(job), ""
        except StoreError as exc:
            continued, unsettled = None, str(exc)
        if continued is not None:
            job = job.model_copy(
                update={"status": job.status.model_copy(update={"attempt": continued})}
            )
        nodes = await self._node_states(job, observed, now)
        lost = lost_nodes(job, nodes, now)
        return PassInputs(
            now=now,
            findings=tuple(memory.findings),
            crashes=tuple(memory.crashes),
            progress=memory.progress,
            latest_checkpoint=await self._latest(job, memory, now),
            continued_attempt=continued,
            attempt=await self._attempt(job, observed, now, unsettled, lost),
            watched=watched(job),
            signals_error=signals_error,
            node_states=nodes,
            retention_problem=memory.retention_problem,
            engine_readings=memory.engine_readings,
            taken=tuple(sorted(memory.taken)),
            default_store=self.checkpoints.defaults,
        )

    @staticmethod
    def _note_crashes(job: RLJob, observed: Observed, memory: JobMemory, now: dt.datetime) -> None:
        """New crash findings join the pending ones (consumed once a pass journals them)."""
        found = crash_findings(memory.crash_tracker, job, observed, now)
        pending = {pod.name for pod, _ in memory.crashes}
        memory.crashes += [(pod, e) for pod, e in found if pod.name not in pending]
        live = {pod.name for pod in observed.pods}
        memory.crashes = [(pod, e) for pod, e in memory.crashes if pod.name in live]

    async def _continued_attempt(self, job: RLJob) -> int | None:
        """A new RLJob of an old name continues attempt numbers after the highest marker.
        Raises StoreError: until the store answers, the first attempt's number is unknown."""
        if job.status.attempt is not None or job.spec.checkpoint is None:
            return None
        first = await self.checkpoints.first_attempt(job)
        return first if first > 1 else None

    async def _latest(
        self, job: RLJob, memory: JobMemory, now: dt.datetime
    ) -> CheckpointRef | None:
        """Lists the store only when the trainer reported a save newer than status knows."""
        saved = memory.saved_step
        latest = job.status.checkpoint.latest if job.status.checkpoint else None
        if saved is None or job.spec.checkpoint is None or memory.listed_step == saved:
            return None
        if latest is not None and latest.step >= saved:
            return None
        memory.listed_step = saved
        try:
            return await self.checkpoints.newest(job, now)
        except StoreError as exc:
            CHECKPOINT_ERRORS.labels(kind=type(exc).__name__).inc()
            memory.listed_step = None  # try again on the next report
            return None

    async def _attempt(
        self,
        job: RLJob,
        observed: Observed,
        now: dt.datetime,
        unsettled: str,
        lost: frozenset[str],
    ) -> AttemptGathered | None:
        """The store's answer for the attempt this pass may start; with the attempt number
        itself unsettled (a re-created name, the store down), none: the attempt waits."""
        attempt = attempt_to_start(job, observed, now, lost)
        if attempt is None or job.spec.checkpoint is None:
            return None
        if unsettled:
            CHECKPOINT_ERRORS.labels(kind="StoreError").inc()
            return AttemptGathered(attempt, error=unsettled)
        record = next((r for r in job.status.attempts if r.attempt == attempt), None)
        journaled = record.resumed_from_version if record is not None else None
        try:
            inputs = await self.checkpoints.gather_attempt(job, attempt, journaled, now)
        except StoreError as exc:
            CHECKPOINT_ERRORS.labels(kind=type(exc).__name__).inc()
            return AttemptGathered(attempt, error=str(exc))
        return AttemptGathered(attempt, inputs=inputs)

    async def _node_states(
        self, job: RLJob, observed: Observed, now: dt.datetime
    ) -> dict[str, NodeState]:
        """The nodes of trainer pods stuck terminating or not ready (a lost node's first sign)."""
        stuck = {pod.node for pod in stuck_pods(job, observed, now) if pod.node}
        nodes = sorted(stuck | set(nodes_to_read(job, observed)))
        return {node: await self._node_state(node) for node in nodes}

    async def _node_state(self, node: str) -> NodeState:
        read = self.nodes.get(node)
        if read is not None and time.monotonic() - read[0] < NODE_READ_SECONDS:
            return read[1]
        state = await self._read_node(node)
        self.nodes[node] = (time.monotonic(), state)
        if len(self.nodes) > MAX_NODES_KEPT:
            self.nodes.pop(next(iter(self.nodes)))
        return state

    async def _read_node(self, node: str) -> NodeState:
        try:
            body = await self.kube.request("get", object_path("v1", "Node", None, node))
        except KubeError as exc:
            if exc.not_found:
                return NodeState(GONE)
            log.warning("cannot read node", node=node, status=exc.status)
            return NodeState(UNREAD)  # not proof the node is lost: no force delete
        return node_state(body)


def node_state(body: dict[str, Any]) -> NodeState:
    """A Node's Ready condition (and since when), and its out-of-service taint."""
    conditions = (body.get("status") or {}).get("conditions") or []
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    taints = (body.get("spec") or {}).get("taints") or []
    since = ready.get("lastTransitionTime")
    return NodeState(
        {"True": READY, "False": NOT_READY}.get(str(ready.get("status")), UNKNOWN),
        since=dt.datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None,
        out_of_service=any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints),
    )


def watched(job: RLJob) -> bool:
    """The health loop watches a job that runs: not suspended, not finished."""
    return not suspended(job) and job.status.phase not in (JobPhase.SUCCEEDED, JobPhase.FAILED)
