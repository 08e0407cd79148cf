"""The ports Ray binds in every trainer pod of launcher ray (rljob.reconcile.launchers starts Ray
on them and declares the fixed ones), and the rules refusing a trainer port of the spec that is
one of them: two processes would need the port, and a fixed one would be declared twice."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rljob.api.rules import CrossFieldRule
from rljob.vocabulary.enums import EngineExporter, Launcher

# Ray's ports, the same on every pod (each has its own IP). GCS, dashboard, dashboard agent
# (HTTP) and client server are Ray's own defaults (ray/_private/ray_constants.py: DEFAULT_PORT,
# DEFAULT_DASHBOARD_PORT, DEFAULT_DASHBOARD_AGENT_LISTEN_PORT; scripts.py: 10001 and the
# 10002-19999 worker range); the ports Ray would otherwise pick at random are fixed here.
RAY_PORTS: dict[str, tuple[str, int]] = {
    # env variable: (container port name, port)
    "RLJOB_RAY_GCS_PORT": ("ray-gcs", 6379),
    "RLJOB_RAY_NODE_MANAGER_PORT": ("ray-node-mgr", 6380),
    "RLJOB_RAY_OBJECT_MANAGER_PORT": ("ray-object-mgr", 6381),
    "RLJOB_RAY_DASHBOARD_AGENT_GRPC_PORT": ("ray-agent-grpc", 6382),
    "RLJOB_RAY_RUNTIME_ENV_AGENT_PORT": ("ray-runtime-env", 6383),
    "RLJOB_RAY_METRICS_EXPORT_PORT": ("ray-metrics", 8080),
    "RLJOB_RAY_DASHBOARD_PORT": ("ray-dashboard", 8265),
    "RLJOB_RAY_DASHBOARD_AGENT_LISTEN_PORT": ("ray-agent-http", 52365),
    "RLJOB_RAY_CLIENT_SERVER_PORT": ("ray-client", 10001),
}
# Each Ray worker process binds one port of this range; a range is not declared port by port.
RAY_WORKER_PORTS = {"RLJOB_RAY_MIN_WORKER_PORT": 10002, "RLJOB_RAY_MAX_WORKER_PORT": 19999}
# Ray's metrics agent, where exporter ray reads the gang's engines.
RAY_METRICS_EXPORT_PORT = RAY_PORTS["RLJOB_RAY_METRICS_EXPORT_PORT"][1]

RAY_FIXED_PORTS = tuple(port for _, port in RAY_PORTS.values())
_FIXED_PORTS = RAY_FIXED_PORTS
_LOWEST_WORKER_PORT = RAY_WORKER_PORTS["RLJOB_RAY_MIN_WORKER_PORT"]
_HIGHEST_WORKER_PORT = RAY_WORKER_PORTS["RLJOB_RAY_MAX_WORKER_PORT"]

_FIXED_PORTS_TEXT = ", ".join(f"{port} ({name})" for name, port in RAY_PORTS.values())
_WORKER_PORTS_TEXT = f" or a Ray worker port, {_LOWEST_WORKER_PORT}-{_HIGHEST_WORKER_PORT}"


def _is_ray_worker_port(port: int) -> bool:
    """Whether one of Ray's worker processes may bind `port` under launcher ray."""
    return _LOWEST_WORKER_PORT <= port <= _HIGHEST_WORKER_PORT


def _clash_cel(port: str, *, worker_range: bool) -> str:
    """CEL true when the integer expression `port` is a fixed Ray port (or, with worker_range,
    one of Ray's worker ports)."""
    clash = f"{port} in [{', '.join(map(str, _FIXED_PORTS))}]"
    if worker_range:
        clash += f" || ({port} >= {_LOWEST_WORKER_PORT} && {port} <= {_HIGHEST_WORKER_PORT})"
    return f"({clash})"


def _ray_port_rule(
    field: str,
    unset_cel: str,
    port_of: Callable[[Any], int | None],
    *,
    worker_range: bool,
    subject: str,
) -> CrossFieldRule:
    """Refuses the trainer's port at `field` (`subject` in the message) under launcher ray when
    it is one of Ray's fixed ports (or, with worker_range, of its worker ports); `unset_cel` says
    in CEL when the port does not apply, `port_of` reads it (None: it does not apply)."""

    def holds(role: Any) -> bool:
        port = port_of(role)
        if role.launcher != Launcher.RAY or port is None:
            return True
        return port not in _FIXED_PORTS and not (worker_range and _is_ray_worker_port(port))

    clash = _clash_cel(f"self.{field}", worker_range=worker_range)
    ports = _FIXED_PORTS_TEXT + (_WORKER_PORTS_TEXT if worker_range else "")
    return CrossFieldRule(
        cel=f"self.launcher != 'ray' || {unset_cel} || !{clash}",
        message=f"{subject} must not be a port launcher ray binds in every trainer pod: {ports}",
        field=field,
        holds=holds,
    )


def _metrics_port(role: Any) -> int | None:
    return role.metrics.port if role.metrics is not None else None


def _engines_own_port(role: Any) -> int | None:
    """The port the gang's engines serve themselves; under exporter ray the port is Ray's own
    metrics export port (8080 by default), which is meant to be Ray's."""
    engines = role.engines
    serve_their_own = engines is not None and engines.exporter in _OWN_PAGES
    return engines.port if serve_their_own else None


# The exporters whose pages the engines serve themselves (not Ray's agent).
_OWN_PAGES = (EngineExporter.ENGINE, EngineExporter.PLUGIN)


RAY_LAUNCHER_LEAVES_METRICS_PORT = _ray_port_rule(
    "metrics.port",
    "!has(self.metrics)",
    _metrics_port,
    worker_range=True,
    subject="metrics.port",
)
# Not the worker range: the engines are started by Ray's workers, and slime gives them the first
# free port from 15000 by design (docs/frameworks.md); none of that range is a declared port.
RAY_LAUNCHER_LEAVES_ENGINES_PORT = _ray_port_rule(
    "engines.port",
    "!has(self.engines) || !(self.engines.exporter in ['engine', 'plugin'])"
    " || !has(self.engines.port)",
    _engines_own_port,
    worker_range=False,
    subject="engines.port of exporter engine",
)
