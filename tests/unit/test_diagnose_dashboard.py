"""The dashboard's bottleneck row: repeated per job, the operator's step time by phase and
bottleneck role, the SDK's phase seconds, and the throughput-versus-concurrency scatter. The
queries' series and syntax are checked for every panel by test_dashboard.py."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.vocabulary.enums import BottleneckRole
from tests.unit.monitoring import dashboard, metric_names, panels

ROW = "Bottleneck: $job"


def panel(title: str) -> dict[str, Any]:
    return next(p for p in panels(dashboard()) if p["title"] == title)


def exprs(title: str) -> list[str]:
    return [target["expr"] for target in panel(title)["targets"]]


def row_of(title: str) -> str:
    """The title of the row a panel sits under (rows own the panels below them)."""
    board = dashboard()["panels"]
    found = panel(title)
    rows = [p for p in board if p["type"] == "row" and p["gridPos"]["y"] < found["gridPos"]["y"]]
    return str(max(rows, key=lambda p: p["gridPos"]["y"])["title"])


def test_the_bottleneck_row_repeats_per_job() -> None:
    assert panel(ROW)["repeat"] == "job"


@pytest.mark.parametrize(
    ("title", "kind", "series"),
    [
        pytest.param("Bottleneck role", "state-timeline", {"rljob_job_bottleneck"}, id="role"),
        pytest.param(
            "Step time by phase", "timeseries", {"rljob_job_step_phase_seconds"}, id="operator"
        ),
        pytest.param(
            "Trainer time by phase", "timeseries", {"rljob_trainer_phase_seconds_total"}, id="sdk"
        ),
        pytest.param(
            "Throughput vs requests in flight",
            "xychart",
            {
                "vllm:num_requests_running",
                "vllm:num_requests_waiting",
                "vllm:generation_tokens_total",
            },
            id="scatter",
        ),
        pytest.param(
            "Requests in flight per engine",
            "timeseries",
            {"vllm:num_requests_running", "vllm:num_requests_waiting"},
            id="in-flight",
        ),
    ],
)
def test_bottleneck_panels(title: str, kind: str, series: set[str]) -> None:
    found = panel(title)
    assert found["type"] == kind
    assert row_of(title) == ROW
    assert set().union(*(metric_names(expr) for expr in exprs(title))) == series
    # In the repeated row each query is one job's: operator series by job, workload by rljob_job.
    for expr in exprs(title):
        label = "job" if "rljob_job_" in expr else "rljob_job"
        assert f'{label}=~"$job"' in expr and 'namespace=~"$namespace"' in expr, expr


@pytest.mark.parametrize("title", ["Step time by phase", "Trainer time by phase"])
def test_phase_panels_stack_by_phase(title: str) -> None:
    custom = panel(title)["fieldConfig"]["defaults"]["custom"]
    assert custom["stacking"]["mode"] == "normal"
    assert all("by (namespace, phase)" in expr for expr in exprs(title))
    assert [t["legendFormat"] for t in panel(title)["targets"]] == ["{{phase}}"]


def test_bottleneck_role_shows_the_current_role_only() -> None:
    (expr,) = exprs("Bottleneck role")
    assert expr.endswith("== 1") and "by (namespace, role)" in expr
    assert panel("Bottleneck role")["targets"][0]["legendFormat"] == "{{role}}"
    # The operator's roles are what the panel's description names.
    description = panel("Bottleneck role")["description"]
    assert all(role.value in description for role in BottleneckRole)


def test_scatter_plots_tokens_against_requests_in_flight_per_job() -> None:
    scatter = panel("Throughput vs requests in flight")
    concurrency, tokens = scatter["targets"]
    assert "vllm:num_requests_running" in concurrency["expr"]
    assert "vllm:generation_tokens_total" in tokens["expr"]
    for target in (concurrency, tokens):
        assert target["expr"].startswith("sum by (namespace, rljob_job) (")
    # One frame joined on time, its x the requests in flight (by the first query's legend).
    assert scatter["transformations"] == [
        {"id": "joinByField", "options": {"byField": "Time", "mode": "inner"}}
    ]
    assert scatter["options"]["dims"]["x"] == concurrency["legendFormat"] == "requests in flight"
