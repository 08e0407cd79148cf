"""The RLJob spec: what the user asks for."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field

from rljob.api.base import SpecModel
from rljob.api.base import nested as _nested
from rljob.api.durations import (
    Duration,
    DurationAtLeastOneSecond,
    duration_nanoseconds,
    durations_in_order,
)
from rljob.api.enum_fields import AddressingStyleField
from rljob.api.failure_policy import (
    MAX_FAILURE_RULES,
    MAX_RESTARTS_LIMIT,
    Backoff,
    FailurePolicy,
    FailureRule,
)
from rljob.api.kube_names import ImageRef
from rljob.api.kube_types import Int64Check, ObjectName
from rljob.api.roles import (
    PROMETHEUS_NAME_PATTERN,
    RESOURCE_NAME_PATTERN,
    EngineMetricNames,
    GangEngines,
    MetricsEndpoint,
    Role,
    Roles,
    RolloutRole,
    ServingRole,
    TrainerRole,
)
from rljob.api.rules import CelCheck, CrossFieldRule, Immutable, TransitionRule
from rljob.vocabulary.enums import AddressingStyle, RoleName

# The role models live in rljob.api.roles; they are named here too, as the spec's parts.
__all__ = [
    "CHECKPOINT_VERSION_PATTERN",
    "HTTP_URL_PATTERN",
    "MAX_FAILURE_RULES",
    "MAX_RESTARTS_LIMIT",
    "PROMETHEUS_LABEL_PATTERN",
    "PROMETHEUS_NAME_PATTERN",
    "RESOURCE_NAME_PATTERN",
    "RESUME_PATTERN",
    "S3_URI_PATTERN",
    "URI_MAX_LENGTH",
    "Backoff",
    "Checkpoint",
    "DirectSource",
    "EngineMetricNames",
    "EngineStall",
    "FailurePolicy",
    "FailureRule",
    "GangEngines",
    "Health",
    "HealthSource",
    "KVDrift",
    "MetricsEndpoint",
    "PrometheusSource",
    "RLJobSpec",
    "Role",
    "Roles",
    "RolloutRole",
    "ServingRole",
    "TrainerRole",
    "TrainerStall",
    "VerifierLatency",
]

# No backslashes in patterns used by CEL rules: a CEL string literal would read them as escapes.
S3_URI_PATTERN = r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._=+-]+)*$"
CHECKPOINT_VERSION_PATTERN = r"^v[0-9]{12}-a[0-9]{6}$"
RESUME_PATTERN = r"^(Latest|None|v[0-9]{12}-a[0-9]{6})$"
# No user info in the authority (`http://allowed@elsewhere` is elsewhere) and no whitespace.
HTTP_URL_PATTERN = r"^https?://[^/?#@\s]+([/?#]\S*)?$"
PROMETHEUS_LABEL_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"

URI_MAX_LENGTH = 1024

PrometheusLabel = Annotated[str, Field(pattern=PROMETHEUS_LABEL_PATTERN, max_length=128)]
HttpUrl = Annotated[str, Field(pattern=HTTP_URL_PATTERN, max_length=URI_MAX_LENGTH)]
S3Uri = Annotated[
    str,
    Field(max_length=URI_MAX_LENGTH),
    CelCheck(
        cel=f"self.matches('{S3_URI_PATTERN}')",
        message="must be s3://<bucket>[/<prefix>]: a bucket name (3-63 of a-z 0-9 . -), then "
        "path segments of A-Z a-z 0-9 . _ = + - without a trailing slash",
        holds=lambda uri: re.fullmatch(S3_URI_PATTERN, uri) is not None,
    ),
    CelCheck(
        cel="!self.split('/').exists(s, s == '.' || s == '..')",
        message="must not have a . or .. path segment: S3 keys are not paths, so the store "
        "would refuse every request under it",
        holds=lambda uri: not {".", ".."} & set(uri.split("/")),
    ),
]


def _has_control(text: str) -> bool:
    """ASCII control characters (RE2's [:cntrl:]): CR and LF would split a header."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


# RFC 9110 section 5.6.2: a header name is a token. In a CEL double-quoted string, since the
# token characters include the single quote.
HTTP_TOKEN_PATTERN = "^[-!#$%&'*+.^_`|~0-9A-Za-z]+$"
# Set by the HTTP client from the URL and the body; a job's value would redirect or desync it.
CLIENT_HEADERS = ("host", "content-length", "transfer-encoding", "connection")
Headers = Annotated[
    dict[str, Annotated[str, Field(max_length=1024)]],
    Field(max_length=16),
    CelCheck(
        cel=f'self.all(k, k.size() <= 256 && k.matches("{HTTP_TOKEN_PATTERN}"))',
        message="header names must be HTTP tokens of at most 256 characters "
        "(letters, digits and !#$%&'*+-.^_`|~)",
        holds=lambda headers: all(
            len(k) <= 256 and re.fullmatch(HTTP_TOKEN_PATTERN, k) for k in headers
        ),
    ),
    CelCheck(
        # A POSIX class: a backslash escape would be read by CEL's string literal first.
        cel="self.all(k, self[k].matches('^[^[:cntrl:]]*$'))",
        message="header values must not contain CR, LF or other control characters",
        holds=lambda headers: not any(_has_control(v) for v in headers.values()),
    ),
    CelCheck(
        cel=f"self.all(k, !(k.lowerAscii() in {list(CLIENT_HEADERS)}))",
        message="must not set " + ", ".join(CLIENT_HEADERS) + ": the HTTP client sets them",
        holds=lambda headers: not any(k.lower() in CLIENT_HEADERS for k in headers),
    ),
]


class Checkpoint(SpecModel):
    """Versioned checkpoints in S3 or an S3-compatible store."""

    uri: Annotated[
        S3Uri,
        Immutable("checkpoint.uri is immutable: the job's checkpoint versions live under it"),
    ] = Field(description="s3://bucket/prefix; versions live under <uri>/<namespace>/<name>/.")
    endpoint: HttpUrl | None = Field(
        default=None,
        description="Endpoint of an S3-compatible store; default: the operator's own (or AWS "
        "S3). It must be one the platform allows (chart value allowlist.s3Endpoints).",
    )
    addressing_style: AddressingStyleField = Field(
        default=AddressingStyle.AUTO, description="Bucket addressing: auto, virtual or path."
    )
    region: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        default=None, description="Region of the bucket."
    )
    ca_bundle_secret: ObjectName | None = Field(
        default=None,
        description="Secret (key ca.crt) with the CA bundle of a private endpoint.",
    )
    credentials_secret: ObjectName | None = Field(
        default=None,
        description="Secret with S3 credentials, mounted into trainer pods only; the operator "
        "never reads it.",
    )
    keep: int = Field(default=5, ge=1, le=1000, description="Newest eligible versions kept.")
    incomplete_grace: Duration = Field(
        default="6h",
        description="Age after which an incomplete version of the live attempt is deleted.",
    )
    resume: Annotated[str, Field(pattern=RESUME_PATTERN, max_length=32)] = Field(
        default="Latest",
        description="Where a new attempt starts: Latest (newest valid version), None (from "
        "scratch) or a version such as v000000001200-a000003.",
    )


class PrometheusSource(SpecModel):
    """Read workload metrics from a Prometheus HTTP API."""

    url: HttpUrl = Field(
        description="Base URL of the Prometheus HTTP API. A bearer token comes only from the "
        "operator's mounted token file (its --prometheus-token-file), never from a Secret read "
        "through the API; a job's own source sends `headers`. It must be one the platform "
        "allows (chart value allowlist.prometheusUrls)."
    )
    headers: Headers = Field(
        default_factory=dict, description="Extra HTTP headers sent with every query."
    )
    pod_label: PrometheusLabel = Field(
        default="pod", description="Series label holding the pod name."
    )
    namespace_label: PrometheusLabel = Field(
        default="namespace", description="Series label holding the namespace."
    )


class DirectSource(SpecModel):
    """Scrape each pod's metrics endpoint directly, without Prometheus."""


class HealthSource(SpecModel):
    """Where health signals come from: exactly one of prometheus or direct."""

    prometheus: PrometheusSource | None = Field(
        default=None, description="Query a Prometheus HTTP API."
    )
    direct: DirectSource | None = Field(default=None, description="Scrape pods directly.")

    cel_rules = (
        CrossFieldRule(
            cel="has(self.prometheus) != has(self.direct)",
            message="set exactly one of prometheus or direct",
            field="",
            holds=lambda source: (source.prometheus is None) != (source.direct is None),
        ),
    )


class KVDrift(SpecModel):
    """Detects rollout throughput decaying as the KV cache fragments."""

    threshold: float = Field(
        default=0.2,
        gt=0,
        le=1,
        description="Relative throughput drop (0 to 1) against baseline and peers that counts.",
    )
    window: Duration = Field(default="30m", description="How long the drop must last.")
    warmup: Duration = Field(
        default="15m", description="Time after an engine starts before its baseline is taken."
    )
    cooldown: Duration = Field(
        default="1h", description="Minimum time between two drift restarts of one engine."
    )


class EngineStall(SpecModel):
    """Detects an engine with pending requests that generates nothing."""

    timeout: Duration = Field(default="5m", description="How long the token counter may be flat.")


class TrainerStall(SpecModel):
    """Detects a trainer whose heartbeat stopped."""

    timeout: Duration = Field(default="30m", description="How stale the heartbeat may get.")
    startup_grace: Duration = Field(
        default="30m", description="Time after an attempt starts during which stalls are ignored."
    )


class VerifierLatency(SpecModel):
    """Detects slow verifiers."""

    p99: Duration = Field(default="10s", description="Bound on the 99th-percentile latency.")
    window: Duration = Field(default="10m", description="How long the bound must be exceeded.")


class BottleneckDiagnosis(SpecModel):
    """Which role bounds the trainer's step (status.bottleneck) and the parallelism knee."""

    window: Duration = Field(
        default="15m",
        description="The trainer phases' shares and the engines' load are judged over this long; "
        "a concurrency bin of the knee's curve needs a third of it observed. At least two "
        "intervals are used.",
    )


class RewardHacking(SpecModel):
    """Finds RewardHackingSuspected: training reward rising while held-out evaluation does not
    (the SDK's rljob_rl_reward_train and rljob_rl_reward_eval)."""

    window: Duration = Field(
        default="2h",
        description="The slopes are fitted over this long; at least two intervals are used.",
    )
    min_slope_per_hour: float = Field(
        default=0.05, gt=0, description="Training reward rise per hour that counts."
    )
    max_eval_ratio: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Held-out reward rising by less than this share of the training reward's "
        "rise is flat.",
    )
    min_eval_points: int = Field(
        default=4, ge=2, le=1000, description="Distinct evaluations needed in the window."
    )


class ThroughputRegression(SpecModel):
    """Finds ThroughputRegression: tokens per second of generation after a weight sync against
    the window before it (the SDK's rljob_rl_generated_tokens_total over the generating phase)."""

    before: Duration = Field(default="1h", description="The reference window before the sync.")
    after: Duration = Field(
        default="15m",
        description="Judged over this long after the sync (averages its warm-up); at least two "
        "intervals are used.",
    )
    threshold: float = Field(
        default=0.3, gt=0, le=1, description="Relative drop (0 to 1) that counts."
    )


class Canaries(SpecModel):
    """RL correctness findings a failurePolicy rule can act on (Report by default)."""

    reward_hacking: RewardHacking = _nested(RewardHacking, "Reward hacking.")
    throughput_regression: ThroughputRegression = _nested(
        ThroughputRegression, "Throughput regression after a weight sync."
    )


class Health(SpecModel):
    """Health detection: where signals come from, how often, and each detector's bounds."""

    source: HealthSource | None = Field(
        default=None, description="Signal source; default: the operator's configured one."
    )
    interval: DurationAtLeastOneSecond = Field(
        default="30s", description="How often the job's health is evaluated."
    )
    kv_drift: KVDrift = _nested(KVDrift, "KV-cache drift detection for rollout engines.")
    engine_stall: EngineStall = _nested(EngineStall, "Stalled-engine detection.")
    trainer_stall: TrainerStall = _nested(TrainerStall, "Stalled-trainer detection.")
    verifier_latency: VerifierLatency = _nested(VerifierLatency, "Slow-verifier detection.")
    bottleneck: BottleneckDiagnosis = _nested(
        BottleneckDiagnosis, "What bounds the step (status.bottleneck)."
    )
    canaries: Canaries = _nested(Canaries, "RL correctness findings.")

    # Health is evaluated once per interval: a shorter window or timeout cannot be honoured.
    cel_rules = tuple(
        durations_in_order(
            "interval",
            bound,
            field=bound,
            message=f"{bound} must not be shorter than interval: health is evaluated once per "
            "interval",
        )
        for bound in ("kvDrift.window", "verifierLatency.window", "engineStall.timeout")
    )


def _image_rule(role: RoleName) -> CrossFieldRule:
    def holds(spec: Any) -> bool:
        workload = getattr(spec.roles, role.value)
        return spec.image is not None or workload is None or workload.image is not None

    return CrossFieldRule(
        cel=f"has(self.image) || !has(self.roles.{role}) || has(self.roles.{role}.image)",
        message=f"set spec.image or spec.roles.{role}.image",
        field=f"roles.{role}.image",
        holds=holds,
    )


def _trainer_grace_within_teardown(spec: Any) -> bool:
    grace = spec.roles.trainer.termination_grace_period_seconds
    teardown = duration_nanoseconds(spec.failure_policy.teardown_timeout)
    return grace is None or grace * 1_000_000_000 <= teardown


# A rank still checkpointing after SIGTERM is force-deleted once teardownTimeout has passed.
TRAINER_GRACE_WITHIN_TEARDOWN = CrossFieldRule(
    cel="!has(self.roles.trainer.terminationGracePeriodSeconds) || !has(self.failurePolicy)"
    " || !has(self.failurePolicy.teardownTimeout)"
    " || self.roles.trainer.terminationGracePeriodSeconds"
    " <= duration(self.failurePolicy.teardownTimeout).getSeconds()",
    message="roles.trainer.terminationGracePeriodSeconds must not exceed "
    "failurePolicy.teardownTimeout: a rank still saving a checkpoint after SIGTERM would be "
    "force-deleted when the teardown times out",
    field="roles.trainer.terminationGracePeriodSeconds",
    holds=_trainer_grace_within_teardown,
)


def _trainer_nodes_unchanged_or_suspended(old: Any, new: Any) -> bool:
    return bool(new.roles.trainer.nodes == old.roles.trainer.nodes or new.suspend or old.suspend)


class RLJobSpec(SpecModel):
    """One LLM reinforcement-learning job: its roles, checkpoints, health and failure policy."""

    suspend: bool = Field(
        default=False,
        description="Job-style suspend: removes pods, keeps state and checkpoints.",
    )
    image: ImageRef | None = Field(
        default=None, description="Default container image of every role."
    )
    roles: Roles = Field(description="The job's workloads.")
    checkpoint: Checkpoint | None = Field(
        default=None, description="Versioned checkpoints; without it a restart starts over."
    )
    health: Health = _nested(Health, "Health detection.")
    failure_policy: FailurePolicy = _nested(FailurePolicy, "Failure handling.")
    ttl_seconds_after_finished: Annotated[int, Field(ge=0), Int64Check] | None = Field(
        default=None,
        description="Seconds after Succeeded or Failed before the job is deleted; default: kept.",
    )

    cel_rules = (*(_image_rule(role) for role in RoleName), TRAINER_GRACE_WITHIN_TEARDOWN)
    transition_rules = (
        TransitionRule(
            cel="self.roles.trainer.nodes == oldSelf.roles.trainer.nodes"
            " || (has(self.suspend) && self.suspend)"
            " || (has(oldSelf.suspend) && oldSelf.suspend)",
            message="roles.trainer.nodes can change only while the job is suspended",
            field="roles.trainer.nodes",
            holds=_trainer_nodes_unchanged_or_suspended,
        ),
        TransitionRule(
            cel="has(self.checkpoint) == has(oldSelf.checkpoint)",
            message="checkpoint cannot be added or removed after creation",
            field="checkpoint",
            holds=lambda old, new: (old.checkpoint is None) == (new.checkpoint is None),
        ),
    )
