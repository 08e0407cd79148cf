"""The engine side of weight currency: a rollout engine reports the policy generation it serves
as the gauge `rljob_engine_policy_generation`, which the operator reads from the engine's
metrics page to open the `rljob.io/policy-current` readiness gate (weightSync: Gated) and to
publish generations in the roster. Standard library only; prometheus_client is imported only
by `register()`.

Three ways, docs/weight-sync.md says which fits vLLM and SGLang:

    # 1. In the process that applies a weight update (e.g. a vLLM worker extension):
    set_policy_generation(42)
    # 2. On an engine page that serves prometheus_client's registry, from a process that
    #    writes to it: register() once, then set_policy_generation() as above.
    register()
    # 3. A tiny exporter in the pod that serves the engine's own page plus the gauge, the
    #    generation set here or read from the engine's weight version:
    serve(9401, engine_metrics_url="http://127.0.0.1:30000/metrics",
          generation=weight_version_from("http://127.0.0.1:30000/get_weight_version"))

or as a process of its own: `python -m rljob.sdk.engine_generation --port 9401
--weight-version-url URL [--engine-metrics URL]`; then point spec.roles.rollout.metrics.port
at 9401."""

from __future__ import annotations

import argparse
import json
import logging
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

METRIC = "rljob_engine_policy_generation"
HELP = "Generation of the policy weights this engine serves."
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FETCH_TIMEOUT_SECONDS = 5.0
GenerationSource = Callable[[], int | None]


class _Generation:
    """This process's generation and the registered gauges that mirror it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: int | None = None
        self.gauges: dict[int, Any] = {}  # id(registry) -> prometheus_client Gauge


_state = _Generation()


def set_policy_generation(generation: int) -> None:
    """The engine now serves this policy generation (call it once the update is applied)."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise ValueError(f"a policy generation is an int >= 0, not {generation!r}")
    with _state.lock:
        _state.value = generation
        for gauge in _state.gauges.values():
            gauge.set(generation)


def policy_generation() -> int | None:
    """What set_policy_generation() last set in this process, if anything."""
    with _state.lock:
        return _state.value


def register(registry: Any = None) -> None:
    """Adds the gauge to prometheus_client's default registry (or `registry`); idempotent.
    In prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR set before
    prometheus_client was first imported) the value goes to that directory, and a page
    built with MultiProcessCollector shows the most recent value any process set."""
    from prometheus_client import REGISTRY, Gauge

    target = registry if registry is not None else REGISTRY
    with _state.lock:
        if id(target) in _state.gauges:
            return
        gauge = Gauge(METRIC, HELP, registry=target, multiprocess_mode="mostrecent")
        if _state.value is not None:
            gauge.set(_state.value)
        _state.gauges[id(target)] = gauge


def weight_version_from(url: str) -> GenerationSource:
    """A generation source reading an engine's own weight version: a GET of `url` answering
    {"weight_version": "<int>"} (SGLang's /get_weight_version, vLLM's dev-mode /weight_info).
    None while the engine is unreachable or its version is not a whole number."""

    def read() -> int | None:
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response:
                version = json.loads(response.read()).get("weight_version")
            generation = int(str(version))
        except (OSError, ValueError, AttributeError):
            return None
        return generation if generation >= 0 else None

    return read


def render(generation: int | None) -> str:
    """The gauge in the Prometheus text format (nothing when no generation is known)."""
    if generation is None:
        return ""
    return f"# HELP {METRIC} {HELP}\n# TYPE {METRIC} gauge\n{METRIC} {generation}\n"


def page(engine_metrics_url: str | None, generation: GenerationSource) -> str:
    """The engine's page (if any) followed by the gauge, unless the engine's page has it.
    Raises OSError when the engine's page cannot be read: the scrape fails as the engine's own
    would."""
    engine = ""
    if engine_metrics_url:
        with urllib.request.urlopen(engine_metrics_url, timeout=FETCH_TIMEOUT_SECONDS) as answer:
            engine = answer.read().decode()
        if engine and not engine.endswith("\n"):
            engine += "\n"
    if _has_metric(engine):
        return engine
    return engine + render(generation())


def _has_metric(text: str) -> bool:
    return any(line.split("{")[0].split(" ")[0] == METRIC for line in text.splitlines())


class Exporter:
    """A running exporter: the port it listens on, and stop()."""

    def __init__(self, server: ThreadingHTTPServer) -> None:
        self._server = server
        self.port: int = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, name="rljob-engine-generation", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(FETCH_TIMEOUT_SECONDS)


def serve(
    port: int,
    *,
    addr: str = "0.0.0.0",
    engine_metrics_url: str | None = None,
    generation: GenerationSource = policy_generation,
) -> Exporter:
    """Serves GET /metrics on `port` (0 picks one) in a daemon thread: the engine's page at
    engine_metrics_url (if given) plus the gauge, whose value `generation` returns (by
    default what set_policy_generation() set in this process)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass  # a scrape every few seconds is not news

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            try:
                body = page(engine_metrics_url, generation).encode()
            except OSError as exc:
                self.send_error(503, f"engine metrics unavailable: {exc}")
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    return Exporter(server)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rljob.sdk.engine_generation",
        description=f"Serve an engine's metrics page plus {METRIC}.",
    )
    parser.add_argument("--port", type=int, default=9401, help="port to serve /metrics on")
    parser.add_argument("--addr", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--engine-metrics", help="the engine's own metrics URL to include")
    parser.add_argument(
        "--weight-version-url",
        required=True,
        help="the engine endpoint answering {'weight_version': ...} (the generation)",
    )
    args = parser.parse_args(argv)
    exporter = serve(
        args.port,
        addr=args.addr,
        engine_metrics_url=args.engine_metrics,
        generation=weight_version_from(args.weight_version_url),
    )
    log.info("serving %s on port %d", METRIC, exporter.port)
    threading.Event().wait()  # until the process is killed


if __name__ == "__main__":
    main()
