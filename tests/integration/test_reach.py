"""A job aimed where the platform did not allow causes no request there, and says why; an allowed
one works as before. The bed allows only 127.0.0.1 (rljob.dev.bed.BED_ALLOWLIST and the chart
values of chart_release), so a listener on 127.0.0.2, still loopback, stands for a server inside
the cluster that a tenant must not reach through the operator."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from tests.helpers import wait_for
from tests.integration.chart_release import installed, new_release
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    admission_refusal,
    apply_rljob,
    condition,
    example,
    second_scale_health,
    wait_condition,
)

# cluster_wide: the chart's cluster-wide admission policy.
pytestmark = [pytest.mark.integration, pytest.mark.cluster_wide]

DENIED_HOST, ALLOWED_HOST = "127.0.0.2", "127.0.0.1"
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Listener:
    """Counts the connections made to it and answers each with a 503."""

    def __init__(self, host: str) -> None:
        self.socket = socket.create_server((host, 0))
        self.url = f"http://{host}:{self.socket.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.socket.accept()
            except OSError:
                return  # closed
            self.connections += 1
            with client:
                client.settimeout(2)
                with suppress(OSError):
                    client.recv(65536)
                    client.sendall(UNAVAILABLE)


@contextmanager
def listening(host: str) -> Iterator[Listener]:
    listener = Listener(host)
    try:
        yield listener
    finally:
        listener.socket.close()


def aimed(name: str, prometheus: str, endpoint: str | None = None) -> dict[str, Any]:
    body = example(health=second_scale_health({"prometheus": {"url": prometheus}}))
    if endpoint is not None:
        body["spec"]["checkpoint"] = {"uri": "s3://rljob-tests/reach", "endpoint": endpoint}
    body["metadata"]["name"] = name
    return body


def test_the_operator_refuses_a_job_aimed_where_the_platform_does_not_allow(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    with listening(DENIED_HOST) as denied, listening(ALLOWED_HOST) as allowed:
        apply_rljob(cluster, namespace, aimed("denied", denied.url, endpoint=denied.url))
        apply_rljob(cluster, namespace, aimed("allowed", allowed.url))

        job = wait_condition(cluster, namespace, "denied", "Accepted", status="False")
        refused = condition(job, "Accepted")
        assert refused["reason"] == "NotAllowed"
        assert refused["message"] == (
            f"spec.health.source.prometheus.url: '{denied.url}' is not among the Prometheus URLs "
            "this cluster allows jobs to use (allowed: http://127.0.0.1:*); the platform sets "
            "them in the chart's values (and 1 more)"
        )
        wait_condition(cluster, namespace, "allowed", "Accepted", status="True")
        # The allowed source is queried (and answers 503), so health rounds ran meanwhile.
        wait_for(lambda: allowed.connections, 60, "a query of the allowed Prometheus")
        assert denied.connections == 0


@pytest.mark.parametrize(
    ("field", "spec"),
    [
        pytest.param(
            "spec.health.source.prometheus.url",
            lambda url: {"health": {"source": {"prometheus": {"url": url}}}},
            id="prometheus-url",
        ),
        pytest.param(
            "spec.checkpoint.endpoint",
            lambda url: {"checkpoint": {"uri": "s3://rljob-tests/reach", "endpoint": url}},
            id="s3-endpoint",
        ),
    ],
)
def test_the_charts_admission_policy_refuses_it_before_the_operator_sees_it(
    cluster: Cluster, namespace: str, field: str, spec: Any
) -> None:
    with listening(DENIED_HOST) as denied, installed(new_release(cluster), {}) as release:
        policy = f"{release.name}-rljob-operator-reach"
        refusal = wait_for(
            lambda: _judged_by(
                policy, admission_refusal(cluster, namespace, example(**spec(denied.url)))
            ),
            30,
            f"the API server to refuse {field} by {policy}",
        )
        assert f"{field}: '{denied.url}' is not among the" in refusal
        apply_rljob(cluster, namespace, example(**spec("http://127.0.0.1:1")))  # allowed
        assert denied.connections == 0


def _judged_by(policy: str, refusal: str | None) -> str | None:
    """`refusal` when `policy` refused by its allowlists; an error (kept by wait_for as the last
    seen) for any other refusal."""
    if refusal is None or (policy in refusal and "is not among" in refusal):
        return refusal
    raise ValueError(f"refused otherwise: {refusal}")
