"""One control plane per test run (or a running one named by RLJOB_TEST_RUN_DIR), a fresh
namespace per test, and component log tails on failure."""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rljob.api import crd_manifest
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import (
    COMPONENTS,
    ControlPlane,
    RunDir,
    RunState,
    admin_credentials,
    running_plane,
)
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.processes import tail
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
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(cluster, Cluster):
        report.sections.append(("control plane logs", cluster.log_tails()))
    return report
