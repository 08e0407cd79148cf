"""One control plane per test run (or a running one named by RLJOB_TEST_RUN_DIR), a fresh
namespace per test, the CRD, the operator under its ServiceAccount, and log tails on failure.

Under pytest-xdist (`-n N`) the workers share one plane that the controller starts: each worker
runs its own operator, simulator, Prometheus and S3 server, and its operator and simulator watch
only the worker's namespaces ("gw0-*"), as `rljob run --namespace` does for a team. A test marked
cluster_wide changes what every namespace shares, so it runs without -n, on its own plane."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import urllib.parse
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rljob.dev.bed import BED_ALLOWLIST, OperatorProcess, install_crd, start_operator
from rljob.dev.binaries import bin_dir
from rljob.dev.components import COMPONENTS
from rljob.dev.controlplane import ControlPlane, running_plane
from rljob.dev.kubeapi import ApiError, KubeApi
from rljob.dev.processes import tail
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.rundir import RunDir, RunState, admin_credentials
from rljob.dev.s3server import S3Server
from rljob.dev.sim import Simulator
from rljob.dev.sim.launcher import start_with_prometheus
from tests.helpers import wait_for
from tests.integration.s3_fixtures import (  # noqa: F401 - fixtures for every integration test
    private_s3_fixture,
    s3_bucket_fixture,
    s3_server_fixture,
)
from tests.integration.worker import WATCHED, WORKER, namespace_name
from tests.unit.monitoring import scaled_rule_groups

SHARED_PLANE = pytest.StashKey[ControlPlane]()


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller starts the plane its workers share (they inherit the variable)."""
    shared = getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    if not shared or os.environ.get("RLJOB_TEST_RUN_DIR"):
        return
    plane = ControlPlane(Path(tempfile.mkdtemp(prefix="rljob-test-")), bin_dir(), "test")
    plane.start()
    config.stash[SHARED_PLANE] = plane
    os.environ["RLJOB_TEST_RUN_DIR"] = str(plane.dir.root)


def pytest_unconfigure(config: pytest.Config) -> None:
    plane = config.stash.get(SHARED_PLANE, None)
    if plane is not None:
        plane.stop()
        os.environ.pop("RLJOB_TEST_RUN_DIR", None)
        shutil.rmtree(plane.dir.root, ignore_errors=True)


@pytest.fixture(autouse=True)
def _alone_when_cluster_wide(request: pytest.FixtureRequest) -> None:
    if WORKER and request.node.get_closest_marker("cluster_wide"):
        pytest.fail(
            "a cluster_wide test would change what the other workers share: run these without "
            "-n (tools/test.sh does: pytest -m cluster_wide tests/integration)"
        )


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
        return "\n".join(
            f"--- {name} ---\n{tail(self.run.logs / f'{name}.log', lines)}" for name in COMPONENTS
        )


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


@pytest.fixture(scope="session")
def crd(cluster: Cluster) -> list[str]:
    """The generated CRD, applied server-side and Established; returns the API's warnings."""
    return install_crd(cluster.api)


OPERATOR_SCRAPE_JOB = "rljob-operator"  # the scrape job the shipped rules expect


class Operator:
    """The session's operator under its least-privilege ServiceAccount; tests may restart it
    (with a different environment) or kill it, and it is running again for the next test."""

    def __init__(self, cluster: Cluster, workdir: Path, store: S3Server) -> None:
        self.cluster, self.workdir, self.store = cluster, workdir, store
        self.custom = False
        self.prometheus: PrometheusServer | None = None
        self.current = self.start()

    @property
    def user(self) -> str:
        return self.current.user

    @property
    def log(self) -> Path:
        return self.current.log

    @property
    def metrics_url(self) -> str:
        return self.current.metrics_url

    def start(self, env: dict[str, str] | None = None) -> OperatorProcess:
        # The operator's own S3 identity: the session's store, unless a test says otherwise.
        environment = {**self.store.env(), **(env or {})}
        started = start_operator(
            self.cluster.api, self.cluster.run, self.workdir, "--resync-seconds=20",
            *BED_ALLOWLIST, env=environment, watch=WATCHED,
        )  # fmt: skip
        if self.prometheus is not None:
            self.prometheus.set_static_targets(OPERATOR_SCRAPE_JOB, [_address(started)])
        return started

    def scraped_by(self, prometheus: PrometheusServer) -> None:
        """The bed's Prometheus scrapes this operator (as the chart's ServiceMonitor would),
        also after restarts."""
        self.prometheus = prometheus
        prometheus.set_static_targets(OPERATOR_SCRAPE_JOB, [_address(self.current)])

    def restart(self, env: dict[str, str] | None = None) -> None:
        self.current.stop()
        self.custom = env is not None
        self.current = self.start(env)

    def ensure_default(self) -> None:
        if self.current.process.poll() is not None or self.custom:
            self.restart()


@pytest.fixture(scope="session")
def operator_session(
    cluster: Cluster, crd: list[str], s3_server: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    op = Operator(cluster, tmp_path_factory.mktemp("operator"), s3_server)
    yield op
    op.current.stop()


@pytest.fixture
def operator(operator_session: Operator) -> Iterator[Operator]:
    """The running operator; restored to its default configuration after each test."""
    yield operator_session
    operator_session.ensure_default()


def _address(started: OperatorProcess) -> str:
    return urllib.parse.urlsplit(started.metrics_url).netloc


@pytest.fixture(scope="session")
def stack(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Simulator, PrometheusServer]]:
    """The simulator (the process's namespaces) and Prometheus (1 s scrape and evaluation) with the
    shipped alert rules at second scale (1/60: 30m -> 30s), for the run."""
    run_dir = tmp_path_factory.mktemp("sim-prometheus")
    rules = run_dir / "rljob-rules-scaled.yaml"
    rules.write_text(yaml.safe_dump({"groups": scaled_rule_groups(1 / 60)}, sort_keys=False))
    sim, prometheus = start_with_prometheus(
        run_dir,
        cluster.run.kubeconfig,
        rule_files=[rules],
        namespaces=WATCHED,
        scrape_interval="1s",
        evaluation_interval="1s",
    )
    yield sim, prometheus
    prometheus.stop()
    sim.stop()


@pytest.fixture(scope="session")
def simulator(stack: tuple[Simulator, PrometheusServer]) -> Simulator:
    return stack[0]


@pytest.fixture(scope="session")
def prometheus(stack: tuple[Simulator, PrometheusServer]) -> PrometheusServer:
    return stack[1]


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test (with its default ServiceAccount), deleted afterwards; under
    xdist named after the worker, whose operator and simulator watch it."""
    base = request.node.name.split("[")[0].replace("_", "-").lower()[:40].strip("-")
    name = create_namespace(cluster, base)
    yield name
    delete_namespace(cluster, name)


def create_namespace(cluster: Cluster, base: str) -> str:
    """A new namespace named after `base` (under xdist after the worker too), once its default
    ServiceAccount exists."""
    name = namespace_name(f"{base}-{secrets.token_hex(3)}")
    cluster.api.create("/api/v1/namespaces", {"metadata": {"name": name}})
    wait_for(
        lambda: cluster.api.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        30,
        f"the default ServiceAccount in {name}",
    )
    return name


def delete_namespace(cluster: Cluster, name: str) -> None:
    """Deletes the namespace, then its Jobs. The namespace controller deletes a namespace's
    pods before anything else (OrderedNamespaceDeletion, kubernetes v1.36.3
    pkg/controller/namespace/deletion/namespaced_resources_deleter.go:533-562), and a deleted Job
    pod keeps its batch.kubernetes.io/job-tracking finalizer until it ends or its Job is gone.
    kwok has no kubelet to end it, so the namespace stayed Terminating for minutes, its jobs
    still simulated, scraped and reconciled (68 such namespaces at once on the shared plane)."""
    for path in (
        f"/api/v1/namespaces/{name}",  # first: nothing new is created in it from now on
        f"/apis/batch/v1/namespaces/{name}/jobs?propagationPolicy=Background",
    ):
        try:
            cluster.api.delete(path)
        except ApiError as exc:
            if exc.status != 404:
                raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cluster, op = funcargs.get("cluster"), funcargs.get("operator")
    if report.failed and isinstance(cluster, Cluster):
        report.sections.append(("control plane logs", cluster.log_tails()))
    if report.failed and isinstance(op, Operator):
        report.sections.append(("operator log", tail(op.log, 60)))
    namespace = funcargs.get("namespace")
    if report.failed and isinstance(cluster, Cluster) and isinstance(namespace, str):
        report.sections.append(("the namespace's RLJobs and Events", _story(cluster, namespace)))
    return report


def _story(cluster: Cluster, namespace: str) -> str:
    """Each RLJob's status and the namespace's last Events: what the operator decided, which
    the operator's log, which records no action, does not tell."""
    try:
        jobs = cluster.api.get(f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/rljobs")["items"]
        events = cluster.api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    except ApiError as exc:
        return f"not readable: {exc}"
    statuses = {job["metadata"]["name"]: job.get("status", {}) for job in jobs}
    told = sorted(events, key=lambda e: str(e.get("lastTimestamp")))
    lines = [
        f"{e.get('lastTimestamp')} {e.get('type')} {e.get('reason')} "
        f"{e['involvedObject'].get('name')}: {e.get('message')}"
        for e in told[-40:]
    ]
    return yaml.safe_dump(statuses, sort_keys=False) + "\n".join(lines)
