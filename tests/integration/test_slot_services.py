"""slotServices end to end on the bed: a slime-like driver (the simulator's slot driver) that
fixed the job's slot Services as its engine addresses at start and updates every address from
disk each step, and two SGLang engines started at --weight-version 0, one of which drifts and is
replaced by the operator's per-engine repair.

The victim's slot is lent to the other engine before its gate closes, so every update finds a
ready endpoint behind every address (none fails: slime would have ended its step); its requests
finish on it before it is deleted (none lost); the newcomer is loaded by the operator from the
serving engine's /model_info, opens its gate and takes a slot back; no gang restart follows.

Run with -s to see the driver's figures (updates per engine, stale requests, each address's
endpoints over time)."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.dev.prometheus import PrometheusServer
from rljob.dev.scrape import metric_values
from rljob.dev.sim.launcher import Simulator
from rljob.vocabulary.labels import slots_held
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
    trainer_env,
    wait_condition,
)

pytestmark = pytest.mark.integration

NAME = "grpo-minimal"
ENGINES = 2
DRIVER = {
    "step_seconds": 3.0,
    # Longer than the simulator's poll lag under load: a victim deleted with requests still on
    # it would be seen losing them.
    "request_seconds": 4.0,
    # Each engine's batch plus its queue (per_engine 0): saturated, as the drift detector reads.
}
# SGLang engines without an exporter (their weight version comes from /model_info), started as
# slime's external engines are: --weight-version 0.
PROFILE = {
    "noise": 0.0,
    "exporter": "sglang",
    "generation_gauge": False,
    "start_weight_version": "0",
}


def _job(prometheus_url: str) -> dict[str, Any]:
    return engines_job(
        prometheus_url,
        PROFILE,
        engine="sglang",
        replicas=ENGINES,
        weightSync="Gated",
        generationFrom="engine",
        slotServices=True,
        drainTimeout="20s",
    )


class SlotDriver:
    """The simulator's slot driver of the test's job."""

    def __init__(self, simulator: Simulator, namespace: str) -> None:
        self.client, self.namespace = simulator.client(timeout=30), namespace

    def start(self) -> dict[str, Any]:
        return self.client.start_slot_driver(namespace=self.namespace, job=NAME, **DRIVER)

    def report(self) -> dict[str, Any]:
        return self.client.driver(namespace=self.namespace, job=NAME)

    def stop(self) -> None:
        self.client.stop_driver(namespace=self.namespace, job=NAME)


def _slots(cluster: Cluster, namespace: str) -> dict[str, list[int]]:
    """The slots each rollout pod's labels say it holds."""
    return {
        pod["metadata"]["name"]: sorted(slots_held(pod["metadata"].get("labels") or {}))
        for pod in children(cluster, namespace, PODS, NAME, "rollout")
    }


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _evidence(cluster: Cluster, namespace: str, driver: SlotDriver) -> str:
    """What a failure should show: the driver's report, the pods' slot labels and readiness,
    and the operator's Events on the job."""
    pods = {
        p["metadata"]["name"]: (
            sorted(slots_held(p["metadata"].get("labels") or {})),
            _ready(p),
            p["metadata"].get("deletionTimestamp") is not None,
        )
        for p in children(cluster, namespace, PODS, NAME, "rollout")
    }
    events = cluster.api.get(
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={NAME}"
    )["items"]
    told = [(e.get("reason"), e.get("message")) for e in events]
    return f"driver: {driver.report()}; pods (slots, ready, deleting): {pods}; events: {told}"


def _steady(cluster: Cluster, namespace: str, operator: Operator) -> dict[str, str]:
    """The job Ready, every slot held, with drift baselines; its engines."""
    wait_condition(cluster, namespace, NAME, "Ready", timeout=90)
    wait_for(
        lambda: (
            sorted(s for held in _slots(cluster, namespace).values() for s in held)
            == list(range(ENGINES))
        ),
        60,
        "every slot held by an engine",
        interval=0.5,
    )
    matchers = ('detector="kv_drift"', f'namespace="{namespace}"')
    wait_for(
        lambda: metric_values(operator.metrics_url, "rljob_detector_value", *matchers),
        DRIFT_WARMUP + 60,
        "the engines' drift baselines",
        interval=1,
    )
    return pod_uids(cluster, namespace, NAME, "rollout")


def _newcomer_serving(cluster: Cluster, namespace: str, engines: dict[str, str]) -> str | None:
    """A replacement engine Ready and holding a slot."""
    for pod in children(cluster, namespace, PODS, NAME, "rollout"):
        name, labels = pod["metadata"]["name"], pod["metadata"].get("labels") or {}
        if name not in engines and slots_held(labels) and _ready(pod):
            return str(name)
    return None


def _gaps(report: dict[str, Any]) -> dict[str, list[Any]]:
    """Per address, the moments its Service had no ready endpoint or a connection found none."""
    gaps: dict[str, list[Any]] = {}
    for service, seen in report["ready"].items():
        gaps[service] = [t for t, pods in seen if not pods]
    for service, resolved in report["resolved"].items():
        gaps[service] += [t for t, pod in resolved if pod is None]
    return {service: times for service, times in gaps.items() if times}


def _figures(report: dict[str, Any], newcomer: str) -> str:
    return (
        f"slot driver: steps {report['steps']}, N {report['generation']}, "
        f"updates {report['updates']}, failed updates {report['failed_updates']}, "
        f"requests lost {report['lost_total']}, sent {report['sent']}, "
        f"stale {report['sent_stale']}, newcomer {newcomer}; "
        f"endpoints over time: {report['ready']}"
    )


def test_a_per_engine_repair_keeps_every_slot_address_answering(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    apply_rljob(cluster, namespace, _job(prometheus.url))
    engines = _steady(cluster, namespace, operator)
    before = get_rljob(cluster, namespace, NAME)
    driver = SlotDriver(simulator, namespace)
    started = driver.start()
    try:
        env = trainer_env(cluster, namespace, before["status"]["attempt"])
        assert env["RLJOB_ROLLOUT_SLOT_ADDRESSES"].split() == started["addresses"], env
        wait_for(lambda: driver.report()["steps"] >= 1, 30, "the driver's first step", interval=1)
        victim = sorted(engines)[0]
        simulator.client().inject("drift", namespace=namespace, pod=victim, drop=0.3)
        try:
            wait_for(
                lambda: victim not in pod_uids(cluster, namespace, NAME, "rollout"),
                3 * DRIFT_WINDOW + 60,
                f"{victim} replaced for KVCacheDrift",
                interval=1,
            )
            newcomer = wait_for(
                lambda: _newcomer_serving(cluster, namespace, engines),
                60,
                "the replacement Ready and holding a slot",
                interval=1,
            )
            wait_for(
                lambda: driver.report()["sent"].get(newcomer, 0) > 0,
                30,
                f"the driver sending to {newcomer}",
                interval=0.5,
            )
            steps = driver.report()["steps"]
            wait_for(
                lambda: driver.report()["steps"] >= steps + 2,
                20,
                "the driver stepping on",
                interval=1,
            )
        except AssertionError as error:
            raise AssertionError(f"{error}; {_evidence(cluster, namespace, driver)}") from error
        report = driver.report()
        print(_figures(report, newcomer))
        evidence = _evidence(cluster, namespace, driver)
        assert report["lost_total"] == 0, evidence
        assert (report["failed_updates"], report["restarts"]) == (0, 0), evidence
        assert report["failed_trainer_pods"] == [], evidence
        assert _gaps(report) == {}, evidence
        assert report["sent_stale"] == {}, evidence  # no sample from an engine behind N
        assert report["updates"].get(newcomer, 0) > 0, evidence  # a step reached it by its slot
        job = get_rljob(cluster, namespace, NAME)
        assert job["status"]["attempt"] == before["status"]["attempt"], evidence
        assert (job["status"].get("restarts") or {}).get("byReason") == {"KVCacheDrift": 1}
        held = _slots(cluster, namespace)
        assert held[newcomer] and sorted(k for slots in held.values() for k in slots) == [0, 1]
    finally:
        driver.stop()
