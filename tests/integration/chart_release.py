"""The Helm chart (charts/rljob-operator) installed into the test control plane with the real
helm: a release of its own name (its cluster-scoped RBAC never meets the bed's), the chart's
ServiceAccount as an API client, and the operator run as the chart's Deployment would run it,
under that ServiceAccount's token."""

from __future__ import annotations

import base64
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.dev.bed import OperatorProcess, ensure_namespace, launch_operator, service_account_token
from rljob.dev.binaries import bin_dir
from rljob.dev.kubeapi import Credentials, KubeApi
from rljob.dev.processes import tail
from rljob.dev.rundir import write_kubeconfig
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator, delete_namespace
from tests.integration.rljobs import admission_refusal, example, second_scale_health

CHART = Path(__file__).resolve().parents[2] / "charts" / "rljob-operator"
# The local process listens on free ports; every other flag is the chart's.
LOCAL_FLAGS = ("--metrics-port=", "--liveness-port=")

Obj = dict[str, Any]
# The bed's loopback Prometheus and S3 servers, allowed explicitly (the chart allows neither).
BED_VALUES = {
    "allowlist.prometheusUrls": "{http://127.0.0.1:*}",
    "allowlist.s3Endpoints": "{http://127.0.0.1:*}",
}


def helm_binary() -> Path:
    path = bin_dir() / "helm"
    if not path.is_file():
        pytest.fail(f"{path} is missing: tools/build.sh builds it from tools/helm")
    return path


def run_helm(*args: str) -> str:
    done = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, f"helm {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


@dataclass
class Release:
    """One helm release of the chart in a namespace of its own."""

    cluster: Cluster
    name: str
    namespace: str
    objects: list[Obj] = field(default_factory=list)

    def helm(self, *args: str) -> str:
        return run_helm(f"--kubeconfig={self.cluster.run.kubeconfig}", *args)

    def install(self, values: dict[str, str]) -> None:
        """`helm install --wait`: fails unless the API server accepts every object and the
        Deployment becomes available (kwok runs its pod)."""
        sets = [f"--set={key}={value}" for key, value in {**BED_VALUES, **values}.items()]
        self.helm("install", self.name, str(CHART), f"--namespace={self.namespace}",
                  "--wait", "--timeout=90s", *sets)  # fmt: skip
        manifest = self.helm("get", "manifest", self.name, f"--namespace={self.namespace}")
        self.objects = [doc for doc in yaml.safe_load_all(manifest) if doc]

    def find(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    @property
    def account(self) -> str:
        (account,) = self.find("ServiceAccount")
        return str(account["metadata"]["name"])

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"

    @property
    def container(self) -> Obj:
        (deployment,) = self.find("Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        return dict(container)

    def operator_args(self) -> list[str]:
        """The chart's `rljob run` flags but the ports."""
        return [arg for arg in self.container["args"] if not arg.startswith(LOCAL_FLAGS)]

    def operator_env(self) -> dict[str, str]:
        """The container's plain variables and its envFrom Secrets, read as the kubelet does."""
        env = {e["name"]: e["value"] for e in self.container.get("env", []) if "value" in e}
        for source in self.container.get("envFrom", []):
            name = source["secretRef"]["name"]
            secret = self.cluster.api.get(f"/api/v1/namespaces/{self.namespace}/secrets/{name}")
            env.update(_decoded(secret.get("data") or {}))
        return env

    def token(self) -> str:
        return service_account_token(self.cluster.api, self.namespace, self.account)

    def api(self) -> KubeApi:
        """A client authenticated as the chart's ServiceAccount."""
        ca_file = self.cluster.api.creds.ca_file
        return KubeApi(Credentials(self.cluster.server, ca_file, token=self.token()))

    def kubeconfig(self, path: Path) -> Path:
        return write_kubeconfig(
            self.cluster.run, self.cluster.server, token=self.token(), path=path
        )


def _decoded(data: dict[str, str]) -> dict[str, str]:
    """A Secret's data, base64-decoded."""
    return {key: base64.b64decode(value).decode() for key, value in data.items()}


def new_release(cluster: Cluster) -> Release:
    """A release name and an empty release namespace (for Secrets the values name)."""
    suffix = secrets.token_hex(3)
    release = Release(cluster, f"it{suffix}", f"rljob-chart-{suffix}")
    ensure_namespace(cluster.api, release.namespace)
    return release


@contextmanager
def installed(release: Release, values: dict[str, str]) -> Iterator[Release]:
    """The release installed; uninstalled with its namespace afterwards."""
    try:
        release.install(values)
        yield release
    finally:
        release.helm("uninstall", release.name, f"--namespace={release.namespace}",
                     "--ignore-not-found")  # fmt: skip
        _wait_policies_gone(release)
        delete_namespace(release.cluster, release.namespace)


def _wait_policies_gone(release: Release) -> None:
    """Until the API server stops applying the release's admission policies: its policy cache
    lags their deletion, and the next test's jobs must not meet them."""
    names = [p["metadata"]["name"] for p in release.find("ValidatingAdmissionPolicy")]
    # A Prometheus the bed's allowlist leaves out: the reach policy refuses it while it applies.
    body = example(health=second_scale_health({"prometheus": {"url": "http://127.0.0.2:9"}}))

    def gone() -> bool:
        refusal = admission_refusal(release.cluster, release.namespace, body) or ""
        return not any(f"'{name}'" in refusal for name in names)

    if names:
        wait_for(gone, 60, f"the admission policies {names} to stop applying")


@contextmanager
def chart_operator(release: Release, workdir: Path) -> Iterator[OperatorProcess]:
    """`rljob run` with the chart's flags and environment under the chart's ServiceAccount; a
    failure in the block carries the operator's log."""
    kubeconfig = release.kubeconfig(workdir / "chart-operator.kubeconfig")
    op = launch_operator(kubeconfig, workdir, *release.operator_args(),
                         env=release.operator_env(), user=release.user)  # fmt: skip
    try:
        yield op
    except BaseException as exc:
        exc.add_note(f"--- chart operator log ---\n{tail(op.log, 60)}")
        raise
    finally:
        op.stop()


def step_aside(session_operator: Operator) -> None:
    """Stops the session's operator (two would both act on every job); the `operator` fixture's
    teardown, or Operator.ensure_default, starts it again."""
    session_operator.current.stop()
    session_operator.custom = True


def allowed(api: KubeApi, verb: str, resource: str, **attributes: str) -> bool:
    """A SelfSubjectAccessReview: may api's identity do verb on resource (group, namespace,
    subresource, name as keyword attributes)?"""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": verb, "resource": resource, **attributes}},
    }
    answer = api.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))
