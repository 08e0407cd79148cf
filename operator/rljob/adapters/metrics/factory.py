"""Which source a job is health-checked from (its `SourceKey`) and the default factory that
makes a source of a key: jobs with equal keys share one source."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

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

TokenReader = Callable[[str, str, str], Awaitable["str | None"]]


@dataclass(frozen=True, slots=True)
class SourceKey:
    """Identifies one source: jobs with equal keys are queried together. The bearer token's
    Secret is part of the key (with its namespace), so jobs share a token only when they name
    the same Secret."""

    kind: SourceKind
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    token_secret: tuple[str, str, str] | None = None  # (namespace, name, key)
    pod_label: str = "pod"
    namespace_label: str = "namespace"

    def describe(self) -> str:
        return self.url if self.kind == "prometheus" else "direct scrape"


def source_key(health: Health, namespace: str, default: SourceKey | None) -> SourceKey | None:
    """The source a job's spec.health names, or the operator's default without one."""
    source = health.source
    if source is None:
        return default
    if source.prometheus is None:
        return SourceKey("direct")
    prometheus = source.prometheus
    secret = prometheus.bearer_token_secret
    return SourceKey(
        kind="prometheus",
        url=prometheus.url.rstrip("/"),
        headers=tuple(sorted(prometheus.headers.items())),
        token_secret=(namespace, secret.name, secret.key) if secret is not None else None,
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
    """The default source factory: a SourceKey -> a new source. `token_reader(namespace,
    secret, key)` reads a bearer token Secret (re-read every TOKEN_TTL seconds);
    `direct_resolver(namespace, pod)` gives a pod's metrics URL for direct scraping."""

    def __init__(
        self,
        *,
        token_reader: TokenReader | None = None,
        direct_resolver: AddressResolver | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        scrape_timeout: float = DEFAULT_SCRAPE_TIMEOUT,
        scrape_concurrency: int = DEFAULT_SCRAPE_CONCURRENCY,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.token_reader = token_reader
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
        provider: TokenProvider | None = None
        if key.token_secret is not None:
            reader, secret = self.token_reader, key.token_secret
            if reader is None:
                return UnconfiguredSource(
                    "prometheus",
                    "a bearer token Secret is named but the operator cannot read Secrets",
                )

            async def read_token() -> str | None:
                return await reader(*secret)

            provider = read_token

        return PrometheusSource(
            key.url,
            headers=dict(key.headers),
            token_provider=provider,
            pod_label=key.pod_label,
            namespace_label=key.namespace_label,
            timeout=self.timeout,
            max_body=self.max_body,
        )
