"""What a simulated rollout engine holds for a rollout driver (issue #17): the policy generation
of the weights it serves and the driver's requests in flight on it.

A new engine process serves the weights on its command line, generation 0 (or the whole number
its SGLang --weight-version names), until a driver pushes it a newer one; it exports the
generation as `rljob_engine_policy_generation` (the gauge rljob.sdk's engine-side helper
exports). While a driver drives it, its running gauge is capped at the requests that driver has
in flight on it (a drained engine reads 0); requests still in flight when the process goes away
(pod deleted, container killed) are lost and counted per job.
"""

from __future__ import annotations

from bisect import insort
from collections import defaultdict
from dataclasses import dataclass, field

ENGINE_POLICY_GENERATION = "rljob_engine_policy_generation"
ENGINE_POLICY_GENERATION_HELP = "Generation of the policy weights this engine serves."
# SGLang's ServerArgs.weight_version default (python/sglang/srt/server_args.py, --weight-version).
DEFAULT_VERSION = "default"


@dataclass(slots=True)
class EngineRequests:
    """A driver's requests in flight on one engine process, by the time each ends."""

    ends: list[float] = field(default_factory=list)
    sent: int = 0
    completed: int = 0

    def send(self, now: float, seconds: float, count: int = 1) -> None:
        for _ in range(count):
            insort(self.ends, now + seconds)
        self.sent += count

    def settle(self, now: float) -> int:
        """Retires the requests that ended by `now`; returns how many."""
        done = 0
        while done < len(self.ends) and self.ends[done] <= now:
            done += 1
        del self.ends[:done]
        self.completed += done
        return done

    def in_flight(self) -> int:
        return len(self.ends)

    def abandon(self, now: float) -> int:
        """The process is gone at `now`: the requests not yet ended are lost (returned)."""
        self.settle(now)
        lost = len(self.ends)
        self.ends.clear()
        return lost


@dataclass(slots=True)
class EngineWeights:
    """An engine process's generation and a driver's requests on it. `driven`: a driver is
    active on the engine's job, so the running gauge shows only that driver's requests.
    `version` is the weight version the engine's own HTTP API reports (SGLang's
    `weight_version`: its --weight-version until an update names another) and `model_path` the
    checkpoint an update loaded ("": the one on its command line)."""

    generation: int = 0
    driven: bool = False
    requests: EngineRequests = field(default_factory=EngineRequests)
    version: str = DEFAULT_VERSION
    model_path: str = ""

    @classmethod
    def started(cls, version: str = DEFAULT_VERSION) -> EngineWeights:
        """A new process started with weight version `version`: a whole number is its
        generation, anything else ("default") generation 0."""
        generation = int(version) if version.isascii() and version.isdigit() else 0
        return cls(generation=generation, version=version)

    def push(self, generation: int) -> None:
        """A weight update: the engine now serves `generation`."""
        self.generation = generation
        self.version = str(generation)

    def load(self, model_path: str, generation: int | None) -> None:
        """SGLang's update from disk: the checkpoint at `model_path`, its version `generation`
        when the update names one (else the version stays)."""
        self.model_path = model_path
        if generation is not None:
            self.push(generation)

    def served(self, running: float, waiting: float) -> tuple[float, float]:
        """The (running, waiting) gauges: the model's own, capped at the driver's requests
        while driven (a driver keeps more in flight than a batch holds, so a driven engine reads
        as its model says until the driver stops sending to it)."""
        if not self.driven:
            return running, waiting
        held = float(self.requests.in_flight())
        return min(running, held), min(waiting, max(0.0, held - running))

    def state(self) -> dict[str, int | bool]:
        return {
            "policy_generation": self.generation,
            "driven": self.driven,
            "in_flight": self.requests.in_flight(),
            "sent": self.requests.sent,
            "completed": self.requests.completed,
        }


@dataclass
class LostRequests:
    """Requests lost with their engine process, per job (namespace, job) and pod."""

    by_job: dict[tuple[str, str], dict[str, int]] = field(default_factory=lambda: defaultdict(dict))

    def record(self, namespace: str, job: str, pod: str, count: int) -> None:
        if count <= 0:
            return
        pods = self.by_job[(namespace, job)]
        pods[pod] = pods.get(pod, 0) + count

    def of(self, namespace: str, job: str) -> dict[str, int]:
        return dict(self.by_job.get((namespace, job), {}))
