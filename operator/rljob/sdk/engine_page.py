"""One metrics page per vLLM engine process, for engines that run inside a framework's Ray actors
(verl, OpenRLHF, NeMo-RL) and serve no page of their own. rljob.sdk.vllm_plugin calls `serve`
when vLLM builds its stat loggers; this module holds what needs no vLLM.

vLLM's PrometheusStatLogger records into the process's default registry whenever an AsyncLLM
has a stat logger (vllm 0.33.0, vllm/v1/engine/async_llm.py: a plugin logger turns statistics
on; vllm/v1/metrics/loggers.py StatLoggerManager always adds PrometheusStatLogger). Nothing in
a Ray actor serves that registry: this does, on the first free port of
RLJOB_ENGINE_METRICS_PORT .. + RLJOB_ENGINE_METRICS_PAGES - 1, so several engine processes in
one pod never clash (a bind is atomic: the loser takes the next port). Each page's samples carry
`rljob_engine_page="<offset>"`, so two processes' `engine="0"` series stay apart when the
operator merges a pod's pages. Beside vLLM's registry each page serves the SDK's
`rljob_engine_process_tree_resident_bytes` (rljob.sdk.process_memory), the resident memory of
the engine process and its descendants (the engine core, the workers), read from /proc at each
scrape, for the operator's memory-growth detector. Without RLJOB_ENGINE_METRICS_PORT (set by the
operator for `engines.exporter: plugin`) nothing is served: an image with the SDK installed
behaves as before.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from rljob.sdk.process_memory import ProcessTreeMemory

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

PORT_ENV = "RLJOB_ENGINE_METRICS_PORT"
PAGES_ENV = "RLJOB_ENGINE_METRICS_PAGES"
PAGE_LABEL = "rljob_engine_page"
DEFAULT_PAGES = 1

log = logging.getLogger("rljob.sdk.engine_page")


class _Process:
    """This process's page: the port it serves, once it does."""

    lock = threading.Lock()
    served: int | None = None


def page_ports(env: dict[str, str] | os._Environ[str]) -> range:
    """The ports this pod's engine pages may take; empty when the operator asked for none."""
    raw_port, raw_pages = env.get(PORT_ENV, ""), env.get(PAGES_ENV, str(DEFAULT_PAGES))
    try:
        port, pages = int(raw_port), int(raw_pages)
    except ValueError:
        return range(0)
    if not 0 < port <= 65535 or pages < 1:
        return range(0)
    return range(port, min(port + pages, 65536))


class _Source(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class Relabelled:
    """A collector that gives every sample of `source` (a registry or a collector) one more
    label."""

    def __init__(self, source: _Source, name: str, value: str) -> None:
        self._source, self._name, self._value = source, name, value

    def collect(self) -> Iterable[Metric]:
        from prometheus_client.metrics_core import Metric

        for family in self._source.collect():
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = [
                sample._replace(labels={**sample.labels, self._name: self._value})
                for sample in family.samples
            ]
            yield copy


Start = Callable[[int, "CollectorRegistry"], Any]


def _start_http_server(port: int, registry: CollectorRegistry) -> Any:
    from prometheus_client import start_http_server

    return start_http_server(port, registry=registry)


def serve(
    source: CollectorRegistry | None = None, *, start: Start = _start_http_server
) -> int | None:
    """Serves `source` (the default registry) on the first free page port, once per process;
    the port, or None when none is configured or every one is taken (logged, never raised:
    an engine must not fail over its metrics)."""
    from prometheus_client import REGISTRY, CollectorRegistry

    with _Process.lock:
        if _Process.served is not None:
            return _Process.served
        ports = page_ports(os.environ)
        for port in ports:
            page = CollectorRegistry(auto_describe=False)
            offset = str(port - ports.start)
            page.register(Relabelled(source or REGISTRY, PAGE_LABEL, offset))
            page.register(Relabelled(ProcessTreeMemory(), PAGE_LABEL, offset))
            try:
                start(port, page)
            except OSError:
                continue
            _Process.served = port
            log.info("rljob: this engine process serves its vLLM metrics on :%d", port)
            return port
        if ports:
            log.warning(
                "rljob: every engine metrics port %s is taken", f"{ports.start}-{ports.stop - 1}"
            )
        return None


def reset_for_tests() -> None:
    with _Process.lock:
        _Process.served = None


__all__ = [
    "PAGES_ENV",
    "PAGE_LABEL",
    "PORT_ENV",
    "Relabelled",
    "page_ports",
    "reset_for_tests",
    "serve",
]
