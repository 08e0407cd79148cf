"""`rljob run`'s default metrics source flags: what a chart install gives jobs without their
own spec.health.source."""

from __future__ import annotations

import pytest

from rljob.adapters.metrics import SourceKey
from rljob.cli import _allowlist, _default_source, _parser
from rljob.reconcile.reach import Allowlist


def source_of(*flags: str) -> SourceKey | None:
    return _default_source(_parser().parse_args(["run", *flags]))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        pytest.param((), None, id="none"),
        pytest.param(("--direct-scrape",), SourceKey("direct", default=True), id="direct"),
        pytest.param(
            (
                "--prometheus-url=http://prom:9090/",
                "--prometheus-token-file=/var/run/secrets/prometheus/token",
                "--prometheus-header=X-Scope-OrgID: team-a",
                "--prometheus-pod-label=kpod",
            ),
            SourceKey(
                "prometheus",
                url="http://prom:9090",
                headers=(("X-Scope-OrgID", "team-a"),),
                token_file="/var/run/secrets/prometheus/token",
                pod_label="kpod",
                default=True,
            ),
            id="prometheus",
        ),
    ],
)
def test_default_source_flags(flags: tuple[str, ...], expected: SourceKey | None) -> None:
    assert source_of(*flags) == expected


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(("--prometheus-url=http://p", "--direct-scrape"), id="both-kinds"),
        pytest.param(("--prometheus-header=no colon",), id="header-without-colon"),
        pytest.param(("--prometheus-header=bad name: v",), id="header-name-with-space"),
    ],
)
def test_bad_source_flags_are_refused(
    flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        source_of(*flags)
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        pytest.param((), Allowlist(), id="by-default-nothing-but-any-bucket"),
        pytest.param(
            (
                "--allow-prometheus-url=http://prom.monitoring:9090/",
                "--allow-s3-endpoint=http://127.0.0.1:*",
                "--allow-s3-bucket=team-a",
                "--allow-s3-bucket=team-b",
            ),
            Allowlist(
                ("http://prom.monitoring:9090",), ("http://127.0.0.1:*",), ("team-a", "team-b")
            ),
            id="each-flag",
        ),
    ],
)
def test_allowlist_flags(flags: tuple[str, ...], expected: Allowlist) -> None:
    assert _allowlist(_parser().parse_args(["run", *flags])) == expected


@pytest.mark.parametrize(
    "flag",
    [
        pytest.param("--allow-prometheus-url=prom:9090", id="no-scheme"),
        pytest.param("--allow-s3-endpoint=ftp://store", id="not-http"),
        pytest.param("--allow-s3-endpoint=http://u@store", id="user-info"),
    ],
)
def test_allowlist_flags_refuse_what_is_not_a_url(flag: str) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", flag])
