"""The Grafana dashboard: one source in the chart (files/rljob-operator-dashboard.json, embedded
by the dashboard ConfigMap), a checked copy in dashboards/, the panels the operator's users need,
and queries that parse and select only exported metrics."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.monitoring import (
    DASHBOARD_COPY,
    DASHBOARD_FILE,
    dashboard,
    dashboard_queries,
    metric_names,
    panels,
    promtool_or_skip,
    unknown,
)

REQUIRED_PANELS = {
    "RLJobs by phase",
    "Tokens/s per engine vs 1h baseline",
    "Restarts by reason (last hour)",
    "Checkpoint age",
    "Trainer step rate",
    "Verifier p99 latency",
}


def test_the_dashboards_folder_holds_a_copy_of_the_charts() -> None:
    assert DASHBOARD_COPY.read_text() == DASHBOARD_FILE.read_text(), (
        f"{DASHBOARD_COPY} differs from the single source {DASHBOARD_FILE}: "
        f"cp {DASHBOARD_FILE} {DASHBOARD_COPY}"
    )


def test_dashboard_shape() -> None:
    board = dashboard()
    assert board["uid"] == "rljob-operator"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert {"namespace", "job"} <= set(variables)
    ids = [panel["id"] for panel in panels(board)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    titles = {panel["title"] for panel in panels(board)}
    assert titles >= REQUIRED_PANELS, REQUIRED_PANELS - titles
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            # Every query goes to the data source the user picks, never a hard-coded one.
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert panel["targets"], panel["title"]


def test_dashboard_queries_select_only_exported_metrics() -> None:
    for title, expr in dashboard_queries(dashboard()):
        names = metric_names(expr)
        assert names, (title, expr)
        assert unknown(names) == set(), f"{title}: {expr}"
        assert "$" not in expr, f"{title}: unreplaced variable in {expr}"


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """promtool parses every query (as a recording rule), the same parser Prometheus uses."""
    promtool = promtool_or_skip()
    rules = [
        {"record": f"rljob:dashboard_query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(dashboard_queries(dashboard()))
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [str(promtool), "check", "rules", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("variables", [{}, {"namespace": "team-a", "job": "grpo-demo"}])
def test_variables_are_replaced(variables: dict[str, str]) -> None:
    for _, expr in dashboard_queries(dashboard(), variables):
        assert "$namespace" not in expr and "$job" not in expr
