"""Which source a job is health-checked from (its `SourceKey`) and the default factory that
makes a source of a key: jobs with equal keys share one source.

A bearer token comes only from a file mounted into the operator's pod (the operator's default
source, `--prometheus-token-file`): the operator never reads Secrets through the API."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from rljob.adapters.metrics.base import (
    Collected,
    MetricsSource,
    Queries,
    SourceKind,
    SourceUnavailable,
)
from rljob.adapters.metrics.direct import (
    DEFAULT_SCRAPE_CONCURRENCY,
    DEFAULT_SCRAPE_TIMEOUT,
    AddressResolver,
    DirectSource,
)
from rljob.adapters.metrics.prometheus import (
    DEFAULT_TIMEOUT,
    MAX_BODY_BYTES,
    PrometheusSource,
    TokenProvider,
)
from rljob.api.spec import Health

MAX_TOKEN_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class SourceKey:
    """Identifies one source: jobs with equal keys are queried together. `token_file` is set
    only on the operator's default source (a job cannot name a file of the operator's pod)."""

    kind: SourceKind
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    token_file: str | None = None
    pod_label: str = "pod"
    namespace_label: str = "namespace"
    default: bool = False  # the operator's default, not a job's own health.source

    def describe(self) -> str:
        what = f"Prometheus at {self.url}" if self.kind == "prometheus" else "direct scraping"
        return f"{what} ({'the operator default' if self.default else 'spec.health.source'})"


def source_key(health: Health, namespace: str, default: SourceKey | None) -> SourceKey | None:
    """The source a job's spec.health names, or the operator's default without one."""
    source = health.source
    if source is None:
        return default
    if source.prometheus is None:
        return SourceKey("direct")
    prometheus = source.prometheus
    return SourceKey(
        kind="prometheus",
        url=prometheus.url.rstrip("/"),
        headers=tuple(sorted(prometheus.headers.items())),
        pod_label=prometheus.pod_label,
        namespace_label=prometheus.namespace_label,
    )


class UnconfiguredSource:
    """A source that cannot be used (e.g. direct scraping without an address resolver):
    every signal ends in SourceUnavailable with the reason."""

    def __init__(self, kind: SourceKind, reason: str) -> None:
        self.kind = kind
        self.reason = reason

    @property
    def supports_history(self) -> bool:
        return False

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        return {signal: SourceUnavailable(self.reason) for signal in queries}

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        return {signal: SourceUnavailable(self.reason) for signal in queries}

    async def close(self) -> None:
        return None


class MetricsSources:
    """The default source factory: a SourceKey -> a new source. `direct_resolver(namespace,
    pod)` gives a pod's metrics URL for direct scraping; a key's token file is re-read every
    TOKEN_TTL seconds (a rotated projected token is picked up)."""

    def __init__(
        self,
        *,
        direct_resolver: AddressResolver | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        scrape_timeout: float = DEFAULT_SCRAPE_TIMEOUT,
        scrape_concurrency: int = DEFAULT_SCRAPE_CONCURRENCY,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.direct_resolver = direct_resolver
        self.timeout = timeout
        self.scrape_timeout = scrape_timeout
        self.scrape_concurrency = scrape_concurrency
        self.max_body = max_body

    def __call__(self, key: SourceKey) -> MetricsSource:
        if key.kind == "direct":
            if self.direct_resolver is None:
                return UnconfiguredSource("direct", "direct scraping has no pod address resolver")
            return DirectSource(
                self.direct_resolver,
                timeout=self.scrape_timeout,
                concurrency=self.scrape_concurrency,
            )
        return PrometheusSource(
            key.url,
            headers=dict(key.headers),
            token_provider=token_file_reader(key.token_file) if key.token_file else None,
            pod_label=key.pod_label,
            namespace_label=key.namespace_label,
            timeout=self.timeout,
            max_body=self.max_body,
        )


def token_file_reader(path: str) -> TokenProvider:
    """Reads a bearer token from a mounted file, off the event loop, stripped of whitespace."""

    def read() -> str | None:
        with Path(path).open("rb") as token:
            text = token.read(MAX_TOKEN_BYTES + 1)
        if len(text) > MAX_TOKEN_BYTES:
            raise ValueError(f"{path} is larger than {MAX_TOKEN_BYTES} bytes")
        return text.decode().strip() or None

    async def provide() -> str | None:
        return await asyncio.to_thread(read)

    return provide
