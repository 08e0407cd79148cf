"""`rljob run`'s default metrics source flags: what a chart install gives jobs without their
own spec.health.source."""

from __future__ import annotations

import pytest

from rljob.adapters.metrics import SourceKey
from rljob.cli import _default_source, _parser


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
