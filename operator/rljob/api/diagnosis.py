"""What the operator concluded about a running job, kept in status for `kubectl rljob diagnose`:
the role bounding the step (status.bottleneck) and a policy suspension (status.suspension).
Every list is bounded; the values are refreshed with progress (at most every 5 minutes)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BeforeValidator, Field

from rljob.api.base import StatusModel, optional_text
from rljob.api.rounding import Amount, Seconds, Share, TokensPerSecond
from rljob.vocabulary.enums import BottleneckRole, FailureReason, RoleName

MAX_PHASES = 8
MAX_CURVE_POINTS = 64
MAX_ENGINE_LOADS = 64
DIAGNOSIS_MESSAGE_MAX_LENGTH = 1024
PHASE_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"


def _cut(value: object) -> object:
    limit = DIAGNOSIS_MESSAGE_MAX_LENGTH
    return value[: limit - 3] + "..." if isinstance(value, str) and len(value) > limit else value


Text = Annotated[str, Field(max_length=DIAGNOSIS_MESSAGE_MAX_LENGTH), BeforeValidator(_cut)]


# Handled request nonces remembered beyond the last (a set-back annotation is not new).
MAX_EARLIER_REQUESTS = 16


class PhaseShare(StatusModel):
    """One trainer phase over the window."""

    phase: Annotated[str, Field(pattern=PHASE_NAME_PATTERN, max_length=63)] = Field(
        description="Phase, as the SDK's rljob_trainer_phase_seconds_total{phase} names it."
    )
    share: Share = Field(description="Share of the trainer's time in the window.")
    seconds_per_step: Seconds | None = Field(
        default=None, description="Mean seconds of each step in this phase; empty: no step ended."
    )


class CurvePoint(StatusModel):
    """One bin of the throughput-versus-concurrency curve (decayed means)."""

    concurrency: Amount = Field(description="Requests in flight (running plus waiting).")
    throughput: TokensPerSecond = Field(
        allow_inf_nan=False, description="Generated tokens per second."
    )
    seconds: Seconds = Field(description="Decayed seconds observed in the bin.")


class ConcurrencyCurveStatus(StatusModel):
    """A role's throughput against requests in flight, pooled over its engines, and its knee."""

    role: RoleName = Field(description="The engines' role (rollout, or trainer when colocated).")
    points: Annotated[list[CurvePoint], Field(max_length=MAX_CURVE_POINTS)] = Field(
        default_factory=list, description="Bins with enough time, lowest concurrency first."
    )
    current: Amount | None = Field(
        default=None, description="Requests in flight now, over the role's engines."
    )
    knee: Amount | None = Field(
        default=None, description="Where gains flatten: the first point of the plateau."
    )
    peak: Amount | None = Field(
        default=None, description="The lowest concurrency reaching the highest throughput."
    )
    degrading_from: Amount | None = Field(
        default=None, description="Past the peak, where throughput fell below it."
    )
    recommended: Amount | None = Field(
        default=None, description="80% of the peak's concurrency: the headroom to run at."
    )
    beyond: bool = Field(
        default=False,
        description="Throughput still climbed at the highest concurrency observed: the knee "
        "lies beyond it.",
    )
    observed_from: Amount | None = Field(default=None, description="Lowest concurrency seen.")
    observed_to: Amount | None = Field(default=None, description="Highest concurrency seen.")
    coverage: Share = Field(default=0.0, description="Share of the observed span with points.")
    message: Text = optional_text("The verdict in words.")


class EngineLoad(StatusModel):
    """One engine's saturation over the window."""

    pod: Annotated[str, Field(max_length=253)] = Field(description="Engine pod.")
    running: Amount = Field(description="Mean requests running.")
    waiting: Amount = Field(description="Mean requests queued.")
    kv_usage: Share | None = Field(default=None, description="Mean KV-cache usage, 0 to 1.")
    tokens_per_second: TokensPerSecond = Field(
        allow_inf_nan=False, description="Generated tokens per second."
    )
    saturated: Share = Field(description="Share of the window with requests queued.")


class VerifierLoad(StatusModel):
    """The verifiers over the window."""

    p50_seconds: Seconds | None = Field(default=None, description="Median request latency.")
    p99_seconds: Seconds | None = Field(default=None, description="99th-percentile latency.")
    queue_depth: Amount | None = Field(
        default=None, description="Mean requests queued (rljob_verifier_queue_depth)."
    )
    errors_per_second: Amount | None = Field(default=None, description="Failed requests/s.")


class Bottleneck(StatusModel):
    """Which role bounds the trainer's step, on what evidence, and what to do about it."""

    role: BottleneckRole = Field(description="What bounds the step.")
    since: datetime = Field(description="When this role became the bottleneck.")
    updated_at: datetime = Field(description="When it was last computed.")
    window_seconds: Seconds = Field(description="The window the shares cover.")
    step_seconds: Seconds | None = Field(
        default=None, description="Mean seconds per trainer step in the window."
    )
    phases: Annotated[list[PhaseShare], Field(max_length=MAX_PHASES)] = Field(
        default_factory=list, description="Each trainer phase's share of the window."
    )
    evidence: Text = optional_text("Why this role, with the figures.")
    advice: Text = optional_text("What to change, following the evidence.")
    recommended_concurrency: Annotated[int, Field(ge=1)] | None = Field(
        default=None,
        description="Requests in flight to run the rollout driver at, when concurrency is the "
        "limit (80% of the peak's, or double today's while the knee lies beyond).",
    )
    curve: ConcurrencyCurveStatus | None = Field(
        default=None, description="The rollout engines' throughput against concurrency."
    )
    engines: Annotated[list[EngineLoad], Field(max_length=MAX_ENGINE_LOADS)] = Field(
        default_factory=list, description="Per-engine saturation (the busiest first)."
    )
    verifier: VerifierLoad | None = Field(default=None, description="Verifier latency and queue.")


class PolicySuspension(StatusModel):
    """The failure policy suspended the job (action Suspend): its pods are stopped as for
    spec.suspend, which stays the user's. The `rljob.io/resume-request` annotation resumes it."""

    reason: FailureReason = Field(description="The finding that suspended it.")
    message: Text = Field(description="Its evidence.")
    rule: Annotated[str, Field(max_length=63)] | None = Field(
        default=None, description="The failure-policy rule that chose Suspend."
    )
    suspended_at: datetime = Field(description="When the suspension was journaled.")


class ResumeRequest(StatusModel):
    """The last `rljob.io/resume-request` nonce the operator handled (resumed or not)."""

    id: Annotated[str, Field(min_length=1, max_length=64)] = Field(description="The nonce.")
    handled_at: datetime = Field(description="When it was handled.")
    resumed: bool = Field(description="Whether it ended a policy suspension.")
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
