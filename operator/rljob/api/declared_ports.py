"""The ports the operator declares on a role's main container (rljob.reconcile.pods and the
trainer's launcher render them), known here from the spec alone so the api layer can refuse a
podTemplate port that collides with one of them."""

from __future__ import annotations

from typing import Any

from rljob.api.ray_ports import RAY_PORTS
from rljob.vocabulary.enums import Engine, Launcher, RoleName

# Each engine's default server port: vLLM's `vllm serve --port` (vllm/entrypoints/openai/
# cli_args.py, 8000) and SGLang's `--port` (python/sglang/srt/server_args.py, 30000).
ENGINE_PORTS = {Engine.VLLM: 8000, Engine.SGLANG: 30000}
ENGINE_PORT = ENGINE_PORTS[Engine.VLLM]
HTTP_ENGINES = (Engine.VLLM, Engine.SGLANG)
# Where rljob.sdk serves /metrics unless RLJOB_METRICS_PORT says otherwise: the trainer's progress
# exporter (sdk/progress.py) and the verifier helper (sdk/verifier.py).
SDK_METRICS_PORTS = {RoleName.TRAINER: 9400, RoleName.VERIFIER: 9100}


def metrics_port(role_name: RoleName, role: Any) -> int | None:
    """The port the role's metrics are read on: spec's `metrics.port`, else the SDK's default
    for the trainer and verifiers (an HTTP engine serves them on its own port)."""
    if role.metrics is not None:
        return int(role.metrics.port)
    return SDK_METRICS_PORTS.get(role_name)


def is_http_engine(role_name: RoleName, role: Any) -> bool:
    """A rollout role whose engine serves its API, health and metrics over HTTP."""
    return role_name == RoleName.ROLLOUT and getattr(role, "engine", None) in HTTP_ENGINES


def engine_port(role: Any) -> int:
    """The engine's default server port (vLLM's for a role without an engine)."""
    engine = getattr(role, "engine", None)
    return ENGINE_PORTS.get(engine, ENGINE_PORT) if engine is not None else ENGINE_PORT


def declared_ports(role_name: RoleName, role: Any) -> list[tuple[str, int]]:
    """(name, containerPort) of every port the main container of `role` is rendered with: its
    metrics port, else an HTTP engine's port; under launcher ray Ray's fixed ports; the gang
    engines' metrics port unless one of those already is it."""
    ports: list[tuple[str, int]] = []
    metrics = metrics_port(role_name, role)
    if metrics is not None:
        ports.append(("metrics", metrics))
    elif is_http_engine(role_name, role):
        ports.append(("http", engine_port(role)))
    if role_name != RoleName.TRAINER:
        return ports
    if role.launcher == Launcher.RAY:
        ports += RAY_PORTS.values()
    engines = role.engines
    if engines is not None and engines.metrics_port not in {port for _, port in ports}:
        ports.append(("engine-metrics", engines.metrics_port))
    return ports
