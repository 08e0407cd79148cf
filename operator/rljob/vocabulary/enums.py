"""Closed vocabularies of an RLJob's spec and status: the operator writes them (its pydantic
models take them through rljob.api.enum_fields), the kubectl plugin reads them."""

from __future__ import annotations

from enum import StrEnum


class RoleName(StrEnum):
    """A workload role of an RLJob."""

    ROLLOUT = "rollout"
    TRAINER = "trainer"
    REFERENCE = "reference"
    VERIFIER = "verifier"


class Engine(StrEnum):
    """The inference engine a rollout role runs; it decides the metric names read."""

    VLLM = "vllm"
    SGLANG = "sglang"
    CUSTOM = "custom"


class Launcher(StrEnum):
    """How the trainer's pods start: torchrun's rendezvous (PET_* variables), a Ray cluster (index
    0 runs the head and the driver, the others join it), or the user's command as is."""

    TORCHRUN = "torchrun"
    RAY = "ray"
    COMMAND = "command"


class EngineExporter(StrEnum):
    """Where the metrics of engines inside the trainer gang are read: Ray's metrics agent on
    each node (vLLM's RayPrometheusStatLogger), the engines' own /metrics port, or the pages the
    rljob SDK's vLLM plugin serves from each engine process (rljob.sdk.vllm_plugin)."""

    RAY = "ray"
    ENGINE = "engine"
    PLUGIN = "plugin"


class WeightSync(StrEnum):
    """How a rollout engine the operator replaces rejoins the driver's loop: Ungated (deleted at
    once; its replacement turns Ready on its probes alone) or Gated (drained first; Ready only
    once it reports the job's current policy generation, behind a readiness gate)."""

    UNGATED = "Ungated"
    GATED = "Gated"


class GenerationFrom(StrEnum):
    """Where a Gated rollout engine's policy generation is read: the rljob_engine_policy_generation
    gauge on its metrics page, or the engine's own weight version over its HTTP API."""

    METRICS = "metrics"
    ENGINE = "engine"


class EngineState(StrEnum):
    """A rollout engine's place in the roster (status.roles.rollout.engines[].state)."""

    JOINING = "joining"  # running, not Ready yet (Gated: not serving the current policy yet)
    SERVING = "serving"  # Ready: the driver may send to it
    DRAINING = "draining"  # the operator is replacing it: send nothing new, let it finish


class FailureReason(StrEnum):
    """Why a workload is considered failed; what failure-policy rules match on."""

    KV_CACHE_DRIFT = "KVCacheDrift"
    # Judged at the engine's own operating point: one engine slower than its own expectation at
    # the load it is offered, with a fragmentation indicator agreeing; or every judged engine of
    # a role down together at the same offered load (the target is then one of the role's pods).
    KV_CACHE_FRAGMENTATION = "KVCacheFragmentation"
    FLEET_KV_CACHE_FRAGMENTATION = "FleetKVCacheFragmentation"
    ENGINE_STALLED = "EngineStalled"
    # KV capacity no request holds (an idle engine's usage above a floor, or a queue wedged on a
    # full cache with nothing running), and prefix-cache hits collapsing at a steady prompt mix.
    KV_CACHE_LEAK = "KVCacheLeak"
    PREFIX_CACHE_COLLAPSE = "PrefixCacheCollapse"
    # A rollout engine's host memory (its pod's working set or its processes' resident memory)
    # rising steadily while it serves: a leak a restart gives back.
    ENGINE_MEMORY_GROWTH = "EngineMemoryGrowth"
    NCCL_TIMEOUT = "NCCLTimeout"
    NCCL_NETWORK_ERROR = "NCCLNetworkError"
    CUDA_OUT_OF_MEMORY = "CUDAOutOfMemory"
    CUDA_ERROR = "CUDAError"
    GPU_HARDWARE_ERROR = "GPUHardwareError"
    # Ray's own failures, read from a Ray driver's output: an actor's worker process died, a
    # node of the Ray cluster died, Ray's memory monitor killed a task or actor.
    RAY_ACTOR_DIED = "RayActorDied"
    RAY_NODE_DIED = "RayNodeDied"
    RAY_OUT_OF_MEMORY = "RayOutOfMemory"
    TRAINER_STALLED = "TrainerStalled"
    OOM_KILLED = "OOMKilled"
    CRASH_LOOP = "CrashLoop"
    # A container exited non-zero with no more specific classification (e.g. one trainer rank).
    CONTAINER_FAILED = "ContainerFailed"
    VERIFIER_SLOW = "VerifierSlow"
    PREEMPTED = "Preempted"
    # Kubelet node-pressure eviction: like Preempted, the workload itself is not at fault.
    EVICTED = "Evicted"
    NODE_LOST = "NodeLost"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    CONFIG_ERROR = "ConfigError"
    UNSCHEDULABLE = "Unschedulable"
    # RL correctness canaries, read from the SDK's committed series (docs/sdk-metrics.md):
    # training reward rising while held-out evaluation stays flat; generation throughput per
    # token falling after a weight sync against the hour before it.
    REWARD_HACKING_SUSPECTED = "RewardHackingSuspected"
    THROUGHPUT_REGRESSION = "ThroughputRegression"
    # No failure: a restart the user requested (rljob.io/restart-request), as the restart ledger
    # records it beside the policy's; no failure is classified so, so no rule matches it.
    RESTART_REQUESTED = "RestartRequested"


class FailureAction(StrEnum):
    """What the failure policy does about a failure."""

    RESTART_POD = "RestartPod"
    RESTART_ROLE = "RestartRole"
    # Every pod of a serving role deleted by the operator, oldest first, within maxUnavailable.
    RESTART_ROLE_IN_TURN = "RestartRoleInTurn"
    RESTART_TRAINER_GANG = "RestartTrainerGang"
    # The trainer gang restarted and every serving role rolled, as one action: what a JobSet's
    # restart does, for a framework whose engines cannot outlive the trainer they sync with.
    RESTART_JOB = "RestartJob"
    FAIL_JOB = "FailJob"
    # Stops every pod as spec.suspend does, with the suspension kept in status (spec.suspend
    # stays the user's); the rljob.io/resume-request annotation resumes from the newest checkpoint.
    SUSPEND = "Suspend"
    REPORT = "Report"
    IGNORE = "Ignore"


class AddressingStyle(StrEnum):
    """S3 bucket addressing, as boto3's `addressing_style`."""

    AUTO = "auto"
    VIRTUAL = "virtual"
    PATH = "path"


class JobPhase(StrEnum):
    """A one-word summary of the job for humans; logic reads conditions, never the phase."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class QueueState(StrEnum):
    """Where Kueue has a queued job (its kueue.x-k8s.io/queue-name label): waiting for quota,
    admitted (its pods may run), evicted (its pods stop; it waits to be admitted again) or
    finished (its Workload is done)."""

    PENDING = "Pending"
    ADMITTED = "Admitted"
    EVICTED = "Evicted"
    FINISHED = "Finished"


class ActionKind(StrEnum):
    """A multi-step side effect journaled in status.inFlight before it starts."""

    RESTART_POD = "RestartPod"
    RESTART_ROLE = "RestartRole"
    RESTART_ROLE_IN_TURN = "RestartRoleInTurn"
    RESTART_TRAINER_GANG = "RestartTrainerGang"
    RESTART_JOB = "RestartJob"
    FAIL_JOB = "FailJob"
    SUSPEND = "Suspend"
    RESUME = "Resume"


# The actions that start a new trainer attempt from the newest checkpoint.
TRAINER_RESTART_ACTIONS = frozenset({FailureAction.RESTART_TRAINER_GANG, FailureAction.RESTART_JOB})
TRAINER_RESTART_KINDS = frozenset({ActionKind.RESTART_TRAINER_GANG, ActionKind.RESTART_JOB})


class ConditionType(StrEnum):
    """Every condition type the operator sets, in one place (status.conditions is open to
    others); docs/architecture.md section 10 lists them (a test keeps the two in step)."""

    ACCEPTED = "Accepted"
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    PODS_SCHEDULED = "PodsScheduled"
    # A trainer pod runs on a node in status.suspectNodes (rljob.reconcile.suspects).
    SUSPECT_NODE_IN_USE = "SuspectNodeInUse"
    HEALTH_SIGNALS_AVAILABLE = "HealthSignalsAvailable"
    CHECKPOINT_READY = "CheckpointReady"
    CHECKPOINT_STORE_UNAVAILABLE = "CheckpointStoreUnavailable"
    CHECKPOINT_RETENTION_FAILED = "CheckpointRetentionFailed"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    """Status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class BottleneckRole(StrEnum):
    """What bounds the trainer's step (the printer column shows it)."""

    # Engines saturated while the trainer waits: add engines.
    ROLLOUT = "Rollout"
    # Engines unsaturated while the trainer waits: too few requests in flight.
    ROLLOUT_CONCURRENCY = "RolloutConcurrency"
    VERIFIER = "Verifier"
    # The trainer's own compute: the rollout side is not the problem.
    TRAINER = "Trainer"
    WEIGHT_SYNC = "WeightSync"
    # Too little of the window observed (no phase counters, a new attempt).
    UNKNOWN = "Unknown"
