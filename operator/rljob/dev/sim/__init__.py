"""Simulated workloads for the test bed: one process serving every simulated pod of the local
control plane on its own loopback port, with vLLM's metric names for rollout engines, the SDK's
trainer metrics, a verifier latency histogram, and a control API for fault injection.

- `Simulator` (rljob.dev.sim.launcher) starts and stops the process (`python -m rljob.dev.sim`).
- `SimClient` (rljob.dev.sim.client) talks to its control API: `inject`, `clear`, `workloads`.

The pure parts (profiles, faults, models, exposition, pods) are importable without starting
anything. Names here load lazily, so the simulator process does not import the launcher's
dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rljob.dev.sim.client import SimClient, SimError
    from rljob.dev.sim.launcher import Simulator, SimulatorError

_EXPORTS = {
    "SimClient": "rljob.dev.sim.client",
    "SimError": "rljob.dev.sim.client",
    "Simulator": "rljob.dev.sim.launcher",
    "SimulatorError": "rljob.dev.sim.launcher",
}

__all__ = ["SimClient", "SimError", "Simulator", "SimulatorError"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
