"""The platform's allowlists: which Prometheus URLs, S3 endpoints and buckets a job may name, with
the operator's own default source and endpoint always among them."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import parse_rljob
from rljob.reconcile.reach import Allowlist, origin, url_allowed
from tests.unit.api.verdicts import job

PROM = "http://prometheus.monitoring:9090"


@pytest.mark.parametrize(
    ("url", "entries", "allowed"),
    [
        pytest.param(PROM, (PROM,), True, id="the-entry"),
        pytest.param(PROM + "/", (PROM,), True, id="a-trailing-slash"),
        pytest.param(PROM, (PROM + "/",), True, id="an-entry-with-a-trailing-slash"),
        pytest.param(PROM + "/api", (PROM,), False, id="another-path"),
        pytest.param("http://prometheus.monitoring:9091", (PROM,), False, id="another-port"),
        pytest.param("https://prometheus.monitoring:9090", (PROM,), False, id="another-scheme"),
        pytest.param("http://127.0.0.1:4711/x", ("http://127.0.0.1:*",), True, id="any-port"),
        pytest.param("http://127.0.0.1/x", ("http://127.0.0.1:*",), True, id="no-port-any-port"),
        pytest.param("http://127.0.0.2:80", ("http://127.0.0.1:*",), False, id="another-host"),
        pytest.param("https://127.0.0.1:1", ("http://127.0.0.1:*",), False, id="other-scheme"),
        pytest.param(
            "http://127.0.0.1:1@evil.example/", ("http://127.0.0.1:*",), False, id="user-info"
        ),
        pytest.param("http://[::1]:9/", ("http://[::1]:*",), True, id="ipv6-any-port"),
        pytest.param("http://LOCALHOST:9", ("http://localhost:*",), True, id="host-case"),
        pytest.param(PROM, (), False, id="nothing-allowed"),
    ],
)
def test_url_allowed(url: str, entries: tuple[str, ...], allowed: bool) -> None:
    assert url_allowed(url, entries) is allowed


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        pytest.param("http://a.b:1/c", ("http", "a.b"), id="host-and-port"),
        pytest.param("http://u:p@a.b:1/c", ("http", "a.b"), id="user-info"),
        pytest.param("http://[::1]:1/c", ("http", "::1"), id="ipv6"),
        pytest.param("http://a.b?x=@c", ("http", "a.b"), id="at-in-query"),
    ],
)
def test_origin(url: str, expected: tuple[str, str]) -> None:
    assert origin(url) == expected


def _spec(**spec: Any) -> Any:
    return parse_rljob(job(**spec)).spec


SOURCE = {"source": {"prometheus": {"url": "http://tenant-prom:9090"}}}
STORE = {"uri": "s3://team-bucket/runs", "endpoint": "http://minio.tenant:9000"}


@pytest.mark.parametrize(
    ("allowlist", "spec", "refused_at"),
    [
        pytest.param(Allowlist(), {}, [], id="a-job-naming-nothing"),
        pytest.param(
            Allowlist(), {"health": SOURCE}, ["spec.health.source.prometheus.url"], id="own-source"
        ),
        pytest.param(
            Allowlist(prometheus_urls=("http://tenant-prom:9090",)),
            {"health": SOURCE},
            [],
            id="an-allowed-source",
        ),
        pytest.param(
            Allowlist().with_defaults("http://tenant-prom:9090", None),
            {"health": SOURCE},
            [],
            id="the-operators-default-source",
        ),
        pytest.param(
            Allowlist(), {"checkpoint": STORE}, ["spec.checkpoint.endpoint"], id="own-endpoint"
        ),
        pytest.param(
            Allowlist().with_defaults(None, "http://minio.tenant:9000"),
            {"checkpoint": STORE},
            [],
            id="the-operators-configured-endpoint",
        ),
        pytest.param(
            Allowlist(), {"checkpoint": {"uri": "s3://any-bucket/x"}}, [], id="aws-any-bucket"
        ),
        pytest.param(
            Allowlist(s3_buckets=("team-bucket",)),
            {"checkpoint": {"uri": "s3://other-bucket/x"}},
            ["spec.checkpoint.uri"],
            id="a-bucket-not-listed",
        ),
        pytest.param(
            Allowlist(s3_endpoints=("http://minio.tenant:9000",), s3_buckets=("team-bucket",)),
            {"checkpoint": STORE},
            [],
            id="endpoint-and-bucket-listed",
        ),
    ],
)
def test_violations(allowlist: Allowlist, spec: dict[str, Any], refused_at: list[str]) -> None:
    assert [v.field for v in allowlist.violations(_spec(**spec))] == refused_at


def test_a_refusal_says_what_is_allowed_and_where_it_is_set() -> None:
    (violation,) = Allowlist(prometheus_urls=(PROM,)).violations(_spec(health=SOURCE))
    assert violation.message == (
        "'http://tenant-prom:9090' is not among the Prometheus URLs this cluster allows jobs to "
        f"use (allowed: {PROM}); the platform sets them in the chart's values"
    )
