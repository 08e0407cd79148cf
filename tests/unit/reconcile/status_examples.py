"""Representative statuses as the operator builds them, floats as computed (unrounded): a healthy
running job, a job after restarts with a suspect node, and a job the failure policy suspended."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rljob.api.diagnosis import (
    Bottleneck,
    ConcurrencyCurveStatus,
    CurvePoint,
    EngineLoad,
    PhaseShare,
    PolicySuspension,
    VerifierLoad,
)
from rljob.api.engine_roster import EngineMember
from rljob.api.status import (
    ActionPod,
    ActionTarget,
    AttemptRecord,
    CheckpointRef,
    CheckpointStatus,
    Condition,
    EngineHealth,
    HealthStatus,
    InFlightAction,
    Progress,
    RestartRequest,
    RestartsStatus,
    RLJobStatus,
    RolesStatus,
    RoleStatus,
    StoreCapabilities,
    SuspectNode,
)
from rljob.reconcile.policy import Decision
from rljob.reconcile.policy.ledger import record_restart
from rljob.reconcile.status import role_restarts
from rljob.vocabulary.enums import (
    ActionKind,
    BottleneckRole,
    ConditionStatus,
    EngineState,
    FailureAction,
    FailureReason,
    JobPhase,
    RoleName,
)
from tests.unit.reconcile.world import T0, example_job

MINUTE = dt.timedelta(minutes=1)
NOW = T0 + 90 * MINUTE
S3 = "s3://ckpt/rl/grpo-demo"


def condition(kind: str, holds: bool, reason: str, message: str) -> Condition:
    status = ConditionStatus.TRUE if holds else ConditionStatus.FALSE
    return Condition(
        type=kind,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=T0,
        observed_generation=1,
    )


def engine(index: int, state: EngineState = EngineState.SERVING) -> EngineMember:
    return EngineMember(
        pod=f"grpo-demo-rollout-{index}",
        address=f"10.0.0.{10 + index}",
        state=state,
        generation=41,
    )


def roles(ledger: RestartsStatus, desired: int = 2, draining: int = 0) -> RolesStatus:
    """Every role of examples/rljob-demo.yaml, all ready but the `draining` rollout engines;
    restarts as the operator counts them."""
    restarts = role_restarts(ledger)

    def role(name: RoleName, ready: int = desired) -> RoleStatus:
        return RoleStatus(desired=desired, ready=ready, restarts=restarts.get(name.value, 0))

    serving = desired - draining
    states = [EngineState.SERVING] * serving + [EngineState.DRAINING] * draining
    engines = [engine(index, state) for index, state in enumerate(states)]
    return RolesStatus(
        rollout=role(RoleName.ROLLOUT, serving).model_copy(update={"engines": engines}),
        trainer=role(RoleName.TRAINER),
        reference=role(RoleName.REFERENCE),
        verifier=role(RoleName.VERIFIER),
    )


def checkpoint(step: int, attempt: int) -> CheckpointRef:
    version = f"v{step:012d}-a{attempt:06d}"
    return CheckpointRef(
        version=version,
        step=step,
        attempt=attempt,
        uri=f"{S3}/{version}/",
        saved_at=T0 + step * dt.timedelta(seconds=30),
    )


def bottleneck() -> Bottleneck:
    return Bottleneck(
        role=BottleneckRole.ROLLOUT,
        since=T0 + 30 * MINUTE,
        updated_at=NOW,
        window_seconds=600.0,
        step_seconds=41.28571428571429,
        phases=[
            PhaseShare(
                phase="waiting_for_rollouts", share=0.6428571428571429, seconds_per_step=26.5384615
            ),
            PhaseShare(phase="training", share=0.3571428571428571, seconds_per_step=14.74725274),
        ],
        evidence="the trainer waited 64% of the window while every engine was saturated",
        advice="add rollout engines",
        curve=ConcurrencyCurveStatus(
            role=RoleName.ROLLOUT,
            points=[
                CurvePoint(concurrency=16.0, throughput=6123.456789, seconds=212.33333333),
                CurvePoint(concurrency=64.0, throughput=9117.283945617, seconds=387.6666667),
            ],
            current=61.33333333333333,
            knee=64.0,
            peak=64.0,
            recommended=51.2,
            observed_from=16.0,
            observed_to=64.0,
            coverage=0.8571428571428571,
            message="throughput flattens at 64 requests in flight",
        ),
        engines=[
            EngineLoad(
                pod="grpo-demo-rollout-0",
                running=31.333333333333332,
                waiting=4.666666666666667,
                kv_usage=0.9123456789,
                tokens_per_second=9117.283945617,
                saturated=0.7333333333333333,
            )
        ],
        verifier=VerifierLoad(
            p50_seconds=0.0421337, p99_seconds=0.31415926, queue_depth=0.25, errors_per_second=0.0
        ),
    )


def health() -> HealthStatus:
    return HealthStatus(
        engines=[
            EngineHealth(
                pod="grpo-demo-rollout-0",
                role=RoleName.ROLLOUT,
                detector="kvDrift",
                baseline_tokens_per_second=9206.012345678,
                warmed_up_at=T0 + 15 * MINUTE,
                updated_at=NOW,
                values={"prefixHitRate": 0.7012345678, "preemptionsPerSecond": 0.0016666666667},
            )
        ]
    )


def first_attempt(phase: JobPhase, conditions: list[Condition], **fields: Any) -> RLJobStatus:
    """A status of generation 1 in its first attempt, begun at T0."""
    return RLJobStatus(
        phase=phase,
        observed_generation=1,
        attempt=1,
        start_time=T0,
        conditions=conditions,
        **fields,
    )


def running() -> RLJobStatus:
    """Every role ready, progress and a diagnosis refreshed, no restart yet."""
    return first_attempt(
        JobPhase.RUNNING,
        [
            condition("Ready", True, "AllRolesReady", "rollout 2/2, trainer 2/2 ready"),
            condition("Progressing", True, "Running", "trainer attempt 1 runs"),
            condition("Degraded", False, "AsExpected", "no role is degraded"),
        ],
        roles=roles(RestartsStatus()),
        progress=Progress(
            step=180,
            last_step_time=NOW,
            tokens_per_second=18234.567891234,
            baseline_tokens_per_second=17999.12345678,
            updated_at=NOW,
        ),
        policy_generation=41,
        checkpoint=CheckpointStatus(
            latest=checkpoint(150, 1),
            history=[checkpoint(100, 1), checkpoint(150, 1)],
            store_capabilities=StoreCapabilities(conditional_writes=True, probed_at=T0),
        ),
        restarts=RestartsStatus(),
        attempts=[AttemptRecord(attempt=1, started_at=T0, job_uid="uid-a1")],
        health=health(),
        bottleneck=bottleneck(),
    )


def ledger() -> RestartsStatus:
    """Two trainer gang restarts on NCCL timeouts, then a rollout pod restart."""
    policy = example_job().spec.failure_policy
    restarts = [
        (RoleName.TRAINER, FailureAction.RESTART_TRAINER_GANG, FailureReason.NCCL_TIMEOUT, None),
        (RoleName.TRAINER, FailureAction.RESTART_TRAINER_GANG, FailureReason.NCCL_TIMEOUT, None),
        (
            RoleName.ROLLOUT,
            FailureAction.RESTART_POD,
            FailureReason.KV_CACHE_DRIFT,
            "grpo-demo-rollout-1",
        ),
    ]
    result = RestartsStatus()
    for minute, (role, action, reason, pod) in enumerate(restarts):
        decision = Decision(action, reason, role, pod, True, 0.0, f"{reason} on {pod or role}")
        result = record_restart(result, decision, T0 + (20 + 20 * minute) * MINUTE, policy)
    return result


def restarted() -> RLJobStatus:
    """Attempt 3 after two gang restarts, a rollout pod restarting in turn, a suspect node."""
    restarts = ledger()
    return running().model_copy(
        update={
            "attempt": 3,
            "conditions": [
                condition("Ready", False, "RolesNotReady", "rollout 1/2, trainer 2/2 ready"),
                condition("Progressing", True, "Running", "trainer attempt 3 runs"),
                condition("Degraded", True, "RolesUnavailable", "rollout 1/2 ready"),
                condition("Restarting", True, "KVCacheDrift", "RestartPod grpo-demo-rollout-1"),
            ],
            "roles": roles(restarts, draining=1),
            "restarts": restarts,
            "attempts": [
                AttemptRecord(
                    attempt=number,
                    started_at=T0 + 20 * (number - 1) * MINUTE,
                    resumed_from_step=None if number == 1 else 50 * (number - 1),
                    job_uid=f"uid-a{number}",
                    ended_at=None if number == 3 else T0 + 20 * number * MINUTE,
                    end_reason=None if number == 3 else "NCCLTimeout",
                )
                for number in (1, 2, 3)
            ],
            "suspect_nodes": [
                SuspectNode(
                    name="gpu-node-7",
                    reason=FailureReason.NCCL_TIMEOUT,
                    marked_at=T0 + 40 * MINUTE,
                    until=T0 + 40 * MINUTE + dt.timedelta(hours=24),
                )
            ],
            "in_flight": InFlightAction(
                id="pod-grpo-demo-rollout-1",
                kind=ActionKind.RESTART_POD,
                target=ActionTarget(role=RoleName.ROLLOUT, name="grpo-demo-rollout-1", uid="u1"),
                reason=FailureReason.KV_CACHE_DRIFT,
                step="Draining",
                started_at=T0 + 60 * MINUTE,
                pods=[
                    ActionPod(name="grpo-demo-rollout-1", uid="u1", drain_started_at=NOW - MINUTE)
                ],
            ),
            "last_restart_request": RestartRequest(
                id="n2", role=RoleName.TRAINER, handled_at=T0 + 5 * MINUTE, earlier=["n1"]
            ),
        }
    )


def suspended() -> RLJobStatus:
    """The failure policy suspended the job: no pods, state and checkpoints kept."""
    message = "rewards rose 4x while the verifier pass rate fell"
    return first_attempt(
        JobPhase.SUSPENDED,
        [
            condition("Ready", False, "Suspended", "the job is suspended; no pods run"),
            condition("Suspended", True, "RewardHackingSuspected", message),
        ],
        roles=roles(RestartsStatus(), desired=0),
        restarts=RestartsStatus(),
        attempts=[
            AttemptRecord(
                attempt=1, started_at=T0, job_uid="uid-a1", ended_at=NOW, end_reason="Suspended"
            )
        ],
        checkpoint=CheckpointStatus(latest=checkpoint(150, 1), history=[checkpoint(150, 1)]),
        suspension=PolicySuspension(
            reason=FailureReason.REWARD_HACKING_SUSPECTED,
            message=message,
            rule="failurePolicy.rules[0]",
            suspended_at=NOW,
        ),
    )
