"""What the runtime gathers for one pass besides the RLJob and its children: the health
loop's findings and readings, the checkpoint store's answers, the nodes under the trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from rljob.api import CheckpointRef
from rljob.api.diagnosis import Bottleneck
from rljob.api.status import EngineHealth
from rljob.checkpoint_protocol.layout import DefaultStore
from rljob.health.evaluation import Evaluation
from rljob.reconcile.attempt_start import AttemptGathered
from rljob.reconcile.engine_readings import EngineReading
from rljob.reconcile.nodes import NodeStates
from rljob.reconcile.observed import Observed, ObservedPod
from rljob.reconcile.progress import ProgressReading
from rljob.reconcile.queue import QueueInputs


@dataclass(frozen=True)
class PassInputs:
    """What the runtime gathered for this pass besides the RLJob and its children."""

    now: datetime
    findings: tuple[Evaluation, ...] = ()  # pending health findings, consumed once journaled
    crashes: tuple[tuple[ObservedPod, Evaluation], ...] = ()  # serving pods crashing in place
    progress: ProgressReading | None = None
    latest_checkpoint: CheckpointRef | None = None  # listed after the trainer reported a save
    continued_attempt: int | None = None  # a re-created name continues after the old markers
    attempt: AttemptGathered | None = None  # the store's answer for the attempt about to start
    watched: bool = False  # the health loop watches this job
    signals_error: str | None = None
    signals_source: str | None = None  # which source, described; None: none configured
    # The detectors that have judged in the job's health rounds so far (None: no round yet).
    signals_detectors: tuple[str, ...] | None = None
    node_states: NodeStates = field(default_factory=dict)  # nodes under trainer pods at risk
    retention_problem: str = ""  # the last retention apply's failure, to say in a condition
    engine_summaries: tuple[EngineHealth, ...] | None = None  # detector state to keep in status
    bottleneck: Bottleneck | None = None  # the health loop's latest diagnosis
    engine_readings: tuple[EngineReading, ...] = ()  # rollout engines: running, generation
    # Names an object without the job's labels held when the executor came to create a child.
    taken: tuple[tuple[str, str], ...] = ()
    # What of the job's name label the job does not own (decide() sorts it from its observed).
    leftovers: Observed = field(default_factory=Observed)
    # The operator's own S3 endpoint: trainer pods of a job that names none write there.
    default_store: DefaultStore = field(default_factory=DefaultStore)
    # A queued job's Workload and what it needs; None: the operator runs without Kueue.
    queue: QueueInputs | None = None
