"""rljob.sdk.engine_page: the ports an engine process may serve its page on, the label that keeps
two processes' series apart, and one page per process whichever ports are taken. The plugin as
vLLM loads it is tests/upstream/vllm/test_vllm_plugin.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from rljob.dev.sim import gang as sim_gang
from rljob.dev.sim import pods as sim_pods
from rljob.health.profiles import workloads
from rljob.reconcile import render
from rljob.sdk import engine_page
from rljob.sdk.engine_page import PAGE_LABEL, PAGES_ENV, PORT_ENV, Relabelled, page_ports, serve


@pytest.fixture(autouse=True)
def _fresh_process() -> Iterator[None]:
    engine_page.reset_for_tests()
    yield
    engine_page.reset_for_tests()


@pytest.mark.parametrize(
    ("env", "ports"),
    [
        pytest.param({}, range(0), id="not-asked-for"),
        pytest.param({PORT_ENV: "9410"}, range(9410, 9411), id="one-page-by-default"),
        pytest.param({PORT_ENV: "9410", PAGES_ENV: "4"}, range(9410, 9414), id="four-engines"),
        pytest.param({PORT_ENV: "65535", PAGES_ENV: "4"}, range(65535, 65536), id="clipped"),
        pytest.param({PORT_ENV: "x"}, range(0), id="garbage-port"),
        pytest.param({PORT_ENV: "9410", PAGES_ENV: "0"}, range(0), id="no-pages"),
        pytest.param({PORT_ENV: "0"}, range(0), id="port-zero"),
    ],
)
def test_page_ports(env: dict[str, str], ports: range) -> None:
    assert page_ports(env) == ports


def test_the_operator_uses_the_names_the_plugin_reads_and_writes() -> None:
    assert (render.ENGINE_PAGE_PORT_ENV, render.ENGINE_PAGES_ENV) == (PORT_ENV, PAGES_ENV)
    assert (sim_pods.ENGINE_PAGES_ENV, sim_gang.PAGE_LABEL) == (PAGES_ENV, PAGE_LABEL)
    assert workloads.ENGINE_PAGE_LABEL == PAGE_LABEL


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    gauge = Gauge("vllm:num_requests_running", "running", ["engine"], registry=registry)
    gauge.labels(engine="0").set(3)
    return registry


def test_every_sample_carries_the_page_label() -> None:
    page = CollectorRegistry(auto_describe=False)
    page.register(Relabelled(_registry(), PAGE_LABEL, "2"))

    samples = [s for family in page.collect() for s in family.samples]

    assert [(s.name, s.labels, s.value) for s in samples] == [
        ("vllm:num_requests_running", {"engine": "0", PAGE_LABEL: "2"}, 3.0)
    ]


class _Ports:
    """start_http_server's stand-in: some ports taken, the others recorded."""

    def __init__(self, taken: set[int]) -> None:
        self.taken, self.started = taken, list[tuple[int, Any]]()

    def __call__(self, port: int, registry: CollectorRegistry) -> None:
        if port in self.taken:
            raise OSError(98, "Address already in use")
        self.started.append((port, registry))


@pytest.mark.parametrize(
    ("taken", "served"),
    [
        pytest.param(set(), 9410, id="first-free"),
        pytest.param({9410, 9411}, 9412, id="two-engines-before-it"),
        pytest.param({9410, 9411, 9412}, None, id="all-taken"),
    ],
)
def test_a_process_takes_the_first_free_port_once(
    monkeypatch: pytest.MonkeyPatch, taken: set[int], served: int | None
) -> None:
    monkeypatch.setenv(PORT_ENV, "9410")
    monkeypatch.setenv(PAGES_ENV, "3")
    ports = _Ports(taken)

    first = serve(_registry(), start=ports)
    again = serve(_registry(), start=ports)

    assert first == served
    assert [port for port, _ in ports.started] == ([served] if served else [])
    if served is not None:
        assert again == served  # vLLM builds one logger per engine index: still one page
        (_, registry) = ports.started[0]
        # vLLM's registry, then the SDK's process-tree memory (tests/unit/sdk/test_process_memory)
        vllm, memory = registry.collect()
        assert vllm.samples[0].labels[PAGE_LABEL] == str(served - 9410)
        assert memory.samples[0].labels[PAGE_LABEL] == str(served - 9410)


def test_nothing_is_served_unless_the_operator_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PORT_ENV, raising=False)
    ports = _Ports(set())

    assert serve(_registry(), start=ports) is None
    assert ports.started == []
