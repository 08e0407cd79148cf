"""The engine-side generation helper: the gauge on a prometheus_client registry (also in the
multiprocess mode SGLang always uses), and the exporter that serves an engine's own page plus
the gauge, its generation set in-process or read from the engine's weight version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rljob.sdk import engine_generation
from rljob.sdk.engine_generation import (
    METRIC,
    page,
    register,
    serve,
    set_policy_generation,
    weight_version_from,
)
from tests.unit.sdk.exposition import scrape

ENGINE_PAGE = "# HELP sglang:num_running_reqs running\n# TYPE sglang:num_running_reqs gauge\n"
ENGINE_PAGE += "sglang:num_running_reqs 3.0\n"


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_generation, "_state", engine_generation._Generation())


class FakeEngine:
    """An engine's metrics page and weight-version endpoint."""

    def __init__(self) -> None:
        self.page = ENGINE_PAGE
        self.version: object = "default"


@pytest.fixture
def engine() -> Iterator[tuple[FakeEngine, str]]:
    fake = FakeEngine()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/metrics":
                body = fake.page.encode()
            elif self.path == "/get_weight_version":
                body = json.dumps({"weight_version": fake.version}).encode()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


BAD = [
    pytest.param(-1, id="negative"),
    pytest.param(True, id="bool"),
    pytest.param(1.5, id="float"),
    pytest.param("3", id="string"),
]


@pytest.mark.parametrize("value", BAD)
def test_a_generation_is_a_whole_number(value: Any) -> None:
    with pytest.raises(ValueError, match="int >= 0"):
        set_policy_generation(value)


def test_a_registered_gauge_follows_the_generation() -> None:
    registry = CollectorRegistry()
    set_policy_generation(4)
    register(registry)
    register(registry)  # idempotent: a second Gauge would raise on the duplicate name
    assert scrape(registry).value(METRIC) == 4.0
    set_policy_generation(5)
    assert scrape(registry).value(METRIC) == 5.0
    assert scrape(registry).types[METRIC] == "gauge"


MULTIPROCESS_ENGINE = """
import sys
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from rljob.sdk.engine_generation import register, set_policy_generation
register()
set_policy_generation(int(sys.argv[1]))
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)  # what SGLang's /metrics serves
print(generate_latest(registry).decode())
"""


def test_in_multiprocess_mode_the_most_recent_value_reaches_the_shared_page(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    pages = [
        subprocess.run(
            [sys.executable, "-c", MULTIPROCESS_ENGINE, str(generation)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for generation in (9, 7)
    ]
    # Two processes wrote; the page shows the later one's value, not the larger.
    assert f"{METRIC} 9.0" in pages[0]
    assert f"{METRIC} 7.0" in pages[1]


GAUGE = f"# HELP {METRIC} {engine_generation.HELP}\n# TYPE {METRIC} gauge\n{METRIC} 3\n"
PAGES = [
    pytest.param(None, None, "", id="nothing-known"),
    pytest.param(None, 3, GAUGE, id="gauge-only"),
    pytest.param(ENGINE_PAGE, None, ENGINE_PAGE, id="engine-only"),
    pytest.param(ENGINE_PAGE, 3, ENGINE_PAGE + GAUGE, id="engine-then-gauge"),
    pytest.param(ENGINE_PAGE.rstrip("\n"), 3, ENGINE_PAGE + GAUGE, id="engine-page-unterminated"),
    pytest.param(f"{METRIC} 8\n", 3, f"{METRIC} 8\n", id="engine-has-it-already"),
    pytest.param(f'{METRIC}{{dp_rank="0"}} 8\n', 3, f'{METRIC}{{dp_rank="0"}} 8\n', id="labelled"),
]


@pytest.mark.parametrize(("engine_page", "generation", "expected"), PAGES)
def test_the_page_is_the_engines_plus_the_gauge(
    engine: tuple[FakeEngine, str], engine_page: str | None, generation: int | None, expected: str
) -> None:
    fake, base = engine
    if engine_page is not None:
        fake.page = engine_page
    url = f"{base}/metrics" if engine_page is not None else None
    assert page(url, lambda: generation) == expected


VERSIONS = [
    pytest.param("12", 12, id="numeric-string"),
    pytest.param(12, 12, id="number"),
    pytest.param("default", None, id="sglang-default"),
    pytest.param(None, None, id="null"),
    pytest.param("-1", None, id="negative"),
]


@pytest.mark.parametrize(("version", "generation"), VERSIONS)
def test_the_engines_weight_version_is_the_generation(
    engine: tuple[FakeEngine, str], version: object, generation: int | None
) -> None:
    fake, base = engine
    fake.version = version
    assert weight_version_from(f"{base}/get_weight_version")() == generation


def test_an_unreachable_engine_has_no_generation() -> None:
    assert weight_version_from("http://127.0.0.1:1/get_weight_version")() is None


def test_the_exporter_serves_the_engine_page_with_the_generation(
    engine: tuple[FakeEngine, str],
) -> None:
    fake, base = engine
    fake.version = "6"
    exporter = serve(
        0,
        addr="127.0.0.1",
        engine_metrics_url=f"{base}/metrics",
        generation=weight_version_from(f"{base}/get_weight_version"),
    )
    try:
        status, text = get(f"http://127.0.0.1:{exporter.port}/metrics")
        assert status == 200
        assert "sglang:num_running_reqs 3.0" in text
        assert f"{METRIC} 6" in text
        assert get(f"http://127.0.0.1:{exporter.port}/other")[0] == 404
    finally:
        exporter.stop()


def test_the_exporter_fails_the_scrape_while_the_engine_page_is_down() -> None:
    exporter = serve(0, addr="127.0.0.1", engine_metrics_url="http://127.0.0.1:1/metrics")
    try:
        assert get(f"http://127.0.0.1:{exporter.port}/metrics")[0] == 503
    finally:
        exporter.stop()


def test_by_default_the_exporter_serves_what_this_process_set() -> None:
    exporter = serve(0, addr="127.0.0.1")
    try:
        assert get(f"http://127.0.0.1:{exporter.port}/metrics") == (200, "")
        set_policy_generation(2)
        status, text = get(f"http://127.0.0.1:{exporter.port}/metrics")
        assert (status, text.splitlines()[-1]) == (200, f"{METRIC} 2")
    finally:
        exporter.stop()
