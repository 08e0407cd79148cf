"""A simulated verifier service: a log-normal request latency histogram, an error counter and
the requests in flight (the SDK's rljob.sdk.verifier series). With a worker limit a slow
verifier queues (rljob.dev.sim.models.queue): the queue grows, and each request's latency, as
the SDK times it from acceptance, includes its wait."""

from __future__ import annotations

import math
import random
from typing import Any

from rljob.dev.sim.exposition import Page
from rljob.dev.sim.faults import NO_FAULTS, Active
from rljob.dev.sim.lognormal import lognormal_cdf
from rljob.dev.sim.models.base import PROCESS_START, steps
from rljob.dev.sim.models.queue import Service, advance
from rljob.dev.sim.profiles import VerifierProfile

# Exposed series names; counters carry `_total`.
VERIFIER_DURATION = "rljob_verifier_request_duration_seconds"
VERIFIER_ERRORS = "rljob_verifier_request_errors_total"
VERIFIER_QUEUE_DEPTH = "rljob_verifier_queue_depth"
_Z99 = 2.3263478740408408  # the standard normal's 99th percentile


class VerifierModel:
    """A verifier service: request latency histogram and an error counter."""

    role = "verifier"

    def __init__(self, profile: VerifierProfile, seed: str, start: float) -> None:
        self.profile = profile
        self.start = self.t = start
        self._rng = random.Random(f"{seed}:verifier")
        self.bounds = (*profile.bounds, math.inf)
        self.counts = [0.0] * len(self.bounds)
        self.total_seconds = 0.0
        self.errors = 0.0
        self.median = profile.median_latency
        self.depth = 0.0  # requests accepted and not finished
        self.waiting = 0.0  # seconds the newest request queues before a worker takes it

    def set_profile(self, profile: VerifierProfile) -> None:
        if profile.bounds != self.profile.bounds:
            raise ValueError("bucket bounds cannot change while the process runs")
        self.profile = profile

    def median_at(self, faults: Active) -> float:
        """Service time's median: an injected p99's, else the profile's times its slowdown."""
        if faults.p99_seconds is not None:
            return faults.p99_seconds / math.exp(_Z99 * self.profile.sigma)
        return self.profile.median_latency * self.profile.slowdown

    def service(self, arrivals: float, median: float) -> Service:
        profile = self.profile
        mean = median * math.exp(profile.sigma**2 / 2)
        return Service(arrivals, mean, profile.workers, float(profile.max_queue))

    def delay(self) -> float:
        """Mean seconds from acceptance to a result now: the service plus the queue's wait."""
        return self.median * math.exp(self.profile.sigma**2 / 2) + self.waiting

    def advance(self, now: float, faults: Active = NO_FAULTS) -> None:
        if now <= self.t:
            return
        profile = self.profile
        median = self.median_at(faults)
        error_rate = faults.error_rate if faults.error_rate is not None else profile.error_rate
        mean = median * math.exp(profile.sigma**2 / 2)
        count, step = steps(now - self.t)
        for _ in range(count):
            arrivals = profile.requests_per_second * self._rng.uniform(0.8, 1.2)
            service = self.service(arrivals, median)
            self.depth, requests = advance(self.depth, step, service)
            if not profile.workers:  # nothing queues: every arrival is served (as before)
                requests = arrivals * step
            # Finished requests waited about as long as the queue holds them now.
            self.waiting = service.wait(self.depth)
            for index, bound in enumerate(self.bounds):
                share = lognormal_cdf(bound - self.waiting, median, profile.sigma)
                self.counts[index] += requests * share
            self.total_seconds += requests * (mean + self.waiting)
            self.errors += requests * error_rate
        self.t = now
        self.median = median

    def p99(self) -> float:
        return self.median * math.exp(_Z99 * self.profile.sigma) + self.waiting

    def state(self) -> dict[str, Any]:
        return {
            "requests_total": math.floor(self.counts[-1]),
            "errors_total": math.floor(self.errors),
            "p99_seconds": round(self.p99(), 4),
            "queue_depth": round(self.depth, 2),
            "queue_wait_seconds": round(self.waiting, 3),
        }

    def render(self) -> str:
        page = Page()
        # Floors of cumulative counts stay cumulative and monotonic.
        buckets = [
            (bound, float(math.floor(count)))
            for bound, count in zip(self.bounds, self.counts, strict=True)
        ]
        page.histogram(
            VERIFIER_DURATION,
            "Time to verify one request.",
            labels="",
            buckets=buckets,
            total=self.total_seconds,
            created=self.start,
        )
        page.counter(
            VERIFIER_ERRORS.removesuffix("_total"),
            "Requests that failed verification with an error.",
            math.floor(self.errors),
            self.start,
        )
        # The SDK counts whole requests (inc at acceptance, dec at the end).
        depth = float(round(self.depth))
        page.gauge(VERIFIER_QUEUE_DEPTH, "Requests accepted and not yet finished.", depth)
        page.gauge(
            PROCESS_START, "Start time of the process since unix epoch in seconds.", self.start
        )
        return page.text()
