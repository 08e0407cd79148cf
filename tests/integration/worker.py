"""Which pytest-xdist worker this process is, and the namespaces its operator and simulators
watch on the plane the workers share (see conftest.py)."""

from __future__ import annotations

import os

# "gw0", "gw1", ... in a pytest-xdist worker; None in a run without -n.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# The worker's namespaces ("gw0-*"), or every namespace in a run without -n.
WATCHED: tuple[str, ...] = (f"{WORKER}-*",) if WORKER else ()


def namespace_name(base: str) -> str:
    """A namespace name this worker's operator and simulator watch."""
    return f"{WORKER}-{base}" if WORKER else base
