"""What a job may send its Prometheus and name as its checkpoint location: header names that are
HTTP tokens, values without CR or LF, none of the headers the HTTP client owns; URLs without user
info or whitespace; checkpoint prefixes without . or .. segments. The model and the CRD refuse
the same bodies at the same field."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.verdicts import both_refusals, job, model_messages

HEADERS = "spec.health.source.prometheus.headers"
URL = "spec.health.source.prometheus.url"
URI = "spec.checkpoint.uri"
ENDPOINT = "spec.checkpoint.endpoint"


def prometheus(url: str = "http://prometheus.monitoring:9090", **headers: str) -> dict[str, Any]:
    return job(health={"source": {"prometheus": {"url": url, "headers": headers}}})


def checkpoint(uri: str = "s3://bucket/runs", **fields: str) -> dict[str, Any]:
    return job(checkpoint={"uri": uri, **fields})


@pytest.mark.parametrize(
    ("body", "refused_at"),
    [
        pytest.param(prometheus(**{"X-Scope-OrgID": "team-a"}), set(), id="a-tenant-header"),
        pytest.param(prometheus(**{"X-Odd!#$%&'*+.^_`|~": "v"}), set(), id="every-token-char"),
        pytest.param(prometheus(**{"X Scope": "v"}), {HEADERS}, id="a-name-with-a-space"),
        pytest.param(prometheus(**{"X-A:": "v"}), {HEADERS}, id="a-name-with-a-colon"),
        pytest.param(prometheus(**{"": "v"}), {HEADERS}, id="an-empty-name"),
        pytest.param(prometheus(**{"X-" + "a" * 300: "v"}), {HEADERS}, id="a-300-char-name"),
        pytest.param(prometheus(**{"X-A": "v\r\nX-B: w"}), {HEADERS}, id="a-value-with-crlf"),
        pytest.param(prometheus(**{"X-A": "v\nw"}), {HEADERS}, id="a-value-with-lf"),
        pytest.param(prometheus(**{"X-A": "v\rw"}), {HEADERS}, id="a-value-with-cr"),
        pytest.param(prometheus(**{"X-A": "v\x00w"}), {HEADERS}, id="a-value-with-nul"),
        pytest.param(prometheus(**{"X-A": "v w\u00e9"}), set(), id="spaces-and-non-ascii"),
        pytest.param(prometheus(**{"Host": "elsewhere"}), {HEADERS}, id="host"),
        pytest.param(prometheus(**{"transfer-encoding": "chunked"}), {HEADERS}, id="framing"),
        pytest.param(prometheus("http://prom:9090/api/prom"), set(), id="a-url-with-a-path"),
        pytest.param(prometheus("http://allowed:9090@elsewhere/"), {URL}, id="a-url-user-info"),
        pytest.param(prometheus("http://prom:9090/a b"), {URL}, id="a-url-with-a-space"),
        pytest.param(prometheus("http://prom:9090/\nx"), {URL}, id="a-url-with-a-newline"),
        pytest.param(checkpoint("s3://bucket/runs/team.a"), set(), id="a-dotted-segment"),
        pytest.param(checkpoint("s3://bucket/../other"), {URI}, id="a-dot-dot-segment"),
        pytest.param(checkpoint("s3://bucket/runs/."), {URI}, id="a-dot-segment"),
        pytest.param(
            checkpoint(endpoint="http://u:p@s3.example.com"), {ENDPOINT}, id="an-endpoint-user"
        ),
    ],
)
def test_endpoint_fields(body: dict[str, Any], refused_at: set[str]) -> None:
    assert both_refusals(body) == (refused_at, refused_at)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(prometheus(**{"X Scope": "v"}), "header names must be HTTP tokens", id="name"),
        pytest.param(prometheus(**{"X-A": "v\r\n"}), "must not contain CR, LF", id="crlf"),
        pytest.param(prometheus(**{"HOST": "x"}), "the HTTP client sets them", id="host"),
        pytest.param(checkpoint("s3://bucket/.."), "must not have a . or .. path segment", id="dd"),
    ],
)
def test_refusals_say_why(body: dict[str, Any], message: str) -> None:
    assert any(message in text for text in model_messages(body))
