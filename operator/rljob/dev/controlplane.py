"""The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok as processes on 127.0.0.1, with simulated GPU nodes. Backs `rljob dev up` and the tests."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import yaml

from rljob.dev import pki, podnet
from rljob.dev.components import COMPONENTS, PORT_NAMES, Components
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.nodes import PROFILES, NodeProfile, node_manifests
from rljob.dev.processes import Managed, free_ports, pid_runs, spawn, tail, terminate
from rljob.dev.rundir import RunDir, RunState, admin_credentials, write_kubeconfig

_AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}


class ControlPlaneError(RuntimeError):
    """The control plane could not start; the message carries the failing component's log tail."""


# The ports each component listens on, which only the components started after it use.
OWN_PORTS = {
    "etcd": ("etcd", "etcd-peer"),
    "kube-apiserver": ("apiserver",),
    "kube-controller-manager": ("controller-manager",),
    "kube-scheduler": ("scheduler",),
    "kwok": ("kwok",),
}
ADDRESS_IN_USE = "address already in use"
BIND_RETRIES = 3


class ComponentStartError(ControlPlaneError):
    """One component of the bed did not come up: its name and log say where to look."""

    def __init__(self, component: str, log: Path, reason: str) -> None:
        # The log's path right under the first line: the reason may go on with a log tail.
        first, _, rest = reason.strip().partition("\n")
        details = f"\n{rest}" if rest.strip() else ""
        super().__init__(f"{component} did not come up: {first}\nits log: {log}{details}")
        self.component = component
        self.log = log
        self.reason = reason


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    interval: float = 0.2,
    gives_up: tuple[type[Exception], ...] = (),
) -> None:
    """Polls check until it returns True; raises ControlPlaneError naming `what` on timeout.
    A ControlPlaneError, or one of `gives_up` (a probe's "the process exited"), from check ends
    the wait at once; any other error is the normal not-ready-yet case."""
    deadline = time.monotonic() + timeout
    last_error = ""
    ends_the_wait: tuple[type[Exception], ...] = (ControlPlaneError, *gives_up)
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except ends_the_wait:
            raise
        except Exception as exc:  # a probe failing is the normal not-ready-yet case
            last_error = f" (last error: {exc})"
        time.sleep(interval)
    raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}{last_error}")


class ControlPlane:
    """Starts and stops the components of one local cluster."""

    def __init__(self, run_dir: Path, bin_dir: Path, profile: str = "test") -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
        self.dir = RunDir(run_dir)
        self.bin_dir = bin_dir
        self.profile: NodeProfile = PROFILES[profile]
        self.state = RunState(profile=profile, ports={}, launcher_pid=os.getpid())
        self.procs: list[Managed] = []
        self.components = Components(self.dir, self.state, self.profile)

    @property
    def server(self) -> str:
        return self.components.server

    def api(self) -> KubeApi:
        return KubeApi(admin_credentials(self.dir, self.state))

    def start(self, timeout: float = 180.0) -> None:
        self._prepare()
        try:
            self._start_components(timeout)
            self._create_nodes(timeout)
        except BaseException:
            self.stop()
            raise
        self.state.ready = True
        self.state.save(self.dir.root)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            terminate(proc.pid)
        self.procs.clear()
        self.state.pids.clear()
        self.state.ready = False
        if self.state.pod_cidr:
            podnet.release(self.state.pod_cidr, self.state.launcher_pid)
            self.state.pod_cidr = ""
        if self.dir.root.exists():
            self.state.save(self.dir.root)

    def stop_component(self, name: str, *, kill: bool = False) -> None:
        """Stops one running component, SIGTERM with a grace period or SIGKILL at once (a crash),
        keeping its ports, flags and data for `start_component`."""
        proc = self._proc(name)
        if kill:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        terminate(proc.pid)
        with contextlib.suppress(Exception):
            proc.process.wait(timeout=5)
        self.state.pids.pop(name, None)
        self.state.save(self.dir.root)

    def start_component(self, name: str, timeout: float = 120.0) -> None:
        """Starts a stopped component again with the same flags, ports and data folder, and
        waits until it is ready."""
        if self._proc(name).process.poll() is None:
            raise ControlPlaneError(f"{name} is still running")
        self._await(self._spawn(name, self._argv(name)), self._ready_check(name), timeout)

    def _proc(self, name: str) -> Managed:
        found = [proc for proc in self.procs if proc.name == name]
        if not found:
            raise ControlPlaneError(f"no component {name!r} was started (known: {COMPONENTS})")
        return found[0]

    def _prepare(self) -> None:
        self.dir.logs.mkdir(parents=True, exist_ok=True)
        pki.generate(self.dir.pki.root)
        self.dir.audit_policy.write_text(yaml.safe_dump(_AUDIT_POLICY))
        stages = resources.files("rljob.dev").joinpath("kwok-stages.yaml").read_text()
        self.dir.stages.write_text(stages)
        self.state.ports = dict(zip(PORT_NAMES, free_ports(len(PORT_NAMES)), strict=True))
        if not self.state.pod_cidr:
            self.state.pod_cidr = podnet.reserve(self.state.launcher_pid)
        write_kubeconfig(self.dir, self.server)
        self.state.save(self.dir.root)

    def _spawn(self, name: str, argv: list[str]) -> Managed:
        proc = spawn(name, [str(self.bin_dir / name), *argv], self.dir.logs)
        # A restarted component takes its predecessor's place: `stop` goes in reverse order.
        names = [p.name for p in self.procs]
        if name in names:
            self.procs[names.index(name)] = proc
        else:
            self.procs.append(proc)
        self.state.pids[name] = proc.pid
        self.state.save(self.dir.root)
        return proc

    def _await(self, proc: Managed, check: Callable[[], bool], timeout: float) -> None:
        def alive_and_ready() -> bool:
            if proc.process.poll() is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with {proc.process.returncode}:\n{tail(proc.log)}"
                )
            return check()

        try:
            wait_until(alive_and_ready, timeout, f"{proc.name} to become ready")
        except ControlPlaneError as exc:
            # An exit's message carries the log tail already; a timeout's does not.
            reason = str(exc) if "exited with" in str(exc) else f"{exc}\n{tail(proc.log)}"
            raise ComponentStartError(proc.name, proc.log, reason) from None

    def _start_components(self, timeout: float) -> None:
        for name in ("etcd", "kube-apiserver"):
            self._await_bound(self._spawn(name, self._argv(name)), timeout)
        # The rest only need the API server: start them together, then wait for each.
        rest = [self._spawn(name, self._argv(name)) for name in COMPONENTS[2:]]
        for proc in rest:
            self._await_bound(proc, timeout)

    def _await_bound(self, proc: Managed, timeout: float) -> None:
        """Waits for a component; one that found a port of its own taken (chosen free, then
        taken by another process's client before it bound: ports are picked from the ephemeral
        range) starts again on fresh ports, a few times. No component started yet uses them."""
        for _ in range(BIND_RETRIES):
            try:
                self._await(proc, self._ready_check(proc.name), timeout)
                return
            except ComponentStartError as exc:
                if ADDRESS_IN_USE not in exc.reason:
                    raise
            self._new_ports(proc.name)
            proc = self._spawn(proc.name, self._argv(proc.name))
        self._await(proc, self._ready_check(proc.name), timeout)

    def _new_ports(self, component: str) -> None:
        fresh = free_ports(len(OWN_PORTS[component]))
        self.state.ports.update(zip(OWN_PORTS[component], fresh, strict=True))
        if component == "kube-apiserver":
            write_kubeconfig(self.dir, self.server)
        self.state.save(self.dir.root)

    def _argv(self, name: str) -> list[str]:
        return self.components.argv(name)

    def _ready_check(self, name: str) -> Callable[[], bool]:
        return self.components.ready_check(name)

    def _create_nodes(self, timeout: float) -> None:
        api = self.api()
        wait_until(
            lambda: bool(api.get("/api/v1/namespaces/default/serviceaccounts/default")),
            timeout,
            "the default ServiceAccount (created by kube-controller-manager)",
        )
        for node in node_manifests(self.profile):
            name = node["metadata"]["name"]
            try:
                api.create("/api/v1/nodes", node)
            except ApiError as exc:
                if exc.status != 409:
                    raise
            api.merge_patch(f"/api/v1/nodes/{name}/status", {"status": node["status"]})
        wait_until(lambda: self._nodes_ready(api), timeout, "simulated nodes to become Ready")

    def _nodes_ready(self, api: KubeApi) -> bool:
        nodes = api.get("/api/v1/nodes")["items"]
        ready = [
            n
            for n in nodes
            for c in n.get("status", {}).get("conditions", [])
            if c["type"] == "Ready" and c["status"] == "True"
        ]
        return len(ready) >= self.profile.count


def running_plane(run_dir: Path) -> RunState:
    """The state of a ready plane in run_dir whose apiserver process is still alive."""
    state = RunState.load(run_dir)
    pid = state.pids.get("kube-apiserver", 0)
    if not state.ready or not pid_runs(pid, "kube-apiserver"):
        raise ControlPlaneError(f"no running control plane in {run_dir}")
    return state
