"""A verifier's requests in flight as a fluid queue (pure): requests arrive at rate λ, `workers`
serve them at once, each for a mean `service` seconds, so the service completes at most
workers / service a second. Below that capacity the requests in flight settle at λ x service
(Little's law), approached exponentially; above it the queue grows by the difference every
second until `bound`, where the driver stops submitting. Time in the queue is the backlog over
the capacity. Closed form per interval, so any step length is exact."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Service:
    arrivals: float  # requests a second
    service: float  # mean seconds a worker spends on one
    workers: int  # 0: as many as needed
    bound: float  # most requests accepted at once

    @property
    def capacity(self) -> float:
        """Requests completed a second with every worker busy (inf without a worker limit)."""
        return self.workers / self.service if self.workers else math.inf

    def settled(self) -> float:
        """Requests in flight once settled below capacity."""
        return self.arrivals * self.service

    def wait(self, depth: float) -> float:
        """Seconds a request accepted at `depth` queues before a worker takes it."""
        if not self.workers or depth <= self.workers:
            return 0.0
        return (depth - self.workers) / self.capacity


def advance(depth: float, seconds: float, service: Service) -> tuple[float, float]:
    """(requests in flight after `seconds`, requests completed meanwhile) from `depth`."""
    remaining, completed = seconds, 0.0
    workers = service.workers or math.inf
    for _ in range(3):  # at most: drain to the workers, relax, then grow
        if remaining <= 0:
            break
        before = depth
        if depth > workers or (depth >= workers and service.settled() > workers):
            depth, spent = _linear(depth, remaining, service)
        else:
            depth, spent = _relax(depth, remaining, service)
        completed += service.arrivals * spent - (depth - before)
        if depth >= service.bound:  # full: what is admitted is what completes
            completed += service.capacity * (remaining - spent)
            return service.bound, completed
        remaining -= spent
    return depth, completed


def _linear(depth: float, seconds: float, service: Service) -> tuple[float, float]:
    """Every worker busy: the backlog changes at arrivals - capacity."""
    slope = service.arrivals - service.capacity
    if slope >= 0:
        if depth + slope * seconds < service.bound:
            return depth + slope * seconds, seconds
        return service.bound, (service.bound - depth) / slope if slope else seconds
    to_workers = (depth - service.workers) / -slope
    if to_workers >= seconds:
        return depth + slope * seconds, seconds
    return float(service.workers), to_workers


def _relax(depth: float, seconds: float, service: Service) -> tuple[float, float]:
    """Workers to spare: in flight relaxes towards λ x service with time constant `service`,
    until every worker is busy."""
    settled, tau = service.settled(), service.service
    if service.workers and settled > service.workers:
        to_workers = tau * math.log((settled - depth) / (settled - service.workers))
        if to_workers < seconds:
            return float(service.workers), to_workers
    return settled + (depth - settled) * math.exp(-seconds / tau), seconds
