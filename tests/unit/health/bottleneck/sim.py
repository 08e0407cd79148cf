"""A small simulated RL job for the bottleneck tests: engines whose throughput follows a given
curve of requests in flight, a trainer whose phase counter accrues the phase it is in, and
verifiers with a queue, scraped every SCRAPE seconds and fed to a BottleneckMonitor the way the
health loop feeds it (each pod's samples in time order, one round per scrape)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rljob.api.diagnosis import Bottleneck
from rljob.health.bottleneck import BottleneckMonitor
from rljob.health.samples import EngineSample

SCRAPE = 15.0
Curve = Callable[[float], float]
Schedule = Callable[[float], float]


def step_time_curve(a: float, b: float, capacity: float) -> Curve:
    """T(c) = m/(a + b*m), m = min(c, capacity): a continuously batching engine."""

    def throughput(c: float) -> float:
        m = min(c, capacity)
        return m / (a + b * m) if m > 0 else 0.0

    return throughput


def true_recommendation(curve: Curve, capacity: float, tolerance: float = 0.05) -> float:
    """0.8 x the lowest concurrency within `tolerance` of the throughput at capacity."""
    top = curve(capacity)
    c = 1.0
    while curve(c) < (1 - tolerance) * top:
        c += 0.01
    return 0.8 * c


@dataclass
class Job:
    """Per-engine in flight over time, the engine's curve, and the trainer's phase over time."""

    in_flight: Schedule
    throughput: Curve
    phase: Callable[[float], str]
    engines: int = 1
    capacity: float | None = None  # KV capacity (kv_usage = running / capacity)
    verifiers: int = 0
    verifier_depth: Schedule = lambda t: 0.0
    trainer_pods: int = 1
    t: float = 0.0
    tokens: list[float] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    step: float = 0.0
    last_phase: str = ""

    def run(
        self, monitor: BottleneckMonitor, until: float, evaluate_every: int = 4
    ) -> list[Bottleneck]:
        """Advances to `until`, feeding a round per scrape; returns the evaluations made."""
        results: list[Bottleneck] = []
        if not self.tokens:
            self.tokens = [0.0] * self.engines
        scrapes = 0
        while self.t <= until:
            self._feed(monitor)
            scrapes += 1
            if scrapes % evaluate_every == 0 and (found := monitor.evaluate(self.t)) is not None:
                results.append(found)
            self._advance(SCRAPE)
        return results

    def _feed(self, monitor: BottleneckMonitor) -> None:
        c = self.in_flight(self.t)
        running = min(c, self.capacity) if self.capacity else c
        kv = running / self.capacity if self.capacity else None
        for engine in range(self.engines):
            sample = EngineSample(
                t=self.t,
                generated_tokens_total=self.tokens[engine],
                running=running,
                waiting=c - running,
                kv_usage=kv,
                sleeping=False,
            )
            monitor.observe_engine(f"engine-{engine}", sample)
        for pod in range(self.trainer_pods):
            monitor.observe_trainer(f"trainer-{pod}", self.t, dict(self.phase_seconds), self.step)
        for pod in range(self.verifiers):
            monitor.observe_verifier(f"verifier-{pod}", self.t, self.verifier_depth(self.t))

    def _advance(self, seconds: float) -> None:
        substeps = int(seconds)
        for _ in range(substeps):
            c = self.in_flight(self.t + 0.5)
            for engine in range(self.engines):
                self.tokens[engine] += self.throughput(c)
            phase = self.phase(self.t + 0.5)
            self.phase_seconds[phase] = self.phase_seconds.get(phase, 0.0) + 1.0
            if phase != self.last_phase and phase == "training":
                self.step += 1
            self.last_phase = phase
            self.t += 1.0


def cycle(*parts: tuple[str, float]) -> Callable[[float], str]:
    """A trainer repeating phases of given seconds: cycle(("waiting_for_rollouts", 60), ...)."""
    period = sum(seconds for _, seconds in parts)

    def phase(t: float) -> str:
        at = t % period
        for name, seconds in parts:
            if at < seconds:
                return name
            at -= seconds
        return parts[-1][0]

    return phase


def constant(value: float) -> Schedule:
    return lambda t: value
