"""A simulated reference-model server: tokens scored and requests served."""

from __future__ import annotations

import math
import random
from typing import Any

from rljob.dev.sim.exposition import Page
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.models.base import PROCESS_START, noisy, steps
from rljob.dev.sim.profiles import ReferenceProfile

# Exposed series names; counters carry `_total`.
REFERENCE_TOKENS = "rljob_reference_tokens_total"
REFERENCE_REQUESTS = "rljob_reference_requests_total"


class ReferenceModel:
    """A reference-model server: scored tokens and requests."""

    role = "reference"

    def __init__(self, profile: ReferenceProfile, seed: str, start: float) -> None:
        self.profile = profile
        self.start = self.t = start
        self._rng = random.Random(f"{seed}:reference")
        self.tokens = 0.0
        self.requests = 0.0

    def set_profile(self, profile: ReferenceProfile) -> None:
        self.profile = profile

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        count, step = steps(now - self.t)
        for index in range(count):
            t = self.t + index * step
            if faults.stalled(t):
                continue
            tokens = (
                self.profile.throughput
                * faults.health(t)
                * noisy(self._rng, self.profile.noise)
                * step
            )
            self.tokens += tokens
            self.requests += tokens / self.profile.tokens_per_request
        self.t = now

    def state(self) -> dict[str, Any]:
        return {"tokens_total": math.floor(self.tokens)}

    def render(self) -> str:
        page = Page()
        page.counter(
            REFERENCE_TOKENS.removesuffix("_total"),
            "Tokens scored.",
            math.floor(self.tokens),
            self.start,
        )
        page.counter(
            REFERENCE_REQUESTS.removesuffix("_total"),
            "Requests served.",
            math.floor(self.requests),
            self.start,
        )
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()
