"""The RLJob status: what the operator observed and did. Every list is bounded so status cannot
grow without limit on a job that runs for weeks."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from rljob.api.base import StatusModel, optional_text
from rljob.api.diagnosis import (
    MAX_EARLIER_REQUESTS,
    Bottleneck,
    PolicySuspension,
    ResumeRequest,
)
from rljob.api.engine_roster import EngineMember
from rljob.api.goodput import GoodputStatus
from rljob.api.roles import MAX_REPLICAS
from rljob.api.rounding import DetectorValue, TokensPerSecond
from rljob.api.rules import CelCheck, KubeList
from rljob.api.spec import CHECKPOINT_VERSION_PATTERN, URI_MAX_LENGTH
from rljob.vocabulary.enums import (
    ActionKind,
    ConditionStatus,
    FailureAction,
    FailureReason,
    JobPhase,
    QueueState,
    RoleName,
)

# metav1.Condition's grammar for type and reason.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

MESSAGE_MAX_LENGTH = 1024
REASON_MAX_LENGTH = 1024
MAX_CONDITIONS = 16
MAX_CHECKPOINT_HISTORY = 20
# maxRestarts is at most 100, and the 101st counted restart in a window fails the job.
MAX_COUNTED_AT = 101
MAX_RECENT_RESTARTS = 20
MAX_SUSPECT_NODES = 16
MAX_ATTEMPTS = 20
# Scopes named by the fallback name: the four roles, and trainer attempts ("trainer-a<N>").
MAX_RENAMED = 16
RENAMED_SCOPE_PATTERN = r"^(rollout|trainer|reference|verifier|trainer-a[0-9]{1,9})$"
JOURNAL_FORMAT = 1  # status.inFlight's format: raised when an entry's meaning changes
# Per-engine detector state kept across operator restarts: a few hundred bytes an engine.
MAX_ENGINE_HEALTH = 256
MAX_ENGINE_HEALTH_VALUES = 8
ENGINE_HEALTH_KEY_MAX_LENGTH = 63
# Longer than any failover or upgrade takes; an operator gone longer has missed too much of the
# engines' life (in-place container restarts keep the pod name) for its saved baselines to hold.
ENGINE_HEALTH_MAX_AGE = timedelta(hours=6)
DETECTOR_NAME_PATTERN = r"^[a-z][a-zA-Z0-9]*$"


def _truncate(limit: int) -> BeforeValidator:
    # Messages quote pod termination messages (up to 4 KiB, user-controlled): cut them rather
    # than fail the status write.
    def cut(value: Any) -> Any:
        return (
            value[: limit - 3] + "..." if isinstance(value, str) and len(value) > limit else value
        )

    return BeforeValidator(cut)


Message = Annotated[str, Field(max_length=MESSAGE_MAX_LENGTH), _truncate(MESSAGE_MAX_LENGTH)]
Name = Annotated[str, Field(max_length=253)]
Uid = Annotated[str, Field(max_length=64)]
Count = Annotated[int, Field(ge=0)]
CheckpointVersion = Annotated[str, Field(pattern=CHECKPOINT_VERSION_PATTERN, max_length=32)]


class Condition(StatusModel):
    """One aspect of the job's state, as metav1.Condition."""

    type: Annotated[str, Field(pattern=CONDITION_TYPE_PATTERN, max_length=316)] = Field(
        description="Condition type, e.g. Ready, Progressing, Degraded, CheckpointReady."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Annotated[
        str, Field(pattern=REASON_PATTERN, min_length=1, max_length=REASON_MAX_LENGTH)
    ] = Field(description="One CamelCase word for machines and aggregation.")
    message: Message = Field(description="One line for humans.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: Count | None = Field(
        default=None, description="metadata.generation the condition was computed from."
    )


class RoleStatus(StatusModel):
    """Pod counts of one role."""

    desired: Count = Field(default=0, description="Pods the role should have.")
    ready: Count = Field(default=0, description="Pods ready now.")
    restarts: Count = Field(
        default=0,
        description="Restarts of the role the restart ledger counts (status.restarts.byRole): "
        "the roles' restarts add up to status.restarts.total.",
    )
    # An empty roster and no roster mean the same: status omits empty lists.
    engines: Annotated[list[EngineMember], Field(max_length=MAX_REPLICAS)] = Field(
        default_factory=list,
        description="Rollout only: the engine roster, by pod name; written when membership or "
        "a state changes.",
    )


class RolesStatus(StatusModel):
    """Pod counts per role."""

    rollout: RoleStatus | None = Field(default=None, description="Rollout engines.")
    trainer: RoleStatus | None = Field(default=None, description="Trainer pods.")
    reference: RoleStatus | None = Field(default=None, description="Reference servers.")
    verifier: RoleStatus | None = Field(default=None, description="Verifiers.")


class Progress(StatusModel):
    """Training progress, refreshed at most every 5 minutes (live values are metrics)."""

    step: Count | None = Field(default=None, description="Last completed trainer step.")
    last_step_time: datetime | None = Field(default=None, description="When it completed.")
    tokens_per_second: TokensPerSecond | None = Field(
        default=None, description="Rollout throughput, all engines."
    )
    baseline_tokens_per_second: TokensPerSecond | None = Field(
        default=None, description="Post-warm-up baseline of that throughput."
    )
    updated_at: datetime | None = Field(default=None, description="When progress was refreshed.")


class CheckpointRef(StatusModel):
    """One checkpoint version."""

    version: CheckpointVersion = Field(description="Version name, v<step>-a<attempt>.")
    step: Count = Field(description="Trainer step saved.")
    attempt: Count | None = Field(default=None, description="Attempt that wrote it.")
    uri: Annotated[str, Field(max_length=URI_MAX_LENGTH)] = Field(
        description="s3:// URI of the version's prefix."
    )
    saved_at: datetime | None = Field(default=None, description="When its manifest was written.")
    validated_at: datetime | None = Field(
        default=None, description="When its shards were last checked against the manifest."
    )


class StoreCapabilities(StatusModel):
    """What the checkpoint store supports, probed once per endpoint."""

    conditional_writes: bool | None = Field(
        default=None, description="Whether If-None-Match writes are honoured."
    )
    probed_at: datetime | None = Field(default=None, description="When the probe ran.")


class CheckpointStatus(StatusModel):
    """Checkpoints seen and used."""

    latest: CheckpointRef | None = Field(
        default=None, description="Newest valid version eligible for resume."
    )
    resumed_from: CheckpointRef | None = Field(
        default=None, description="Version the current attempt resumed from."
    )
    history: Annotated[list[CheckpointRef], Field(max_length=MAX_CHECKPOINT_HISTORY)] = Field(
        default_factory=list, description="Recent eligible versions, newest first."
    )
    store_capabilities: StoreCapabilities | None = Field(
        default=None, description="Probed features of the store."
    )


class RestartRecord(StatusModel):
    """One restart the operator made."""

    time: datetime = Field(description="When the restart was decided.")
    role: RoleName = Field(description="Role restarted.")
    pod: Name | None = Field(default=None, description="Pod restarted, for pod restarts.")
    reason: FailureReason = Field(description="Failure that caused it.")
    action: FailureAction = Field(description="Action taken.")
    counted: bool = Field(default=True, description="Whether it counted towards maxRestarts.")
    message: Message = optional_text("Evidence, one line.")


class RestartsStatus(StatusModel):
    """The restart ledger; the failure policy's budget is computed from it."""

    total: Count = Field(default=0, description="Restarts since the job was created.")
    counted: Count = Field(default=0, description="Restarts that counted towards maxRestarts.")
    counted_at: Annotated[list[datetime], Field(max_length=MAX_COUNTED_AT)] = Field(
        default_factory=list,
        description="Times of counted restarts within failurePolicy.window, oldest first.",
    )
    by_reason: Annotated[dict[str, Count], Field(max_length=len(FailureReason))] = Field(
        default_factory=dict, description="Restarts since creation by failure reason."
    )
    by_role: Annotated[dict[str, Count], Field(max_length=len(RoleName))] = Field(
        default_factory=dict,
        description="Restarts since creation by role restarted; they add up to total. Empty "
        "while total is not (a ledger older than this field): counted from recent.",
    )
    recent: Annotated[list[RestartRecord], Field(max_length=MAX_RECENT_RESTARTS)] = Field(
        default_factory=list, description="Latest restarts, newest last."
    )

    def role_counts(self) -> dict[str, int]:
        """Restarts since creation by role: byRole, or for a ledger written before it existed
        the recent records (exact unless the job restarted more than MAX_RECENT_RESTARTS times)."""
        if self.by_role or self.total == 0:
            return dict(self.by_role)
        return dict(Counter(record.role.value for record in self.recent))


class ActionTarget(StatusModel):
    """What an in-flight action acts on."""

    role: RoleName = Field(description="Role acted on.")
    name: Name | None = Field(default=None, description="Pod, Deployment or Job acted on.")
    uid: Uid | None = Field(default=None, description="Its uid, used as a delete precondition.")


class ActionPod(StatusModel):
    """One pod of an in-turn role restart, in its turn."""

    name: Name = Field(description="Pod name.")
    uid: Uid = Field(description="Its uid, used as the delete precondition.")
    drain_started_at: datetime | None = Field(
        default=None,
        description="weightSync Gated: when its drain began (the roster says draining); it is "
        "deleted once its running requests reach zero, no container of it runs, or "
        "drainTimeout passes.",
    )
    deleted_at: datetime | None = Field(
        default=None,
        description="When its turn came: journaled before its delete. Empty: not yet (a pod "
        "gone on its own before its turn is skipped).",
    )


class InFlightAction(StatusModel):
    """An action journaled before its first side effect, so a restarted operator resumes it
    instead of repeating it."""

    id: Annotated[str, Field(min_length=1, max_length=64)] = Field(
        description="Action id, also set as the rljob.io/action-id annotation of what it creates."
    )
    kind: ActionKind = Field(description="What the action does.")
    target: ActionTarget | None = Field(default=None, description="What it acts on.")
    reason: FailureReason | None = Field(default=None, description="Failure that caused it.")
    step: Annotated[str, Field(max_length=64)] = optional_text(
        "Last step completed; absent before the first."
    )
    started_at: datetime = Field(description="When the action was journaled.")
    format: Annotated[int, Field(ge=1, le=1000)] = Field(
        default=JOURNAL_FORMAT,
        description="Format of this entry (absent: 1, the first). An operator resumes the "
        "formats it knows and leaves an entry of a newer one alone, saying so.",
    )
    # No pods and an empty list mean the same: status omits empty lists.
    pods: Annotated[list[ActionPod], Field(max_length=MAX_REPLICAS)] = Field(
        default_factory=list,
        description="RestartRoleInTurn only: the role's pods when it was journaled, oldest "
        "first, the order they are restarted in.",
    )


class SuspectNode(StatusModel):
    """A node new trainer attempts prefer not to use (a soft anti-affinity), until `until`."""

    name: Name = Field(description="Node name.")
    reason: FailureReason = Field(description="Hardware-like failure seen on it.")
    marked_at: datetime = Field(description="When it was marked.")
    until: datetime | None = Field(
        default=None,
        description="When it stops being suspect and is dropped; empty (an older operator's "
        "entry): markedAt plus failurePolicy.suspectNodeTTL.",
    )


class RestartRequest(StatusModel):
    """The last user-requested restart the operator handled (kubectl rljob restart)."""

    id: Annotated[str, Field(min_length=1, max_length=64)] = Field(description="Request id.")
    role: RoleName | None = Field(default=None, description="Role restarted; empty: the job.")
    handled_at: datetime = Field(description="When it was carried out.")
    earlier: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=64)]],
        Field(max_length=MAX_EARLIER_REQUESTS),
    ] = Field(
        default_factory=list,
        description="Ids handled before it, newest last: one set back (a GitOps tool "
        "re-applying an older manifest) is not a new request.",
    )

    def handled(self, nonce: str) -> bool:
        return nonce == self.id or nonce in self.earlier

    def after(self) -> list[str]:
        """`earlier` for the request handled next."""
        return [*self.earlier, self.id][-MAX_EARLIER_REQUESTS:]


class AttemptRecord(StatusModel):
    """One trainer gang attempt."""

    attempt: Count = Field(description="Attempt number, the checkpoint lineage key.")
    started_at: datetime = Field(description="When its Job was created.")
    resumed_from_step: Count | None = Field(
        default=None, description="Step it resumed from; empty: from scratch."
    )
    resumed_from_version: CheckpointVersion | None = Field(
        default=None, description="Version it resumed from."
    )
    job_uid: Annotated[str, Field(max_length=64)] | None = Field(
        default=None,
        description="UID of its Job once the operator saw it: a Job gone without the operator "
        "deleting it was deleted outside it, and the next attempt starts.",
    )
    ended_at: datetime | None = Field(default=None, description="When it ended.")
    end_reason: Annotated[str, Field(max_length=64)] | None = Field(
        default=None,
        description="Why it ended: a failure reason, FailJob, Suspended, Succeeded, "
        "RestartRequested or JobDeleted.",
    )
    # The marks status.goodput splits its time by (reconcile/goodput.py).
    running_at: datetime | None = Field(
        default=None, description="When all its ranks were first Ready."
    )
    first_step_at: datetime | None = Field(
        default=None, description="When the operator first read a step it completed."
    )
    caught_up_at: datetime | None = Field(
        default=None,
        description="When it passed the step the attempt before had reached (the end of "
        "recomputation).",
    )
    reached_step: Count | None = Field(
        default=None, description="The last step the operator read of it."
    )
    healthy_at: datetime | None = Field(
        default=None,
        description="When that step was first read: its last evidence of health.",
    )
    failed_at: datetime | None = Field(
        default=None,
        description="When its first failed rank's container ended, where one did (the failure "
        "instant; else detection runs from healthyAt).",
    )


def _short_keys(values: dict[str, float]) -> bool:
    return all(0 < len(key) <= ENGINE_HEALTH_KEY_MAX_LENGTH for key in values)


EngineHealthValues = Annotated[
    dict[str, DetectorValue],
    Field(max_length=MAX_ENGINE_HEALTH_VALUES),
    CelCheck(
        f"self.all(k, size(k) > 0 && size(k) <= {ENGINE_HEALTH_KEY_MAX_LENGTH})",
        f"must be keyed by names of 1 to {ENGINE_HEALTH_KEY_MAX_LENGTH} characters",
        _short_keys,
    ),
]


class EngineHealth(StatusModel):
    """One detector's summary of one engine, so a restarted operator need not learn it again."""

    pod: Name = Field(description="Engine pod.")
    role: RoleName = Field(description="Role of the pod.")
    detector: Annotated[str, Field(pattern=DETECTOR_NAME_PATTERN, min_length=1, max_length=63)] = (
        Field(description="Detector the summary belongs to, as named in spec.health (kvDrift).")
    )
    baseline_tokens_per_second: DetectorValue | None = Field(
        default=None, ge=0, description="Post-warm-up throughput baseline."
    )
    warmed_up_at: datetime | None = Field(default=None, description="When the baseline was taken.")
    cooldown_until: datetime | None = Field(
        default=None, description="Until when a finding on the engine is not acted on."
    )
    updated_at: datetime = Field(description="When the summary was last confirmed.")
    values: EngineHealthValues = Field(
        default_factory=dict, description="Further numbers a detector keeps, by name."
    )


class HealthStatus(StatusModel):
    """Detector state that must survive an operator restart."""

    engines: Annotated[
        list[EngineHealth],
        Field(max_length=MAX_ENGINE_HEALTH),
        KubeList("map", ("pod", "detector")),
    ] = Field(
        default_factory=list,
        description="Per-engine detector summaries; stale ones are not restored.",
    )


class QueueStatus(StatusModel):
    """Kueue's admission of the job, from its Workload (docs/kueue.md): the pods of a job
    that is not admitted do not exist, and an eviction stops them as a suspension does."""

    workload: Name = Field(description="The job's Workload (kueue.x-k8s.io/v1beta2).")
    local_queue: Name = Field(description="The LocalQueue its kueue.x-k8s.io/queue-name names.")
    state: QueueState = Field(description="Pending, Admitted, Evicted or Finished.")
    cluster_queue: Name | None = Field(
        default=None, description="The ClusterQueue that admitted it."
    )
    reason: Annotated[str, Field(max_length=128)] | None = Field(
        default=None, description="Kueue's reason (e.g. Preempted, PodsReadyTimeout)."
    )
    message: Message = optional_text("Kueue's words: why it waits, or why it was evicted.")
    since: datetime = Field(description="When it entered this state.")
    deactivated: bool = Field(
        default=False,
        description="The operator set the Workload's spec.active to false for spec.suspend.",
    )


class RLJobStatus(StatusModel):
    """What the operator observed and did."""

    phase: JobPhase | None = Field(default=None, description="Summary for humans.")
    observed_generation: Count | None = Field(
        default=None, description="metadata.generation this status reflects."
    )
    attempt: Count | None = Field(
        default=None, description="Current trainer gang attempt; the checkpoint lineage key."
    )
    start_time: datetime | None = Field(default=None, description="When the job first ran.")
    completion_time: datetime | None = Field(
        default=None,
        description="When it Succeeded or Failed; ttlSecondsAfterFinished counts from here.",
    )
    conditions: Annotated[
        list[Condition], Field(max_length=MAX_CONDITIONS), KubeList("map", ("type",))
    ] = Field(default_factory=list, description="Current conditions, one per type.")
    roles: RolesStatus | None = Field(default=None, description="Pod counts per role.")
    progress: Progress | None = Field(default=None, description="Training progress.")
    policy_generation: Count | None = Field(
        default=None, description="Generation of the policy weights engines must serve."
    )
    checkpoint: CheckpointStatus | None = Field(default=None, description="Checkpoints.")
    restarts: RestartsStatus | None = Field(default=None, description="The restart ledger.")
    in_flight: InFlightAction | None = Field(
        default=None, description="The action being carried out, if any."
    )
    suspect_nodes: Annotated[
        list[SuspectNode], Field(max_length=MAX_SUSPECT_NODES), KubeList("map", ("name",))
    ] = Field(default_factory=list, description="Nodes new trainer attempts prefer to avoid.")
    last_restart_request: RestartRequest | None = Field(
        default=None, description="Last user-requested restart handled."
    )
    attempts: Annotated[list[AttemptRecord], Field(max_length=MAX_ATTEMPTS)] = Field(
        default_factory=list, description="Latest trainer attempts, oldest first."
    )
    health: HealthStatus | None = Field(
        default=None, description="Detector state kept across operator restarts."
    )
    bottleneck: Bottleneck | None = Field(
        default=None, description="What bounds the trainer's step, and the advice."
    )
    suspension: PolicySuspension | None = Field(
        default=None,
        description="Set while the failure policy holds the job suspended (action Suspend).",
    )
    queue: QueueStatus | None = Field(
        default=None, description="Kueue's admission, for a job with a queue-name label."
    )
    last_resume_request: ResumeRequest | None = Field(
        default=None, description="Last rljob.io/resume-request handled."
    )
    goodput: GoodputStatus | None = Field(
        default=None,
        description="Effective training time: the share of wall-clock that advanced training, "
        "and the time lost by cause.",
    )
    renamed: Annotated[
        list[Annotated[str, Field(pattern=RENAMED_SCOPE_PATTERN, max_length=20)]],
        Field(max_length=MAX_RENAMED),
        KubeList("set"),
    ] = Field(
        default_factory=list,
        description="What this job names with its fallback name, <name>-<first 5 characters of "
        "its uid>-...: a role (its Deployment and Services, its pods labelled rljob.io/instance "
        "and selected by it too) or a trainer attempt's Job (trainer-a<N>), because an object "
        "this RLJob does not own (a leftover of a deleted namesake) held the usual name.",
    )
