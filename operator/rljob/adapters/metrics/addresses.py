"""Where direct scraping finds each pod: the pods the operator already watches (pod IP and the
role's metrics port), kept per job and refreshed on every reconcile pass."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from rljob.adapters.metrics.base import PodKey
from rljob.api.resource import RLJob

DEFAULT_METRICS_PATH = "/metrics"
TRAINER = "trainer"

JobKey = tuple[str, str]


def metrics_url(ip: str, port: int, path: str = DEFAULT_METRICS_PATH) -> str | None:
    """`http://ip:port/path`, or None for an address that is not an IP (a pod without one)."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    host = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{host}:{port}{path}"


def metrics_path(job: RLJob, role: str) -> str:
    """The role's spec.roles.<role>.metrics.path; engines serve /metrics on their HTTP port."""
    spec = getattr(job.spec.roles, role, None)
    endpoint = getattr(spec, "metrics", None)
    return str(getattr(endpoint, "path", None) or DEFAULT_METRICS_PATH)


def gang_engines_pages(job: RLJob) -> tuple[tuple[int, str], ...]:
    """(port, path) of each page where the trainer's pods serve their colocated engines'
    metrics (one, or one per engine process under exporter plugin)."""
    engines = job.spec.roles.trainer.engines
    if engines is None:
        return ()
    return tuple((port, engines.path) for port in engines.page_ports)


class PodAddresses:
    """(namespace, pod) -> metrics URLs of the pods of every monitored job (a trainer pod with
    colocated engines has more than one page); the resolver of the direct source. Pods without an IP
    (not started yet) or a metrics port resolve to None."""

    def __init__(self) -> None:
        self._urls: dict[PodKey, tuple[str, ...]] = {}
        self._by_job: dict[JobKey, set[PodKey]] = {}

    def __call__(self, namespace: str, pod: str) -> tuple[str, ...] | None:
        return self._urls.get((namespace, pod))

    def __len__(self) -> int:
        return len(self._urls)

    def update(self, job: RLJob, pods: Mapping[str, Iterable[Any]]) -> None:
        """The job's pods by role now; pods it no longer has are forgotten."""
        namespace = job.metadata.namespace or "default"
        key = (namespace, job.metadata.name)
        urls: dict[PodKey, tuple[str, ...]] = {}
        engines = gang_engines_pages(job)
        for role, members in pods.items():
            path = metrics_path(job, role)
            for pod in members:
                ip, port = getattr(pod, "ip", ""), getattr(pod, "metrics_port", None)
                pages = [metrics_url(ip, port, path) if port else None]
                if role == TRAINER:
                    pages += [metrics_url(ip, *page) for page in engines]
                found = tuple(url for url in pages if url is not None)
                if found:
                    urls[(namespace, pod.name)] = found
        self.forget(key)
        self._urls.update(urls)
        self._by_job[key] = set(urls)

    def forget(self, key: JobKey) -> None:
        for pod in self._by_job.pop(key, ()):
            self._urls.pop(pod, None)
