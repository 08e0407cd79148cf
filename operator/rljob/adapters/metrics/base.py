"""What every metrics source shares: the answer's types, the errors, the `MetricsSource`
protocol, the rejected-garbage tally and the bounded HTTP reading of an aiohttp session."""

from __future__ import annotations

import json
import math
from collections import Counter as Tally
from collections.abc import Collection, Mapping
from typing import Any, Literal, Protocol

import aiohttp

from rljob.health.profiles import Series, Signal
from rljob.observability import HEALTH_REJECTED

MAX_ERROR_TEXT = 300
_CHUNK = 64 * 1024

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


class Rejects:
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


def reject_duplicate(
    identity: object, differs: bool, conflicting: set[Any], rejects: Rejects
) -> None:
    """A series seen again: an identical copy is dropped; copies that disagree are all dropped
    (which one is right is unknown, and the wrong one could fake a stall or a drop)."""
    rejects.add("duplicate_series")
    if differs and identity not in conflicting:
        conflicting.add(identity)
        rejects.add("duplicate_series")


def finite(value: float, rejects: Rejects) -> bool:
    """Whether `value` is finite; a NaN or infinite one is tallied (no detector may see it)."""
    if math.isnan(value):
        rejects.add("nan")
        return False
    if math.isinf(value):
        rejects.add("infinite")
        return False
    return True


def wanted_pods(selectors: Selectors) -> set[PodKey]:
    return {(namespace, pod) for namespace, pods in selectors.items() for pod in pods}


def shorten(text: str) -> str:
    """`text` on one line, cut to MAX_ERROR_TEXT characters (it ends up in conditions)."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 3] + "..."


def describe_error(error: BaseException) -> str:
    return shorten(str(error) or type(error).__name__)


async def read_bounded(response: aiohttp.ClientResponse, limit: int) -> bytes:
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


def status_error(status: int, body: bytes) -> SourceError:
    """The error a non-200 answer ends in: unavailable for 5xx and 429 (try again later). Only
    the status and Prometheus's own errorType and error fields are kept: the body of whatever
    answered is never reflected into conditions or Events."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        parsed = None
    message = shorten(f"HTTP {status}{prometheus_error(parsed)}")
    if status >= 500 or status == 429:
        return SourceUnavailable(message)
    return SourceError(message)


def prometheus_error(parsed: object) -> str:
    """': <errorType>: <error>' of a Prometheus error envelope (both strings), else ''."""
    if not isinstance(parsed, dict):
        return ""
    kind, error = parsed.get("errorType"), parsed.get("error")
    if not isinstance(kind, str) or not isinstance(error, str):
        return ""
    return f": {kind}: {error}"


class HttpSource:
    """The aiohttp session of a source: borrowed when given, else created on first use and
    owned (closed by `close`)."""

    _session: aiohttp.ClientSession | None
    _owns_session: bool
    _concurrency: int = 1  # connections at once in a session this source creates

    def _adopt(self, session: aiohttp.ClientSession | None) -> None:
        self._session = session
        self._owns_session = session is None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._concurrency)
            self._session = aiohttp.ClientSession(connector=connector)
            self._owns_session = True
        return self._session

    async def close(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None
