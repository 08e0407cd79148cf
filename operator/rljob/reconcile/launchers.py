"""What each trainer launcher (spec.roles.trainer.launcher) adds to the trainer's pods and Job.

- torchrun: torchrun's PET_* rendezvous variables plus NNODES/NODE_RANK; the command as is.
- command: the command as is, with NNODES/NODE_RANK only.
- ray: index 0 starts the Ray head, then execs the user's command (the driver); the other
  indexes join the head and block (`ray start --block`). Every port is explicit (env variables
  the start script reads, so each is visible in the pod spec), declared as a container port, and
  the Job succeeds when index 0 does (successPolicy, GA in Kubernetes 1.33): the Job controller
  then stops the blocked workers. A readiness probe asks the head's GCS: index 0 is Ready once
  every node has joined, another index once its own node has.

Ray's flags are those of `ray start` in ray 2.60.0 (python/ray/scripts/scripts.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rljob.api import Launcher, TrainerRole
from rljob.api.ray_ports import RAY_PORTS, RAY_WORKER_PORTS

EnvList = list[dict[str, Any]]


@dataclass(frozen=True)
class LaunchInputs:
    """What a launcher needs: the role, the first rank's stable DNS name, torchrun's port, and
    the env entry giving the pod's completion index."""

    role: TrainerRole
    master_address: str
    master_port: int
    node_rank: Mapping[str, Any]


@dataclass(frozen=True)
class Launch:
    """A launcher's part of the trainer pod and Job. `command`/`args` replace the role's when
    set; `job_spec` is merged into the Job's spec."""

    env: EnvList
    command: list[str] | None = None
    args: list[str] | None = None
    ports: list[dict[str, Any]] = field(default_factory=list)
    probes: dict[str, Any] = field(default_factory=dict)
    job_spec: dict[str, Any] = field(default_factory=dict)


def _rank(inputs: LaunchInputs) -> dict[str, Any]:
    """The completion index's env source, a fresh copy per variable (no shared objects)."""
    return copy.deepcopy(dict(inputs.node_rank))


def _topology(inputs: LaunchInputs) -> EnvList:
    return [
        {"name": "NNODES", "value": str(inputs.role.nodes)},
        {"name": "NODE_RANK", **_rank(inputs)},
    ]


def _torchrun(inputs: LaunchInputs) -> Launch:
    """torchrun's PET_* variables and NNODES/NODE_RANK for other launchers. No RANK or
    WORLD_SIZE: torchrun sets them per process, and a pod-level value would be wrong for all
    but one process."""
    role = inputs.role
    return Launch(
        env=[
            {"name": "PET_NNODES", "value": str(role.nodes)},
            {"name": "PET_NODE_RANK", **_rank(inputs)},
            {"name": "PET_NPROC_PER_NODE", "value": str(max(role.gpus, 1))},
            {"name": "PET_MASTER_ADDR", "value": inputs.master_address},
            {"name": "PET_MASTER_PORT", "value": str(inputs.master_port)},
            *_topology(inputs),
        ]
    )


def _command(inputs: LaunchInputs) -> Launch:
    return Launch(env=_topology(inputs))


RAY_HEAD_ADDRESS_ENV = "RLJOB_RAY_HEAD_ADDRESS"
RAY_NODE_IP_ENV = "RLJOB_RAY_NODE_IP"
# Ray's session directory (logs, sockets); ray start's own default.
RAY_TEMP_DIR_ENV = "RLJOB_RAY_TEMP_DIR"
RAY_TEMP_DIR = "/tmp/ray"
RAY_ENV_NAMES = (
    RAY_HEAD_ADDRESS_ENV,
    RAY_NODE_IP_ENV,
    RAY_TEMP_DIR_ENV,
    *RAY_PORTS,
    *RAY_WORKER_PORTS,
)

_EVERY_NODE_FLAGS = (
    f'--node-ip-address="${RAY_NODE_IP_ENV}"',
    '--node-manager-port="$RLJOB_RAY_NODE_MANAGER_PORT"',
    '--object-manager-port="$RLJOB_RAY_OBJECT_MANAGER_PORT"',
    '--dashboard-agent-listen-port="$RLJOB_RAY_DASHBOARD_AGENT_LISTEN_PORT"',
    '--dashboard-agent-grpc-port="$RLJOB_RAY_DASHBOARD_AGENT_GRPC_PORT"',
    '--runtime-env-agent-port="$RLJOB_RAY_RUNTIME_ENV_AGENT_PORT"',
    '--metrics-export-port="$RLJOB_RAY_METRICS_EXPORT_PORT"',
    '--min-worker-port="$RLJOB_RAY_MIN_WORKER_PORT"',
    '--max-worker-port="$RLJOB_RAY_MAX_WORKER_PORT"',
    f'--temp-dir="${RAY_TEMP_DIR_ENV}"',
    "--num-gpus={gpus}",
    "--disable-usage-stats",
)
_HEAD_FLAGS = (
    "--head",
    '--port="$RLJOB_RAY_GCS_PORT"',
    "--include-dashboard=true",
    "--dashboard-host=0.0.0.0",
    '--dashboard-port="$RLJOB_RAY_DASHBOARD_PORT"',
    '--ray-client-server-port="$RLJOB_RAY_CLIENT_SERVER_PORT"',
)
_WORKER_FLAGS = (f'--address="${RAY_HEAD_ADDRESS_ENV}:$RLJOB_RAY_GCS_PORT"', "--block")
# $0 of the start script, named in ps and in the shell's own error messages.
RAY_SCRIPT_NAME = "rljob-ray-launcher"


def ray_start_script(gpus: int) -> str:
    """The POSIX shell script every Ray pod runs, the driver's command as its arguments. exec,
    so the driver (or the blocking `ray start`) gets the kubelet's SIGTERM as PID 1."""
    every = " ".join(_EVERY_NODE_FLAGS).format(gpus=gpus)
    return "\n".join(
        [
            "set -eu",
            'if [ "$NODE_RANK" = 0 ]; then',
            f"  ray start {' '.join(_HEAD_FLAGS)} {every}",
            f'  export RAY_ADDRESS="${RAY_NODE_IP_ENV}:$RLJOB_RAY_GCS_PORT"',
            '  exec "$@"',
            "fi",
            f"exec ray start {' '.join(_WORKER_FLAGS)} {every}",
        ]
    )


# The readiness check, asked of the head's GCS (ray._raylet.GcsClient, ray 2.60.0): index 0 is
# ready once NNODES nodes are alive, another index once its own node (its IP and node manager
# port) is. GcsNodeInfo.state 0 is ALIVE (src/ray/protobuf/gcs.proto, GcsNodeState).
RAY_READY_CHECK = """\
import os, sys
from ray._raylet import GcsClient
env = os.environ
head = env["RLJOB_RAY_HEAD_ADDRESS"] + ":" + env["RLJOB_RAY_GCS_PORT"]
nodes = GcsClient(address=head).get_all_node_info(timeout=5).values()
alive = [(n.node_manager_address, n.node_manager_port) for n in nodes if n.state == 0]
if env["NODE_RANK"] == "0":
    sys.exit(0 if len(alive) >= int(env["NNODES"]) else 1)
me = (env["RLJOB_RAY_NODE_IP"], int(env["RLJOB_RAY_NODE_MANAGER_PORT"]))
sys.exit(0 if me in alive else 1)
"""
RAY_PROBE_PERIOD_SECONDS = 10
RAY_PROBE_TIMEOUT_SECONDS = 10


def _ray(inputs: LaunchInputs) -> Launch:
    role = inputs.role
    env = [
        *_topology(inputs),
        {"name": RAY_HEAD_ADDRESS_ENV, "value": inputs.master_address},
        {"name": RAY_NODE_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": RAY_TEMP_DIR_ENV, "value": RAY_TEMP_DIR},
        *({"name": name, "value": str(port)} for name, (_, port) in RAY_PORTS.items()),
        *({"name": name, "value": str(port)} for name, port in RAY_WORKER_PORTS.items()),
    ]
    ports = [
        {"name": name, "containerPort": number, "protocol": "TCP"}
        for name, number in RAY_PORTS.values()
    ]
    readiness = {
        "exec": {"command": ["python", "-c", RAY_READY_CHECK]},
        "periodSeconds": RAY_PROBE_PERIOD_SECONDS,
        "timeoutSeconds": RAY_PROBE_TIMEOUT_SECONDS,
        "failureThreshold": 3,
    }
    return Launch(
        env=env,
        command=["sh", "-c", ray_start_script(role.gpus), RAY_SCRIPT_NAME],
        args=[*(role.command or []), *(role.args or [])],
        ports=ports,
        probes={"readinessProbe": readiness},
        # The driver's success is the Job's; the workers block until the Job controller stops
        # them. Kubernetes 1.33+ (JobSuccessPolicy GA).
        job_spec={"successPolicy": {"rules": [{"succeededIndexes": "0"}]}},
    )


LAUNCHERS: dict[Launcher, Callable[[LaunchInputs], Launch]] = {
    Launcher.TORCHRUN: _torchrun,
    Launcher.RAY: _ray,
    Launcher.COMMAND: _command,
}


def launch(inputs: LaunchInputs) -> Launch:
    """The role's launcher's part of its pods and Job."""
    return LAUNCHERS[inputs.role.launcher](inputs)
