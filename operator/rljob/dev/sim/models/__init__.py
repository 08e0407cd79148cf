"""The simulated workloads' state as a function of time and faults (pure, seeded).

Each model is advanced to a time with the faults in force over the elapsed span (the simulator
advances every affected model before it changes a rule, so each span has one set of faults),
integrating counters in steps of at most `MAX_STEP` seconds with per-step noise. Counters only
grow; a restarted process is a new model whose counters start at zero, as a real one's do.
`render()` is the metrics page a scrape sees.

Metric names and semantics follow vLLM's PrometheusStatLogger (labels model_name and engine;
`vllm:engine_sleep_state{sleep_state=awake|weights_offloaded|discard_all}`, awake = 0 while
asleep) and the rljob SDK's trainer exporter (see shared/reference/workload-signals.md).
"""

from __future__ import annotations

from rljob.dev.sim.engines import SLEEP_STATES
from rljob.dev.sim.models.base import MAX_STEP, MAX_STEPS, PROCESS_START, Model
from rljob.dev.sim.models.canaries import (
    RL_CANARIES,
    RL_GENERATED_TOKENS,
    RL_PREFIX,
    RL_STEP,
)
from rljob.dev.sim.models.concurrency import KneeTruth, knee_truth
from rljob.dev.sim.models.engine import (
    VLLM_GENERATION_TOKENS,
    VLLM_KV_USAGE,
    VLLM_PREEMPTIONS,
    VLLM_PREFIX_HITS,
    VLLM_PREFIX_QUERIES,
    VLLM_PROMPT_TOKENS,
    VLLM_REQUEST_SUCCESS,
    VLLM_RUNNING,
    VLLM_SLEEP_STATE,
    VLLM_WAITING,
    EngineModel,
    Mode,
)
from rljob.dev.sim.models.phases import (
    COUNTED_PHASES,
    PHASE_CHECKPOINTING,
    PHASE_EVALUATING,
    PHASE_SECONDS,
    PHASE_TRAINING,
    PHASE_WAITING_FOR_ROLLOUTS,
    SDK_PHASES,
    STEP_PHASES,
)
from rljob.dev.sim.models.reference import REFERENCE_REQUESTS, REFERENCE_TOKENS, ReferenceModel
from rljob.dev.sim.models.trainer import (
    CHECKPOINT_STEP,
    POLICY_GENERATION,
    TRAINER_HEARTBEAT,
    TRAINER_PHASE,
    TRAINER_STEP,
    TrainerModel,
)
from rljob.dev.sim.models.verifier import (
    VERIFIER_DURATION,
    VERIFIER_ERRORS,
    VERIFIER_QUEUE_DEPTH,
    VerifierModel,
)

__all__ = [
    "CHECKPOINT_STEP",
    "COUNTED_PHASES",
    "MAX_STEP",
    "MAX_STEPS",
    "PHASE_CHECKPOINTING",
    "PHASE_EVALUATING",
    "PHASE_SECONDS",
    "PHASE_TRAINING",
    "PHASE_WAITING_FOR_ROLLOUTS",
    "POLICY_GENERATION",
    "PROCESS_START",
    "REFERENCE_REQUESTS",
    "REFERENCE_TOKENS",
    "RL_CANARIES",
    "RL_GENERATED_TOKENS",
    "RL_PREFIX",
    "RL_STEP",
    "SDK_PHASES",
    "SLEEP_STATES",
    "STEP_PHASES",
    "TRAINER_HEARTBEAT",
    "TRAINER_PHASE",
    "TRAINER_STEP",
    "VERIFIER_DURATION",
    "VERIFIER_ERRORS",
    "VERIFIER_QUEUE_DEPTH",
    "VLLM_GENERATION_TOKENS",
    "VLLM_KV_USAGE",
    "VLLM_PREEMPTIONS",
    "VLLM_PREFIX_HITS",
    "VLLM_PREFIX_QUERIES",
    "VLLM_PROMPT_TOKENS",
    "VLLM_REQUEST_SUCCESS",
    "VLLM_RUNNING",
    "VLLM_SLEEP_STATE",
    "VLLM_WAITING",
    "EngineModel",
    "KneeTruth",
    "Mode",
    "Model",
    "ReferenceModel",
    "TrainerModel",
    "VerifierModel",
    "knee_truth",
]
