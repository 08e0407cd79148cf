"""Under launcher ray the trainer's own ports must leave Ray's alone: a metrics.port Ray binds,
fixed or in its worker range, and a gang engines' own engines.port on a fixed Ray port, are
refused by the model and by the CRD alike at that field; other ports, and other launchers, pass
both."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api.ray_ports import RAY_PORTS
from tests.unit.api.verdicts import both_refusals, model_messages, with_trainer

METRICS_PORT = "spec.roles.trainer.metrics.port"
ENGINES_PORT = "spec.roles.trainer.engines.port"
ENGINES_EXPORTER = "spec.roles.trainer.engines.exporter"
ENGINES_PAGES = "spec.roles.trainer.engines.pages"
RAY = {"launcher": "ray", "command": ["python", "driver.py"]}


def ray_trainer(**fields: Any) -> dict[str, Any]:
    return with_trainer(**RAY, **fields)


@pytest.mark.parametrize(
    ("port", "refused_at"),
    [
        pytest.param(8080, {METRICS_PORT}, id="ray-metrics-export-8080"),
        pytest.param(6379, {METRICS_PORT}, id="ray-gcs-6379"),
        pytest.param(10001, {METRICS_PORT}, id="ray-client-10001"),
        pytest.param(12000, {METRICS_PORT}, id="inside-worker-range-12000"),
        pytest.param(10002, {METRICS_PORT}, id="worker-range-start-10002"),
        pytest.param(19999, {METRICS_PORT}, id="worker-range-end-19999"),
        pytest.param(9000, set(), id="free-9000"),
        pytest.param(20000, set(), id="past-worker-range-20000"),
    ],
)
def test_ray_trainer_metrics_port(port: int, refused_at: set[str]) -> None:
    body = ray_trainer(metrics={"port": port})

    assert both_refusals(body) == (refused_at, refused_at)


@pytest.mark.parametrize(
    ("name", "port"), [pytest.param(name, port, id=name) for name, port in RAY_PORTS.values()]
)
def test_every_fixed_ray_port_is_refused_as_metrics_port(name: str, port: int) -> None:
    body = ray_trainer(metrics={"port": port})

    assert both_refusals(body) == ({METRICS_PORT}, {METRICS_PORT})


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(ray_trainer(), id="ray-default-metrics-port"),
        pytest.param(with_trainer(launcher="torchrun", metrics={"port": 8080}), id="torchrun-8080"),
        pytest.param(with_trainer(launcher="command", metrics={"port": 6379}), id="command-6379"),
    ],
)
def test_ports_ray_does_not_bind_pass(body: dict[str, Any]) -> None:
    assert both_refusals(body) == (set(), set())


@pytest.mark.parametrize(
    ("engines", "refused_at"),
    [
        pytest.param({"exporter": "engine", "port": 6379}, {ENGINES_PORT}, id="engine-on-ray-gcs"),
        pytest.param({"exporter": "engine", "port": 8080}, {ENGINES_PORT},
                     id="engine-on-ray-metrics-export"),
        pytest.param({"exporter": "engine", "port": 15000}, set(),
                     id="engine-in-worker-range-as-slime-does"),
        pytest.param({"exporter": "engine", "port": 8000}, set(), id="engine-on-free-port"),
        pytest.param({"exporter": "ray"}, set(), id="ray-exporter-default-port"),
        pytest.param({"exporter": "ray", "port": 8080}, set(), id="ray-exporter-on-ray-metrics"),
        pytest.param({"exporter": "plugin", "port": 8080}, {ENGINES_PORT, ENGINES_PAGES},
                     id="plugin-on-ray-metrics-export"),
        pytest.param({"exporter": "plugin", "pages": 4}, set(), id="plugin-default-port"),
        pytest.param({"exporter": "plugin", "engine": "sglang"}, {ENGINES_EXPORTER},
                     id="plugin-is-vllms"),
        pytest.param({"exporter": "engine", "port": 8000, "pages": 2}, {ENGINES_PAGES},
                     id="pages-without-plugin"),
        pytest.param({"exporter": "plugin", "port": 9397, "pages": 4}, {ENGINES_PAGES},
                     id="plugin-pages-over-the-trainers-9400"),
        pytest.param({"exporter": "plugin", "port": 8077, "pages": 4}, {ENGINES_PAGES},
                     id="plugin-pages-over-ray-metrics-8080"),
        pytest.param({"exporter": "plugin", "port": 9999, "pages": 4}, {ENGINES_PAGES},
                     id="plugin-pages-into-ray-worker-range"),
        pytest.param({"exporter": "plugin", "port": 9396, "pages": 4}, set(),
                     id="plugin-pages-just-below-9400"),
    ],
)  # fmt: skip
def test_ray_trainer_engines_port(engines: dict[str, Any], refused_at: set[str]) -> None:
    body = ray_trainer(engines=engines)

    assert both_refusals(body) == (refused_at, refused_at)


def test_engines_port_is_free_under_torchrun() -> None:
    body = with_trainer(launcher="torchrun", engines={"exporter": "engine", "port": 6379})

    assert both_refusals(body) == (set(), set())


def test_the_refusal_names_rays_ports_and_worker_range() -> None:
    (message,) = model_messages(ray_trainer(metrics={"port": 6379}))

    assert message.startswith("metrics.port must not be a port launcher ray binds")
    assert "6379 (ray-gcs)" in message
    assert "8080 (ray-metrics)" in message
    assert "10002-19999" in message
