"""One control plane per test run (or a running one named by RLJOB_TEST_RUN_DIR), a fresh
namespace per test, and component log tails on failure."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.api import crd_manifest
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import (
    COMPONENTS,
    ControlPlane,
    RunDir,
    RunState,
    admin_credentials,
    running_plane,
    write_kubeconfig,
)
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.processes import free_ports, spawn, tail, terminate
from tests.helpers import wait_for


@dataclass
class Cluster:
    """A running local control plane as the tests see it."""

    run: RunDir
    state: RunState
    api: KubeApi

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.state.ports['apiserver']}"

    def log_tails(self, lines: int = 20) -> str:
        parts = [
            f"--- {name} ---\n{tail(self.run.logs / f'{name}.log', lines)}" for name in COMPONENTS
        ]
        return "\n".join(parts)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The control plane: reuses RLJOB_TEST_RUN_DIR's, or starts one for this run."""
    # Tests talk only to the plane they start or are pointed at, never to a user's cluster.
    os.environ.pop("KUBECONFIG", None)
    reuse = os.environ.get("RLJOB_TEST_RUN_DIR")
    if reuse:
        run = RunDir(Path(reuse))
        state = running_plane(run.root)
        yield Cluster(run, state, KubeApi(admin_credentials(run, state)))
        return
    with tempfile.TemporaryDirectory(prefix="rljob-test-") as tmp:
        plane = ControlPlane(Path(tmp), bin_dir(), "test")
        plane.start()
        try:
            yield Cluster(plane.dir, plane.state, plane.api())
        finally:
            plane.stop()


CRD_NAME = "rljobs.rljob.io"


@pytest.fixture(scope="session")
def crd(cluster: Cluster) -> dict[str, Any]:
    """The generated CRD, applied server-side and Established; returns the apply response."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    applied = cluster.api.apply(path, crd_manifest(), field_manager="rljob-tests")
    applied["warnings"] = cluster.api.last_warnings

    def established() -> bool:
        conditions = cluster.api.get(path).get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_for(established, 30, f"CRD {CRD_NAME} to be Established")
    return applied


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (with its default ServiceAccount), deleted afterwards."""
    base = request.node.name.split("[")[0].replace("_", "-").lower()[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    cluster.api.create("/api/v1/namespaces", {"metadata": {"name": name}})
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        f"the default ServiceAccount in {name}",
    )
    yield name
    try:
        cluster.api.delete(f"/api/v1/namespaces/{name}")
    except ApiError as exc:
        if exc.status != 404:
            raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cluster, op = funcargs.get("cluster"), funcargs.get("operator")
    if report.failed and isinstance(cluster, Cluster):
        report.sections.append(("control plane logs", cluster.log_tails()))
    if report.failed and isinstance(op, OperatorProcess):
        report.sections.append(("operator log", tail(op.log, 60)))
    return report


RBAC_RULES = (
    Path(__file__).resolve().parents[2] / "charts" / "rljob-operator" / "files" / "rbac-rules.yaml"
)
OPERATOR_NAMESPACE = "rljob-system"
OPERATOR_ACCOUNT = "rljob-operator"


def _apply_all(cluster: Cluster, objects: list[tuple[str, dict[str, Any]]]) -> None:
    for path, body in objects:
        cluster.api.apply(path, body, field_manager="rljob-tests")


def operator_identity(cluster: Cluster, kubeconfig: Path) -> Path:
    """A ServiceAccount bound to exactly the chart's rules, as a token kubeconfig."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = {"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE}
    role_ref = {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": OPERATOR_ACCOUNT,
    }
    _apply_all(
        cluster,
        [
            (
                f"/api/v1/namespaces/{OPERATOR_NAMESPACE}",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
            ),
            (
                f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{OPERATOR_ACCOUNT}",
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE},
                },
            ),
            (
                f"{rbac}/clusterroles/{OPERATOR_ACCOUNT}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": OPERATOR_ACCOUNT},
                    "rules": yaml.safe_load(RBAC_RULES.read_text()),
                },
            ),
            (
                f"{rbac}/clusterrolebindings/{OPERATOR_ACCOUNT}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": OPERATOR_ACCOUNT},
                    "roleRef": role_ref,
                    "subjects": [subject],
                },
            ),
        ],
    )
    token = cluster.api.create(
        f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/serviceaccounts/{OPERATOR_ACCOUNT}/token",
        {"spec": {"expirationSeconds": 86400}},
    )["status"]["token"]
    return write_kubeconfig(cluster.run, cluster.server, token=token, path=kubeconfig)


@dataclass
class OperatorProcess:
    """The operator running as a subprocess under its ServiceAccount."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_url: str
    user: str = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"

    def stop(self) -> None:
        terminate(self.process.pid, grace=15)


def start_operator(cluster: Cluster, workdir: Path, *extra: str) -> OperatorProcess:
    kubeconfig = operator_identity(cluster, workdir / "operator.kubeconfig")
    metrics, liveness = free_ports(2)
    log = workdir / "operator.log"
    cmd = [
        sys.executable,
        "-m",
        "rljob.cli",
        "run",
        f"--kubeconfig={kubeconfig}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics}",
        f"--liveness-port={liveness}",
        "--resync-seconds=20",
        *extra,
    ]
    proc = spawn("operator", cmd, workdir).process
    op = OperatorProcess(
        proc, log=workdir / "operator.log", metrics_url=f"http://127.0.0.1:{metrics}/metrics"
    )
    liveness_url = f"http://127.0.0.1:{liveness}/healthz"

    def alive() -> bool:
        assert proc.poll() is None, f"operator exited {proc.returncode}:\n{tail(log, 40)}"
        with urllib.request.urlopen(liveness_url, timeout=2) as resp:
            return bool(resp.status == 200)

    wait_for(alive, 60, "the operator's liveness endpoint")
    return op


@pytest.fixture(scope="session")
def operator(
    cluster: Cluster, crd: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """One operator for the session, under the least-privilege ServiceAccount."""
    op = start_operator(cluster, tmp_path_factory.mktemp("operator"))
    yield op
    op.stop()
