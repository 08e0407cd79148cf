"""Issue #13: health works after a plain install. The operator runs with the chart's flags only
(no test hooks: `helm install` values, the chart's ServiceAccount), the stock demo example is
applied unchanged but where the bed's S3 store is, and a drift injected into one engine is
repaired: once through the default Prometheus source, once by direct scraping (each pod at its
pod IP, which kwok hands out inside 127.0.0.0/8 and the simulator serves)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rljob.dev.prometheus import PrometheusServer
from rljob.dev.scrape import metric_values
from rljob.dev.sim.launcher import Simulator
from tests.helpers import wait_for
from tests.integration.chart_release import (
    Release,
    chart_operator,
    installed,
    new_release,
    step_aside,
)
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    PODS,
    apply_rljob,
    children,
    condition,
    example,
    kubectl,
    wait_condition,
)
from tests.integration.s3_fixtures import S3Bucket

# cluster_wide: the chart's cluster-scoped objects and a cluster-wide operator.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

NAME = "grpo-demo"
S3_SECRET = "rljob-operator-s3"


@pytest.fixture
def release(cluster: Cluster, operator: Operator) -> Release:
    step_aside(operator)
    return new_release(cluster)


def _values(source: str, prometheus: PrometheusServer) -> dict[str, str]:
    values = {"checkpointStore.credentialsSecret": S3_SECRET}
    if source == "prometheus":
        values |= {"health.defaultSource": "prometheus", "health.prometheus.url": prometheus.url}
    return values  # direct: the chart's default


def _store_secret(cluster: Cluster, release: Release, bucket: S3Bucket) -> None:
    """The operator's S3 identity, as checkpointStore.credentialsSecret names it."""
    secret = {
        "metadata": {"name": S3_SECRET},
        "stringData": bucket.server.env(),
    }
    cluster.api.create(f"/api/v1/namespaces/{release.namespace}/secrets", secret)


def _demo_job(bucket: S3Bucket) -> dict[str, Any]:
    body = example("rljob-demo")
    assert "source" not in body["spec"]["health"]  # the operator's default is what is tested
    body["spec"]["checkpoint"]["uri"] = f"s3://{bucket.name}/checkpoints"
    body["spec"]["checkpoint"]["endpoint"] = bucket.server.endpoint
    return body


def _rollouts(cluster: Cluster, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in children(cluster, namespace, PODS, NAME, "rollout")}


@pytest.mark.parametrize("source", ["prometheus", "direct"])
def test_a_plain_install_repairs_a_drifting_engine(
    cluster: Cluster,
    release: Release,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
    s3_bucket: S3Bucket,
    tmp_path: Path,
    source: str,
) -> None:
    _store_secret(cluster, release, s3_bucket)
    with (
        installed(release, _values(source, prometheus)),
        chart_operator(release, tmp_path) as op,
    ):
        apply_rljob(cluster, namespace, _demo_job(s3_bucket))
        wait_condition(cluster, namespace, NAME, "Ready", timeout=120)
        job = wait_condition(cluster, namespace, NAME, "HealthSignalsAvailable", timeout=60)
        said = condition(job, "HealthSignalsAvailable")["message"]
        expected = "Prometheus at" if source == "prometheus" else "direct scraping"
        assert expected in said and "the operator default" in said, said
        engines = _rollouts(cluster, namespace)
        victim = sorted(engines)[0]
        # Inject once every engine holds its post-warm-up baseline (the detector has a value).
        wait_for(
            lambda: metric_values(op.metrics_url, "rljob_detector_value", *_drift(namespace)),
            120,
            "the engines' drift baselines",
            interval=1,
        )
        simulator.client().inject("drift", namespace=namespace, pod=victim, drop=0.3)
        wait_for(
            lambda: victim not in _rollouts(cluster, namespace),
            180,
            f"{victim} restarted for KVCacheDrift",
            interval=1,
        )
        events = kubectl(cluster, "get", "events", "-n", namespace,
                         "--field-selector=reason=PodRestarted", "-o",
                         "custom-columns=MSG:.message")  # fmt: skip
        assert re.search(rf"{victim}.*KVCacheDrift|KVCacheDrift.*{victim}", events), events
        assert engines - {victim} <= _rollouts(cluster, namespace)  # the others untouched


def _drift(namespace: str) -> tuple[str, str]:
    return ('detector="kv_drift"', f'namespace="{namespace}"')
