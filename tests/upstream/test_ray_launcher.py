"""The ray launcher against real Ray (ray[default] 2.60.0 from PyPI) on loopback, CPU only.

Two Ray "nodes" run exactly the command, arguments and environment the operator renders for
completion indexes 0 and 1 (taken from render_children), the driver under the entrypoint
wrapper. What a pod would get from the API is filled in: the completion index, and this
machine's address (the one Ray picks itself; it replaces a 127.0.0.1 --node-ip-address) for
status.podIP and for the head's DNS name. Port mapping, so that two nodes fit on one
address (in a cluster each pod has its own IP and all use the rendered ports): the GCS port
is shared (the worker joins it), every other rendered port variable gets a free port per node,
each node its own worker port range and its own RLJOB_RAY_TEMP_DIR (short: Ray's Unix socket
paths must stay under 108 bytes). The readiness probe's check is run as rendered for each node.

(a) the worker node killed (its process group, SIGKILL) -> the driver fails, and its
termination log classifies as RayNodeDied or RayActorDied naming the lost actor;
(b) the driver finishing -> index 0 exits 0 (the Job succeeds by its successPolicy).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rljob.api import parse_rljob
from rljob.api.ray_ports import RAY_PORTS, RAY_WORKER_PORTS
from rljob.health import ContainerTermination, classify_termination
from rljob.reconcile import RenderContext, render_children
from rljob.reconcile.launchers import RAY_READY_CHECK
from tests.unit.reconcile.world import example_body, with_role

TOP = Path(__file__).resolve().parents[2]
NODES = 2
START_TIMEOUT = 90.0
PAIR_STARTS = 3  # a worker node that dies while starting is started again (pair_factory)
RUN_TIMEOUT = 150.0
DRIVER = """\
import os, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

ray.init()
deadline = time.monotonic() + 60
while len([n for n in ray.nodes() if n["Alive"]]) < 2:
    assert time.monotonic() < deadline, "the worker node never joined"
    time.sleep(0.2)

@ray.remote(num_cpus=0)
class Pinger:
    def where(self):
        return ray.get_runtime_context().get_node_id()

nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
actors = [
    Pinger.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
    for node in nodes
]
assert sorted(ray.get([a.where.remote() for a in actors])) == nodes
print("DRIVER-READY", flush=True)
if os.environ["DRIVER_MODE"] == "finish":
    print("DRIVER-DONE", flush=True)
    sys.exit(0)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    ray.get([a.where.remote() for a in actors])
    time.sleep(0.2)
sys.exit(3)
"""


def rendered_pod(index: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The trainer container's full command line and env for one completion index."""
    body = with_role(
        example_body(),
        "trainer",
        launcher="ray",
        gpus=0,
        nodes=NODES,
        command=["python", "-m", "rljob.sdk.entrypoint", "--", "python", "driver.py"],
    )
    job = parse_rljob(body)
    ctx = RenderContext(name=job.metadata.name, namespace="rl", uid="u", attempt=1)
    (trainer,) = [c for c in render_children(job, ctx) if c.kind == "Job"]
    assert trainer.body["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    container = trainer.body["spec"]["template"]["spec"]["containers"][0]
    return [*container["command"], *container["args"]], container["env"]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def worker_ports_base(taken: list[int]) -> int:
    """The first of the nodes' worker port ranges (50 ports a node): below the kernel's
    ephemeral range, where `free_ports` picks the nodes' other ports. A range that reached into
    it once held the runtime env agent's port, and the worker node never started."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    span = NODES * 50
    slots = max(1, (low - 20000) // span)
    base = 20000 + (os.getpid() % slots) * span
    assert not any(base <= port < base + span for port in taken), (base, taken)
    return base


def host_address(venv: Path) -> str:
    """The address Ray itself gives a node on this machine (it replaces a 127.0.0.1
    --node-ip-address by it), standing for every pod's IP and the head's name."""
    found = subprocess.run(
        [venv / "bin" / "python", "-c", HOST_ADDRESS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return found.stdout.strip()


HOST_ADDRESS = "from ray._private.services import get_node_ip_address; print(get_node_ip_address())"


def node_env(
    index: int,
    rendered: list[dict[str, Any]],
    overrides: dict[str, str],
    base: dict[str, str],
    address: str,
) -> dict[str, str]:
    """The rendered env as the kubelet would give it, then the port mapping."""
    env = dict(base)
    for variable in rendered:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
            continue
        path = variable["valueFrom"]["fieldRef"]["fieldPath"]
        env[variable["name"]] = address if path == "status.podIP" else str(index)
    env.update(overrides)
    return env


class RayPair:
    """The two nodes' processes, each in its own session so it can be killed as a group."""

    def __init__(self, workdir: Path, venv: Path, mode: str) -> None:
        self.workdir = workdir
        self.roots = [Path(tempfile.mkdtemp(prefix=f"rr{i}", dir="/tmp")) for i in range(NODES)]
        (workdir / "driver.py").write_text(DRIVER)
        ports = free_ports(1 + NODES * len(RAY_PORTS))
        gcs, per_node = ports[0], ports[1:]
        base = {
            "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
            "PYTHONPATH": str(TOP / "operator"),
            "HOME": os.environ.get("HOME", "/tmp"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RLJOB_TERMINATION_LOG": str(workdir / "termination-log"),
            "DRIVER_MODE": mode,
        }
        self.envs: list[dict[str, str]] = []
        self.procs: list[subprocess.Popen[bytes]] = []
        worker_base = worker_ports_base(ports)
        address = host_address(venv)
        for index in range(NODES):
            command, rendered = rendered_pod(index)
            names = [name for name in RAY_PORTS if name != "RLJOB_RAY_GCS_PORT"]
            mine = per_node[index * len(names) : (index + 1) * len(names)]
            overrides = {
                **dict(zip(names, map(str, mine), strict=True)),
                "RLJOB_RAY_GCS_PORT": str(gcs),
                "RLJOB_RAY_HEAD_ADDRESS": address,
                "RLJOB_RAY_TEMP_DIR": str(self.roots[index]),
                "RLJOB_RAY_MIN_WORKER_PORT": str(worker_base + index * 50),
                "RLJOB_RAY_MAX_WORKER_PORT": str(worker_base + index * 50 + 49),
            }
            assert set(overrides) >= {*RAY_PORTS, *RAY_WORKER_PORTS}
            env = node_env(index, rendered, overrides, base, address)
            self.envs.append(env)
            log = (workdir / f"node{index}.log").open("wb")
            self.procs.append(
                subprocess.Popen(
                    command,
                    cwd=workdir,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def log(self, index: int) -> str:
        return (self.workdir / f"node{index}.log").read_text(errors="replace")

    def wait_for(self, index: int, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log(index):
            if self.procs[index].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"node {index} never printed {text!r}:\n{self.log(index)[-4000:]}")
            time.sleep(0.2)

    def ready(self, index: int) -> bool:
        """The rendered readiness probe's check, run as the kubelet would in that pod."""
        venv_python = shutil.which("python", path=self.envs[index]["PATH"])
        assert venv_python is not None
        probe = subprocess.run(
            [venv_python, "-c", RAY_READY_CHECK],
            env=self.envs[index],
            capture_output=True,
            timeout=30,
            check=False,
        )
        return probe.returncode == 0

    def worker_started(self, timeout: float) -> bool:
        """The worker node passes its readiness check (False: it died first; True as well
        when it is still starting at `timeout`, for the test to judge)."""
        deadline = time.monotonic() + timeout
        while not self.ready(1):
            if self.procs[1].poll() is not None:
                return False
            if time.monotonic() > deadline:
                return True
            time.sleep(0.5)
        return True

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not all(self.ready(i) for i in range(NODES)):
            if time.monotonic() > deadline:
                pytest.fail(f"not ready:\n{self.log(0)[-3000:]}\n{self.log(1)[-3000:]}")
            time.sleep(0.5)

    def kill(self, index: int) -> None:
        """SIGKILL to the node's whole session: ray start and the Ray daemons it spawned,
        found by the node's own temp dir in their command lines as well."""
        pids = {self.procs[index].pid}
        root = str(self.roots[index])
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
                    sid = os.getsid(int(proc.name))
                except (OSError, ProcessLookupError):
                    continue
                if root in cmdline or sid == self.procs[index].pid:
                    pids.add(int(proc.name))
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        for index in range(NODES):
            self.kill(index)
        for proc in self.procs:
            proc.wait(timeout=30)
        for root in self.roots:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pair_factory(tmp_path: Path, torch_venv: Path) -> Iterator[Any]:
    """A pair whose worker node came up. Its ports are picked free and released before Ray
    binds them, so another process may take one meanwhile (a worker raylet once died so in
    CI): a worker node that dies while starting is started again, with fresh ports."""
    made: list[RayPair] = []

    def make(mode: str) -> RayPair:
        for start in range(1, PAIR_STARTS + 1):
            workdir = tmp_path / f"start{start}"
            workdir.mkdir()
            pair = RayPair(workdir, torch_venv, mode)
            made.append(pair)
            if pair.worker_started(START_TIMEOUT):
                return pair
            pair.close()
        pytest.fail(
            f"the worker node died while starting {PAIR_STARTS} times:\n{pair.log(1)[-4000:]}"
        )

    yield make
    for pair in made:
        pair.close()


def test_worker_node_lost_fails_the_driver_with_a_ray_reason(pair_factory: Any) -> None:
    pair = pair_factory("loop")
    pair.wait_ready(START_TIMEOUT)
    pair.wait_for(0, "DRIVER-READY", START_TIMEOUT)
    pair.kill(1)
    code = pair.procs[0].wait(timeout=RUN_TIMEOUT)
    assert code not in (0, 3), pair.log(0)[-4000:]
    message = (pair.workdir / "termination-log").read_text()
    classified = classify_termination(ContainerTermination(code, "Error", message, "trainer"))
    assert classified is not None, message
    assert classified.reason in ("RayNodeDied", "RayActorDied"), (classified, message)
    assert classified.primary
    assert classified.exit_code == code
    assert any(
        text in classified.message
        for text in ("node has died", "worker process has died", "ActorDiedError", "Unavailable")
    ), classified.message


def test_driver_finishing_ends_index_zero_with_success(pair_factory: Any) -> None:
    pair = pair_factory("finish")
    code = pair.procs[0].wait(timeout=START_TIMEOUT + RUN_TIMEOUT)
    assert code == 0, pair.log(0)[-4000:]
    assert "DRIVER-DONE" in pair.log(0)
    assert not (pair.workdir / "termination-log").exists()
    assert pair.procs[1].poll() is None  # the worker blocks: the Job controller stops it
