"""Reading an operator's /metrics page: values of one series name, whole or summed by a label."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rljob.dev.scrape import HistogramReading, histogram_reading, metric_values, metric_values_by


def _page() -> bytes:
    registry = CollectorRegistry()
    wakes = Counter("rljob_reconcile_wakes", "Wakes.", ["cause"], registry=registry)
    wakes.labels("resync").inc(500)
    wakes.labels("own_write").inc(462)
    gc_seconds = Counter("rljob_gc_seconds", "GC.", ["generation"], registry=registry)
    gc_seconds.labels("0").inc(0.25)
    gc_seconds.labels("2").inc(0.5)
    return generate_latest(registry)


@contextlib.contextmanager
def _serving(page: bytes) -> Iterator[str]:
    """The URL of a /metrics endpoint on loopback that serves `page`."""

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


@pytest.fixture
def url() -> Iterator[str]:
    with _serving(_page()) as served:
        yield served


def test_values_of_a_name_whole_and_by_matcher(url: str) -> None:
    assert sum(metric_values(url, "rljob_gc_seconds_total")) == 0.75
    assert metric_values(url, "rljob_reconcile_wakes_total", 'cause="resync"') == [500.0]


def test_values_summed_by_a_label_in_page_order(url: str) -> None:
    assert metric_values_by(url, "rljob_reconcile_wakes_total", "cause") == {
        "resync": 500.0,
        "own_write": 462.0,
    }
    assert metric_values_by(url, "rljob_missing_total", "cause") == {}


def test_a_histogram_read_from_a_page_and_differenced() -> None:
    registry = CollectorRegistry()
    waits = Histogram(
        "rljob_reconcile_queue_seconds", "Waits.", ["urgency"], buckets=(0.1, 1), registry=registry
    )
    for seconds in (0.05, 0.5):
        waits.labels("user").observe(seconds)
    waits.labels("resync").observe(9)
    before = _served(generate_latest(registry), "user")
    waits.labels("user").observe(3)
    after = _served(generate_latest(registry), "user")
    assert (before.count, before.worst(), before.over(0.1)) == (2, 1.0, 1)
    window = after - before
    assert (window.count, window.mean(), window.worst()) == (1, 3.0, math.inf)


def test_a_histogram_without_labels_is_read_from_a_whole_page() -> None:
    registry = CollectorRegistry()
    lag = Histogram("rljob_event_loop_lag_seconds", "Lag.", buckets=(0.1,), registry=registry)
    Counter("rljob_gc_seconds", "GC.", ["generation"], registry=registry).labels("0").inc()
    lag.observe(0.5)
    with _serving(generate_latest(registry)) as url:
        reading = histogram_reading(url, "rljob_event_loop_lag_seconds")
    assert (reading.count, reading.over(0.1), reading.total) == (1, 1, 0.5)


def _served(page: bytes, urgency: str) -> HistogramReading:
    with _serving(page) as url:
        return histogram_reading(url, "rljob_reconcile_queue_seconds", f'urgency="{urgency}"')
