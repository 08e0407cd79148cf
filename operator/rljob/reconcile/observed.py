"""What the operator observed of an RLJob's children: small immutable tuples a kopf index holds,
never whole bodies (rljob.adapters.observe builds them from watch events)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

TERMINAL_POD_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class ObservedChild:
    """One Deployment, Service or Job owned by the RLJob."""

    kind: str
    name: str
    uid: str
    role: str
    spec_hash: str
    attempt: int | None
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    succeeded: bool = False
    failed: bool = False
    failed_message: str = ""
    failed_at: datetime | None = None  # when the Job's FailureTarget (or Failed) turned True
    deleting: bool = False
    created_at: datetime | None = None
    restarted_at: str = ""  # the pod template's rljob.io/restarted-at (a role roll's action id)
    generation: int = 0
    observed_generation: int = 0  # status describes this generation of the spec
    owner_uid: str = ""  # its controller's uid (the RLJob's, for this job's own); "": none


@dataclass(frozen=True)
class ObservedPod:
    """One pod of the RLJob's roles."""

    name: str
    uid: str
    role: str
    attempt: int | None
    node: str
    phase: str
    ready: bool
    restart_count: int
    unschedulable_message: str
    exit_code: int | None
    reason: str
    message: str
    completion_index: int | None
    deleting: bool
    created_at: datetime | None
    disruption: str = ""  # reason of a DisruptionTarget=True condition (preempted, node lost)
    disruption_message: str = ""
    ip: str = ""  # status.podIP: direct scraping reaches the pod there
    metrics_port: int | None = None  # the container port named metrics (else http)
    # The container's termination time (finishedAt): the first observed failure across pods.
    finished_at: datetime | None = None
    policy_current: bool = False  # its rljob.io/policy-current condition is True (Gated)
    # A container of it is running: without one no engine process holds a request (a crash
    # loop, an in-place restart, a pod not started), so a drain of it has nothing to wait for.
    container_running: bool = True
    # When its main container last (re)started: a reading taken before describes a process gone.
    started_at: datetime | None = None
    owner_uid: str = ""  # its controller's uid: its Job's, or its ReplicaSet's; "": none
    # Every container passes its readiness probe (ContainersReady): a Gated engine not Ready
    # with this True waits only for its readiness gate, the weights.
    containers_ready: bool = False
    slots: frozenset[int] = frozenset()  # slotServices: the slots its labels say it holds

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_POD_PHASES


@dataclass(frozen=True)
class Observed:
    """Everything observed of one RLJob's children and pods; `owners`: (uid, controller uid) of
    the objects between them (a Deployment's ReplicaSets), to follow a pod's controller chain."""

    children: tuple[ObservedChild, ...] = ()
    pods: tuple[ObservedPod, ...] = ()
    owners: tuple[tuple[str, str], ...] = ()
