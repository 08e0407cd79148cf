"""The operator on the local control plane: CRD install, its least-privilege identity, and the
operator process. Shared by `rljob dev demo` and the integration fixtures."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rljob.api import crd_manifest
from rljob.dev.controlplane import ControlPlaneError, wait_until
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.processes import free_ports, spawn, tail, terminate
from rljob.dev.rundir import RunDir, write_kubeconfig

CRD_NAME = "rljobs.rljob.io"
OPERATOR_NAMESPACE = "rljob-system"
OPERATOR_ACCOUNT = "rljob-operator"
OPERATOR_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{OPERATOR_ACCOUNT}"
FIELD_MANAGER = "rljob-dev"


def rbac_rules(*, kueue: bool = False) -> list[dict[str, Any]]:
    """The chart's rules (charts/rljob-operator/files/rbac-rules.yaml), one source of truth;
    `kueue`: with the rules its kueue.enabled adds (rbac-rules-kueue.yaml)."""
    names = ("rbac-rules.yaml", "rbac-rules-kueue.yaml") if kueue else ("rbac-rules.yaml",)
    return [rule for name in names for rule in _chart_rules(name)]


def _chart_rules(name: str) -> list[dict[str, Any]]:
    repo_file = Path(__file__).resolve().parents[3] / "charts" / "rljob-operator" / "files" / name
    text = (
        repo_file.read_text()
        if repo_file.exists()
        else resources.files("rljob.dev").joinpath(name).read_text()
    )
    rules: list[dict[str, Any]] = yaml.safe_load(text)
    return rules


def install_crd(api: KubeApi) -> list[str]:
    """Server-side applies the generated CRD, waits until Established; returns API warnings."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    api.apply(path, crd_manifest(), field_manager=FIELD_MANAGER)
    warnings = list(api.last_warnings)

    def established() -> bool:
        conditions = api.get(path).get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_until(established, 30, f"CRD {CRD_NAME} to be Established")
    return warnings


def ensure_namespace(api: KubeApi, name: str, timeout: float = 60.0) -> None:
    """Creates the namespace (an existing one is fine) and waits for its default
    ServiceAccount, without which no pod can be created in it."""
    try:
        api.create("/api/v1/namespaces", {"metadata": {"name": name}})
    except ApiError as exc:
        if exc.status != 409:
            raise
    wait_until(
        lambda: bool(api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")),
        timeout,
        f"the default ServiceAccount in {name}",
    )


def _object(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def _identity_objects(*, kueue: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The operator's ServiceAccount bound to the chart's rules; `kueue`: another account, with
    the rules kueue.enabled adds too, so the default operator's identity stays as it is."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    ns, sa = OPERATOR_NAMESPACE, f"{OPERATOR_ACCOUNT}-kueue" if kueue else OPERATOR_ACCOUNT
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa}
    return [
        (
            f"/api/v1/namespaces/{ns}",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        ),
        (
            f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": sa, "namespace": ns},
            },
        ),
        (
            f"{rbac}/clusterroles/{sa}",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": sa},
                "rules": rbac_rules(kueue=kueue),
            },
        ),
        (
            f"{rbac}/clusterrolebindings/{sa}",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": sa},
                "roleRef": role_ref,
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}],
            },
        ),
    ]


def service_account_token(api: KubeApi, namespace: str, account: str) -> str:
    """A one-day token of the ServiceAccount from the TokenRequest API."""
    token: str = api.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"spec": {"expirationSeconds": 86400}},
    )["status"]["token"]
    return token


def operator_kubeconfig(api: KubeApi, run: RunDir, path: Path, *, kueue: bool = False) -> Path:
    """A token kubeconfig for the operator's ServiceAccount, bound to exactly the chart's rules
    (with `kueue`, those of a chart installed with kueue.enabled)."""
    for object_path, body in _identity_objects(kueue=kueue):
        api.apply(object_path, body, field_manager=FIELD_MANAGER)
    account = f"{OPERATOR_ACCOUNT}-kueue" if kueue else OPERATOR_ACCOUNT
    token = service_account_token(api, OPERATOR_NAMESPACE, account)
    return write_kubeconfig(run, api.creds.server, token=token, path=path)


@dataclass
class OperatorProcess:
    """The operator running as a subprocess."""

    process: subprocess.Popen[bytes]
    log: Path
    metrics_url: str
    user: str = OPERATOR_USER
    liveness_url: str = ""

    def stop(self) -> None:
        terminate(self.process.pid, grace=15)


# What the bed's jobs may name: its loopback Prometheus servers, S3 server and fault proxies, on
# any port (a chart install allows neither; docs/install.md).
BED_ALLOWLIST = (
    "--allow-prometheus-url=http://127.0.0.1:*",
    "--allow-s3-endpoint=http://127.0.0.1:*",
)


def start_operator(
    api: KubeApi,
    run: RunDir,
    workdir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    watch: Sequence[str] = (),
    kueue: bool = False,
) -> OperatorProcess:
    """Starts `rljob run` under the operator's ServiceAccount and waits for its liveness probe;
    `watch`: only these namespaces or patterns (default: every namespace); `kueue`: as a chart
    installed with kueue.enabled (`--kueue`, and the rules that adds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = operator_kubeconfig(api, run, workdir / "operator.kubeconfig", kueue=kueue)
    scope = [f"--namespace={each}" for each in watch]
    flags = ["--kueue"] if kueue else []
    return launch_operator(kubeconfig, workdir, *scope, *flags, *extra, env=env)


def launch_operator(
    kubeconfig: Path,
    workdir: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    user: str = OPERATOR_USER,
) -> OperatorProcess:
    """Starts `rljob run` with the kubeconfig's identity (`user` names it) and waits for its
    liveness probe."""
    workdir.mkdir(parents=True, exist_ok=True)
    metrics, liveness = free_ports(2)
    cmd = [
        # The bed's entry arms RLJOB_TEST_CRASH_POINT; `rljob run` itself never reads it.
        sys.executable, "-m", "rljob.dev.crash_entry", "run",
        f"--kubeconfig={kubeconfig}",
        "--metrics-address=127.0.0.1",
        f"--metrics-port={metrics}",
        f"--liveness-port={liveness}",
        *extra,
    ]  # fmt: skip
    managed = spawn("operator", cmd, workdir, env=env)
    op = OperatorProcess(
        managed.process,
        managed.log,
        f"http://127.0.0.1:{metrics}/metrics",
        user,
        f"http://127.0.0.1:{liveness}/healthz",
    )

    def alive() -> bool:
        if op.process.poll() is not None:
            raise ControlPlaneError(f"operator exited {op.process.returncode}:\n{tail(op.log, 40)}")
        with urllib.request.urlopen(op.liveness_url, timeout=2) as resp:
            return bool(resp.status == 200)

    wait_until(alive, 60, "the operator's liveness endpoint")
    return op
