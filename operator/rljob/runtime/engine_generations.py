"""The health loop's reads of each rollout engine's own weight version, for the jobs whose rollout
role has generationFrom engine (docs/weight-sync.md): where each engine answers (its pod IP and
the port its Services forward, refreshed from the pods the passes observe) and one bounded,
concurrent read of a round's engines. A job that does not opt in is never looked at again after
register."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rljob.adapters.metrics import metrics_url
from rljob.api import GenerationFrom, RLJob, RoleName
from rljob.health.weight_version import weight_version_paths
from rljob.reconcile.pods import serving_port

# Engines read at once in a round, over all its jobs: a few hundred engines read in a few GETs'
# time, never a burst of thousands of connections.
DEFAULT_READ_CONCURRENCY = 16

Where = tuple[str, tuple[str, ...]]  # an engine's base URL (http://ip:port) and its paths


class WeightVersionReader(Protocol):
    """rljob.adapters.weight_versions.WeightVersions, or a fake in tests."""

    async def read(self, base_url: str, paths: Sequence[str]) -> int | None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Endpoints:
    """One job's engines: http://ip:port by pod name, and the paths its engine answers on."""

    urls: Mapping[str, str]
    paths: tuple[str, ...]


def endpoints(job: RLJob, rollout: Iterable[Any]) -> Endpoints | None:
    """Where the job's rollout pods report their weight version; None unless it opted in."""
    role = job.spec.roles.rollout
    if role is None or role.generation_from != GenerationFrom.ENGINE:
        return None
    port = serving_port(RoleName.ROLLOUT, role)  # the port its Service and probes use
    urls = {}
    for pod in rollout:
        url = metrics_url(getattr(pod, "ip", ""), port, "")
        if url is not None:
            urls[pod.name] = url
    return Endpoints(urls, weight_version_paths(role.engine))


class EngineGenerations:
    """The opted-in jobs' engine endpoints by job uid, and their reads (see the module)."""

    def __init__(
        self, reader: WeightVersionReader, concurrency: int = DEFAULT_READ_CONCURRENCY
    ) -> None:
        self._reader = reader
        self._concurrency = max(1, concurrency)
        self._jobs: dict[str, Endpoints] = {}

    def update(self, uid: str, job: RLJob, rollout: Iterable[Any]) -> None:
        """The job's rollout pods now (forgotten when it does not, or no longer, opt in)."""
        found = endpoints(job, rollout)
        if found is None:
            self._jobs.pop(uid, None)
        else:
            self._jobs[uid] = found

    def forget(self, uid: str) -> None:
        self._jobs.pop(uid, None)

    def opted_in(self, uid: str) -> bool:
        return uid in self._jobs

    def wanted(self, pods_by_uid: Mapping[str, Sequence[str]]) -> dict[tuple[str, str], Where]:
        """(uid, pod) -> where it answers, for the opted-in jobs' pods among `pods_by_uid`."""
        wanted: dict[tuple[str, str], Where] = {}
        for uid, pods in pods_by_uid.items():
            job = self._jobs.get(uid)
            if job is not None and job.paths:
                wanted |= {
                    (uid, pod): (job.urls[pod], job.paths) for pod in pods if pod in job.urls
                }
        return wanted

    async def read(self, pods_by_uid: Mapping[str, Sequence[str]]) -> dict[str, dict[str, int]]:
        """uid -> pod -> the generation its engine reports now (pods without one left out)."""
        wanted = self.wanted(pods_by_uid)
        if not wanted:
            return {}
        semaphore = asyncio.Semaphore(self._concurrency)

        async def one(url: str, paths: tuple[str, ...]) -> int | None:
            async with semaphore:
                return await self._reader.read(url, paths)

        found = await asyncio.gather(*(one(*where) for where in wanted.values()))
        read: dict[str, dict[str, int]] = {}
        for (uid, pod), generation in zip(wanted, found, strict=True):
            if generation is not None:
                read.setdefault(uid, {})[pod] = generation
        return read

    async def close(self) -> None:
        await self._reader.close()
