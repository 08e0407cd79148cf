"""Health metrics sources against in-process HTTP servers on 127.0.0.1: PromQL building and
escaping, one query per signal for many jobs, parsing of garbage and hostile answers, bounded
bodies and timeouts, and the direct scrape's prefilter and bounded concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from aiohttp import web
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from rljob.adapters.metrics import (
    DirectSource,
    MetricsSources,
    PodAddresses,
    PrometheusSource,
    SourceError,
    SourceKey,
    SourceUnavailable,
    UnconfiguredSource,
    direct,
    prefilter,
    promql_string,
    range_selector,
    regex_escape,
    series_selector,
    source_key,
)
from rljob.api import RLJob
from rljob.api.spec import Health
from rljob.health.profiles import VLLM, Series, Signal

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
TOKENS = Signal("generation_tokens", "vllm:generation_tokens_total")
RUNNING = Signal("requests_running", "vllm:num_requests_running")
SLEEP = Signal("sleep_state", "vllm:engine_sleep_state", (("sleep_state", "awake"),))


def handler(make: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Handler:
    """A lambda returning a coroutine, as the async handler aiohttp wants."""

    async def handle(request: web.Request) -> web.StreamResponse:
        return await make(request)

    return handle


@contextlib.asynccontextmanager
async def serve(routes: dict[str, Handler]) -> AsyncIterator[str]:
    app = web.Application()
    for path, route in routes.items():
        app.router.add_route("*", path, handler(route))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def matrix(*series: Any) -> dict[str, Any]:  # Any: hostile answers hold anything
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def item(pod: str, values: Any, namespace: str = "ns1", **labels: str) -> dict[str, Any]:
    metric = {"__name__": "m", "namespace": namespace, "pod": pod, **labels}
    return {"metric": metric, "values": values}


def rejected(kind: str, source: str = "prometheus") -> float:
    value = REGISTRY.get_sample_value(
        "rljob_health_rejected_total", {"source": source, "kind": kind}
    )
    return value or 0.0


def queries(source: str, signal: str, outcome: str) -> float:
    value = REGISTRY.get_sample_value(
        "rljob_health_queries_total", {"source": source, "signal": signal, "outcome": outcome}
    )
    return value or 0.0


class Recorder:
    """A Prometheus stand-in that records each query form and answers with `answer(form)`."""

    def __init__(self, answer: Callable[[dict[str, str]], Any]) -> None:
        self.answer = answer
        self.forms: list[dict[str, str]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        body = await request.text()
        form = {key: values[0] for key, values in parse_qs(body).items()}
        self.forms.append(form)
        self.paths.append(request.path)
        self.headers.append(dict(request.headers))
        return web.json_response(self.answer(form))

    def routes(self) -> dict[str, Handler]:
        return {"/api/v1/query": self, "/api/v1/query_range": self}


# ------------------------------------------------------------------ query building


def test_regex_escape_covers_re2_metacharacters_only() -> None:
    assert regex_escape("rollout-0.a") == r"rollout-0\.a"
    assert regex_escape("a+b*c?(d)[e]{f}|g^h$i\\j") == r"a\+b\*c\?\(d\)\[e\]\{f\}\|g\^h\$i\\j"
    for name in ("rollout-0.a", "a+b*c?(d)[e]{f}|g^h$i\\j", "x y"):
        assert re.fullmatch(regex_escape(name), name)


def test_promql_string_escapes_quotes_backslashes_and_newlines() -> None:
    assert promql_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_selector_names_every_pod_and_namespace_escaped() -> None:
    selector = series_selector(
        SLEEP, {"ns1": ["rollout-0.x", "rollout-1"], "ns.2": ["p"], "empty": []}
    )
    assert selector == (
        '{__name__="vllm:engine_sleep_state", namespace=~"ns\\\\.2|ns1", '
        'pod=~"p|rollout-0\\\\.x|rollout-1", sleep_state="awake"}'
    )
    ranged = range_selector(TOKENS, {"ns": ["a"]}, 45.2, pod_label="kpod", namespace_label="kns")
    assert ranged == '{__name__="vllm:generation_tokens_total", kns=~"ns", kpod=~"a"}[45200ms]'


# ------------------------------------------------------------------ Prometheus


async def test_one_query_per_signal_for_all_pods_of_all_jobs() -> None:
    def answer(form: dict[str, str]) -> Any:
        name = re.search(r'__name__="([^"]+)"', form["query"])
        assert name is not None
        # As Prometheus answers: the selector's exact matchers hold on every series.
        exact = dict(re.findall(r'([a-z_]+)="([^"]*)"', form["query"]))
        labels = {k: v for k, v in exact.items() if k != "__name__"}
        result = [
            item(
                pod,
                [[100.0, "1"], [101.5, "2"]],
                namespace=namespace,
                __name__=name.group(1),
                **labels,
            )
            for namespace in ("ns1", "ns2")
            for pod in ("a", "b", "c")
        ]
        return matrix(*result)

    recorder = Recorder(answer)
    wanted = {"ns1": {"a", "b"}, "ns2": {"c"}}  # three jobs' pods
    async with serve(recorder.routes()) as url:
        source = PrometheusSource(url)
        collected = await source.collect(
            {TOKENS: wanted, RUNNING: wanted, SLEEP: {"ns1": {"a"}}}, lookback=45, at=1000.0
        )
        await source.close()
    assert len(recorder.forms) == 3
    assert {path for path in recorder.paths} == {"/api/v1/query"}
    tokens = next(form for form in recorder.forms if "generation_tokens" in form["query"])
    assert tokens["time"] == "1000.000"
    assert tokens["query"].endswith("[45000ms]")
    assert 'pod=~"a|b|c"' in tokens["query"]
    assert 'namespace=~"ns1|ns2"' in tokens["query"]
    data = collected[TOKENS]
    assert isinstance(data, dict)
    # The regexes form a cross product: ns2/a, ns2/b and ns1/c were not asked for.
    assert set(data) == {("ns1", "a"), ("ns1", "b"), ("ns2", "c")}
    assert data["ns1", "a"] == [Series((), ((100.0, 1.0), (101.5, 2.0)))]
    sleep = collected[SLEEP]
    assert isinstance(sleep, dict)
    assert set(sleep) == {("ns1", "a")}


WORKING_SET = Signal(
    "memory_working_set", "container_memory_working_set_bytes", (("container", ""),)
)


async def test_an_empty_matcher_selects_the_series_without_the_label() -> None:
    """cAdvisor's pod cgroup series has container="", which Prometheus stores as no label: the
    selector asks for container="" and the answer's series without the label are kept, those
    of the pod's containers (should an answer carry them) dropped as unmatched."""
    answer = matrix(
        item("a", [[100.0, "1000"]], __name__=WORKING_SET.metric, id="/kubepods/pod1"),
        item("a", [[100.0, "600"]], __name__=WORKING_SET.metric, container="vllm"),
        item("a", [[100.0, "700"]], __name__=WORKING_SET.metric, container=""),
    )
    recorder = Recorder(lambda form: answer)
    async with serve(recorder.routes()) as url:
        source = PrometheusSource(url)
        collected = await source.collect({WORKING_SET: {"ns1": {"a"}}}, lookback=45, at=1000.0)
        await source.close()
    assert 'container=""' in recorder.forms[0]["query"]
    data = collected[WORKING_SET]
    assert isinstance(data, dict)
    assert sorted(s.points[0][1] for s in data["ns1", "a"]) == [700.0, 1000.0]
    assert WORKING_SET.matches({"id": "/kubepods/pod1"})
    assert not WORKING_SET.matches({"container": "vllm"})
    assert SLEEP.matches({"sleep_state": "awake"}) and not SLEEP.matches({})


async def test_garbage_in_an_answer_is_dropped_and_counted() -> None:
    a_values = [[3.0, "3"], [1.0, "1"], [2.0, "NaN"], [4.0, "+Inf"], [5.0, "abc"]]
    answer = matrix(
        item("a", a_values),
        item("a", a_values),  # the same series again (a copy that differs drops both)
        item("b", [[1.0, "1"], ["x", "2"], [2.0], 7, [math.nan, "1"]], engine="0"),
        {"metric": {"namespace": "ns1"}, "values": [[1.0, "1"]]},  # no pod label
        {"metric": "nope", "values": []},
        "garbage",
        item("z", [[1.0, "1"]]),  # not asked for
        item("c", "not a list"),
    )
    before = {
        kind: rejected(kind)
        for kind in (
            "nan",
            "infinite",
            "non_numeric",
            "duplicate_series",
            "missing_labels",
            "malformed",
            "unrequested",
            "bad_timestamp",
        )
    }
    async with serve(Recorder(lambda _: answer).routes()) as url:
        source = PrometheusSource(url)
        data = await source.raw_samples(TOKENS, {"ns1": {"a", "b", "c"}}, 30)
        await source.close()
    assert data == {
        ("ns1", "a"): [Series((), ((1.0, 1.0), (3.0, 3.0)))],
        ("ns1", "b"): [Series((("engine", "0"),), ((1.0, 1.0),))],
    }
    grew = {kind: rejected(kind) - count for kind, count in before.items()}
    assert grew == {
        "nan": 1,
        "infinite": 1,
        "non_numeric": 1,
        "duplicate_series": 1,
        "missing_labels": 1,
        "malformed": 5,  # a short pair, a number, two non-object items, a non-list values
        "unrequested": 1,
        "bad_timestamp": 2,
    }


async def _raw_samples_against(handler: Handler, **options: Any) -> dict[Any, Any]:
    async with serve({"/api/v1/query": handler}) as url:
        source = PrometheusSource(url, **options)
        try:
            return await source.raw_samples(TOKENS, {"ns1": {"a"}}, 30)
        finally:
            await source.close()


async def _json(request: web.Request, payload: Any, status: int = 200) -> web.Response:
    return web.json_response(payload, status=status)


async def _redirect(request: web.Request) -> web.Response:
    return web.Response(status=302, headers={"Location": "http://example.invalid/"})


async def _text(request: web.Request, text: str, **kwargs: Any) -> web.Response:
    return web.Response(text=text, **kwargs)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda r: _text(r, "<html>login</html>", content_type="text/html"),
            SourceError,
            "not application/json",
        ),
        (lambda r: _text(r, "{not json", content_type="application/json"), SourceError, "JSON"),
        (
            lambda r: _text(r, "[" * 100_000, content_type="application/json"),
            SourceError,
            "JSON",
        ),
        (
            lambda r: _json(r, {"status": "error", "errorType": "bad_data", "error": "parse"}, 400),
            SourceError,
            "HTTP 400: bad_data: parse",
        ),
        (lambda r: _json(r, {"status": "error"}, 503), SourceUnavailable, "HTTP 503"),
        (lambda r: _json(r, {"status": "error", "error": "x"}), SourceError, "query failed"),
        (
            lambda r: _json(r, {"status": "success", "data": {"resultType": "scalar"}}),
            SourceError,
            "neither a matrix nor a vector",
        ),
        (lambda r: _json(r, [1, 2]), SourceError, "not a JSON object"),
        (
            _redirect,
            SourceError,
            "HTTP 302",
        ),
    ],
)
async def test_hostile_answers_end_in_a_typed_error(
    make: Handler, error: type[SourceError], match: str
) -> None:
    with pytest.raises(error, match=match):
        await _raw_samples_against(make)


SECRET = "internal-secret-4711"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda r: _text(r, f"<p>{SECRET}</p>", status=404), id="an-error-page"),
        pytest.param(lambda r: _text(r, SECRET, status=500), id="a-plain-5xx-body"),
        pytest.param(
            lambda r: _json(r, {"errorType": {"x": SECRET}, "error": SECRET}, 400),
            id="an-envelope-whose-errorType-is-not-a-string",
        ),
        pytest.param(
            lambda r: _json(r, {"status": "error", "errorType": 1, "error": [SECRET]}),
            id="a-200-error-envelope-of-other-types",
        ),
        pytest.param(lambda r: _text(r, "{}", content_type=f"text/{SECRET}"), id="a-content-type"),
        pytest.param(
            lambda r: _json(r, {"status": "success", "data": {"resultType": SECRET}}),
            id="a-result-type",
        ),
    ],
)
async def test_nothing_of_an_answer_is_reflected_but_status_and_prometheus_error_fields(
    make: Handler,
) -> None:
    with pytest.raises(SourceError) as caught:
        await _raw_samples_against(make)
    assert SECRET not in str(caught.value)


async def test_huge_bodies_are_refused_declared_or_streamed() -> None:
    big = json.dumps(matrix(item("a", [[1.0, "1"]] * 20_000))).encode()

    async def declared(request: web.Request) -> web.Response:
        return web.Response(body=big, content_type="application/json")

    async def streamed(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(big), 4096):
            await response.write(big[start : start + 4096])
        await response.write_eof()
        return response

    for handler in (declared, streamed):
        with pytest.raises(SourceError, match="limit"):
            await _raw_samples_against(handler, max_body=64 * 1024)
    # Within the limit the same answer parses.
    data = await _raw_samples_against(declared)
    assert len(data["ns1", "a"][0].points) == 1


async def test_slow_and_unreachable_sources_are_unavailable() -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response(matrix())

    before = queries("prometheus", TOKENS.name, "unavailable")
    with pytest.raises(SourceUnavailable, match="no answer within"):
        await _raw_samples_against(slow, timeout=0.3)
    release.set()
    assert queries("prometheus", TOKENS.name, "unavailable") == before + 1

    async with serve({}) as url:
        dead = url  # the server is gone after the block
    source = PrometheusSource(dead, timeout=2)
    with pytest.raises(SourceUnavailable):
        await source.raw_samples(TOKENS, {"ns1": {"a"}}, 30)
    collected = await source.collect({TOKENS: {"ns1": {"a"}}}, lookback=30, at=1.0)
    assert isinstance(collected[TOKENS], SourceUnavailable)
    await source.close()


async def test_range_query_for_backfill() -> None:
    recorder = Recorder(lambda _: matrix(item("a", [[10.0, "1"], [40.0, "2"]])))
    async with serve(recorder.routes()) as url:
        source = PrometheusSource(url)
        data = await source.range_samples(TOKENS, {"ns1": {"a"}}, 0.0, 2_000_000.0, 30.0)
        history = await source.history({TOKENS: {"ns1": {"a"}}}, start=0, end=60, step=30)
        await source.close()
    assert recorder.paths == ["/api/v1/query_range", "/api/v1/query_range"]
    form = recorder.forms[0]
    assert form["query"] == '{__name__="vllm:generation_tokens_total", namespace=~"ns1", pod=~"a"}'
    assert (form["start"], form["end"]) == ("0.000", "2000000.000")
    assert float(form["step"]) == 200.0  # widened: at most 10,000 points per series
    assert data["ns1", "a"][0].points == ((10.0, 1.0), (40.0, 2.0))
    assert recorder.forms[1]["step"] == "30.000"
    assert isinstance(history[TOKENS], dict)


async def test_headers_and_bearer_token_are_sent_and_the_token_is_cached() -> None:
    recorder = Recorder(lambda _: matrix())
    reads = 0

    async def token() -> str:
        nonlocal reads
        reads += 1
        return "s3cret"

    async with serve(recorder.routes()) as url:
        source = PrometheusSource(url, headers={"X-Scope-OrgID": "team-a"}, token_provider=token)
        await source.collect({TOKENS: {"ns": {"a"}}, RUNNING: {"ns": {"a"}}}, lookback=30, at=1)
        await source.close()
        fixed = PrometheusSource(url, bearer_token="t0")
        await fixed.raw_samples(TOKENS, {"ns": {"a"}}, 30)
        await fixed.close()
    assert reads == 1
    assert all(h["Authorization"] == "Bearer s3cret" for h in recorder.headers[:2])
    assert all(h["X-Scope-OrgID"] == "team-a" for h in recorder.headers[:2])
    assert recorder.headers[2]["Authorization"] == "Bearer t0"

    async def broken() -> str:
        raise RuntimeError("secret not found")

    source = PrometheusSource("http://127.0.0.1:9", token_provider=broken)
    with pytest.raises(SourceUnavailable, match="bearer token unavailable: secret not found"):
        await source.raw_samples(TOKENS, {"ns": {"a"}}, 30)
    await source.close()


async def test_no_pods_means_no_query() -> None:
    source = PrometheusSource("http://127.0.0.1:9")
    assert await source.raw_samples(TOKENS, {"ns": set()}, 30) == {}
    assert await source.range_samples(TOKENS, {}, 0, 10, 1) == {}
    await source.close()


# ------------------------------------------------------------------ direct scrape

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 7.0
# HELP vllm:num_requests_running_by_me something else
vllm:num_requests_running_by_me{engine="0"} 99.0
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine="0",sleep_state="awake"} 1.0
vllm:engine_sleep_state{engine="0",sleep_state="weights_offloaded"} 0.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0
vllm:generation_tokens_created{engine="0",model_name="m"} 1.7e9
python_gc_objects_collected_total{generation="0"} 1.0
"""


def test_prefilter_keeps_only_sample_lines_of_wanted_metrics() -> None:
    kept = prefilter(PAGE, {"vllm:num_requests_running", "vllm:generation_tokens_total"})
    assert kept == [
        'vllm:num_requests_running{engine="0",model_name="m"} 7.0',
        'vllm:num_requests_running_by_me{engine="0"} 99.0',  # dropped after parsing
        'vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0',
    ]
    assert prefilter(PAGE, set()) == []


async def test_direct_scrape_parses_only_prefiltered_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real = text_string_to_metric_families

    def spy(text: str) -> Any:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(direct, "text_string_to_metric_families", spy)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE + "x" * 1000 + "\n", content_type="text/plain")

    async with serve({"/metrics": page}) as url:
        address = url.removeprefix("http://")
        source = DirectSource(lambda ns, pod: address, clock=lambda: 500.0)
        collected = await source.collect(
            {TOKENS: {"ns": {"a"}}, RUNNING: {"ns": {"a"}}, SLEEP: {"ns": {"a"}}},
            lookback=30,
            at=500.0,
        )
        await source.close()
    assert len(parsed) == 1
    assert "python_gc" not in parsed[0]
    assert "# TYPE" not in parsed[0]
    assert "_created" not in parsed[0]
    tokens, running, sleep = (collected[s] for s in (TOKENS, RUNNING, SLEEP))
    assert tokens == {
        ("ns", "a"): [Series((("engine", "0"), ("model_name", "m")), ((500.0, 1234.0),))]
    }
    assert running == {
        ("ns", "a"): [Series((("engine", "0"), ("model_name", "m")), ((500.0, 7.0),))]
    }
    assert sleep == {
        ("ns", "a"): [Series((("engine", "0"), ("sleep_state", "awake")), ((500.0, 1.0),))]
    }


async def test_direct_scrape_survives_garbage_lines_and_bad_values() -> None:
    text = (
        'vllm:num_requests_running{engine="0"} 7\n'
        'vllm:num_requests_running{engine="1" 3\n'  # broken label set
        'vllm:num_requests_running{engine="2"} NaN\n'
        'vllm:num_requests_running{engine="3"} +Inf\n'
        'vllm:num_requests_running{engine="0"} 7\n'  # duplicate series (differing: both go)
        'vllm:num_requests_running{engine="4"} twelve\n'
    )

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    before = {k: rejected(k, "direct") for k in ("unparsable_line", "nan", "infinite")}
    before_dup = rejected("duplicate_series", "direct")
    async with serve({"/metrics": page}) as url:
        source = DirectSource(lambda ns, pod: f"{url}/metrics", clock=lambda: 1.0)
        collected = await source.collect({RUNNING: {"ns": {"a"}}}, lookback=30, at=1.0)
        await source.close()
    assert collected[RUNNING] == {("ns", "a"): [Series((("engine", "0"),), ((1.0, 7.0),))]}
    assert rejected("unparsable_line", "direct") - before["unparsable_line"] == 2
    assert rejected("nan", "direct") - before["nan"] == 1
    assert rejected("infinite", "direct") - before["infinite"] == 1
    assert rejected("duplicate_series", "direct") - before_dup == 1


async def test_direct_scrape_bounds_concurrency_and_times_out_per_pod() -> None:
    active = peak = 0
    release = asyncio.Event()

    async def page(request: web.Request) -> web.Response:
        nonlocal active, peak
        pod = request.query["pod"]
        if pod == "hung":
            await release.wait()
        if pod == "html":
            return web.Response(text="<html/>", content_type="text/html")
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.02)
        active -= 1
        return web.Response(text=f'vllm:num_requests_running{{pod="{pod}"}} 1\n')

    pods = {f"p{i}" for i in range(20)} | {"hung", "html", "nowhere"}
    async with serve({"/metrics": page}) as url:

        def resolve(namespace: str, pod: str) -> str | None:
            return None if pod == "nowhere" else f"{url}/metrics?pod={pod}"

        source = DirectSource(resolve, concurrency=4, timeout=0.5)
        before = queries("direct", "page", "unavailable")
        collected = await source.collect({RUNNING: {"ns": pods}}, lookback=30, at=1.0)
        release.set()
        await source.close()
    data = collected[RUNNING]
    assert isinstance(data, dict)
    assert set(data) == {("ns", f"p{i}") for i in range(20)}
    assert peak <= 4
    assert queries("direct", "page", "unavailable") - before == 1  # the hung pod


async def test_a_pod_with_two_pages_gives_the_samples_of_every_page_that_answers() -> None:
    """A trainer pod's SDK page and its colocated engines' page: merged, and a page that does
    not answer (the SDK runs on the driver's pod only) costs only its own samples."""

    async def sdk(request: web.Request) -> web.Response:
        return web.Response(text='vllm:num_requests_running{engine="sdk"} 1\n')

    async def engines(request: web.Request) -> web.Response:
        return web.Response(text='vllm:num_requests_running{WorkerId="w1"} 4\n')

    async with serve({"/sdk": sdk, "/engines": engines}) as url:
        pages = {"both": ("/sdk", "/engines"), "engines-only": ("/down", "/engines")}

        def resolve(namespace: str, pod: str) -> tuple[str, ...]:
            return tuple(f"{url}{path}" for path in pages[pod])

        source = DirectSource(resolve, clock=lambda: 1.0)
        collected = await source.collect({RUNNING: {"ns": set(pages)}}, lookback=30, at=1.0)
        await source.close()
    data = collected[RUNNING]
    assert isinstance(data, dict)
    assert {pod: sorted(s.labels for s in series) for (_, pod), series in data.items()} == {
        "both": [(("WorkerId", "w1"),), (("engine", "sdk"),)],
        "engines-only": [(("WorkerId", "w1"),)],
    }


async def test_direct_scrape_of_no_reachable_pod_is_unavailable() -> None:
    source = DirectSource(lambda ns, pod: "127.0.0.1:9", timeout=1)
    collected = await source.collect({RUNNING: {"ns": {"a", "b"}}}, lookback=30, at=1.0)
    assert isinstance(collected[RUNNING], SourceUnavailable)
    assert source.supports_history is False
    assert await source.history({RUNNING: {"ns": {"a"}}}, start=0, end=1, step=1) == {RUNNING: {}}
    await source.close()


@dataclass(frozen=True)
class _Pod:
    name: str
    ip: str = ""
    metrics_port: int | None = None


def _addressed_job(**roles: Any) -> RLJob:
    return RLJob.model_validate(
        {
            "apiVersion": "rljob.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {
                "image": "img:1",
                "roles": {
                    "rollout": {"engine": "vllm", "replicas": 1},
                    "trainer": {"nodes": 1},
                    **roles,
                },
            },
        }
    )


GANG_RAY = {"trainer": {"nodes": 2, "launcher": "ray", "command": ["d"], "engines": {}}}
GANG_HTTP = {"trainer": {"nodes": 2, "engines": {"exporter": "engine", "port": 8100, "path": "/e"}}}
GANG_PLUGIN = {"trainer": {"nodes": 2, "engines": {"exporter": "plugin", "pages": 3}}}


@pytest.mark.parametrize(
    ("roles", "role", "pod", "urls"),
    [
        pytest.param(
            {},
            "rollout",
            _Pod("a", "10.0.0.7", 8000),
            ("http://10.0.0.7:8000/metrics",),
            id="engine",
        ),
        pytest.param(
            {"verifier": {"replicas": 1, "metrics": {"port": 9100, "path": "/m"}}},
            "verifier",
            _Pod("a", "10.0.0.7", 9100),
            ("http://10.0.0.7:9100/m",),
            id="role-metrics-path",
        ),
        pytest.param(
            {}, "rollout", _Pod("a", "fd00::7", 8000), ("http://[fd00::7]:8000/metrics",), id="ipv6"
        ),
        pytest.param({}, "rollout", _Pod("a", "", 8000), None, id="no-ip-yet"),
        pytest.param({}, "rollout", _Pod("a", "10.0.0.7", None), None, id="no-metrics-port"),
        pytest.param({}, "rollout", _Pod("a", "not-an-ip", 8000), None, id="garbage-ip"),
        pytest.param(
            GANG_RAY,
            "trainer",
            _Pod("a", "10.0.0.7", 9400),
            ("http://10.0.0.7:9400/metrics", "http://10.0.0.7:8080/metrics"),
            id="gang-engines-through-ray",
        ),
        pytest.param(
            GANG_HTTP,
            "trainer",
            _Pod("a", "10.0.0.7", None),
            ("http://10.0.0.7:8100/e",),
            id="gang-engines-own-port-without-sdk-port",
        ),
        pytest.param(
            GANG_PLUGIN,
            "trainer",
            _Pod("a", "10.0.0.7", 9400),
            (
                "http://10.0.0.7:9400/metrics",
                "http://10.0.0.7:9410/metrics",
                "http://10.0.0.7:9411/metrics",
                "http://10.0.0.7:9412/metrics",
            ),
            id="gang-engines-one-plugin-page-per-engine-process",
        ),
    ],
)
def test_pod_addresses_resolve_observed_pods(
    roles: dict[str, Any], role: str, pod: _Pod, urls: tuple[str, ...] | None
) -> None:
    addresses = PodAddresses()
    addresses.update(_addressed_job(**roles), {role: [pod]})
    assert addresses("ns", "a") == urls
    assert addresses("other", "a") is None


def test_pod_addresses_forget_pods_and_jobs_that_are_gone() -> None:
    addresses, job = PodAddresses(), _addressed_job()
    addresses.update(job, {"rollout": [_Pod("a", "10.0.0.1", 8000), _Pod("b", "10.0.0.2", 8000)]})
    addresses.update(job, {"rollout": [_Pod("b", "10.0.0.9", 8000)]})
    assert addresses("ns", "a") is None
    assert addresses("ns", "b") == ("http://10.0.0.9:8000/metrics",)
    addresses.forget(("ns", "j"))
    assert len(addresses) == 0


# ------------------------------------------------------------------ keys and the factory


def test_source_key_from_the_spec() -> None:
    default = SourceKey("prometheus", url="http://prom:9090", default=True)
    assert source_key(Health(), "ns", default) is default
    assert source_key(Health(), "ns", None) is None
    direct = Health.model_validate({"source": {"direct": {}}})
    assert source_key(direct, "ns", default) == SourceKey("direct")
    spec = Health.model_validate(
        {
            "source": {
                "prometheus": {
                    "url": "http://prom:9090/",
                    "headers": {"b": "2", "a": "1"},
                    "podLabel": "kpod",
                }
            }
        }
    )
    key = source_key(spec, "ns", None)
    assert key == SourceKey(
        "prometheus",
        url="http://prom:9090",
        headers=(("a", "1"), ("b", "2")),
        pod_label="kpod",
    )
    assert "spec.health.source" in key.describe() and "default" in default.describe()


def test_a_token_secret_cannot_be_named_in_the_spec() -> None:
    """The operator never reads Secrets through the API: token-file auth replaces it."""
    with pytest.raises(ValidationError, match="bearerTokenSecret"):
        Health.model_validate(
            {"source": {"prometheus": {"url": "http://p", "bearerTokenSecret": {"name": "t"}}}}
        )


async def test_factory_builds_each_kind(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    sources = MetricsSources(direct_resolver=lambda ns, pod: None)
    prometheus = sources(SourceKey("prometheus", url="http://p", token_file=str(token)))
    assert isinstance(prometheus, PrometheusSource)
    assert await prometheus._token() == "s3cret"
    missing = sources(SourceKey("prometheus", url="http://p", token_file=str(tmp_path / "none")))
    assert isinstance(missing, PrometheusSource)
    with pytest.raises(SourceUnavailable, match="bearer token unavailable"):
        await missing._token()
    assert isinstance(sources(SourceKey("direct")), DirectSource)
    bare = MetricsSources()
    unconfigured = bare(SourceKey("direct"))
    assert isinstance(unconfigured, UnconfiguredSource)
    collected = await unconfigured.collect({RUNNING: {"ns": {"a"}}}, lookback=1, at=1)
    assert isinstance(collected[RUNNING], SourceUnavailable)
    assert VLLM.signals()  # the profile the scheduler asks for


@pytest.mark.parametrize("exporter", ["vllm", "sglang"])
async def test_simulated_engine_pages_become_engine_samples(exporter: str) -> None:
    """The test bed's vLLM and SGLang pages, scraped directly, give the engine's own numbers."""
    from rljob.dev.sim.models import EngineModel
    from rljob.dev.sim.profiles import EngineProfile as SimEngineProfile
    from rljob.health.profiles import ENGINE_PROFILES, engine_samples

    model = EngineModel(SimEngineProfile(exporter=exporter), seed="e", start=1000.0)
    model.advance(1030.0)

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=model.render(), content_type="text/plain")

    profile = ENGINE_PROFILES[exporter]
    signals = profile.signals()
    async with serve({"/metrics": page}) as url:
        source = DirectSource(lambda ns, pod: f"{url}/metrics", clock=lambda: 1030.0)
        collected = await source.collect(
            {signal: {"ns": {"e"}} for signal in signals.values()}, lookback=30, at=1030.0
        )
        await source.close()
    series = {}
    for name, signal in signals.items():
        data = collected[signal]
        assert isinstance(data, dict)
        series[name] = data.get(("ns", "e"), [])
    (sample,) = engine_samples(profile, series, 15.0)
    assert sample.t == 1030.0
    assert sample.generated_tokens_total == math.floor(model.tokens)
    assert sample.running == model.running
    assert sample.saturated
    assert sample.prefix_hits_total is not None and sample.prefix_queries_total is not None
    # The operating point: a histogram's _sum and _count are plain series to the scrape.
    assert sample.finished_requests_total == model.finished > 0
    assert sample.finished_prompt_tokens_total == model.finished_prompt
    assert sample.finished_generation_tokens_total == model.finished_generation
    assert sample.token_latency_count_total == math.floor(model.operating.latency.count)
    assert sample.token_latency_seconds_total == pytest.approx(model.operating.latency.total)
    if exporter == "vllm":
        assert sample.waiting == model.waiting
        assert sample.kv_usage == pytest.approx(model.kv_usage)
        assert sample.sleeping is False
        assert sample.preemptions_total is not None
    else:  # SGLang's page shows its last stats log, and whether it changes tells pause apart
        assert sample.gauges is not None and sample.kv_usage is not None
        assert sample.sleeping is None and sample.paused is None
