"""Real torchrun, 2 nodes x 2 processes on loopback, each node started as the operator's trainer
Job would start its container: the command, args and environment come from render_children (the
PET_* and RLJOB_* variables, the completion index as the node rank), the master address mapped to
127.0.0.1, through the SDK's entrypoint wrapper. What Kubernetes would show for each node is
rebuilt as the kubelet builds it: the termination-log file, or with FallbackToLogsOnError the
log's tail when the container wrote none."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from rljob.api import parse_rljob
from rljob.dev.controlplane import wait_until
from rljob.dev.processes import free_ports
from rljob.health import ContainerTermination
from rljob.reconcile import RenderContext, render_children
from rljob.reconcile.render import COMPLETION_INDEX_FIELD
from rljob.sdk.entrypoint import exit_status

TOP = Path(__file__).resolve().parents[2]
WORKLOADS = Path(__file__).resolve().parent / "workloads"
NODES = 2
PROCS_PER_NODE = 2
# What a run may take at most: a gloo timeout of a few seconds plus torchrun's start and stop.
RUN_DEADLINE = 120.0
# What the kubelet puts in state.terminated.message (kubernetes pkg/kubelet/container/runtime.go:
# MaxContainerTerminationMessageLength 4096 for the file, read with tail.ReadAtMost so the end is
# kept; with FallbackToLogsOnError and no file content, MaxContainerTerminationMessageLogLines 80
# and MaxContainerTerminationMessageLogLength 2048 of the log, its end too:
# pkg/kubelet/kuberuntime/kuberuntime_container.go, readLastStringFromContainerLogs).
MESSAGE_BYTES = 4096
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048


@dataclass(frozen=True, slots=True)
class NodeRun:
    """One trainer pod's container as Kubernetes sees it once it ended."""

    node_rank: int
    exit_code: int
    log: str
    termination_log: str
    oom_killed: bool = False

    def message(self) -> str:
        """`state.terminated.message`: the file, else the log's tail (only on a failure)."""
        if self.termination_log:
            return self.termination_log.encode()[-MESSAGE_BYTES:].decode("utf-8", "ignore")
        if self.exit_code == 0:
            return ""
        return fallback_tail(self.log)

    def termination(self) -> ContainerTermination:
        reason = "OOMKilled" if self.oom_killed else ("Error" if self.exit_code else "Completed")
        return ContainerTermination(self.exit_code, reason, self.message(), container="trainer")


def fallback_tail(log: str) -> str:
    lines = log.splitlines(keepends=True)[-FALLBACK_LINES:]
    return "".join(lines).encode()[-FALLBACK_BYTES:].decode("utf-8", "ignore")


def trainer_container(workload: Path, env: Mapping[str, str], master_port: int) -> dict[str, Any]:
    """The trainer Job's container as the operator renders it for attempt 1."""
    body = yaml.safe_load((TOP / "examples" / "rljob-minimal.yaml").read_text())
    body["metadata"].update(namespace="bed", uid="bed-uid", generation=1)
    body["spec"]["roles"]["trainer"].update(
        nodes=NODES,
        gpus=PROCS_PER_NODE,
        command=["python", "-m", "rljob.sdk.entrypoint", "--"],
        args=["torchrun", str(workload)],
        env=[{"name": key, "value": value} for key, value in env.items()],
    )
    job = parse_rljob(body)
    context = RenderContext(
        name=job.metadata.name,
        namespace="bed",
        uid="bed-uid",
        attempt=1,
        trainer_master_port=master_port,
    )
    (trainer,) = [child for child in render_children(job, context) if child.kind == "Job"]
    container: dict[str, Any] = trainer.body["spec"]["template"]["spec"]["containers"][0]
    return container


def node_environment(container: Mapping[str, Any], node_rank: int) -> dict[str, str]:
    """The container's env as the kubelet resolves it on node `node_rank` (the completion
    index is the node rank), the master Service's name mapped to loopback."""
    env: dict[str, str] = {}
    for variable in container["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
            continue
        field = variable["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == COMPLETION_INDEX_FIELD, variable
        env[variable["name"]] = str(node_rank)
    assert not any("$(" in value for value in env.values()), env
    env["PET_MASTER_ADDR"] = "127.0.0.1"
    return env


def kill_container(process: subprocess.Popen[bytes]) -> None:
    """What a cgroup v2 OOM kill does (memory.oom.group): SIGKILL to every process of the
    container at once (torchrun starts its workers in sessions of their own)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        tree = psutil.Process(process.pid)
        for member in [*tree.children(recursive=True), tree]:
            with contextlib.suppress(psutil.NoSuchProcess):
                member.kill()


@dataclass
class _Node:
    rank: int
    process: subprocess.Popen[bytes]
    log: Path
    termination_log: Path
    oom_killed: bool = False


def run_trainer(
    venv: Path,
    folder: Path,
    workload_env: Mapping[str, str],
    *,
    oom_kill_node: int | None = None,
    oom_kill_after: str = "",
    workload: Path = WORKLOADS / "faulty_train.py",
) -> list[NodeRun]:
    """Both nodes of one trainer attempt, to their end (at most RUN_DEADLINE). With
    `oom_kill_node`, that node's whole container is SIGKILLed once its log shows
    `oom_kill_after`, as the kubelet's OOM kill would."""
    (port,) = free_ports(1)
    container = trainer_container(workload, workload_env, port)
    command = [*container["command"], *container["args"]]
    nodes = []
    for rank in range(NODES):
        env = {
            "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
            "HOME": str(folder),
            "PYTHONPATH": str(TOP / "operator"),
            "RLJOB_TERMINATION_LOG": str(folder / f"termination-log-{rank}"),
            **node_environment(container, rank),
        }
        log = folder / f"container-{rank}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                command, env=env, cwd=folder, stdout=sink, stderr=subprocess.STDOUT
            )
        nodes.append(_Node(rank, process, log, Path(env["RLJOB_TERMINATION_LOG"])))
    _wait(nodes, oom_kill_node, oom_kill_after)
    return [
        NodeRun(
            node.rank,
            exit_status(node.process.returncode),
            node.log.read_text(errors="replace"),
            node.termination_log.read_text() if node.termination_log.exists() else "",
            node.oom_killed,
        )
        for node in nodes
    ]


def _wait(nodes: list[_Node], oom_kill_node: int | None, oom_kill_after: str) -> None:
    def ended() -> bool:
        for node in nodes:
            due = node.rank == oom_kill_node and not node.oom_killed
            if due and oom_kill_after in node.log.read_text(errors="replace"):
                kill_container(node.process)
                node.oom_killed = True
        return all(node.process.poll() is not None for node in nodes)

    try:
        wait_until(ended, RUN_DEADLINE, "both trainer nodes to end", interval=0.05)
    finally:
        for node in nodes:
            if node.process.poll() is None:
                kill_container(node.process)
                node.process.wait(timeout=10)
