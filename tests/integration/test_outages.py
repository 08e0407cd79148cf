"""Outages of what the operator depends on, survived with nothing lost (issue #9).

- The API server and etcd restarted (SIGTERM or SIGKILL) under a running job, on a private
  control plane: the operator's watches resume, a failure and a spec change around the outage
  are each acted on once, and status catches up.
- The checkpoint store unavailable, slow, or failing in the middle of a listing when a trainer
  attempt starts: the attempt waits with a condition naming the problem, nothing is deleted, and
  once the store answers again it resumes from the newest eligible complete version. (An RLJob
  re-created under an old name while its store is down still continues its attempt numbers.)
- Prometheus slow or answering with series missing: evaluations say "insufficient data" and
  nothing is restarted.

The faults sit in loopback proxies (tests/integration/fault_proxy.py) between the operator and
the real servers.
"""

from __future__ import annotations

import datetime as dt
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from rljob.checkpoint_protocol.layout import CheckpointLocation
from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.dev.audit import writes_by_user
from rljob.dev.bed import (
    BED_ALLOWLIST,
    OperatorProcess,
    ensure_namespace,
    install_crd,
    start_operator,
)
from rljob.dev.binaries import bin_dir
from rljob.dev.controlplane import ControlPlane
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.scrape import metric_values
from rljob.sdk.checkpoint import CheckpointWriter
from tests.helpers import quiet_for, wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.fault_proxy import Fault, PrometheusFaultProxy, TcpFaultProxy
from tests.integration.rljobs import (
    DEPLOYMENTS,
    JOBS,
    PODS,
    apply_rljob,
    children,
    condition,
    example,
    fail_rank0,
    get_rljob,
    patch_spec,
    rljob_path,
    settled_job,
    trainer_env,
    wait_condition,
)
from tests.integration.s3_fixtures import S3Bucket

# own_plane: restarts the API server and etcd of a private control plane (started once per
# process: xdist_group keeps the module on one worker when it runs under -n).
pytestmark = [pytest.mark.integration, pytest.mark.own_plane, pytest.mark.xdist_group("outages")]

NAME = "grpo-minimal"


def _jobs(cluster: Cluster, namespace: str) -> list[str]:
    return sorted(j["metadata"]["name"] for j in children(cluster, namespace, JOBS, NAME))


def _restart_trainer(cluster: Cluster, namespace: str, nonce: str) -> None:
    annotations = {"rljob.io/restart-request": f"trainer/{nonce}"}
    cluster.api.merge_patch(rljob_path(namespace, NAME), {"metadata": {"annotations": annotations}})


# ------------------------------------------------------------------ API server and etcd


@dataclass
class PrivatePlane:
    """A control plane of this module's own, with an operator: its outages harm no other test."""

    plane: ControlPlane
    cluster: Cluster
    operator: OperatorProcess


@pytest.fixture(scope="module")
def private_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivatePlane]:
    root = tmp_path_factory.mktemp("outage-plane")
    plane = ControlPlane(root / "plane", bin_dir(), "test")
    plane.start()
    try:
        api = plane.api()
        install_crd(api)
        operator = start_operator(
            api, plane.dir, root / "operator", "--resync-seconds=20", *BED_ALLOWLIST
        )
        try:
            yield PrivatePlane(plane, Cluster(plane.dir, plane.state, api), operator)
        finally:
            operator.stop()
    finally:
        plane.stop()


# Stopped in this order, started in the reverse one. The controller manager goes down with the
# API server, as on a control-plane node's restart: one left running marks every node NotReady
# while its lease watch reconnects, and kwok's simulated kubelets never set pods Ready again.
OUTAGE = ("kube-controller-manager", "kube-apiserver", "etcd")


def _outage(plane: ControlPlane, *, kill: bool, down_for: float) -> None:
    """The API server and etcd stopped, kept down `down_for` seconds, started again."""
    for name in OUTAGE:
        plane.stop_component(name, kill=kill)
    with pytest.raises(OSError):
        plane.api().get("/version")
    quiet_for(down_for)
    for name in reversed(OUTAGE):
        plane.start_component(name)


@pytest.mark.parametrize("kill", [False, True], ids=["SIGTERM", "SIGKILL"])
def test_after_an_api_server_and_etcd_restart_watches_resume_and_nothing_is_done_twice(
    private_plane: PrivatePlane, kill: bool
) -> None:
    plane, cluster, operator = private_plane.plane, private_plane.cluster, private_plane.operator
    namespace = f"apiserver-restart-{secrets.token_hex(3)}"
    ensure_namespace(cluster.api, namespace)
    apply_rljob(cluster, namespace, example())
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    since = dt.datetime.now(dt.UTC)

    # A trainer failure lands just before the outage: the operator acts on it before, during
    # or after the restart, and exactly once.
    fail_rank0(cluster, namespace, NAME)
    _outage(plane, kill=kill, down_for=5)
    assert operator.process.poll() is None, "the operator exited during the outage"
    wait_for(lambda: _jobs(cluster, namespace) == [f"{NAME}-trainer-a2"], 90, "attempt 2 alone")

    # A change made after the restart reaches the operator through its resumed watches.
    patch_spec(cluster, namespace, NAME, {"roles": {"rollout": {"replicas": 3}}})
    job = wait_for(
        lambda: settled_job(cluster, namespace, NAME, replicas=3), 90, "status to catch up"
    )
    (deployment,) = children(cluster, namespace, DEPLOYMENTS, NAME, "rollout")
    assert deployment["spec"]["replicas"] == 3
    assert job["status"]["attempt"] == 2
    assert job["status"]["restarts"]["total"] == 1
    assert job["status"]["restarts"]["byReason"] == {"NCCLTimeout": 1}

    # Settled means quiet: past a resync, no write at all, and still one attempt 2.
    quiet_from = dt.datetime.now(dt.UTC)
    settled = get_rljob(cluster, namespace, NAME)["status"]
    quiet_for(25)
    writes = [
        w
        for w in writes_by_user(plane.dir.audit_log, operator.user, since=quiet_from)
        if w.namespace == namespace
    ]
    now = get_rljob(cluster, namespace, NAME)["status"]
    changed = {
        key: now.get(key) for key in settled.keys() | now.keys() if settled.get(key) != now.get(key)
    }
    assert writes == [], f"the status fields the writes changed: {changed}"
    assert _jobs(cluster, namespace) == [f"{NAME}-trainer-a2"]
    deletes = [
        w.name
        for w in writes_by_user(plane.dir.audit_log, operator.user, since=since)
        if w.namespace == namespace and w.resource == "jobs" and w.verb == "delete"
    ]
    assert deletes == [f"{NAME}-trainer-a1"]


# ------------------------------------------------------------------ the checkpoint store

BIG_SHARDS = 1100  # more keys than one ListObjectsV2 page (1000) of the operator's listings


@dataclass(frozen=True)
class StoreFault:
    fault: Fault
    says: str  # what the condition's message names
    counted: str  # the proxy's count of the fault it applied
    blocks: bool = True  # False: only retention's full listing fails; the attempt starts


STORE_FAULTS = {
    "unavailable": StoreFault(Fault.REFUSE, "Connection was closed", "refused"),
    "slow": StoreFault(Fault.SLOW, "no answer within 10s", "delayed"),
    # Discovery reads the pointer and one page after it; retention's full listing is what a
    # cut later page breaks, and retention never blocks an attempt.
    "failing mid-listing": StoreFault(
        Fault.CUT_LATER_PAGES, "list_objects_v2", "cut", blocks=False
    ),
}


class History:
    """The store as an earlier RLJob of the same name left it, and then attempt 3 wrote."""

    def __init__(self, bucket: S3Bucket, namespace: str) -> None:
        self.bucket = bucket
        self.location = CheckpointLocation(bucket.name, "ckpt", namespace, NAME)

    def writer(self, attempt: int, *, fenced: bool = True) -> CheckpointWriter:
        return CheckpointWriter(
            self.location, attempt, endpoint=self.bucket.endpoint, check_newer_attempt=fenced
        )

    def earlier_job(self) -> None:
        """Attempt 1 saved step 100 (more objects than a listing page, its manifest on the
        second page); attempt 2 resumed from it and saved step 200."""
        self.marker(1, None)
        with self.writer(1).version(100) as big, ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: big.write_bytes(f"data/{i:04d}", b"w"), range(BIG_SHARDS)))
        self.marker(2, 100)
        self.commit(self.writer(2), 200)

    def marker(self, attempt: int, resumed: int | None) -> None:
        self.bucket.store(self.location).write_marker(
            AttemptMarker(
                job=NAME,
                namespace=self.location.namespace,
                job_uid="an-earlier-uid",
                attempt=attempt,
                started_at=dt.datetime.now(dt.UTC),
                resumed_from_step=resumed,
                resumed_from_version=None if resumed is None else f"v{resumed:012d}-a000001",
            )
        )

    def commit(self, writer: CheckpointWriter, step: int) -> None:
        with writer.version(step) as version:
            version.write_bytes("model/rank0.pt", b"weights" * 100)

    def third_attempt(self) -> None:
        """Attempt 3 saved step 250 and died writing step 300 (no manifest); a zombie of
        attempt 2 then committed step 260 and moved latest.json to it."""
        self.commit(self.writer(3), 250)
        with self.writer(3).version(300, commit=False) as partial:
            partial.write_bytes("model/rank0.pt", b"half")
        self.commit(self.writer(2, fenced=False), 260)

    def versions(self) -> dict[str, set[str]]:
        """Each version's keys."""
        found: dict[str, set[str]] = {}
        for key in self.bucket.all_keys(self.location.base + "v"):
            name = key[len(self.location.base) :].split("/", 1)[0]
            found.setdefault(name, set()).add(key)
        return found


def _job_behind(proxy: TcpFaultProxy, bucket: S3Bucket) -> dict[str, Any]:
    """The RLJob, its checkpoints reached through the proxy."""
    checkpoint = {
        "uri": f"s3://{bucket.name}/ckpt",
        "endpoint": proxy.url,
        "addressingStyle": "path",
    }
    return example(checkpoint=checkpoint)


@pytest.fixture
def store_proxy(s3_bucket: S3Bucket) -> Iterator[TcpFaultProxy]:
    with TcpFaultProxy(("127.0.0.1", s3_bucket.server.port), delay=15.0) as proxy:
        yield proxy


@pytest.mark.parametrize("case", list(STORE_FAULTS), ids=list(STORE_FAULTS))
def test_a_store_fault_at_an_attempt_start_deletes_nothing_and_resumes_correctly_after(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3_bucket: S3Bucket,
    store_proxy: TcpFaultProxy,
    case: str,
) -> None:
    fault = STORE_FAULTS[case]
    history = History(s3_bucket, namespace)
    history.earlier_job()
    apply_rljob(cluster, namespace, _job_behind(store_proxy, s3_bucket))
    assert trainer_env(cluster, namespace, 3)["RLJOB_RESUME_VERSION"] == "v000000000200-a000002"
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    history.third_attempt()
    before = history.versions()

    store_proxy.set_fault(fault.fault)
    _restart_trainer(cluster, namespace, "under-fault")
    if not fault.blocks:
        env = trainer_env(cluster, namespace, 4)
        assert env["RLJOB_RESUME_VERSION"] == "v000000000250-a000003"
        job = wait_condition(cluster, namespace, NAME, "CheckpointRetentionFailed", timeout=60)
        message = condition(job, "CheckpointRetentionFailed")["message"]
        assert fault.says in message, message
        assert store_proxy.counts[fault.counted] > 0
        assert history.versions() == before, "retention deleted nothing it could not list"
        return
    job = wait_condition(cluster, namespace, NAME, "CheckpointStoreUnavailable", timeout=90)
    message = condition(job, "CheckpointStoreUnavailable")["message"]
    assert "attempt 4 waits" in message and fault.says in message, message
    assert store_proxy.counts[fault.counted] > 0
    assert _jobs(cluster, namespace) == []
    assert history.versions() == before

    store_proxy.set_fault(Fault.NONE)
    env = trainer_env(cluster, namespace, 4)
    assert env["RLJOB_RESUME_VERSION"] == "v000000000250-a000003"
    job = wait_condition(
        cluster, namespace, NAME, "CheckpointStoreUnavailable", status="False", timeout=60
    )
    assert job["status"]["attempt"] == 4
    assert job["status"]["lastRestartRequest"]["id"] == "under-fault"
    assert _jobs(cluster, namespace) == [f"{NAME}-trainer-a4"]
    # Every valid eligible version is kept whole; retention removed only what its policy says
    # (the zombie's commit), and only now. The dead attempt's incomplete version stays as
    # evidence until incompleteGrace has passed.
    after = history.versions()
    kept = (
        "v000000000100-a000001",
        "v000000000200-a000002",
        "v000000000250-a000003",
        "v000000000300-a000003",
    )
    assert after == {name: before[name] for name in kept}


def test_a_store_outage_when_a_job_of_an_old_name_is_created_still_continues_its_attempts(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    s3_bucket: S3Bucket,
    store_proxy: TcpFaultProxy,
) -> None:
    history = History(s3_bucket, namespace)
    history.earlier_job()
    before = history.versions()
    store_proxy.set_fault(Fault.REFUSE)
    apply_rljob(cluster, namespace, _job_behind(store_proxy, s3_bucket))
    job = wait_condition(cluster, namespace, NAME, "CheckpointStoreUnavailable", timeout=90)
    assert "Connection was closed" in condition(job, "CheckpointStoreUnavailable")["message"]
    assert _jobs(cluster, namespace) == []

    store_proxy.set_fault(Fault.NONE)
    # One store retry (15 s) and some: the earlier job's attempts 1 and 2 are continued.
    env = trainer_env(cluster, namespace, 3, timeout=40)
    assert env["RLJOB_RESUME_VERSION"] == "v000000000200-a000002"
    assert history.versions() == before


# ------------------------------------------------------------------ Prometheus

WINDOW = 20.0
WARMUP = 10.0


def _health_job(prometheus_url: str) -> dict[str, Any]:
    return example(
        roles={"rollout": {"replicas": 4, "gpus": 1}, "trainer": {"nodes": 1, "gpus": 8}},
        health={
            "source": {"prometheus": {"url": prometheus_url}},
            "interval": "1s",
            "kvDrift": {"threshold": 0.2, "window": f"{WINDOW:.0f}s", "warmup": f"{WARMUP:.0f}s"},
            "engineStall": {"timeout": "15s"},
            "trainerStall": {"timeout": "10s", "startupGrace": "5s"},
        },
        failurePolicy={"backoff": {"initial": "1s", "max": "2s"}},
    )


def _evaluations(operator: Operator, outcome: str) -> float:
    matcher = f'outcome="{outcome}"'
    return sum(metric_values(operator.metrics_url, "rljob_detector_evaluations_total", matcher))


def _detector_value(operator: Operator, namespace: str, detector: str) -> float | None:
    matchers = (f'detector="{detector}"', f'namespace="{namespace}"')
    found = metric_values(operator.metrics_url, "rljob_detector_value", *matchers)
    return found[0] if found else None


def _pod_uids(cluster: Cluster, namespace: str) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in children(cluster, namespace, PODS, NAME)
    }


def _slow(proxy: PrometheusFaultProxy, pods: dict[str, list[str]]) -> None:
    proxy.delay = 12.0  # past the operator's 10 s query timeout


def _partial(proxy: PrometheusFaultProxy, pods: dict[str, list[str]]) -> None:
    """The trainer's series and one engine's vanish; another engine loses only its token
    counter (its requests-pending gauges stay: the look of a stall, without the evidence)."""
    gone = {*pods["trainer"], pods["rollout"][0]}
    tokenless = pods["rollout"][1]

    def keep(labels: dict[str, str]) -> bool:
        pod = labels.get("pod", "")
        tokens = labels.get("__name__") == "vllm:generation_tokens_total"
        return pod not in gone and not (pod == tokenless and tokens)

    proxy.keep = keep


@dataclass(frozen=True)
class PrometheusFault:
    strike: Callable[[PrometheusFaultProxy, dict[str, list[str]]], None]
    counted: str  # the proxy's count of the fault it applied
    signals: str  # HealthSignalsAvailable meanwhile: partial answers are still answers
    says: str = ""  # what its message names


PROMETHEUS_FAULTS = {
    "slow": PrometheusFault(_slow, "delayed", "False", "no answer within 10s"),
    "partial data": PrometheusFault(_partial, "dropped", "True"),
}


@pytest.fixture
def prometheus_proxy(prometheus: PrometheusServer) -> Iterator[PrometheusFaultProxy]:
    with PrometheusFaultProxy(prometheus.url) as proxy:
        yield proxy


@pytest.mark.parametrize("case", list(PROMETHEUS_FAULTS), ids=list(PROMETHEUS_FAULTS))
def test_a_prometheus_fault_decides_no_restart_on_missing_data(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    prometheus_proxy: PrometheusFaultProxy,
    case: str,
) -> None:
    apply_rljob(cluster, namespace, _health_job(prometheus_proxy.url))
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    # The fault strikes detectors that have state: engine baselines past their warm-up (by
    # then the trainer is past its startup grace, its heartbeat judged).
    wait_for(
        lambda: _detector_value(operator, namespace, "kv_drift") is not None,
        WARMUP + 60,
        "drift baselines",
    )
    uids = _pod_uids(cluster, namespace)
    pods = {
        role: sorted(p["metadata"]["name"] for p in children(cluster, namespace, PODS, NAME, role))
        for role in ("rollout", "trainer")
    }
    fault = PROMETHEUS_FAULTS[case]
    fault.strike(prometheus_proxy, pods)
    insufficient = _evaluations(operator, "insufficient_data")

    # Past every detector's timeout and the drift window: missing data must stay missing data.
    quiet_for(WINDOW + 20)
    wait_for(
        lambda: _evaluations(operator, "insufficient_data") > insufficient,
        30,
        "evaluations with insufficient data",
    )
    job = wait_condition(
        cluster, namespace, NAME, "HealthSignalsAvailable", status=fault.signals, timeout=30
    )
    assert fault.says in condition(job, "HealthSignalsAvailable")["message"]
    assert prometheus_proxy.counts[fault.counted] > 0
    assert _pod_uids(cluster, namespace) == uids
    assert get_rljob(cluster, namespace, NAME)["status"]["restarts"]["total"] == 0
