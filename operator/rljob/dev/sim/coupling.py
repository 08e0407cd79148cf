"""A trainer whose wait for rollouts follows its job's rollout engines and verifiers (trainer
profile `couple_rollouts`), so that slowing a verifier or lowering the engines' concurrency
visibly moves the trainer's time into waiting_for_rollouts.

Each step waits tokens_per_step / (the job's engines' tokens/s) for generation, plus the mean
of its verifiers' delays (service time and queue wait, rljob.dev.sim.models.verifier) for the
rewards. An engine counts at the throughput its profile gives at its concurrency (over a
synchronous batch, its mean while generating; without the concurrency model, its profile's
throughput), times its health; one asleep, paused or stalled adds nothing, nor one (re)started
less than the trainer profile's `engine_load_seconds` ago (loading its model). The trainer's clock
and the engines' batches are not synchronised: the wait is a rate, recomputed whenever the
trainer advances. Without an attached engine in the job the profile's wait_for_rollouts
stands. The job's workloads are those of the trainer's namespace and `rljob.io/job`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rljob.dev.sim.models import EngineModel, Mode, TrainerModel, VerifierModel

if TYPE_CHECKING:
    from rljob.dev.sim.workload import Workload

# A job whose engines all stopped waits this long at most per step (then the value is capped).
MAX_WAIT_SECONDS = 3600.0
_NOT_SERVING = (Mode.ASLEEP, Mode.PAUSED, Mode.STALLED)


def engine_rate(engine: EngineModel) -> float:
    """Tokens/s the engine supplies to the trainer."""
    if engine.mode in _NOT_SERVING:
        return 0.0
    driver = engine.driver
    rate = driver.mean_tokens_per_second() if driver is not None else engine.profile.throughput
    return rate * engine.health


def rollout_wait(
    tokens_per_step: float, engine_rates: Sequence[float], verifier_delays: Sequence[float]
) -> float | None:
    """Seconds a step waits for its rollouts; None without engines (the profile's wait)."""
    if not engine_rates:
        return None
    supply = sum(engine_rates)
    if supply <= 0:
        return MAX_WAIT_SECONDS
    delay = sum(verifier_delays) / len(verifier_delays) if verifier_delays else 0.0
    return min(MAX_WAIT_SECONDS, tokens_per_step / supply + delay)


def couple(trainer: Workload, workloads: Iterable[Workload], now: float | None = None) -> None:
    """Sets a coupled trainer's wait from its job's engines and verifiers, as they are at `now`
    (None: ignores engine load times)."""
    model = trainer.model
    if not isinstance(model, TrainerModel) or not model.profile.couple_rollouts:
        return
    pod = trainer.pod
    load = model.profile.engine_load_seconds
    rates: list[float] = []
    delays: list[float] = []
    for workload in workloads:
        if (workload.pod.namespace, workload.pod.job) != (pod.namespace, pod.job):
            continue
        other = workload.model
        if isinstance(other, EngineModel):
            loading = now is not None and now - workload.started < load
            rates.append(0.0 if loading else engine_rate(other))
        elif isinstance(other, VerifierModel):
            delays.append(other.delay())
    model.rollout_wait = rollout_wait(model.profile.tokens_per_step, rates, delays)
