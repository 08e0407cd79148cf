"""A simulated slime-like rollout driver for a job with slot Services (spec.roles.rollout.
slotServices): the trainer side of engines reached at addresses that outlive them.

slime (THUDM/slime 624b824) reads its engine addresses once, when its process starts
(--rollout-external-engine-addrs: slime/utils/arguments.py, slime/backends/sglang_utils/
external.py). With --update-weight-transport disk every training step counts its weight version
N up (from 0 in each process) and POSTs /update_weights_from_disk {"model_path": <the step's
checkpoint>, "weight_version": str(N)} to every engine; `_make_request` calls raise_for_status
(slime/backends/sglang_utils/sglang_engine.py), so an update refused or unreachable raises and
ends the training process.

Here the addresses are the job's slot Services, fixed when the driver starts and never re-read.
A request or an update to an address goes where kube-proxy sends a connection to a ClusterIP:
to one of the READY endpoints of the Service's EndpointSlices, picked at random; a request stays
on that pod until it ends (conntrack). The driver keeps `per_engine` requests in flight per
address; every step it counts N up and updates every address (in-process, as the POST would
land). An address with no ready endpoint, or whose endpoint's engine does not answer, fails the
update: the trainer fails (the caller fails its pod) and the driver starts over as the new
process would, at `first_generation`.

Pure: `endpoints(service)` says which pods are ready behind a Service now (the caller reads the
EndpointSlices once per tick, or on the bed, which runs no EndpointSlice controller, works them
out from the pods as that controller would: `ready_pods_by_selector`), `engines(pod)` looks an
engine up; the caller acts on what `tick` returns.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rljob.dev.sim.driver import EngineLookup
from rljob.dev.sim.models import EngineModel

# Which pods are ready behind a Service now (its name -> pod names).
EndpointLookup = Callable[[str], Sequence[str]]
# slime's --update-weight-disk-dir: one directory per version (update_weight_from_disk.py).
CHECKPOINT_DIR = "/sim/slime/update-weights"
UPDATE_PATH = "/update_weights_from_disk"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"  # on each EndpointSlice of a Service
HISTORY = 200  # entries kept per list in the report


def checkpoint(generation: int) -> str:
    """The checkpoint slime writes for version `generation` (weight_v000001, ...)."""
    return f"{CHECKPOINT_DIR}/weight_v{generation:06d}"


def refused(address: str) -> str:
    """What slime's process ends with when an update's connection is refused: kube-proxy
    rejects a connection to a ClusterIP without a ready endpoint."""
    host, _, port = address.rpartition(":")
    return (
        f"requests.exceptions.ConnectionError: HTTPConnectionPool(host='{host}', port={port}): "
        f"Max retries exceeded with url: {UPDATE_PATH} (Caused by NewConnectionError("
        "'Failed to establish a new connection: [Errno 111] Connection refused'))"
    )


@dataclass(frozen=True)
class SlotSettings:
    step_seconds: float = 3.0  # one training step: N counts up, every address is updated
    request_seconds: float = 2.0  # how long each request runs on its engine
    per_engine: int = 0  # requests kept in flight per address; 0: a batch plus a queue
    first_generation: int = 0  # N when a process starts (slime's counter starts at 0)

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> SlotSettings:
        fields = cls.__dataclass_fields__
        unknown = sorted(set(body) - set(fields))
        if unknown:
            raise ValueError(f"unknown slot driver settings {unknown}; known: {sorted(fields)}")
        values = {key: body[key] for key in fields if key in body}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{key} must be a number >= 0")
        for key in ("per_engine", "first_generation"):
            if key in values and values[key] != int(values[key]):
                raise ValueError(f"{key} must be a whole number")
            values[key] = int(values.get(key, getattr(cls, key)))
        settings = cls(**values)
        if min(settings.step_seconds, settings.request_seconds) <= 0:
            raise ValueError("step_seconds and request_seconds must be > 0")
        return settings


@dataclass(frozen=True)
class SlotAddress:
    """One slot: its Service and the host:port a trainer is given for it."""

    service: str
    address: str


@dataclass(frozen=True)
class Request:
    """A request bound to the pod its connection went to (conntrack), on that engine process."""

    pod: str
    engine: EngineModel
    ends: float


@dataclass
class SlotCounters:
    steps: int = 0
    sent: dict[str, int] = field(default_factory=dict)
    sent_stale: dict[str, int] = field(default_factory=dict)  # to an engine reporting < N
    updates: dict[str, int] = field(default_factory=dict)  # updates that reached each pod
    failed_updates: int = 0
    refused_requests: int = 0  # no ready endpoint, or its engine did not answer
    restarts: int = 0  # the process ended by a failed update and started over
    failures: list[tuple[float, str, str]] = field(default_factory=list)  # (t, service, why)
    # Per Service: each change of the pod a connection resolved to (None: no ready endpoint).
    resolved: dict[str, list[tuple[float, str | None]]] = field(default_factory=dict)
    # Per Service: each change of its ready endpoints, as the driver saw them at its ticks.
    ready: dict[str, list[tuple[float, tuple[str, ...]]]] = field(default_factory=dict)


@dataclass(frozen=True)
class SlotOutcome:
    failed: str | None = None  # what the trainer's process ended with this tick


class SlotDriver:
    """The driver's state; callers feed it ticks (see the module docstring)."""

    def __init__(
        self,
        settings: SlotSettings,
        addresses: Sequence[SlotAddress],
        endpoints: EndpointLookup,
        engines: EngineLookup,
        now: float,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.addresses = tuple(addresses)  # read once, as slime reads its engine addresses
        self.endpoints = endpoints
        self.engines = engines
        self.rng = rng or random.Random(0)
        self.generation = settings.first_generation
        self.next_step = now + settings.step_seconds
        self.in_flight: dict[str, list[Request]] = {a.service: [] for a in self.addresses}
        self.counters = SlotCounters(
            resolved={a.service: [] for a in self.addresses},
            ready={a.service: [] for a in self.addresses},
        )

    def tick(self, now: float) -> SlotOutcome:
        self._watch(now)
        failed = None
        while now >= self.next_step and failed is None:
            self.next_step += self.settings.step_seconds
            failed = self._step(now)
        self._send(now)
        return SlotOutcome(failed)

    # ------------------------------------------------------------------ routing

    def _ready(self, service: str) -> tuple[str, ...]:
        return tuple(sorted(set(self.endpoints(service))))

    def _watch(self, now: float) -> None:
        for address in self.addresses:
            pods, history = self._ready(address.service), self.counters.ready[address.service]
            if not history or history[-1][1] != pods:
                _append(history, (round(now, 3), pods))

    def _resolve(self, service: str, now: float) -> str | None:
        """The pod a new connection to the Service reaches: a ready endpoint at random."""
        pods = self._ready(service)
        pod = self.rng.choice(pods) if pods else None
        history = self.counters.resolved[service]
        if not history or history[-1][1] != pod:
            _append(history, (round(now, 3), pod))
        return pod

    # ------------------------------------------------------------------ steps

    def _step(self, now: float) -> str | None:
        """One training step's updates; what the process ended with, if one failed."""
        self.generation += 1
        self.counters.steps += 1
        for address in self.addresses:
            why = self._update(address, now)
            if why is not None:
                self._failed(address, why, now)
                return refused(address.address)
        return None

    def _update(self, address: SlotAddress, now: float) -> str | None:
        """Updates the engine the address reaches; why it failed, else None."""
        pod = self._resolve(address.service, now)
        if pod is None:
            return "no ready endpoint"
        engine = self.engines(pod)
        if engine is None:
            return f"its endpoint {pod} did not answer"
        engine.weights.load(checkpoint(self.generation), self.generation)
        _count(self.counters.updates, pod)
        return None

    def _failed(self, address: SlotAddress, why: str, now: float) -> None:
        """The update raised: the process ends, its requests with it, and a new one starts
        with its counter at the start again."""
        counters = self.counters
        counters.failed_updates += 1
        counters.restarts += 1
        _append(counters.failures, (round(now, 3), address.service, why))
        self.generation = self.settings.first_generation
        self.next_step = now + self.settings.step_seconds
        self.in_flight = {a.service: [] for a in self.addresses}

    # ------------------------------------------------------------------ requests

    def _send(self, now: float) -> None:
        for address in self.addresses:
            flights = [r for r in self.in_flight[address.service] if self._running(r, now)]
            self.in_flight[address.service] = flights
            for _ in range(self._target(address.service) - len(flights)):
                request = self._request(address.service, now)
                if request is None:
                    self.counters.refused_requests += 1
                    break
                flights.append(request)

    def _target(self, service: str) -> int:
        """Requests to keep in flight on the address: `per_engine`, else the batch plus the
        queue of the engine it reaches (1 with none: the attempt finds the gap)."""
        if self.settings.per_engine:
            return self.settings.per_engine
        engines = (self.engines(pod) for pod in self._ready(service))
        engine = next((e for e in engines if e is not None), None)
        if engine is None:
            return 1
        return engine.profile.max_running + round(engine.profile.waiting)

    def _running(self, request: Request, now: float) -> bool:
        """Not ended, and its engine process still the one serving the pod (one gone lost
        it: the simulator's ledger counts that)."""
        return request.ends > now and self.engines(request.pod) is request.engine

    def _request(self, service: str, now: float) -> Request | None:
        pod = self._resolve(service, now)
        engine = None if pod is None else self.engines(pod)
        if pod is None or engine is None:
            return None
        weights = engine.weights
        weights.driven = True
        weights.requests.settle(now)
        weights.requests.send(now, self.settings.request_seconds)
        _count(self.counters.sent, pod)
        if weights.generation < self.generation:
            _count(self.counters.sent_stale, pod)
        return Request(pod, engine, now + self.settings.request_seconds)

    def report(self) -> dict[str, Any]:
        counters = self.counters
        return {
            "addressing": "slots",
            "addresses": [a.address for a in self.addresses],
            "services": [a.service for a in self.addresses],
            "generation": self.generation,
            "steps": counters.steps,
            "sent": dict(counters.sent),
            "sent_stale": dict(counters.sent_stale),
            "updates": dict(counters.updates),
            "failed_updates": counters.failed_updates,
            "refused_requests": counters.refused_requests,
            "restarts": counters.restarts,
            "failures": [list(entry) for entry in counters.failures],
            "in_flight": {service: len(r) for service, r in self.in_flight.items()},
            "resolved": {s: [list(e) for e in h] for s, h in counters.resolved.items()},
            "ready": {s: [[t, list(pods)] for t, pods in h] for s, h in counters.ready.items()},
        }


def ready_pods(
    slices: Iterable[Mapping[str, Any]], services: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """The ready pods behind each Service, from its EndpointSlices (discovery.k8s.io/v1): an
    endpoint whose conditions.ready is true, or unset (the API says to read an unknown state
    as ready), and whose targetRef is a pod."""
    found: dict[str, set[str]] = {service: set() for service in services}
    for piece in slices:
        labels = (piece.get("metadata") or {}).get("labels") or {}
        pods = found.get(labels.get(SERVICE_NAME_LABEL, ""))
        if pods is None:
            continue
        for endpoint in piece.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            ready = (endpoint.get("conditions") or {}).get("ready")
            if ready is not False and ref.get("kind") == "Pod" and ref.get("name"):
                pods.add(str(ref["name"]))
    return {service: tuple(sorted(pods)) for service, pods in found.items()}


def ready_pods_by_selector(
    services: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> dict[str, tuple[str, ...]]:
    """The ready endpoints the EndpointSlice controller would publish for each Service, for a
    cluster that runs none (the bed: its pod IPs are loopback aliases no EndpointSlice may
    hold): the pods of its namespace its selector matches that have an IP and are not terminal
    (ShouldPodBeInEndpoints, kubernetes staging/src/k8s.io/endpointslice/util/
    controller_utils.go), ready when Ready and not terminating, or when the Service publishes
    not-ready addresses (podToEndpoint, staging/src/k8s.io/endpointslice/utils.go). A Service
    without a selector gets none: the controller leaves it alone."""
    candidates = [pod for pod in pods if _in_endpoints(pod)]
    found: dict[str, tuple[str, ...]] = {}
    for service in services:
        ready = [str(p["metadata"]["name"]) for p in candidates if _ready_behind(service, p)]
        found[str((service.get("metadata") or {}).get("name", ""))] = tuple(sorted(ready))
    return found


def _in_endpoints(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    terminal = status.get("phase") in ("Succeeded", "Failed")
    return not terminal and bool(status.get("podIP") or status.get("podIPs"))


def _ready_behind(service: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """The pod is a ready endpoint of the Service."""
    meta, spec = service.get("metadata") or {}, service.get("spec") or {}
    selector: Mapping[str, str] = spec.get("selector") or {}
    pod_meta = pod.get("metadata") or {}
    if not selector or pod_meta.get("namespace") != meta.get("namespace"):
        return False
    if not selector.items() <= (pod_meta.get("labels") or {}).items():
        return False
    if spec.get("publishNotReadyAddresses"):
        return True
    return _pod_ready(pod) and not pod_meta.get("deletionTimestamp")


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _count(counts: dict[str, int], pod: str) -> None:
    counts[pod] = counts.get(pod, 0) + 1


def _append(history: list[Any], entry: Any) -> None:
    history.append(entry)
    del history[:-HISTORY]
