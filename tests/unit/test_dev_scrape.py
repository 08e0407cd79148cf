"""Reading an operator's /metrics page: values of one series name, whole or summed by a label."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from rljob.dev.scrape import metric_values, metric_values_by


def _page() -> bytes:
    registry = CollectorRegistry()
    wakes = Counter("rljob_reconcile_wakes", "Wakes.", ["cause"], registry=registry)
    wakes.labels("resync").inc(500)
    wakes.labels("own_write").inc(462)
    gc_seconds = Counter("rljob_gc_seconds", "GC.", ["generation"], registry=registry)
    gc_seconds.labels("0").inc(0.25)
    gc_seconds.labels("2").inc(0.5)
    return generate_latest(registry)


@pytest.fixture
def url() -> Iterator[str]:
    page = _page()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_values_of_a_name_whole_and_by_matcher(url: str) -> None:
    assert sum(metric_values(url, "rljob_gc_seconds_total")) == 0.75
    assert metric_values(url, "rljob_reconcile_wakes_total", 'cause="resync"') == [500.0]


def test_values_summed_by_a_label_in_page_order(url: str) -> None:
    assert metric_values_by(url, "rljob_reconcile_wakes_total", "cause") == {
        "resync": 500.0,
        "own_write": 462.0,
    }
    assert metric_values_by(url, "rljob_missing_total", "cause") == {}
