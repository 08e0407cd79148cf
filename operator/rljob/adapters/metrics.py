"""Health metrics sources: the Prometheus HTTP API and direct scraping of pod metrics pages.

Both answer the same question for a set of pods, one signal (metric) at a time: each pod's
series with their points, timestamped when they were scraped. Every call is bounded (a timeout
on each request, a cap on each response body) and never raises into the caller except a
`SourceError` (`SourceUnavailable` when the source could not be reached or did not answer in
time). Garbage inside an answer (NaN and infinite values, non-numeric values, series without
pod or namespace labels, duplicated series, pods that were not asked for, unparsable lines) is
dropped and counted in rljob_health_rejected_total{source,kind}; every query is counted in
rljob_health_queries_total{source,signal,outcome}.

Prometheus: one instant query with a range vector per signal for every pod of every due job of
one source, `{__name__="m", namespace=~"ns1|ns2", pod=~"p1|p2"}[45s]`, so samples carry their
real scrape timestamps rather than the query time; pods outside the requested (namespace, pod)
pairs (the two regexes form a cross product) are dropped. Queries go out as POST forms: the
selector of a few thousand pods does not fit in a URL. The start-up backfill uses one
/api/v1/query_range per signal.

Direct: one GET of each pod's metrics page per collection, whatever the number of signals, with
bounded concurrency; lines are prefiltered by metric name before prometheus_client's parser
sees them (a full parse of a vLLM page costs ~14 ms; the kept lines are a few dozen).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import aiohttp
import structlog
from prometheus_client.parser import text_string_to_metric_families

from rljob.api.spec import Health
from rljob.health.profiles import Labels, Point, Series, Signal
from rljob.observability import HEALTH_QUERIES, HEALTH_QUERY_SECONDS, HEALTH_REJECTED

log = structlog.get_logger("rljob.metrics")

MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_PAGE_BYTES = 16 * 1024 * 1024
MAX_POINTS_PER_SERIES = 20_000
# Sample lines of the wanted metrics parsed per pod page: a vLLM page has a few dozen, a pod
# with many data-parallel engines a few hundred; a hostile page is cut here.
MAX_PAGE_LINES = 10_000
DEFAULT_TIMEOUT = 10.0
DEFAULT_SCRAPE_TIMEOUT = 5.0
DEFAULT_SCRAPE_CONCURRENCY = 64
DEFAULT_QUERY_CONCURRENCY = 4
TOKEN_TTL = 60.0
MAX_ERROR_TEXT = 300
# Prometheus refuses range queries of more than 11,000 points per series.
MAX_RANGE_POINTS = 10_000
_CHUNK = 64 * 1024
_REGEX_SPECIAL = frozenset("\\.+*?()|[]{}^$")
_PAGE_TYPES = ("text/plain", "application/openmetrics-text")

PodKey = tuple[str, str]  # (namespace, pod)
Selectors = Mapping[str, Collection[str]]  # namespace -> pod names
SignalData = dict[PodKey, list[Series]]
Queries = Mapping[Signal, Selectors]  # each signal and the pods it is asked for
Collected = dict[Signal, "SignalData | SourceError"]
SourceKind = Literal["prometheus", "direct"]


class SourceError(Exception):
    """A metrics source answered, but not usefully: an error status, a body over the limit,
    the wrong content type, malformed JSON."""


class SourceUnavailable(SourceError):  # noqa: N818 - the name the design uses
    """The source could not be reached or did not answer in time."""


class SourceTimeout(SourceUnavailable):
    """The source did not answer one query in time: the round's queries still waiting for a
    slot end with it at once rather than each waiting out the timeout."""


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


class MetricsSource(Protocol):
    """What the health scheduler needs of a source."""

    kind: SourceKind

    @property
    def supports_history(self) -> bool: ...

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        """Each signal's recent points (the last `lookback` seconds before `at`) for the pods
        it is asked for, or the error that signal's query ended in."""
        ...

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        """Each signal's points from `start` to `end` per pod (empty without history)."""
        ...

    async def close(self) -> None: ...


# ------------------------------------------------------------------ shared helpers


class _Rejects:
    """Garbage tallied during one answer, flushed to the rejected counter at once."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.kinds: Tally[str] = Tally()

    def add(self, kind: str, count: int = 1) -> None:
        self.kinds[kind] += count

    def flush(self) -> None:
        for kind, count in self.kinds.items():
            HEALTH_REJECTED.labels(source=self.source, kind=kind).inc(count)
        self.kinds.clear()


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 3] + "..."


async def _read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The (decompressed) body, or SourceError as soon as it grows over `limit` bytes."""
    declared = response.content_length
    if declared is not None and declared > limit:
        raise SourceError(f"response of {declared} bytes is over the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > limit:
            raise SourceError(f"response is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def _number(value: object) -> float | None:
    """A float from a JSON number or a Prometheus value string (maybe NaN or infinite), else
    None."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except (ValueError, OverflowError):  # "abc"; a JSON integer of 400 digits
        return None


def _points(raw: object, rejects: _Rejects) -> tuple[Point, ...]:
    """[[t, "v"], ...] -> finite points ascending in time, one per timestamp, newest kept."""
    if not isinstance(raw, list):
        rejects.add("malformed")
        return ()
    points: dict[float, float] = {}
    for pair in raw:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            rejects.add("malformed")
            continue
        t, value = _number(pair[0]), _number(pair[1])
        if t is None or not math.isfinite(t):
            rejects.add("bad_timestamp")
            continue
        if value is None:
            rejects.add("non_numeric")
            continue
        if math.isnan(value):
            rejects.add("nan")
            continue
        if math.isinf(value):
            rejects.add("infinite")
            continue
        points[t] = value
    ordered = sorted(points.items())
    if len(ordered) > MAX_POINTS_PER_SERIES:
        rejects.add("too_many_points", len(ordered) - MAX_POINTS_PER_SERIES)
        ordered = ordered[-MAX_POINTS_PER_SERIES:]
    return tuple(ordered)


def _wanted(selectors: Selectors) -> set[PodKey]:
    return {(namespace, pod) for namespace, pods in selectors.items() for pod in pods}


# ------------------------------------------------------------------ PromQL


def regex_escape(value: str) -> str:
    """`value` as a literal inside an RE2 regex (only RE2's metacharacters are escaped: RE2
    rejects escapes of letters, digits and spaces)."""
    return "".join(f"\\{char}" if char in _REGEX_SPECIAL else char for char in value)


def promql_string(value: str) -> str:
    """`value` as a double-quoted PromQL string literal."""
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'


def _alternation(values: Iterable[str]) -> str:
    return "|".join(regex_escape(value) for value in sorted(set(values)))


def series_selector(
    signal: Signal, selectors: Selectors, pod_label: str = "pod", namespace_label: str = "namespace"
) -> str:
    """`{__name__="m", namespace=~"a|b", pod=~"p|q", extra="v"}` for the pods of `selectors`
    (the name goes in as a matcher, so metric names that are PromQL keywords work too)."""
    namespaces = [namespace for namespace, pods in selectors.items() if pods]
    pods = [pod for namespace in namespaces for pod in selectors[namespace]]
    matchers = [
        f"__name__={promql_string(signal.metric)}",
        f"{namespace_label}=~{promql_string(_alternation(namespaces))}",
        f"{pod_label}=~{promql_string(_alternation(pods))}",
        *(f"{name}={promql_string(value)}" for name, value in signal.matchers),
    ]
    return "{" + ", ".join(matchers) + "}"


def range_selector(
    signal: Signal,
    selectors: Selectors,
    lookback: float,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
) -> str:
    """The selector with a range of `lookback` seconds (whole milliseconds, at least 1 s)."""
    millis = max(1000, math.ceil(lookback * 1000))
    return f"{series_selector(signal, selectors, pod_label, namespace_label)}[{millis}ms]"


def parse_matrix(
    payload: object,
    selectors: Selectors,
    rejects: _Rejects,
    pod_label: str = "pod",
    namespace_label: str = "namespace",
) -> SignalData:
    """A Prometheus query answer (matrix, or vector) -> each requested pod's series.
    Raises SourceError when the answer as a whole is not one."""
    if not isinstance(payload, dict):
        raise SourceError("answer is not a JSON object")
    if payload.get("status") != "success":
        error = payload.get("error")
        raise SourceError(_short(f"query failed: {payload.get('errorType')}: {error}"))
    data = payload.get("data")
    if not isinstance(data, dict):
        raise SourceError("answer has no data object")
    kind, result = data.get("resultType"), data.get("result")
    if kind not in ("matrix", "vector") or not isinstance(result, list):
        raise SourceError(f"answer is a {kind!r}, not a matrix")
    wanted = _wanted(selectors)
    raws: dict[tuple[PodKey, Labels], object] = {}
    conflicting: set[tuple[PodKey, Labels]] = set()
    dropped = {"__name__", pod_label, namespace_label}
    for item in result:
        metric = item.get("metric") if isinstance(item, dict) else None
        if not isinstance(metric, dict):
            rejects.add("malformed")
            continue
        namespace, pod = metric.get(namespace_label), metric.get(pod_label)
        if not isinstance(namespace, str) or not isinstance(pod, str):
            rejects.add("missing_labels")
            continue
        key = (namespace, pod)
        if key not in wanted:
            rejects.add("unrequested")
            continue
        labels = tuple(
            sorted(
                (name, value)
                for name, value in metric.items()
                if name not in dropped and isinstance(name, str) and isinstance(value, str)
            )
        )
        raw = item.get("values") if kind == "matrix" else [item.get("value")]
        if (key, labels) in raws:
            _duplicate((key, labels), raw != raws[key, labels], conflicting, rejects)
            continue
        raws[key, labels] = raw
    found: SignalData = {}
    for (key, labels), raw in raws.items():
        points = () if (key, labels) in conflicting else _points(raw, rejects)
        if points:
            found.setdefault(key, []).append(Series(labels, points))
    return found


def _duplicate(identity: object, differs: bool, conflicting: set[Any], rejects: _Rejects) -> None:
    """A series seen again: an identical copy is dropped; copies that disagree are all dropped
    (which one is right is unknown, and the wrong one could fake a stall or a drop)."""
    rejects.add("duplicate_series")
    if differs and identity not in conflicting:
        conflicting.add(identity)
        rejects.add("duplicate_series")


TokenProvider = Callable[[], Awaitable[str | None]]


class _HttpSource:
    """The aiohttp session of a source: borrowed when given, else created on first use and
    owned (closed by `close`)."""

    _session: aiohttp.ClientSession | None
    _owns_session: bool

    def _adopt(self, session: aiohttp.ClientSession | None) -> None:
        self._session = session
        self._owns_session = session is None

    async def close(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None


class PrometheusSource(_HttpSource):
    """The Prometheus HTTP API at `url` (the base URL, without /api/v1)."""

    kind: SourceKind = "prometheus"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        bearer_token: str | None = None,
        token_provider: TokenProvider | None = None,
        pod_label: str = "pod",
        namespace_label: str = "namespace",
        timeout: float = DEFAULT_TIMEOUT,
        max_body: int = MAX_BODY_BYTES,
        concurrency: int = DEFAULT_QUERY_CONCURRENCY,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.pod_label = pod_label
        self.namespace_label = namespace_label
        self.timeout = timeout
        self.max_body = max_body
        self._bearer_token = bearer_token
        self._token_provider = token_provider
        self._token_read_at = -math.inf
        self._concurrency = max(1, concurrency)
        self._semaphore: asyncio.Semaphore | None = None
        self._adopt(session)

    @property
    def supports_history(self) -> bool:
        return True

    # ---------------------------------------------------------------- queries

    async def raw_samples(
        self, signal: Signal, selectors: Selectors, lookback: float, at: float | None = None
    ) -> SignalData:
        """One instant query of `signal` over the last `lookback` seconds (before `at`, default
        now) for all pods of `selectors`: each pod's series with their scrape timestamps."""
        if not _wanted(selectors):
            return {}
        form = {"query": range_selector(signal, selectors, lookback, *self._labels)}
        if at is not None:
            form["time"] = f"{at:.3f}"
        return await self._query("/api/v1/query", form, signal, selectors)

    async def range_samples(
        self, signal: Signal, selectors: Selectors, start: float, end: float, step: float
    ) -> SignalData:
        """One range query of `signal` from `start` to `end` every `step` seconds (widened so
        that no series has more than MAX_RANGE_POINTS points) for all pods of `selectors`."""
        if not _wanted(selectors) or not end > start:
            return {}
        step = max(step, (end - start) / MAX_RANGE_POINTS, 0.001)
        form = {
            "query": series_selector(signal, selectors, *self._labels),
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:.3f}",
        }
        return await self._query("/api/v1/query_range", form, signal, selectors)

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        """One instant query per signal."""
        return await self._each(
            queries, lambda signal, pods: self.raw_samples(signal, pods, lookback, at)
        )

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        """One range query per signal."""
        return await self._each(
            queries, lambda signal, pods: self.range_samples(signal, pods, start, end, step)
        )

    # ---------------------------------------------------------------- internals

    @property
    def _labels(self) -> tuple[str, str]:
        return self.pod_label, self.namespace_label

    async def _each(
        self, queries: Queries, query: Callable[[Signal, Selectors], Awaitable[SignalData]]
    ) -> Collected:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._concurrency)
        semaphore = self._semaphore

        timed_out: list[SourceTimeout] = []

        async def one(signal: Signal) -> SignalData | SourceError:
            async with semaphore:
                if timed_out:  # a slow source: the round costs one timeout, not one per slot
                    return timed_out[0]
                try:
                    return await query(signal, queries[signal])
                except SourceTimeout as error:
                    timed_out.append(error)
                    return error
                except SourceError as error:
                    return error

        signals = list(queries)
        answers = await asyncio.gather(*(one(signal) for signal in signals))
        return dict(zip(signals, answers, strict=True))

    async def _query(
        self, path: str, form: dict[str, str], signal: Signal, selectors: Selectors
    ) -> SignalData:
        outcome = "error"
        started = time.monotonic()
        rejects = _Rejects(self.kind)
        try:
            payload = await self._post(path, form)
            data = parse_matrix(payload, selectors, rejects, *self._labels)
            outcome = "ok"
            return data
        except SourceUnavailable:
            outcome = "unavailable"
            raise
        finally:
            rejects.flush()
            HEALTH_QUERIES.labels(source=self.kind, signal=signal.name, outcome=outcome).inc()
            HEALTH_QUERY_SECONDS.labels(source=self.kind).observe(time.monotonic() - started)

    async def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", **self.headers}
        token = await self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _token(self) -> str | None:
        provider = self._token_provider
        if provider is None or time.monotonic() - self._token_read_at < TOKEN_TTL:
            return self._bearer_token
        try:
            self._bearer_token = await provider()
        except Exception as error:
            raise SourceUnavailable(_short(f"bearer token unavailable: {error}")) from error
        self._token_read_at = time.monotonic()
        return self._bearer_token

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._owns_session = True
        return self._session

    async def _post(self, path: str, form: dict[str, str]) -> object:
        headers = await self._headers()
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with self._client().post(
                self.url + path,
                data=form,
                headers=headers,
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                body = await _read_bounded(response, self.max_body)
                if response.status != 200:
                    raise _status_error(response.status, body)
                if response.content_type != "application/json":
                    raise SourceError(
                        f"content type {response.content_type!r}, not application/json"
                    )
        except TimeoutError as error:
            raise SourceTimeout(f"no answer within {self.timeout:g}s") from error
        except aiohttp.ClientError as error:
            raise SourceUnavailable(_short(f"{type(error).__name__}: {error}")) from error
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as error:
            raise SourceError(_short(f"malformed JSON: {error}")) from error


def _status_error(status: int, body: bytes) -> SourceError:
    detail = body[:MAX_ERROR_TEXT].decode("utf-8", "replace")
    try:
        parsed = json.loads(body)
        if isinstance(parsed, dict) and "error" in parsed:
            detail = f"{parsed.get('errorType')}: {parsed.get('error')}"
    except (ValueError, RecursionError):
        pass
    message = _short(f"HTTP {status}: {detail}")
    if status >= 500 or status == 429:
        return SourceUnavailable(message)
    return SourceError(message)


# ------------------------------------------------------------------ direct scrape

AddressResolver = Callable[[str, str], "str | None"]


class AddressMapFile:
    """Resolves (namespace, pod) from a JSON file `{"<namespace>/<pod>": "host:port"}` (the
    test bed's simulator writes it atomically), re-read when it changes; values may also be
    full URLs. A file that cannot be read keeps the last good map."""

    MAX_BYTES = 16 * 1024 * 1024

    def __init__(self, path: Path | str, metrics_path: str = "/metrics", recheck: float = 1.0):
        self.path = Path(path)
        self.metrics_path = metrics_path
        self._recheck = recheck
        self._checked_at = -math.inf
        self._stamp: tuple[int, int] | None = None
        self._map: dict[str, str] = {}

    def __call__(self, namespace: str, pod: str) -> str | None:
        self._maybe_reload()
        address = self._map.get(f"{namespace}/{pod}")
        if address is None:
            return None
        if "://" in address:
            return address
        return f"http://{address}{self.metrics_path}"

    def _maybe_reload(self) -> None:
        now = time.monotonic()
        if now - self._checked_at < self._recheck:
            return
        self._checked_at = now
        try:
            stat = os.stat(self.path)
            stamp = (stat.st_mtime_ns, stat.st_size)
            if stamp == self._stamp:
                return
            if stat.st_size > self.MAX_BYTES:
                raise ValueError(f"over {self.MAX_BYTES} bytes")
            loaded = json.loads(self.path.read_text())
            if not isinstance(loaded, dict):
                raise ValueError("not a JSON object")
            self._map = {k: v for k, v in loaded.items() if isinstance(v, str)}
            self._stamp = stamp
        except (OSError, ValueError) as error:
            log.warning(
                "address map unreadable; keeping the last one",
                path=str(self.path),
                error=str(error),
            )


def prefilter(text: str, names: Collection[str]) -> list[str]:
    """The sample lines of a metrics page whose name starts with one of `names` (comments and
    every other metric dropped) - before any parsing."""
    prefixes = tuple(names)
    if not prefixes:
        return []
    # Lines end at "\n" only, as the exposition format says: splitlines() would also break a
    # line at a "\r" or "\u2028" inside a label value, which needs no escaping there.
    return [line for line in text.split("\n") if line.startswith(prefixes)]


def page_samples(
    text: str, names: Collection[str], rejects: _Rejects
) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of a page's samples named as one of `names`: prefiltered, at most
    MAX_PAGE_LINES lines parsed (a page of millions of matching lines costs no more)."""
    lines = prefilter(text, names)
    if len(lines) > MAX_PAGE_LINES:
        rejects.add("too_many_lines", len(lines) - MAX_PAGE_LINES)
        lines = lines[:MAX_PAGE_LINES]
    return _parse_lines(lines, names, rejects)


def _parse_lines(
    lines: list[str], names: Collection[str], rejects: _Rejects
) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of the samples named exactly as one of `names`. A page the parser
    rejects is parsed again line by line, dropping the bad lines."""
    samples: list[tuple[str, dict[str, str], float]] = []
    try:
        families = list(text_string_to_metric_families("\n".join(lines) + "\n"))
    except Exception:  # the parser raises ValueError, IndexError, ... on garbage
        families = []
        for line in lines:
            try:
                families.extend(text_string_to_metric_families(line + "\n"))
            except Exception:
                rejects.add("unparsable_line")
    for family in families:
        for sample in family.samples:
            if sample.name in names:
                samples.append((sample.name, dict(sample.labels), float(sample.value)))
    return samples


@dataclass(frozen=True, slots=True)
class _Page:
    t: float
    samples: list[tuple[str, dict[str, str], float]]


class DirectSource(_HttpSource):
    """Scrapes each pod's metrics page; `resolver(namespace, pod)` gives its URL (or
    host:port, for /metrics). Samples are timestamped with the scrape time; there is no
    history to backfill from."""

    kind: SourceKind = "direct"

    def __init__(
        self,
        resolver: AddressResolver,
        *,
        timeout: float = DEFAULT_SCRAPE_TIMEOUT,
        concurrency: int = DEFAULT_SCRAPE_CONCURRENCY,
        max_body: int = MAX_PAGE_BYTES,
        clock: Callable[[], float] = time.time,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.resolver = resolver
        self.timeout = timeout
        self.max_body = max_body
        self._clock = clock
        self._concurrency = max(1, concurrency)
        self._adopt(session)

    @property
    def supports_history(self) -> bool:
        return False

    async def history(
        self, queries: Queries, *, start: float, end: float, step: float
    ) -> Collected:
        return {signal: {} for signal in queries}

    async def collect(self, queries: Queries, *, lookback: float, at: float) -> Collected:
        """One scrape of each pod any signal asks for; each signal gets its own pods' series."""
        wanted = {signal: _wanted(selectors) for signal, selectors in queries.items()}
        pods = sorted(set().union(*wanted.values()))
        unique = list(queries)
        if not pods:
            return {signal: {} for signal in unique}
        names = {signal.metric for signal in unique}
        semaphore = asyncio.Semaphore(self._concurrency)
        rejects = _Rejects(self.kind)

        async def one(pod: PodKey) -> _Page | SourceError:
            async with semaphore:
                return await self.scrape(pod, names, rejects)

        try:
            pages = await asyncio.gather(*(one(pod) for pod in pods))
        finally:
            rejects.flush()
        errors = [page for page in pages if isinstance(page, SourceError)]
        if len(errors) == len(pages):
            error = SourceUnavailable(
                f"no pod page could be scraped ({len(pages)} tried): {errors[0]}"
            )
            return {signal: error for signal in unique}
        collected: Collected = {}
        for signal in unique:
            data: SignalData = {}
            for pod, page in zip(pods, pages, strict=True):
                if isinstance(page, SourceError) or pod not in wanted[signal]:
                    continue
                series = _page_series(signal, page, rejects)
                if series:
                    data[pod] = series
            collected[signal] = data
        rejects.flush()
        return collected

    async def scrape(
        self, pod: PodKey, names: Collection[str], rejects: _Rejects | None = None
    ) -> _Page | SourceError:
        """One pod's page, prefiltered to `names` and parsed, or the error it ended in."""
        own = rejects is None
        rejects = rejects or _Rejects(self.kind)
        outcome = "error"
        started = time.monotonic()
        try:
            url = self.resolver(*pod)
            if url is None:
                outcome = "unresolved"
                return SourceUnavailable(f"no address for pod {pod[0]}/{pod[1]}")
            if "://" not in url:
                url = f"http://{url}/metrics"
            text = await self._fetch(url)
            t = self._clock()
            page = _Page(t, page_samples(text, names, rejects))
            outcome = "ok"
            return page
        except SourceUnavailable as error:
            outcome = "unavailable"
            return error
        except SourceError as error:
            return error
        finally:
            if own:
                rejects.flush()
            HEALTH_QUERIES.labels(source=self.kind, signal="page", outcome=outcome).inc()
            HEALTH_QUERY_SECONDS.labels(source=self.kind).observe(time.monotonic() - started)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._concurrency)
            self._session = aiohttp.ClientSession(connector=connector)
            self._owns_session = True
        return self._session

    async def _fetch(self, url: str) -> str:
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        headers = {"Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
        try:
            async with self._client().get(
                url, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                body = await _read_bounded(response, self.max_body)
                if response.status != 200:
                    raise _status_error(response.status, body)
                if not response.content_type.startswith(_PAGE_TYPES):
                    raise SourceError(f"content type {response.content_type!r}, not text/plain")
                return body.decode("utf-8", "replace")
        except TimeoutError as error:
            raise SourceUnavailable(f"no answer within {self.timeout:g}s from {url}") from error
        except aiohttp.ClientError as error:
            raise SourceUnavailable(_short(f"{url}: {type(error).__name__}: {error}")) from error


def _page_series(signal: Signal, page: _Page, rejects: _Rejects) -> list[Series]:
    series: list[Series] = []
    values: dict[Labels, float] = {}
    conflicting: set[Labels] = set()
    for name, labels, value in page.samples:
        if name != signal.metric or not signal.matches(labels):
            continue
        key = tuple(sorted(labels.items()))
        if key in values:
            differs = not _same_value(value, values[key])
            _duplicate(key, differs, conflicting, rejects)
            continue
        values[key] = value
    for key, value in values.items():
        if key in conflicting:
            continue
        if math.isnan(value):
            rejects.add("nan")
            continue
        if math.isinf(value):
            rejects.add("infinite")
            continue
        series.append(Series(key, ((page.t, value),)))
    return series


def _same_value(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


# ------------------------------------------------------------------ the default factory

TokenReader = Callable[[str, str, str], Awaitable["str | None"]]


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


def describe_error(error: BaseException) -> str:
    return _short(str(error) or type(error).__name__)
