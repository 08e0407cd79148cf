"""The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok as processes on 127.0.0.1, with simulated GPU nodes. Backs `rljob dev up` and the tests."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from rljob.dev import pki
from rljob.dev.kubeapi import ApiError, Credentials, KubeApi
from rljob.dev.nodes import PROFILES, NodeProfile, node_manifests
from rljob.dev.processes import Managed, free_ports, pid_runs, spawn, tail, terminate

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
HEARTBEAT_STOP_LABEL = "sim.rljob.io/heartbeat-stopped"
_PORT_NAMES = ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")
# The bench profile raises the components' client rate limits and runs only the controllers an
# RLJob's children need, so the control plane is not the bottleneck being measured (the node
# lifecycle controller lifts the not-ready taint new nodes are admitted with).
_BENCH_CONTROLLERS = (
    "deployment-controller,replicaset-controller,job-controller,garbage-collector-controller,"
    "serviceaccount-controller,namespace-controller,node-lifecycle-controller"
)
# Per component but the API server (/readyz with the cluster CA): its health endpoint as
# (port name, scheme, path).
_HEALTH = {
    "etcd": ("etcd", "http", "/health"),
    "kube-controller-manager": ("controller-manager", "https", "/healthz"),
    "kube-scheduler": ("scheduler", "https", "/healthz"),
    "kwok": ("kwok", "http", "/healthz"),
}

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


@dataclass
class RunState:
    """What `rljob dev down`, `rljob dev env` and reusing fixtures need to find a running plane."""

    profile: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)
    launcher_pid: int = 0
    ready: bool = False

    @staticmethod
    def path(run_dir: Path) -> Path:
        return run_dir / "state.json"

    def save(self, run_dir: Path) -> None:
        tmp = self.path(run_dir).with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.path(run_dir))

    @classmethod
    def load(cls, run_dir: Path) -> RunState:
        return cls(**json.loads(cls.path(run_dir).read_text()))


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    """Polls check until it returns True; raises ControlPlaneError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except ControlPlaneError:
            raise
        except Exception as exc:  # a probe failing is the normal not-ready-yet case
            last_error = f" (last error: {exc})"
        time.sleep(interval)
    raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}{last_error}")


class RunDir:
    """File layout of one run folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.pki = pki.PKIPaths(root / "pki")
        self.kubeconfig = root / "admin.kubeconfig"
        self.audit_log = root / "logs" / "audit.log"
        self.audit_policy = root / "audit-policy.yaml"
        self.stages = root / "kwok-stages.yaml"
        self.etcd_data = root / "etcd"


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

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.state.ports['apiserver']}"

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
        self.state.ports = dict(zip(_PORT_NAMES, free_ports(len(_PORT_NAMES)), strict=True))
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
            if "exited with" in str(exc):
                raise
            raise ControlPlaneError(f"{exc}\n--- {proc.log} ---\n{tail(proc.log)}") from None

    def _start_components(self, timeout: float) -> None:
        for name in ("etcd", "kube-apiserver"):
            self._await(self._spawn(name, self._argv(name)), self._ready_check(name), timeout)
        # The rest only need the API server: start them together, then wait for each.
        rest = [self._spawn(name, self._argv(name)) for name in COMPONENTS[2:]]
        for proc in rest:
            self._await(proc, self._ready_check(proc.name), timeout)

    def _argv(self, name: str) -> list[str]:
        args = {
            "etcd": self._etcd_args,
            "kube-apiserver": self._apiserver_args,
            "kube-controller-manager": self._kcm_args,
            "kube-scheduler": self._scheduler_args,
            "kwok": self._kwok_args,
        }
        return args[name]()

    def _ready_check(self, name: str) -> Callable[[], bool]:
        if name == "kube-apiserver":
            return self._apiserver_ready
        port_name, scheme, path = _HEALTH[name]
        url = f"{scheme}://127.0.0.1:{self.state.ports[port_name]}{path}"
        return functools.partial(_https_ok if scheme == "https" else _http_ok, url)

    def _apiserver_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.dir.pki.ca_crt))
        with urllib.request.urlopen(f"{self.server}/readyz", timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)

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

    def _etcd_args(self) -> list[str]:
        p = self.state.ports
        client, peer = f"http://127.0.0.1:{p['etcd']}", f"http://127.0.0.1:{p['etcd-peer']}"
        return [
            "--name=node0",
            f"--data-dir={self.dir.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=node0={peer}",
            "--listen-metrics-urls=",
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--log-level=warn",
        ]

    def _apiserver_args(self) -> list[str]:
        p, k = self.state.ports, self.dir.pki
        return [
            f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={p['apiserver']}",
            f"--tls-cert-file={k.server_crt}",
            f"--tls-private-key-file={k.server_key}",
            f"--client-ca-file={k.ca_crt}",
            # Set so delegated authentication in KCM/scheduler finds a bundle (quiet logs).
            f"--requestheader-client-ca-file={k.ca_crt}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={k.sa_pub}",
            f"--service-account-signing-key-file={k.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--endpoint-reconciler-type=none",
            "--allow-privileged=true",
            f"--cert-dir={self.dir.root / 'apiserver-certs'}",
            f"--audit-policy-file={self.dir.audit_policy}",
            f"--audit-log-path={self.dir.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--default-not-ready-toleration-seconds=10",
            "--default-unreachable-toleration-seconds=10",
            "--profiling=false",
        ]

    def _component_common(self, port_name: str) -> list[str]:
        return [
            f"--kubeconfig={self.dir.kubeconfig}",
            f"--authentication-kubeconfig={self.dir.kubeconfig}",
            f"--authorization-kubeconfig={self.dir.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.state.ports[port_name]}",
            f"--cert-dir={self.dir.root / (port_name + '-certs')}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def _kcm_args(self) -> list[str]:
        return [
            *self._component_common("controller-manager"),
            f"--root-ca-file={self.dir.pki.ca_crt}",
            f"--service-account-private-key-file={self.dir.pki.sa_key}",
            "--use-service-account-credentials=false",
            "--node-monitor-period=2s",
            "--node-monitor-grace-period=20s",
            *self._client_limits(),
            *([f"--controllers={_BENCH_CONTROLLERS}"] if self.profile.name == "bench" else []),
        ]

    def _scheduler_args(self) -> list[str]:
        return [*self._component_common("scheduler"), *self._client_limits()]

    def _client_limits(self) -> list[str]:
        qps, burst = (1000, 2000) if self.profile.name == "bench" else (100, 200)
        return [f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]

    def _kwok_args(self) -> list[str]:
        port = self.state.ports["kwok"]
        return [
            f"--kubeconfig={self.dir.kubeconfig}",
            f"--config={self.dir.stages}",
            f"--manage-nodes-with-label-selector=!{HEARTBEAT_STOP_LABEL}",
            f"--server-address=127.0.0.1:{port}",
            f"--node-port={port}",
            "--node-ip=127.0.0.1",
            "--node-name=localhost",
            "--node-lease-duration-seconds=10",
            "--cidr=10.244.0.0/16",
        ]


def admin_credentials(run: RunDir, state: RunState) -> Credentials:
    return Credentials(
        server=f"https://127.0.0.1:{state.ports['apiserver']}",
        ca_file=run.pki.ca_crt,
        cert_file=run.pki.admin_crt,
        key_file=run.pki.admin_key,
    )


def write_kubeconfig(
    run: RunDir, server: str, *, token: str | None = None, path: Path | None = None
) -> Path:
    """An admin kubeconfig (client certificate), or a token one when token is given."""
    user: dict[str, str] = (
        {"token": token}
        if token
        else {"client-certificate": str(run.pki.admin_crt), "client-key": str(run.pki.admin_key)}
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "rljob-dev",
                "cluster": {"server": server, "certificate-authority": str(run.pki.ca_crt)},
            }
        ],
        "users": [{"name": "rljob-dev", "user": user}],
        "contexts": [
            {"name": "rljob-dev", "context": {"cluster": "rljob-dev", "user": "rljob-dev"}}
        ],
        "current-context": "rljob-dev",
    }
    target = path or run.kubeconfig
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)
    return target


def running_plane(run_dir: Path) -> RunState:
    """The state of a ready plane in run_dir whose apiserver process is still alive."""
    state = RunState.load(run_dir)
    pid = state.pids.get("kube-apiserver", 0)
    if not state.ready or not pid_runs(pid, "kube-apiserver"):
        raise ControlPlaneError(f"no running control plane in {run_dir}")
    return state


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)


def _https_ok(url: str) -> bool:
    # Components serve self-signed certificates generated at start; health is all we read.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
        return bool(resp.status == 200)
