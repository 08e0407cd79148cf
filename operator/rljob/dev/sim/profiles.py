"""Per-workload base behaviour of the simulated workloads (pure).

A profile is what a healthy workload does; faults (rljob.dev.sim.faults) change it at run time.
Profiles come from the simulator's defaults, overridden per pod by the `sim.rljob.io/profile`
annotation or the `RLJOB_SIM_PROFILE` container variable (a JSON object of field names), and per
selector through the control API. Engines may follow an RL generate/train cycle and load swings
from rljob.dev.traces, so the bed serves the same shapes the detectors are unit-tested on.

Times are seconds; the defaults are second-scale so tests see phases within a test's deadline.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    # Imported when a profile uses them: rljob.health pulls in pydantic, which the simulator
    # process does not otherwise need.
    from rljob.dev.traces import Cycle, LoadSwings

PROFILE_ANNOTATION = "sim.rljob.io/profile"
PROFILE_ENV = "RLJOB_SIM_PROFILE"
ROLES = ("rollout", "trainer", "reference", "verifier")
EXPORTERS = ("vllm", "sglang")
# rljob.sdk.framework_keys.KEY_MAPS' frameworks, copied (the profiles import no SDK).
TENSORBOARD_FRAMEWORKS = ("verl", "openrlhf", "nemo-rl", "slime")
MAX_COLOCATED_ENGINES = 16
MAX_CONCURRENCY = 4096
# a / b of a decode step (fixed cost over per-sequence cost) for rljob.dev.physics'
# DEFAULT_HARDWARE and DEFAULT_MIX: 6.5 ms / (4.0e-5 + 2,416.6 x 5.2e-8) s. Copied, not imported
# (physics imports rljob.health); a unit test compares.
STEP_FIXED_BATCH = 39.2


class ProfileError(ValueError):
    """A profile override names an unknown field or holds a value of the wrong kind."""


@dataclass(frozen=True, slots=True)
class EngineProfile:
    """A vLLM rollout engine. Saturated (requests running and waiting) it generates `throughput`
    tokens/s with multiplicative per-second noise; unsaturated (queue empty) a `unsaturated_load`
    share of it. Its requests hold `prompt_length` prompt and `generation_length` generated
    tokens on average: they finish at throughput / generation_length a second, and prefill (and
    prefix-cache queries) runs at prompt_length per finished request, hits a `prefix_hit_rate`
    share of it. With `cache_symptoms` a drifting engine's hit rate falls and its preemptions
    rise, as a fragmenting KV cache does. `exporter` picks vLLM's metric names (default) or
    SGLang's, `version` the engine version whose page is served (rljob.dev.sim.engines.VERSIONS;
    empty: the newest). SGLang logs stats every `stats_interval` seconds and
    its completion counters advance every `finish_every` seconds (0: at every log; a long
    chain-of-thought tail finishes nothing for minutes).

    Concurrency model (opt-in, `concurrency` > 0; rljob.dev.sim.models.concurrency): the rollout
    driver keeps `concurrency` requests in flight; `knee` sequences fit the KV cache (0:
    `max_running`), the rest wait; a decode step of m sequences takes a + b m seconds, so the
    engine generates m / (a + b m) tokens/s, `throughput` at m = knee, and a / b is
    `step_fixed_batch` (rljob.dev.physics' H100 figures). kv_usage is m / knee x `kv_usage`.
    With `sync_tail` the driver is a synchronous RL rollout: `concurrency` requests of
    log-normal lengths (mean `generation_length`, sigma `length_sigma`) start together and
    finish one by one down to none, then the engine idles `sync_idle` seconds.

    Host memory (rljob.dev.host_memory; served only on the SDK plugin's pages, as
    rljob_engine_process_tree_resident_bytes): `host_memory_gib` once warm, the
    `offloaded_weights_gib` more while asleep at level 1, `memory_per_running_mib` per running
    sequence; the `memory_growth` fault adds what a leak keeps."""

    throughput: float = 800.0
    noise: float = 0.05
    max_running: int = 64
    waiting: float = 16.0
    kv_usage: float = 0.93
    unsaturated_load: float = 0.4
    prefix_hit_rate: float = 0.7
    preemptions_per_minute: float = 0.1
    cache_symptoms: bool = True
    prompt_length: float = 1024.0
    generation_length: float = 2048.0
    model_name: str = "sim-model"
    engine: str = "0"
    exporter: str = "vllm"  # or "sglang": SGLang's metric names and labels
    version: str = ""
    stats_interval: float = 1.0
    finish_every: float = 0.0
    cycle: Cycle | None = None
    load_swings: LoadSwings | None = None
    concurrency: float = 0.0
    knee: int = 0
    step_fixed_batch: float = STEP_FIXED_BATCH
    sync_tail: bool = False
    sync_idle: float = 0.0
    length_sigma: float = 0.8
    # False: no exporter beside the engine, so its page has no rljob_engine_policy_generation
    # (its weight version is read from its HTTP API only: generationFrom engine).
    generation_gauge: bool = True
    # The weight version an SGLang engine reports before any update: its --weight-version
    # (ServerArgs.weight_version, "default" unless given; slime's engines start at "0").
    start_weight_version: str = "default"
    host_memory_gib: float = 40.0
    offloaded_weights_gib: float = 16.06e9 / 2**30  # Llama-3.1-8B's BF16 weights
    memory_per_running_mib: float = 2.0


@dataclass(frozen=True, slots=True)
class TrainerProfile:
    """Steps of (wait for rollouts, train); every `checkpoint_every` steps a checkpoint phase.
    The SDK heartbeats at each phase change and, when `heartbeat_interval` > 0, every that many
    seconds in between (a training loop calling `heartbeat()` per micro-batch); a hung trainer
    does neither. `colocated_engines` rollout engines (the rollout role's profile) run inside
    the pod, as in verl or OpenRLHF, served on its engine metrics port.

    Optional phases of a step (0: skipped): `generate_seconds` generating before the wait,
    `sync_seconds` syncing weights after training (the policy generation changes at its end, else
    at training's), `eval_seconds` evaluating every `eval_every` steps. Seconds per phase accrue
    in rljob_trainer_phase_seconds_total as the SDK's counter does (rljob.dev.sim.models.phases).
    With `couple_rollouts` the wait for rollouts is `tokens_per_step` over the job's engines'
    throughput plus its verifiers' delay (rljob.dev.sim.coupling); an engine (re)started less
    than `engine_load_seconds` ago is loading its model and supplies nothing.

    A rank starts with `load_seconds` in phase starting (loading its model and checkpoint) before
    its first step. With `resume_from_store` and no RLJOB_RESUME_STEP in its pod it resumes from
    the newest checkpoint in its own store location, as a framework on its own does
    (rljob.dev.sim.checkpoints; needs the simulator's --checkpoints).

    With `canaries` the SDK's RL series are reported every step (rljob.dev.sim.models.canaries):
    training reward rises by `reward_slope_per_hour`, the held-out eval reward (every
    `eval_every` steps, held between) with it, or stays flat with `reward_hacking`. A
    `regression` share of generation throughput is lost from the first weight sync
    `regression_delay` seconds after the profile took effect, for `regression_seconds` (0: until
    changed): the generating phase takes 1 / (1 - regression) as long for the same tokens.

    With `tensorboard_keys` (a framework of rljob.sdk.framework_keys) the trainer is that
    framework under the SDK entrypoint's TensorBoard bridge (rljob.dev.sim.tensorboard): each
    finished step is appended to an event file in the framework's tags, and rank 0's page is
    the real bridge's reading of the files; the other ranks (Ray workers) run no entrypoint and
    export no trainer series (both read when the pod attaches, from its RLJOB_SIM_PROFILE or
    annotation). `engines_exporter` serves the colocated engines as vllm or sglang (empty: the
    rollout profile's exporter)."""

    wait_for_rollouts: float = 2.0
    step_seconds: float = 3.0
    checkpoint_every: int = 5
    checkpoint_seconds: float = 2.0
    heartbeat_interval: float = 1.0
    shard_bytes: int = 4096
    colocated_engines: int = 0
    generate_seconds: float = 0.0
    sync_seconds: float = 0.0
    eval_seconds: float = 0.0
    eval_every: int = 5
    tokens_per_step: float = 16384.0
    couple_rollouts: bool = False
    engine_load_seconds: float = 0.0
    load_seconds: float = 0.0
    resume_from_store: bool = False
    canaries: bool = True
    reward_hacking: bool = False
    reward_slope_per_hour: float = 0.02
    reward_noise: float = 0.002
    regression: float = 0.0
    regression_delay: float = 0.0
    regression_seconds: float = 0.0
    tensorboard_keys: str = ""
    engines_exporter: str = ""


@dataclass(frozen=True, slots=True)
class VerifierProfile:
    """Requests at `requests_per_second` (+-20 %) with log-normal latency; a share `error_rate`
    of them fail. `workers` verify at once (0: as many as needed, so nothing queues): when
    requests arrive faster than workers / mean latency the queue (rljob_verifier_queue_depth,
    accepted and not finished) grows up to `max_queue`, where the driver stops submitting, and
    each request's latency includes its wait. `slowdown` multiplies the median latency."""

    requests_per_second: float = 20.0
    median_latency: float = 0.2
    sigma: float = 0.5
    error_rate: float = 0.0
    workers: int = 0
    slowdown: float = 1.0
    max_queue: int = 1000
    bounds: tuple[float, ...] = (
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReferenceProfile:
    """A reference-model server scoring rollouts: tokens and requests per second."""

    throughput: float = 2000.0
    noise: float = 0.05
    tokens_per_request: float = 1024.0


@dataclass(frozen=True, slots=True)
class Profiles:
    """The defaults per role."""

    rollout: EngineProfile = field(default_factory=EngineProfile)
    trainer: TrainerProfile = field(default_factory=TrainerProfile)
    verifier: VerifierProfile = field(default_factory=VerifierProfile)
    reference: ReferenceProfile = field(default_factory=ReferenceProfile)

    def for_role(self, role: str) -> AnyProfile:
        if role not in ROLES:
            raise ProfileError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
        profile: AnyProfile = getattr(self, role)
        return profile

    def with_role(self, role: str, profile: AnyProfile) -> Profiles:
        self.for_role(role)
        changes: dict[str, Any] = {role: profile}
        return dataclasses.replace(self, **changes)


AnyProfile = EngineProfile | TrainerProfile | VerifierProfile | ReferenceProfile
P = TypeVar("P", bound=AnyProfile)

_NESTED = ("cycle", "load_swings")


def _nested(name: str, value: Any) -> Any:
    from rljob.dev.traces import Cycle, LoadSwings

    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ProfileError(f"{name} must be an object or null")
    kind: type[Cycle] | type[LoadSwings] = Cycle if name == "cycle" else LoadSwings
    try:
        return kind(**value)
    except TypeError as exc:
        raise ProfileError(f"{name}: {exc}") from None


def _convert(name: str, value: Any, current: Any) -> Any:
    if name in _NESTED:
        return _nested(name, value)
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ProfileError(f"{name} must be true or false")
        return value
    if isinstance(current, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ProfileError(f"{name} must be a number")
        if not math.isfinite(value) or value < 0:
            raise ProfileError(f"{name} must be a finite number >= 0")
        return type(current)(value)
    if isinstance(current, str):
        if not isinstance(value, str) or len(value) > 128:
            raise ProfileError(f"{name} must be a string of at most 128 characters")
        return value
    if isinstance(current, tuple):
        if not isinstance(value, list | tuple) or not value or len(value) > 40:
            raise ProfileError(f"{name} must be a list of 1 to 40 numbers")
        numbers = tuple(float(v) for v in value)
        if list(numbers) != sorted(set(numbers)) or numbers[0] <= 0:
            raise ProfileError(f"{name} must be ascending positive numbers")
        return numbers
    raise ProfileError(f"{name} cannot be overridden")


def override(profile: P, changes: Mapping[str, Any]) -> P:
    """profile with `changes` (field name -> JSON value) applied; ProfileError on a bad one."""
    known = {f.name for f in dataclasses.fields(profile)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ProfileError(
            f"unknown {type(profile).__name__} field(s) {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known))}"
        )
    values = {
        name: _convert(name, value, getattr(profile, name)) for name, value in changes.items()
    }
    updated = dataclasses.replace(profile, **values)
    _check(updated)
    return updated


def _check_engine(profile: EngineProfile) -> None:
    if profile.max_running < 1:
        raise ProfileError("max_running must be at least 1")
    for name in ("kv_usage", "unsaturated_load", "prefix_hit_rate"):
        if getattr(profile, name) > 1:
            raise ProfileError(f"{name} must be between 0 and 1")
    if profile.generation_length < 1:
        raise ProfileError("generation_length must be at least 1")
    if profile.exporter not in EXPORTERS:
        raise ProfileError(f"exporter must be one of {', '.join(EXPORTERS)}")
    from rljob.dev.sim.engines import VERSIONS

    known = VERSIONS[profile.exporter]
    if profile.version and profile.version not in known:
        raise ProfileError(f"{profile.exporter} version must be one of {', '.join(known)}")
    if profile.stats_interval <= 0:
        raise ProfileError("stats_interval must be > 0")
    if profile.concurrency > MAX_CONCURRENCY or profile.knee > MAX_CONCURRENCY:
        raise ProfileError(f"concurrency and knee must be at most {MAX_CONCURRENCY}")
    if profile.concurrency and (profile.cycle is not None or profile.load_swings is not None):
        raise ProfileError("concurrency replaces cycle and load_swings: unset them")
    if profile.step_fixed_batch <= 0:
        raise ProfileError("step_fixed_batch must be > 0")
    if not profile.start_weight_version.strip():
        raise ProfileError("start_weight_version must not be empty")


def _check_trainer(profile: TrainerProfile) -> None:
    if min(profile.wait_for_rollouts, profile.step_seconds, profile.checkpoint_seconds) <= 0:
        raise ProfileError("phase durations must be > 0")
    if profile.checkpoint_every < 1 or profile.eval_every < 1:
        raise ProfileError("checkpoint_every and eval_every must be >= 1")
    if profile.shard_bytes > 1 << 20:
        raise ProfileError("shard_bytes must be at most 1 MiB")
    if not 0 <= profile.colocated_engines <= MAX_COLOCATED_ENGINES:
        raise ProfileError(f"colocated_engines must be 0 to {MAX_COLOCATED_ENGINES}")
    if profile.regression >= 1:
        raise ProfileError("regression must be below 1 (the share of throughput lost)")
    if profile.tensorboard_keys not in ("", *TENSORBOARD_FRAMEWORKS):
        raise ProfileError(f"tensorboard_keys must be one of {', '.join(TENSORBOARD_FRAMEWORKS)}")
    if profile.engines_exporter not in ("", *EXPORTERS):
        raise ProfileError(f"engines_exporter must be one of {', '.join(EXPORTERS)}")


def _check(profile: AnyProfile) -> None:
    if isinstance(profile, EngineProfile):
        _check_engine(profile)
    elif isinstance(profile, TrainerProfile):
        _check_trainer(profile)
    elif isinstance(profile, VerifierProfile):
        if profile.median_latency <= 0 or profile.sigma <= 0 or profile.error_rate > 1:
            raise ProfileError("median_latency and sigma must be > 0, error_rate at most 1")
        if profile.slowdown <= 0 or profile.max_queue < 1:
            raise ProfileError("slowdown must be > 0 and max_queue at least 1")
    elif profile.tokens_per_request <= 0:
        raise ProfileError("tokens_per_request must be > 0")


def as_json(profile: AnyProfile) -> dict[str, Any]:
    """The profile as JSON values (for the control API's listings)."""
    result: dict[str, Any] = {}
    for f in dataclasses.fields(profile):
        value = getattr(profile, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        elif isinstance(value, tuple):
            value = list(value)
        result[f.name] = value
    return result
