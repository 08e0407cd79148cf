"""Health metrics sources: the Prometheus HTTP API and direct scraping of pod metrics pages.

Both answer the same question for a set of pods, one signal (metric) at a time: each pod's
series with their points, timestamped when they were scraped. Every call is bounded (a timeout
on each request, a cap on each response body) and never raises into the caller except a
`SourceError` (`SourceUnavailable` when the source could not be reached or did not answer in
time). Garbage inside an answer (NaN and infinite values, non-numeric values, series without
pod or namespace labels, duplicated series, pods that were not asked for, unparsable lines) is
dropped and counted in rljob_health_rejected_total{source,kind}; every query is counted in
rljob_health_queries_total{source,signal,outcome}.

Modules: `base` (types, errors, the protocol, shared HTTP reading), `promql` (selectors and
answer parsing), `prometheus` (the Prometheus source), `direct` (direct scraping and its
prefilter), `factory` (source keys and the default factory).
"""

from rljob.adapters.metrics.addresses import PodAddresses, metrics_url
from rljob.adapters.metrics.base import (
    MAX_ERROR_TEXT,
    Collected,
    MetricsSource,
    PodKey,
    Queries,
    Rejects,
    Selectors,
    SignalData,
    SourceError,
    SourceKind,
    SourceTimeout,
    SourceUnavailable,
    describe_error,
)
from rljob.adapters.metrics.direct import (
    DEFAULT_SCRAPE_CONCURRENCY,
    DEFAULT_SCRAPE_TIMEOUT,
    MAX_PAGE_BYTES,
    MAX_PAGE_LINES,
    AddressResolver,
    DirectSource,
    page_samples,
    prefilter,
)
from rljob.adapters.metrics.factory import (
    MetricsSources,
    SourceKey,
    UnconfiguredSource,
    source_key,
)
from rljob.adapters.metrics.prometheus import (
    DEFAULT_QUERY_CONCURRENCY,
    DEFAULT_TIMEOUT,
    MAX_BODY_BYTES,
    MAX_RANGE_POINTS,
    TOKEN_TTL,
    PrometheusSource,
    TokenProvider,
)
from rljob.adapters.metrics.promql import (
    MAX_POINTS_PER_SERIES,
    parse_matrix,
    promql_string,
    range_selector,
    regex_escape,
    series_selector,
)

__all__ = [
    "DEFAULT_QUERY_CONCURRENCY",
    "DEFAULT_SCRAPE_CONCURRENCY",
    "DEFAULT_SCRAPE_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "MAX_BODY_BYTES",
    "MAX_ERROR_TEXT",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_LINES",
    "MAX_POINTS_PER_SERIES",
    "MAX_RANGE_POINTS",
    "TOKEN_TTL",
    "AddressResolver",
    "Collected",
    "DirectSource",
    "MetricsSource",
    "MetricsSources",
    "PodAddresses",
    "PodKey",
    "PrometheusSource",
    "Queries",
    "Rejects",
    "Selectors",
    "SignalData",
    "SourceError",
    "SourceKey",
    "SourceKind",
    "SourceTimeout",
    "SourceUnavailable",
    "TokenProvider",
    "UnconfiguredSource",
    "describe_error",
    "metrics_url",
    "page_samples",
    "parse_matrix",
    "prefilter",
    "promql_string",
    "range_selector",
    "regex_escape",
    "series_selector",
    "source_key",
]
