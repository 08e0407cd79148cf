"""Real torchrun, 2 nodes x 2 processes on loopback, each node started as a trainer pod's
container command runs it: `python -m rljob.sdk.entrypoint -- torchrun SCRIPT` with the PET_*
variables the operator renders (reconcile/render.py), the master address mapped to 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from rljob.dev.processes import Managed, free_ports, spawn, terminate

TOP = Path(__file__).resolve().parents[2]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
NODES = 2
PROCS_PER_NODE = 2


@dataclass
class Gang:
    """The nodes of one trainer attempt, node rank = index."""

    nodes: list[Managed]

    def signal(self, sig: signal.Signals) -> None:
        """To each node's container process only, as the kubelet stops a pod."""
        for node in self.nodes:
            os.kill(node.pid, sig)

    def wait(self, timeout: float) -> list[int]:
        """Each node's exit status; fails with the logs' tails when one runs past timeout."""
        deadline = time.monotonic() + timeout
        codes = []
        for node in self.nodes:
            try:
                codes.append(node.process.wait(max(0.0, deadline - time.monotonic())))
            except Exception as exc:
                raise AssertionError(
                    f"torchrun still running after {timeout}s\n{self.logs()}"
                ) from exc
        return codes

    def logs(self) -> str:
        return "\n".join(
            f"== node {i}\n{n.log.read_text(errors='replace')[-6000:]}"
            for i, n in enumerate(self.nodes)
        )


def node_env(base: Mapping[str, str], node: int, port: int, run_dir: Path) -> dict[str, str]:
    pythonpath = os.pathsep.join([str(TOP / "operator"), os.environ.get("PYTHONPATH", "")])
    return {
        **base,
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "PYTHONPATH": pythonpath.rstrip(os.pathsep),
        "PET_NNODES": str(NODES),
        "PET_NODE_RANK": str(node),
        "PET_NPROC_PER_NODE": str(PROCS_PER_NODE),
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "RLJOB_TERMINATION_LOG": str(run_dir / f"termination-node{node}.log"),
        "DCP_NODE_DIR": str(run_dir / f"node{node}"),
        "OMP_NUM_THREADS": "1",
    }


@contextlib.contextmanager
def start_gang(venv: Path, script: str, env: Mapping[str, str], run_dir: Path) -> Iterator[Gang]:
    """Starts every node; on exit, whatever still runs (workers run in their own sessions,
    torch 2.15.0 subprocess_handler.py: start_new_session) is killed by pid."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_ports(1)[0]
    argv = [str(venv / "bin" / "python"), "-m", "rljob.sdk.entrypoint", "--",
            str(venv / "bin" / "torchrun"), str(WORKLOADS / script)]  # fmt: skip
    nodes = [
        spawn(f"node{n}", argv, run_dir, node_env(env, n, port, run_dir)) for n in range(NODES)
    ]
    try:
        yield Gang(nodes)
    finally:
        for node in nodes:
            _kill_tree(node)


def _kill_tree(node: Managed) -> None:
    if node.process.poll() is not None:
        return
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(node.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    terminate(node.pid, grace=2.0)
