"""The failure trace of the goodput benchmark: which failures hit a simulated RL job, when, and
how long everything around them takes, every number with its source.

Pure and seeded: no I/O, no clock. A later benchmark runs the same simulated job three ways (the
operator with its defaults, the operator mapping every finding to a restart of all roles, a JobSet
with its restart-everything failure policy) against one `failure_trace` and compares effective
training time (the share of wall-clock that advances training).

Rates
-----
The hardware and network classes come from a published per-category count of the failures of a
large synchronous training job, Llama 3 405B pre-training: 419 unexpected interruptions (of 466;
47 were planned) in a 54-day snapshot on 16,384 H100 GPUs (arXiv 2407.21783, Table 5). The
exposure is 16,384 GPUs x 54 days x 24 h = 21,233,664 GPU-hours, so 419 / 21,233,664 =
1.973e-5 unexpected interruptions per GPU-hour (one per 50,677 GPU-hours); a class's rate is the
sum of its categories' counts over the same exposure. The table's counts add up to 419; its printed
percentages do not (94.9 %): Faulty GPU is printed as 30.1 % but 148 / 419 is 35.3 %, every other
category agrees with its count to 0.05 points. The counts are used.

Categories (counts) by class:

- gpu_hardware, 262: Faulty GPU (148), GPU HBM3 memory (72), GPU SRAM memory (19), GPU system
  processor (17), GPU thermal interface + sensor (6).
- nccl_timeout, 49: network switch/cable (35), NIC (7), NCCL watchdog timeouts (7).
- node_lost, 46: host maintenance (32, unplanned), SSD (3), power supply (3), server chassis (2),
  IO expansion board (2), CPU (2), system memory (2).
- not modelled, 62: software bug (54), dependency (2), silent data corruption (6).

Not modelled: a software bug or a broken dependency recurs after any restart (ByteRobust rolls the
code back instead); silent data corruption raises no signal any of the three arms acts on.

hung_rank (a rank hangs with no watchdog) has no Table 5 category. ByteRobust's census of three
months of incidents on its production platform (778,135 LLM training jobs; arXiv 2509.16293, Sec.
2, Table 1) has job hangs at 9.9 % of incidents against CUDA errors at 36.1 % (MFU decline 0.8 %,
NaN 0.3 %, code/data adjustments 17.3 %): only the ratio is used. hung_rank is
gpu_hardware's rate x 9.9 / 36.1, GPU faults standing in for CUDA errors. Some of ByteRobust's hangs
may be collectives a watchdog would end (ByteDance detects hangs by zero RDMA traffic for 10 min),
so this may double-count a little of nccl_timeout.

The engine and verifier classes have no published rate. The RL-specific study, RobustRL (arXiv
2512.22492, "Role-Based Fault Tolerance System for LLM RL Post-Training", OSDI '26), injects only
trainer machine faults end to end (one at a random moment every 10 training steps, "10 % failure
injection frequency", fault type not stated) and studies rollout faults as components (a 32B
rollout replacement takes ~119 s, Fig. 17); its own production projection is one failure per
~117 h on 256 GPUs (3.3e-5 per GPU-hour, 1.7x Llama 3's rate). So engine_oom, engine_drift and
slow_verifier are ASSUMPTIONS: one per engine-week (engines of 8 GPUs) or per verifier-week. The
trace is dominated by them (on 4 engines and 4 verifiers, ~4 each a week against ~0.1 trainer
failures), so the benchmark should report lost seconds per failure class, from which effective
training time can be recomputed for any rates. For scale: deriving engine_drift the way hung_rank
is derived (ByteRobust's MFU decline, 0.8 / 36.1 of the GPU rate) would give 2.7e-7 per GPU-hour,
2,700x below the assumption. Hardware faults on rollout GPUs are not a class (gpu_hardware is a
trainer pod failing); at the Llama 3 rate they would be 1/60 of the assumed engine_oom rate.

| class | role hit | source | figure | rate |
|---|---|---|---|---|
| gpu_hardware | trainer | Llama 3, Table 5 | 262 of 419 in 21.23 M GPU-h | 1.234e-5 / GPU-h |
| nccl_timeout | trainer | Llama 3, Table 5 | 49 of 419 | 2.308e-6 / GPU-h |
| node_lost | trainer, rollout | Llama 3, Table 5 | 46 of 419 | 2.166e-6 / GPU-h |
| engine_oom | rollout | ASSUMPTION | 1 per engine-week | 7.440e-4 / GPU-h |
| engine_drift | rollout | ASSUMPTION | 1 per engine-week | 7.440e-4 / GPU-h |
| hung_rank | trainer | ByteRobust Table 1, Llama 3 | hang 9.9 % / CUDA 36.1 % | 3.384e-6 / GPU-h |
| slow_verifier | verifier | ASSUMPTION | 1 per verifier-week | 5.952e-3 / replica-h |

A class's arrivals are Poisson at its rate x the GPUs (verifier replicas) of the role it hits; a
class hitting two roles has one stream per role.

Durations
---------
Real seconds, each with its source in `Durations`: the failure inter-arrival scale (the per-GPU
mean time between failures above), the RL step, model and checkpoint load and save, the
checkpoint interval, the NCCL watchdog, pod scheduling and start-up, drift onset to threshold, and
the operator's detection windows (its defaults in rljob.api.spec and failure_policy). Other
figures for reference: ByteRobust, 97 % effective training time for three months on 9,600 GPUs,
in-memory every-step checkpoints under 0.9 % overhead, recovery with warm standbys and hot updates
10.87x and 11.04x faster than a requeue (on 16,384 GPUs); RobustRL, ETTR over 80 % with per-role
recovery against ~60 % for ByteRobust's full restart (256 GPUs, Qwen3-8B-Math, 10 % injection),
an 8B trainer-only restart 173.0 s against 277.8 s for the whole task (Fig. 15), checkpoint
blocking ~3 s per step (Figs. 20-22); Llama 3, over 90 % effective training time.

Provenance: the papers' abstracts were read as stored (arXiv abstract pages); Table 5 as
reproduced by glennklockwood.com/garden/component-reliability (counts and printed percentages);
ByteRobust's Table 1 and RobustRL's figures from third parties' full-text reading notes kept in
public repositories, which cite the sections and figures given here. Check them against the PDFs
before publishing numbers.

Scaling
-------
The bench runs at 1/factor of real time: `Durations.scaled(factor)` divides every duration, the
failure inter-arrival scale and the detection windows included, so a trace drawn with scaled
durations has the real trace's events at 1/factor of its times. `extrapolate` takes the seconds
each class lost at the scaled run back to real time: what the scaled durations produced (detection
windows, timeouts, loads, pod start-up, progress lost since the checkpoint, backoff) grows by the
factor; the operator's control-loop latency (watch delivery, reconcile queueing, API writes) and
whatever the bed runs in real time do not, nor does the health interval where it is clamped at the
API's 1 s floor (30 s / 60 = 0.5 s is refused): the bench measures those as fixed seconds.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

HOUR = 3600.0
WEEK_HOURS = 7 * 24.0

# Llama 3 405B pre-training, arXiv 2407.21783, Table 5: a 54-day snapshot on 16,384 H100 GPUs.
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
LLAMA3_GPU_HOURS = LLAMA3_GPUS * LLAMA3_DAYS * 24  # 21,233,664
LLAMA3_INTERRUPTIONS = 466
LLAMA3_PLANNED = 47
LLAMA3_UNEXPECTED = 419

# ByteRobust, arXiv 2509.16293, Sec. 2, Table 1: shares of the incidents of three months (778,135
# LLM training jobs).
BYTEROBUST_CUDA_ERROR_PERCENT = 36.1
BYTEROBUST_JOB_HANG_PERCENT = 9.9
BYTEROBUST_MFU_DECLINE_PERCENT = 0.8

# The assumed engine and verifier rates: one per engine-week, one per verifier-week.
ASSUMED_GPUS_PER_ENGINE = 8
ASSUMED_PER_INSTANCE_WEEK = 1.0


class Role(StrEnum):
    """The roles of an RLJob (rljob.vocabulary.RoleName's values)."""

    TRAINER = "trainer"
    ROLLOUT = "rollout"
    VERIFIER = "verifier"


class FailureClass(StrEnum):
    """What goes wrong; `source` says whom it hits, how often and on whose word."""

    # GPU and HBM faults: the trainer rank's pod fails with a GPU error.
    GPU_HARDWARE = "gpu_hardware"
    # NCCL timeouts and network errors: a collective hangs until the watchdog fires.
    NCCL_TIMEOUT = "nccl_timeout"
    # A node goes away (host faults, unplanned maintenance): its pods are lost.
    NODE_LOST = "node_lost"
    # A rollout engine OOMs on an adversarial prompt: the engine container is OOMKilled.
    ENGINE_OOM = "engine_oom"
    # Engine throughput drifts: the engine slows gradually.
    ENGINE_DRIFT = "engine_drift"
    # A trainer rank hangs silently: no watchdog fires.
    HUNG_RANK = "hung_rank"
    # A verifier's latency rises.
    SLOW_VERIFIER = "slow_verifier"

    @property
    def source(self) -> ClassSource:
        return SOURCES[self]

    @property
    def roles(self) -> tuple[Role, ...]:
        return SOURCES[self].roles

    @property
    def rate_per_unit_hour(self) -> float:
        """Failures per GPU-hour (verifier replica-hour) of a role it hits, at real time."""
        return SOURCES[self].rate_per_unit_hour

    def rate_per_unit_second(self, durations: Durations) -> float:
        """The rate in the durations' time base: `scaled(factor)` multiplies it by factor."""
        return self.rate_per_unit_hour / HOUR * (REAL_GPU_MTBF_S / durations.gpu_mtbf_s)


@dataclass(frozen=True)
class Table5Row:
    """A root-cause category of Llama 3's Table 5 and the class it maps to (None: not modelled)."""

    category: str
    count: int
    printed_percent: float
    failure_class: FailureClass | None


LLAMA3_TABLE5: tuple[Table5Row, ...] = (
    Table5Row("Faulty GPU", 148, 30.1, FailureClass.GPU_HARDWARE),
    Table5Row("GPU HBM3 Memory", 72, 17.2, FailureClass.GPU_HARDWARE),
    Table5Row("Software Bug", 54, 12.9, None),
    Table5Row("Network Switch/Cable", 35, 8.4, FailureClass.NCCL_TIMEOUT),
    Table5Row("Host Maintenance", 32, 7.6, FailureClass.NODE_LOST),
    Table5Row("GPU SRAM Memory", 19, 4.5, FailureClass.GPU_HARDWARE),
    Table5Row("GPU System Processor", 17, 4.1, FailureClass.GPU_HARDWARE),
    Table5Row("NIC", 7, 1.7, FailureClass.NCCL_TIMEOUT),
    Table5Row("NCCL Watchdog Timeouts", 7, 1.7, FailureClass.NCCL_TIMEOUT),
    Table5Row("Silent Data Corruption", 6, 1.4, None),
    Table5Row("GPU Thermal Interface + Sensor", 6, 1.4, FailureClass.GPU_HARDWARE),
    Table5Row("SSD", 3, 0.7, FailureClass.NODE_LOST),
    Table5Row("Power Supply", 3, 0.7, FailureClass.NODE_LOST),
    Table5Row("Server Chassis", 2, 0.5, FailureClass.NODE_LOST),
    Table5Row("IO Expansion Board", 2, 0.5, FailureClass.NODE_LOST),
    Table5Row("Dependency", 2, 0.5, None),
    Table5Row("CPU", 2, 0.5, FailureClass.NODE_LOST),
    Table5Row("System Memory", 2, 0.5, FailureClass.NODE_LOST),
)

LLAMA3_CITATION = (
    "Llama Team, AI @ Meta, 'The Llama 3 Herd of Models', arXiv 2407.21783, Table 5 (root-cause "
    "categorization of unexpected interruptions during a 54-day period of Llama 3 405B "
    "pre-training)"
)
BYTEROBUST_CITATION = (
    "Wan et al., 'Robust LLM Training Infrastructure at ByteDance' (ByteRobust), arXiv 2509.16293, "
    "SOSP '25, Sec. 2, Table 1"
)
ROBUSTRL_CITATION = (
    "Chen et al., 'Role-Based Fault Tolerance System for LLM RL Post-Training' (RobustRL), arXiv "
    "2512.22492, OSDI '26"
)


def table5_count(failure_class: FailureClass | None) -> int:
    """The Table 5 interruptions mapped to a class (None: those not modelled)."""
    return sum(row.count for row in LLAMA3_TABLE5 if row.failure_class is failure_class)


def _llama3_rate(failure_class: FailureClass) -> float:
    return table5_count(failure_class) / LLAMA3_GPU_HOURS


@dataclass(frozen=True)
class ClassSource:
    """Whom a class hits, how often (per GPU-hour, per replica-hour for the verifier), and why."""

    roles: tuple[Role, ...]
    rate_per_unit_hour: float
    figure: str
    derivation: str
    citation: str
    assumed: bool = False


_GPU_RATE = _llama3_rate(FailureClass.GPU_HARDWARE)
_ENGINE_RATE = ASSUMED_PER_INSTANCE_WEEK / (WEEK_HOURS * ASSUMED_GPUS_PER_ENGINE)

SOURCES: Mapping[FailureClass, ClassSource] = {
    FailureClass.GPU_HARDWARE: ClassSource(
        roles=(Role.TRAINER,),
        rate_per_unit_hour=_GPU_RATE,
        figure="Faulty GPU 148 + HBM3 72 + SRAM 19 + GPU system processor 17 + thermal 6 = 262",
        derivation="262 / (16,384 GPUs x 54 d x 24 h)",
        citation=LLAMA3_CITATION,
    ),
    FailureClass.NCCL_TIMEOUT: ClassSource(
        roles=(Role.TRAINER,),
        rate_per_unit_hour=_llama3_rate(FailureClass.NCCL_TIMEOUT),
        figure="network switch/cable 35 + NIC 7 + NCCL watchdog timeouts 7 = 49",
        derivation="49 / (16,384 GPUs x 54 d x 24 h)",
        citation=LLAMA3_CITATION,
    ),
    FailureClass.NODE_LOST: ClassSource(
        roles=(Role.TRAINER, Role.ROLLOUT),
        rate_per_unit_hour=_llama3_rate(FailureClass.NODE_LOST),
        figure="host maintenance 32 + SSD 3 + power 3 + chassis 2 + IO board 2 + CPU 2 + memory 2"
        " = 46",
        derivation="46 / (16,384 GPUs x 54 d x 24 h), on the GPUs of either role",
        citation=LLAMA3_CITATION,
    ),
    FailureClass.ENGINE_OOM: ClassSource(
        roles=(Role.ROLLOUT,),
        rate_per_unit_hour=_ENGINE_RATE,
        figure="no published rate",
        derivation="ASSUMPTION: one per engine-week, 1 / (168 h x 8 GPUs)",
        citation=ROBUSTRL_CITATION + " (injects trainer faults only; no rollout rate)",
        assumed=True,
    ),
    FailureClass.ENGINE_DRIFT: ClassSource(
        roles=(Role.ROLLOUT,),
        rate_per_unit_hour=_ENGINE_RATE,
        figure="no published rate",
        derivation="ASSUMPTION: one per engine-week, 1 / (168 h x 8 GPUs)",
        citation=ROBUSTRL_CITATION + " (no rollout rate); vllm-project/vllm#42484 (drift seen)",
        assumed=True,
    ),
    FailureClass.HUNG_RANK: ClassSource(
        roles=(Role.TRAINER,),
        rate_per_unit_hour=_GPU_RATE * BYTEROBUST_JOB_HANG_PERCENT / BYTEROBUST_CUDA_ERROR_PERCENT,
        figure="job hang 9.9 % vs CUDA error 36.1 % of incidents",
        derivation="gpu_hardware's rate x 9.9 / 36.1",
        citation=BYTEROBUST_CITATION + "; " + LLAMA3_CITATION,
    ),
    FailureClass.SLOW_VERIFIER: ClassSource(
        roles=(Role.VERIFIER,),
        rate_per_unit_hour=ASSUMED_PER_INSTANCE_WEEK / WEEK_HOURS,
        figure="no published rate",
        derivation="ASSUMPTION: one per verifier replica-week, 1 / 168 h",
        citation=ROBUSTRL_CITATION + " (tool and sandbox faults out of its scope)",
        assumed=True,
    ),
}

# The failure inter-arrival scale: the mean time between unexpected interruptions of one GPU.
REAL_GPU_MTBF_S = LLAMA3_GPU_HOURS / LLAMA3_UNEXPECTED * HOUR  # 50,677 GPU-hours


@dataclass(frozen=True)
class Durations:
    """Every duration of the simulated job, in seconds, real unless `scaled`; each field's source
    is in the comment above it. ASSUMPTION marks what no source gave."""

    # Failure inter-arrival scale: 21,233,664 GPU-h / 419 = 50,677 GPU-h per unexpected
    # interruption (Llama 3, arXiv 2407.21783, Table 5). Every class's rate is tied to it.
    gpu_mtbf_s: float = REAL_GPU_MTBF_S
    # One RL step: verl docs/advance/fully_async.md, "Asynchronous Training on 7B Model":
    # Qwen2.5-Math-7B, DAPO, H20, 28K max response, fully_async_policy 32 trainer : 32 rollout
    # GPUs, 189.26 s a step (colocated synchronous on 64 GPUs: 365.28 s; on 32: 790.10 s).
    step_s: float = 189.26
    # ASSUMPTION: a checkpoint every 5 steps, the sparsest interval RobustRL evaluates
    # (arXiv 2512.22492, Figs. 20-22: every step, 3 and 5 steps).
    checkpoint_interval_s: float = 5 * 189.26
    # Checkpoint save, blocking part: 6.3 s for a 7B model with PyTorch DCP async_save (PyTorch
    # blog, "Reducing Model Checkpointing Times by Over 10x with PyTorch Distributed Asynchronous
    # Checkpointing", IBM / Meta, 2024).
    checkpoint_save_s: float = 6.3
    # Checkpoint save, synchronous: 148.8 s for the same 7B model (same blog post).
    checkpoint_save_sync_s: float = 148.8
    # ASSUMPTION: loading reads what the synchronous save wrote, over the same storage: 148.8 s
    # (no published 7B-70B DCP load time found; RobustRL's whole 8B trainer restart, load
    # included, is 173.0 s, Fig. 15).
    checkpoint_load_s: float = 148.8
    # Model weights into a vLLM engine: 47.99 s, Llama 3 8B with vLLM's default safetensors
    # loader from a GP3 SSD (NVIDIA / Run:ai, "Reducing Cold Start Latency for LLM Inference with
    # NVIDIA Run:ai Model Streamer"; 14.34 s with the streamer).
    model_load_s: float = 47.99
    # A rollout engine replaced end to end (scheduling, container, engine init, weight sync):
    # ~119 s for Qwen3-32B (RobustRL, Fig. 17).
    engine_restart_s: float = 119.0
    # The trainer alone restarted from its checkpoint: 173.0 s for 8B (RobustRL, Fig. 15; the
    # whole RL task: 277.8 s).
    trainer_restart_s: float = 173.0
    # NCCL watchdog: kProcessGroupNCCLDefaultTimeout = 10 * 60 * 1000 ms
    # (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp, torch 2.15.0).
    nccl_timeout_s: float = 600.0
    # Pod scheduling + container start, image present: the Kubernetes SLO, p99 <= 5 s
    # (kubernetes/community sig-scalability/slos/pod_startup_latency.md).
    pod_start_s: float = 5.0
    # Image pull of a large GPU image on a fresh node: Google's deep-learning container created
    # in 3 min 50 s without image streaming, 20 s with (W. Denniss, wdenniss.com, "Using image
    # streaming with DockerHub").
    image_pull_s: float = 230.0
    # A silent node is NotReady after kube-controller-manager's --node-monitor-grace-period,
    # 50 s by default (kubernetes/kubernetes#127352).
    node_grace_s: float = 50.0
    # ASSUMPTION: an engine's throughput takes an hour from drift onset to the detector's 20 %
    # drop (vllm-project/vllm#42484: a server up ~60 min served 71.6 against 83-86 fresh,
    # 14-16 % less, P99 TTFT 2.5x).
    drift_onset_to_threshold_s: float = 3600.0
    # The operator's detection windows and restart timing: its defaults (operator/rljob/api/
    # spec.py: Health, KVDrift, EngineStall, TrainerStall, VerifierLatency; failure_policy.py:
    # backoff, node_lost_timeout).
    health_interval_s: float = 30.0
    kv_drift_window_s: float = 1800.0
    kv_drift_warmup_s: float = 900.0
    kv_drift_cooldown_s: float = 3600.0
    engine_stall_timeout_s: float = 300.0
    trainer_stall_timeout_s: float = 1800.0
    trainer_stall_startup_grace_s: float = 1800.0
    verifier_p99_bound_s: float = 10.0
    verifier_latency_window_s: float = 600.0
    restart_backoff_initial_s: float = 30.0
    restart_backoff_max_s: float = 1800.0
    node_lost_timeout_s: float = 60.0

    def scaled(self, factor: float) -> Durations:
        """Every duration divided by factor (the bench runs at 1/factor of real time): the
        failure inter-arrival scale and the detection windows too. The operator refuses a health
        interval under 1 s: a bench at factor > 30 clamps it, and that part does not scale."""
        if not factor > 0:
            raise ValueError(f"factor must be positive, not {factor}")
        return dataclasses.replace(
            self, **{f.name: getattr(self, f.name) / factor for f in dataclasses.fields(self)}
        )


@dataclass(frozen=True)
class JobSize:
    """The simulated job: trainer pods of whole nodes, rollout engines, CPU verifiers."""

    trainer_nodes: int = 4
    gpus_per_trainer_node: int = 8
    rollout_engines: int = 4
    gpus_per_engine: int = ASSUMED_GPUS_PER_ENGINE
    verifiers: int = 4

    def units(self, role: Role) -> int:
        """What a class's rate is per: GPUs of the trainer and rollout, verifier replicas."""
        if role is Role.TRAINER:
            return self.trainer_nodes * self.gpus_per_trainer_node
        if role is Role.ROLLOUT:
            return self.rollout_engines * self.gpus_per_engine
        return self.verifiers

    def instances(self, role: Role) -> int:
        """The pods a failure can target: trainer pods (one a node), engines, verifiers."""
        if role is Role.TRAINER:
            return self.trainer_nodes
        if role is Role.ROLLOUT:
            return self.rollout_engines
        return self.verifiers


@dataclass(frozen=True, order=True)
class FailureEvent:
    """One failure: when (seconds from the run's start, in the durations' time base), what, and
    which pod (index among the role's `instances`)."""

    time_s: float
    failure_class: FailureClass
    role: Role
    index: int


def expected_counts(size: JobSize, durations: Durations, hours: float) -> dict[FailureClass, float]:
    """The mean number of each class's failures in a run of `hours` (durations' time base)."""
    return {
        failure_class: failure_class.rate_per_unit_second(durations)
        * sum(size.units(role) for role in failure_class.roles)
        * hours
        * HOUR
        for failure_class in FailureClass
    }


def failure_trace(
    size: JobSize,
    durations: Durations,
    hours: float,
    seed: int,
    one_per_class: bool = False,
) -> list[FailureEvent]:
    """The failures of a run `hours` long (in the durations' time base: with `scaled(60)`
    durations, one hour of trace holds what 60 real hours would), sorted by time.

    Poisson arrivals per class and role, at the class's rate x the role's units, each on a pod
    drawn uniformly; every (class, role) stream has a random generator of its own, seeded from
    `seed`, so one class's draws do not shift another's. `one_per_class` gives a smoke trace:
    each class exactly once, at the middle of the n-th of len(FailureClass) equal slots of the
    run, on a role drawn in proportion to its units and a pod drawn uniformly."""
    if not hours > 0:
        raise ValueError(f"hours must be positive, not {hours}")
    run_s = hours * HOUR
    if one_per_class:
        return _one_per_class(size, run_s, seed)
    events: list[FailureEvent] = []
    for failure_class in FailureClass:
        for role in failure_class.roles:
            rate = failure_class.rate_per_unit_second(durations) * size.units(role)
            if rate <= 0 or size.instances(role) <= 0:
                continue
            rng = random.Random(f"goodput-trace:{seed}:{failure_class.value}:{role.value}")
            time_s = rng.expovariate(rate)
            while time_s < run_s:
                events.append(
                    FailureEvent(time_s, failure_class, role, rng.randrange(size.instances(role)))
                )
                time_s += rng.expovariate(rate)
    return sorted(events)


def _one_per_class(size: JobSize, run_s: float, seed: int) -> list[FailureEvent]:
    slot_s = run_s / len(FailureClass)
    events = []
    for slot, failure_class in enumerate(FailureClass):
        rng = random.Random(f"goodput-smoke:{seed}:{failure_class.value}")
        roles = [role for role in failure_class.roles if size.instances(role) > 0]
        weights = [size.units(role) for role in roles]
        if not roles or sum(weights) <= 0:
            raise ValueError(f"{failure_class} hits no role of {size}")
        role = rng.choices(roles, weights=weights)[0]
        events.append(
            FailureEvent(
                (slot + 0.5) * slot_s, failure_class, role, rng.randrange(size.instances(role))
            )
        )
    return events


@dataclass(frozen=True)
class LostTime:
    """Seconds one failure cost at the scaled run, and the part of them that does not scale: the
    operator's control-loop latency (watch delivery, reconcile queueing, API writes), the bed's
    real-time work, a health interval clamped at 1 s. The rest came from scaled `Durations`."""

    total_s: float
    fixed_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.fixed_s <= self.total_s:
            raise ValueError(f"need 0 <= fixed_s <= total_s, got {self.fixed_s}, {self.total_s}")


def extrapolate(
    measured: Mapping[FailureClass, LostTime], factor: float
) -> dict[FailureClass, float]:
    """Real seconds lost per failure of each class, from a run at 1/factor of real time: the
    scaled part (detection windows, timeouts, loads, start-up, progress since the checkpoint,
    backoff) times factor, plus the fixed part as measured."""
    if not factor > 0:
        raise ValueError(f"factor must be positive, not {factor}")
    return {
        failure_class: (lost.total_s - lost.fixed_s) * factor + lost.fixed_s
        for failure_class, lost in measured.items()
    }
