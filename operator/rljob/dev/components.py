"""The components of the local control plane: the command line each one runs with, and the probe
that says it is ready."""

from __future__ import annotations

import functools
import ssl
import urllib.request
from collections.abc import Callable

from rljob.dev.nodes import NodeProfile
from rljob.dev.rundir import RunDir, RunState

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
HEARTBEAT_STOP_LABEL = "sim.rljob.io/heartbeat-stopped"
PORT_NAMES = ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok")
# The bench profile raises the components' client rate limits and runs only the controllers an
# RLJob's children need, so the control plane is not the bottleneck being measured (the node
# lifecycle controller lifts the not-ready taint new nodes are admitted with).
_BENCH_CONTROLLERS = (
    "deployment-controller,replicaset-controller,job-controller,garbage-collector-controller,"
    "serviceaccount-controller,namespace-controller,node-lifecycle-controller"
)
# Every other profile runs every controller but the endpoint ones: the bed's pod IPs are
# loopback aliases (rljob.dev.podnet), which EndpointSlices may not hold, so those controllers
# only failed, retried and logged a warning per Service and pod change. Nothing reads them.
_WITHOUT_ENDPOINTS = (
    "*,-endpoints-controller,-endpointslice-controller,-endpointslice-mirroring-controller"
)
# Per component but the API server (/readyz with the cluster CA): its health endpoint as
# (port name, scheme, path).
_HEALTH = {
    "etcd": ("etcd", "http", "/health"),
    "kube-controller-manager": ("controller-manager", "https", "/healthz"),
    "kube-scheduler": ("scheduler", "https", "/healthz"),
    "kwok": ("kwok", "http", "/healthz"),
}


class Components:
    """The flags and readiness probes of one plane's components; ports are read from the state
    at call time (the plane picks them when it prepares the run folder)."""

    def __init__(self, run: RunDir, state: RunState, profile: NodeProfile) -> None:
        self.dir = run
        self.state = state
        self.profile = profile

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.state.ports['apiserver']}"

    def argv(self, name: str) -> list[str]:
        args = {
            "etcd": self._etcd_args,
            "kube-apiserver": self._apiserver_args,
            "kube-controller-manager": self._kcm_args,
            "kube-scheduler": self._scheduler_args,
            "kwok": self._kwok_args,
        }
        return args[name]()

    def ready_check(self, name: str) -> Callable[[], bool]:
        if name == "kube-apiserver":
            return self._apiserver_ready
        port_name, scheme, path = _HEALTH[name]
        url = f"{scheme}://127.0.0.1:{self.state.ports[port_name]}{path}"
        return functools.partial(_https_ok if scheme == "https" else _http_ok, url)

    def _apiserver_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.dir.pki.ca_crt))
        with urllib.request.urlopen(f"{self.server}/readyz", timeout=2, context=ctx) as resp:
            return bool(resp.status == 200)

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
        controllers = _BENCH_CONTROLLERS if self.profile.name == "bench" else _WITHOUT_ENDPOINTS
        return [
            *self._component_common("controller-manager"),
            f"--root-ca-file={self.dir.pki.ca_crt}",
            f"--service-account-private-key-file={self.dir.pki.sa_key}",
            "--use-service-account-credentials=false",
            "--node-monitor-period=2s",
            "--node-monitor-grace-period=20s",
            *self._client_limits(),
            f"--controllers={controllers}",
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
            f"--cidr={self.state.pod_cidr or '10.244.0.0/16'}",
        ]


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
