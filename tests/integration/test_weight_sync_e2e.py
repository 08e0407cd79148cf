"""Issue #17 end to end on the bed: a rollout driver (the simulator's, following the operator's
roster through rljob.sdk.EngineRoster, with an NCCL weight group) and three engines, one of
which drifts and is restarted by the operator.

- Gated: the engine drains before it is deleted (no request lost), the newcomer gets no traffic
  until the driver synced it (the rljob.io/policy-current gate), the driver never hangs and no
  gang restart follows; the roster showed the victim draining then gone, the newcomer joining
  then serving.
- Ungated (the default, today's behaviour): the deletion loses the requests in flight on the
  victim, the driver's weight group hangs, and its NCCL watchdog ends in a gang restart.

Run with -s to see the measured figures (requests lost, seconds until the newcomer serves,
hangs, gang restarts) for each mode."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.crashpoints import DRAIN_CRASH_POINTS
from rljob.dev.crash_entry import crash_env
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.scrape import metric_values
from rljob.dev.sim.launcher import Simulator
from rljob.vocabulary.labels import POLICY_CURRENT_GATE
from tests.helpers import wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    DRIFT_WARMUP,
    DRIFT_WINDOW,
    PODS,
    apply_rljob,
    children,
    engines_job,
    get_rljob,
    pod_uids,
    wait_condition,
)
from tests.integration.test_remediation import _restart_after_the_crash

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
ENGINES = 3
DRIVER = {
    "step_seconds": 3.0,
    # Rollout requests run for seconds; 6 s outlasts the simulator's poll lag under load, so the
    # requests on an Ungated victim are still in flight when the simulator finds it gone.
    "request_seconds": 6.0,
    "push_seconds": 5.0,  # long enough that a newcomer Ready before its push would be seen
    "watchdog_seconds": 10.0,
}


# SGLang engines with no exporter beside them: their page has no generation gauge, and the
# operator reads each one's weight version from its own GET /model_info (generationFrom engine).
OWN_VERSION = {
    "engine": "sglang",
    "generationFrom": "engine",
    "profile": {"exporter": "sglang", "generation_gauge": False},
}


def _job(
    prometheus_url: str, weight_sync: str, variant: dict[str, Any] | None = None
) -> dict[str, Any]:
    variant = variant or {}
    rollout: dict[str, Any] = {
        "engine": variant.get("engine", "vllm"),
        "replicas": ENGINES,
        "weightSync": weight_sync,
        "drainTimeout": "20s",
    }
    if "generationFrom" in variant:
        rollout["generationFrom"] = variant["generationFrom"]
    profile = {"noise": 0.0, **variant.get("profile", {})}
    return engines_job(prometheus_url, profile, **rollout)


class Driver:
    """The simulator's driver of the test's job."""

    def __init__(self, simulator: Simulator, namespace: str) -> None:
        self.client, self.namespace = simulator.client(timeout=30), namespace

    def report(self) -> dict[str, Any]:
        return self.client.driver(namespace=self.namespace, job=NAME)

    def roster_events(self, pod: str) -> list[str]:
        return [event for _, event, who in self.report()["roster"] if who == pod]


def _restarts(cluster: Cluster, namespace: str) -> dict[str, int]:
    restarts = get_rljob(cluster, namespace, NAME)["status"].get("restarts") or {}
    return dict(restarts.get("byReason") or {})


def _gates(cluster: Cluster, namespace: str) -> dict[str, Any]:
    """Each rollout pod's phase, Ready and policy-current condition, as the API shows them."""
    found = {}
    for pod in children(cluster, namespace, PODS, NAME, "rollout"):
        conditions = {c["type"]: c for c in pod.get("status", {}).get("conditions", [])}
        gate = conditions.get(POLICY_CURRENT_GATE, {})
        found[pod["metadata"]["name"]] = (
            pod.get("status", {}).get("phase"),
            conditions.get("Ready", {}).get("status"),
            gate.get("status"),
            gate.get("reason"),
        )
    return found


def _steady(
    cluster: Cluster, namespace: str, operator: Operator, driver: Driver
) -> tuple[dict[str, Any], dict[str, str]]:
    """The job Ready, its engines all in the driver's group, with drift baselines."""
    try:
        wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    except AssertionError as error:
        # Gated engines stuck joining (seen under load): what the driver saw and pushed, and
        # which gates the operator set (ci23: two of three stayed joining, cause unknown).
        gates = _gates(cluster, namespace)
        raise AssertionError(
            f"{error}; the driver's report: {driver.report()}; the pods' gates: {gates}"
        ) from error
    engines = pod_uids(cluster, namespace, NAME, "rollout")
    matchers = ('detector="kv_drift"', f'namespace="{namespace}"')
    wait_for(
        lambda: metric_values(operator.metrics_url, "rljob_detector_value", *matchers),
        DRIFT_WARMUP + 60,
        "the engines' drift baselines",
        interval=1,
    )
    wait_for(
        lambda: driver.report()["group"] == sorted(engines),
        30,
        "every engine in the driver's weight group",
        interval=0.5,
    )
    return get_rljob(cluster, namespace, NAME), engines


def _newcomer(cluster: Cluster, namespace: str, engines: dict[str, str]) -> str | None:
    now = pod_uids(cluster, namespace, NAME, "rollout")
    fresh = sorted(set(now) - set(engines))
    return fresh[0] if fresh else None


def _figures(mode: str, report: dict[str, Any], newcomer: str, restarts: dict[str, int]) -> str:
    serves = report["first_request_after_creation"].get(newcomer)
    return (
        f"{mode}: requests lost {report['lost_total']}, "
        f"newcomer's first request {serves} s after its pod was created, "
        f"driver hangs {report['hangs']}, "
        f"gang restarts (NCCLTimeout) {restarts.get('NCCLTimeout', 0)}, "
        f"requests to the newcomer before it was synced "
        f"{report['sent_unsynced'].get(newcomer, 0)}; "
        f"hung on: {[(t, pods) for t, event, pods in report['roster'] if event == 'hang']}"
    )


def _drift_restart(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
    weight_sync: str,
    crash_at: str | None = None,
    variant: dict[str, Any] | None = None,
) -> tuple[Driver, dict[str, Any], str, str]:
    """Runs the job with a driver, drifts one engine until it is replaced and the newcomer
    serves (the operator set to die at `crash_at` meanwhile, then restarted); returns the
    driver, the job before the fault, the victim and the newcomer."""
    driver = Driver(simulator, namespace)
    driver.client.start_driver(namespace=namespace, job=NAME, **DRIVER)
    apply_rljob(cluster, namespace, _job(prometheus.url, weight_sync, variant))
    before, engines = _steady(cluster, namespace, operator, driver)
    if crash_at is not None:
        operator.restart(env=crash_env(crash_at, namespace))
    victim = sorted(engines)[0]
    simulator.client().inject("drift", namespace=namespace, pod=victim, drop=0.3)
    if crash_at is not None:
        _restart_after_the_crash(operator, crash_at, timeout=3 * DRIFT_WINDOW + 60)
    wait_for(
        lambda: victim not in pod_uids(cluster, namespace, NAME, "rollout"),
        3 * DRIFT_WINDOW + 60,
        f"{victim} replaced for KVCacheDrift",
        interval=1,
    )
    newcomer = wait_for(
        lambda: _newcomer(cluster, namespace, engines), 30, "the victim's replacement"
    )
    wait_for(
        lambda: newcomer in driver.report()["first_request_after_creation"],
        60,
        f"the driver sending to {newcomer}",
        interval=0.5,
    )
    return driver, before, victim, newcomer


@pytest.mark.parametrize(
    "crash_at",
    [None, *DRAIN_CRASH_POINTS],
    ids=["no-crash", *(f"sigkill-at-{p}" for p in DRAIN_CRASH_POINTS)],
)
def test_gated_engines_drain_and_rejoin_synced_without_a_hang(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
    crash_at: str | None,
) -> None:
    """Also when the operator is SIGKILLed where a drain begins and where its pod is deleted:
    the journal holds the drain's start, so the restarted operator finishes it once."""
    driver, before, victim, newcomer = _drift_restart(
        cluster, operator, namespace, simulator, prometheus, "Gated", crash_at
    )
    try:
        report, restarts = driver.report(), _restarts(cluster, namespace)
        print(_figures("Gated", report, newcomer, restarts))
        assert report["lost_total"] == 0, report["lost"]
        assert report["sent_unsynced"].get(newcomer, 0) == 0, report
        assert (report["hangs"], report["watchdog_aborts"]) == (0, 0), report
        assert restarts == {"KVCacheDrift": 1}
        assert (
            get_rljob(cluster, namespace, NAME)["status"]["attempt"] == before["status"]["attempt"]
        )
        assert driver.roster_events(victim)[-2:] == ["drain", "leave"], report
        assert driver.roster_events(newcomer) == ["join", "serving"], report
        assert newcomer in report["group"] and victim not in report["group"], report
    finally:
        driver.client.stop_driver(namespace=namespace, job=NAME)


def test_gated_sglang_engines_rejoin_on_their_own_weight_version_without_an_exporter(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    """generationFrom engine: the newcomer's gate opens on the weight version its /model_info
    reports once the driver pushed it, with no rljob_engine_policy_generation anywhere."""
    driver, _, victim, newcomer = _drift_restart(
        cluster, operator, namespace, simulator, prometheus, "Gated", variant=OWN_VERSION
    )
    try:
        report, restarts = driver.report(), _restarts(cluster, namespace)
        print(_figures("Gated, generationFrom engine", report, newcomer, restarts))
        assert report["lost_total"] == 0, report["lost"]
        assert report["sent_unsynced"].get(newcomer, 0) == 0, report
        assert restarts == {"KVCacheDrift": 1}
        assert driver.roster_events(victim)[-2:] == ["drain", "leave"], report
        assert driver.roster_events(newcomer) == ["join", "serving"], report
        members = get_rljob(cluster, namespace, NAME)["status"]["roles"]["rollout"]["engines"]
        assert all(m.get("generation", 0) > 0 for m in members), members
        gauge = f'rljob_engine_policy_generation{{namespace="{namespace}"}}'
        assert prometheus.query(gauge) == []  # no exporter: the versions came over HTTP
    finally:
        driver.client.stop_driver(namespace=namespace, job=NAME)


def test_ungated_engines_lose_requests_and_hang_the_driver_into_a_gang_restart(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    driver, before, victim, newcomer = _drift_restart(
        cluster, operator, namespace, simulator, prometheus, "Ungated"
    )
    try:
        wait_for(
            lambda: _restarts(cluster, namespace).get("NCCLTimeout", 0) >= 1,
            DRIVER["watchdog_seconds"] + 60,
            "the driver's NCCL watchdog ending in a gang restart",
            interval=1,
        )
        report, restarts = driver.report(), _restarts(cluster, namespace)
        print(_figures("Ungated", report, newcomer, restarts))
        assert report["lost"].get(victim, 0) > 0, report
        hangs = [pods for _, event, pods in report["roster"] if event == "hang"]
        assert hangs == [victim], report  # the deleted engine, once
        assert report["watchdog_aborts"] >= 1, report
        assert "drain" not in driver.roster_events(victim), report  # no draining state
        job = wait_for(
            lambda: (
                (j := get_rljob(cluster, namespace, NAME))["status"].get("attempt", 0)
                > before["status"]["attempt"]
                and j
            ),
            60,
            "a new trainer attempt",
            interval=1,
        )
        assert job["status"]["restarts"]["byReason"]["KVCacheDrift"] == 1, job["status"]
    finally:
        driver.client.stop_driver(namespace=namespace, job=NAME)
