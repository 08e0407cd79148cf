"""Properties of the metrics parsers over hostile answers: the Prometheus HTTP API answer
(parse_matrix, and the bounded HTTP read before it) and the direct scrape's exposition parser
with its prefilter. Whatever comes in, they never raise anything but SourceError, what they
return is clean (finite points ascending in time, requested pods only, one series per label
set) and bounded, and nothing in it comes from a garbage value. No I/O: HTTP answers come from
an in-memory stand-in for the aiohttp session."""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rljob.adapters import metrics
from rljob.adapters.metrics import (
    DirectSource,
    PrometheusSource,
    Rejects,
    SignalData,
    SourceError,
    direct,
    page_samples,
    parse_matrix,
    promql,
)
from rljob.adapters.metrics.direct import _Page, _page_series
from rljob.health.profiles import Signal
from tests.unit.property.strategies import FEW, SETTINGS, garbage_value, hostile_text, json_values

NAMESPACE = "ns1"
WANTED = {NAMESPACE: {"a", "b.c"}}
SIGNAL = Signal("requests_running", "vllm:num_requests_running")
RESERVED_LABELS = {"__name__", "pod", "namespace"}
T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine that never waits (the in-memory session answers at once)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    coroutine.close()
    raise AssertionError("the coroutine waited on something")


def assert_clean(found: SignalData, wanted: Mapping[str, set[str]]) -> None:
    """Requested pods only, one series per label set, no reserved label, 1 to
    MAX_POINTS_PER_SERIES finite points strictly ascending in time."""
    pods = {(namespace, pod) for namespace, names in wanted.items() for pod in names}
    assert set(found) <= pods
    for series_list in found.values():
        label_sets = [series.labels for series in series_list]
        assert len(label_sets) == len(set(label_sets))
        for series in series_list:
            assert not {name for name, _ in series.labels} & RESERVED_LABELS
            assert 1 <= len(series.points) <= metrics.MAX_POINTS_PER_SERIES
            times = [t for t, _ in series.points]
            assert times == sorted(set(times))
            assert all(math.isfinite(t) and math.isfinite(v) for t, v in series.points)


# ------------------------------------------------------------------ Prometheus answers

finite = st.floats(-1e12, 1e12, allow_nan=False)
point_value = st.one_of(
    finite.map(repr), finite, st.integers(-(10**6), 10**6), garbage_value, garbage_value
)
point = st.one_of(
    st.tuples(finite, point_value).map(list),
    st.tuples(garbage_value, point_value).map(list),
    st.sampled_from([[1.0], [1.0, "1", "2"], "1", 7, None]),
)


@st.composite
def series_item(draw: st.DrawFn) -> dict[str, Any]:
    """One result item: mostly a series of a wanted pod, else of another pod, without its pod
    or namespace label, with non-string labels, or no object at all."""
    pod = draw(st.sampled_from(["a", "b.c", "a", "b.c", "z"]))
    metric: dict[str, Any] = {"__name__": SIGNAL.metric, "namespace": NAMESPACE, "pod": pod}
    metric.update(
        draw(st.dictionaries(st.sampled_from(["engine", "le", "x"]), st.text(max_size=3)))
    )
    broken = draw(st.sampled_from([None] * 6 + ["no_pod", "no_namespace", "number_label"]))
    if broken == "no_pod":
        del metric["pod"]
    elif broken == "no_namespace":
        del metric["namespace"]
    elif broken == "number_label":
        metric["pod"] = 7
    values = draw(st.lists(point, max_size=8))
    if draw(st.booleans()):
        return {"metric": metric, "values": values}
    return {"metric": metric, "value": values[0] if values else None}


@st.composite
def matrices(draw: st.DrawFn) -> dict[str, Any]:
    """A success answer whose items are hostile, some of them copies of others (identical or
    differing in their points)."""
    items: list[Any] = draw(st.lists(series_item(), max_size=8))
    for _ in range(draw(st.integers(0, 3))):
        if items:
            copy = json.loads(json.dumps(draw(st.sampled_from(items))))
            if draw(st.booleans()) and "values" in copy:
                copy["values"] = draw(st.lists(point, max_size=3))
            items.append(copy)
    items += draw(st.lists(st.one_of(json_values, st.just("garbage")), max_size=2))
    kind = draw(st.sampled_from(["matrix", "matrix", "vector"]))
    return {"status": "success", "data": {"resultType": kind, "result": items}}


answers = st.one_of(
    matrices(),
    json_values,
    st.fixed_dictionaries({"status": st.just("success"), "data": json_values}),
)


def parse(payload: object) -> SignalData | SourceError:
    try:
        return parse_matrix(payload, WANTED, Rejects("prometheus"))
    except SourceError as error:
        return error


def _identity(item: object) -> tuple[tuple[str, str], tuple[tuple[str, str], ...]] | None:
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict):
        return None
    namespace, pod = metric.get("namespace"), metric.get("pod")
    if not isinstance(namespace, str) or not isinstance(pod, str):
        return None
    labels = tuple(
        sorted((k, v) for k, v in metric.items() if k not in RESERVED_LABELS and isinstance(v, str))
    )
    return (namespace, pod), labels


def _raw_points(item: dict[str, Any]) -> object:
    return item.get("values") if "values" in item else [item.get("value")]


@SETTINGS
@given(answers)
def test_any_answer_parses_to_clean_series_or_a_source_error(payload: object) -> None:
    found = parse(payload)

    if not isinstance(found, SourceError):
        assert_clean(found, WANTED)


@SETTINGS
@given(matrices())
def test_series_come_only_from_finite_input_points_of_unambiguous_series(
    payload: dict[str, Any],
) -> None:
    found = parse(payload)

    assert isinstance(found, dict)
    copies: dict[Any, list[object]] = {}
    for item in payload["data"]["result"]:
        identity = _identity(item)
        if identity is not None:
            copies.setdefault(identity, []).append(_raw_points(item))
    for key, series_list in found.items():
        for series in series_list:
            raws = copies[key, series.labels]
            # Copies that disagree are dropped, all of them: either could be the wrong one.
            assert all(raw == raws[0] for raw in raws)
            given_points = {
                (float(t), float(v))
                for t, v in (
                    p for p in cast(list[Any], raws[0]) if isinstance(p, list) and len(p) == 2
                )
                if _is_number(t) and _is_number(v)
            }
            assert set(series.points) <= given_points


def _is_number(value: object) -> bool:
    try:
        return not isinstance(value, bool) and math.isfinite(float(cast(Any, value)))
    except (TypeError, ValueError, OverflowError):
        return False


@FEW
@given(st.integers(0, 120), st.integers(1, 40))
def test_points_per_series_are_capped_keeping_the_newest(count: int, cap: int) -> None:
    payload = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {
                    "metric": {"namespace": NAMESPACE, "pod": "a"},
                    "values": [[float(t), str(t)] for t in range(count)],
                }
            ],
        },
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(promql, "MAX_POINTS_PER_SERIES", cap)
        found = parse(payload)

    assert isinstance(found, dict)
    points = found[NAMESPACE, "a"][0].points if count else ()
    assert len(points) == min(count, cap)
    assert [t for t, _ in points] == [float(t) for t in range(count - len(points), count)]


# ------------------------------------------------------------------ HTTP answers


@dataclass
class FakeContent:
    body: bytes
    chunk: int
    read: int = 0

    async def iter_chunked(self, size: int) -> AsyncIterator[bytes]:
        step = min(size, self.chunk)
        for start in range(0, len(self.body), step):
            self.read += step
            yield self.body[start : start + step]


@dataclass
class FakeResponse:
    status: int
    content_type: str
    content_length: int | None
    content: FakeContent

    async def __aenter__(self) -> FakeResponse:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


@dataclass
class FakeSession:
    """Answers every request with one canned response, at once."""

    response: FakeResponse
    closed: bool = False

    def post(self, url: str, **options: Any) -> FakeResponse:
        return self.response

    def get(self, url: str, **options: Any) -> FakeResponse:
        return self.response


MAX_BODY = 4096
bodies = st.one_of(
    matrices().map(lambda answer: json.dumps(answer).encode()),
    st.binary(max_size=600),
    st.integers(MAX_BODY - 2, MAX_BODY * 3).map(lambda size: b"[" * size),
    st.integers(0, 300).map(lambda size: b'vllm:num_requests_running{engine="0"} 1\n' * size),
    hostile_text.map(lambda text: text.encode("utf-8", "surrogatepass")),
)


@st.composite
def responses(draw: st.DrawFn, content_types: list[str]) -> FakeResponse:
    body = draw(bodies)
    declared = draw(st.sampled_from([None, len(body), len(body) // 2, MAX_BODY + 1]))
    return FakeResponse(
        status=draw(st.sampled_from([200, 200, 200, 302, 400, 429, 500, 503])),
        content_type=draw(st.sampled_from(content_types)),
        content_length=declared,
        content=FakeContent(body, chunk=draw(st.sampled_from([7, 1024, 65536]))),
    )


def _session(response: FakeResponse) -> aiohttp.ClientSession:
    return cast(aiohttp.ClientSession, FakeSession(response))


def _bounded_read(response: FakeResponse) -> None:
    """Nothing past the limit was read (one chunk of slack), and an oversized body failed."""
    assert response.content.read <= MAX_BODY + 65536


@SETTINGS
@given(responses(["application/json", "text/html", "text/plain", "", "application/json\n"]))
def test_any_prometheus_http_answer_is_clean_data_or_a_source_error(
    response: FakeResponse,
) -> None:
    source = PrometheusSource("http://prometheus", max_body=MAX_BODY, session=_session(response))
    try:
        found = run(source.raw_samples(SIGNAL, WANTED, 30.0))
    except SourceError:
        found = None

    _bounded_read(response)
    if found is not None:
        assert_clean(found, WANTED)
        assert response.status == 200 and response.content_type == "application/json"
        assert len(response.content.body) <= MAX_BODY


@SETTINGS
@given(responses(["text/plain", "application/openmetrics-text", "text/html", "application/json"]))
def test_any_scraped_page_is_a_clean_page_or_a_source_error(response: FakeResponse) -> None:
    source = DirectSource(
        lambda namespace, pod: "http://pod/metrics",
        max_body=MAX_BODY,
        clock=lambda: 1.0,
        session=_session(response),
    )
    page = run(source.scrape((NAMESPACE, "a"), {SIGNAL.metric}))

    _bounded_read(response)
    if not isinstance(page, SourceError):
        assert response.status == 200 and len(response.content.body) <= MAX_BODY
        assert_clean_page(page)


# ------------------------------------------------------------------ exposition pages


def assert_clean_page(page: _Page) -> None:
    assert all(name == SIGNAL.metric for name, _, _ in page.samples)
    assert len(page.samples) <= metrics.MAX_PAGE_LINES
    series = _page_series(SIGNAL, page, Rejects("direct"))
    label_sets = [one.labels for one in series]
    assert len(label_sets) == len(set(label_sets))
    assert all(math.isfinite(v) for one in series for _, v in one.points)


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


sample_line = st.builds(
    lambda engine, value, suffix: (
        f'{SIGNAL.metric}{{engine="{escape_label(engine)}"}} {value}{suffix}'
    ),
    st.one_of(st.sampled_from(["0", "1", "0"]), hostile_text),
    st.one_of(
        st.sampled_from(["1", "NaN", "+Inf", "-Inf", "1e999", "x", "", "7 123"]), finite.map(repr)
    ),
    st.sampled_from(["", "", " 1700000000000", ' # {a="b"} 1', "}", '"']),
)
page_lines = st.one_of(
    sample_line,
    st.sampled_from(
        [f"# TYPE {SIGNAL.metric} gauge", f"{SIGNAL.metric}_other 1", f"{SIGNAL.metric}{{", ""]
    ),
    hostile_text,
)
pages = st.one_of(
    st.lists(page_lines, max_size=30).map("\n".join),
    st.binary(max_size=500).map(lambda raw: raw.decode("utf-8", "replace")),
)


@SETTINGS
@given(pages)
def test_any_page_parses_to_bounded_clean_samples(text: str) -> None:
    page = _Page(1.0, page_samples(text, {SIGNAL.metric}, Rejects("direct")))

    assert_clean_page(page)


@SETTINGS
@given(
    st.lists(
        hostile_text.map(lambda text: text.encode("utf-8", "replace").decode()),
        min_size=1,
        max_size=5,
        unique=True,
    )
)
def test_hostile_label_values_survive_the_exposition_round_trip(engines: list[str]) -> None:
    lines = [f'{SIGNAL.metric}{{engine="{escape_label(e)}"}} {i}' for i, e in enumerate(engines)]

    samples = page_samples("\n".join(lines) + "\n", {SIGNAL.metric}, Rejects("direct"))

    assert [(labels["engine"], value) for _, labels, value in samples] == [
        (engine, float(index)) for index, engine in enumerate(engines)
    ]


@FEW
@given(st.integers(0, 300), st.integers(1, 100))
def test_page_lines_are_capped(count: int, cap: int) -> None:
    text = "\n".join(f'{SIGNAL.metric}{{engine="{i}"}} {i}' for i in range(count))
    rejects = Rejects("direct")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(direct, "MAX_PAGE_LINES", cap)
        samples = page_samples(text, {SIGNAL.metric}, rejects)

    assert len(samples) == min(count, cap)
    assert rejects.kinds["too_many_lines"] == max(0, count - cap)


@SETTINGS
@given(form=st.dictionaries(st.text(max_size=80), st.text(max_size=300), max_size=4))
def test_the_query_form_is_encoded_exactly_as_urlencode_does(form: dict[str, str]) -> None:
    """promql.form_body translates ASCII text in one pass; every text (any character, UTF-8
    beyond ASCII) comes out as urllib.parse.urlencode writes it."""
    assert promql.form_body(form) == urllib.parse.urlencode(form)


@pytest.mark.parametrize(
    "form",
    [
        pytest.param({"query": '{pod=~"a\\.b|c d"}[45000ms]'}, id="a-selector"),
        pytest.param({"query": "rate(x[1m]) > 0", "time": "12.500"}, id="two-fields"),
        pytest.param({"q": "pöd=€&+%"}, id="non-ascii"),
        pytest.param({}, id="empty"),
    ],
)
def test_known_query_forms_are_encoded_as_urlencode_does(form: dict[str, str]) -> None:
    assert promql.form_body(form) == urllib.parse.urlencode(form)
