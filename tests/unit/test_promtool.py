"""The shipped alert rules: promtool accepts them, every alert has a firing and a non-firing
promtool fixture (tests/prometheus/*.yaml), a summary, a description and a runbook section, and
uses only metric names the operator or its workloads export.

promtool comes from Debian's prometheus package, unpacked by tools/prometheus.sh (or the folder
in RLJOB_PROMETHEUS_DIR); without it the promtool tests skip and say why."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.monitoring import (
    PROMTOOL_FIXTURES,
    RULES_COPY,
    RULES_FILE,
    RUNBOOKS,
    alerts,
    metric_names,
    promtool_or_skip,
    rule_groups,
    scaled_rule_groups,
    unknown,
)

REQUIRED_ALERTS = {
    "RLJobFailed",
    "RLJobDegraded",
    "RLJobRestartStorm",
    "RLJobCheckpointStale",
    "RLJobRolloutThroughputDrift",
    "RLJobTrainerStalled",
    "RLJobVerifierSlow",
    "RLJobOperatorDown",
    "RLJobCheckpointStoreUnavailable",
    "RLJobReconcileErrors",
    # RL correctness canaries (group rljob-rl-canaries).
    "RewardHackingSuspected",
    "KLRunaway",
    "ClipFractionHigh",
    "ImportanceRatioTail",
    "ResponseLengthCollapse",
    "ResponseLengthExplosion",
    "GradNormSpike",
    "ThroughputRegressionAfterSync",
    "StepTimeCreep",
    "VerifierQueueGrowing",
}
SEVERITIES = {"critical", "warning", "info"}
RUNBOOK_URL = re.compile(r"^https://\S+/docs/runbooks\.md#(?P<anchor>[a-z0-9-]+)$")


@pytest.fixture(scope="module")
def promtool() -> Path:
    return promtool_or_skip()


def _run(command: list[str], cwd: Path | None = None) -> str:
    result = subprocess.run(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}"
    return result.stdout


def _fixture_files() -> list[Path]:
    return sorted(PROMTOOL_FIXTURES.glob("*.yaml"))


def _alert_tests() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in _fixture_files():
        for test in yaml.safe_load(path.read_text())["tests"]:
            cases.extend(test.get("alert_rule_test") or [])
    return cases


def test_the_plain_rules_file_is_a_copy_of_the_charts() -> None:
    assert RULES_COPY.read_text() == RULES_FILE.read_text(), (
        f"{RULES_COPY} differs from the single source {RULES_FILE}: cp {RULES_FILE} {RULES_COPY}"
    )


def test_promtool_check_rules(promtool: Path) -> None:
    out = _run([str(promtool), "check", "rules", str(RULES_FILE)])
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule_groups())} rules found" in out


def test_promtool_test_rules(promtool: Path) -> None:
    files = _fixture_files()
    assert files, f"no promtool fixtures in {PROMTOOL_FIXTURES}"
    started = time.monotonic()
    out = _run([str(promtool), "test", "rules", *map(str, files)], cwd=PROMTOOL_FIXTURES)
    print(f"promtool test rules: {len(files)} files in {time.monotonic() - started:.2f}s")
    assert out.count("SUCCESS") == len(files), out


def test_fixtures_load_the_shipped_rules() -> None:
    for path in _fixture_files():
        loaded = yaml.safe_load(path.read_text())
        resolved = [(path.parent / name).resolve() for name in loaded["rule_files"]]
        assert resolved == [RULES_FILE.resolve()], path


def test_required_alerts_are_shipped_once() -> None:
    names = [alert["alert"] for alert in alerts()]
    assert len(names) == len(set(names))
    assert set(names) >= REQUIRED_ALERTS, REQUIRED_ALERTS - set(names)


def test_every_alert_has_a_firing_and_a_quiet_fixture() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in _alert_tests():
        (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {alert["alert"] for alert in alerts()}
    assert names - firing == set(), "alerts without a firing fixture"
    assert names - quiet == set(), "alerts without a non-firing fixture"
    assert (firing | quiet) - names == set(), "fixtures for alerts that do not exist"


def test_firing_fixtures_check_every_annotation() -> None:
    for case in _alert_tests():
        for expected in case.get("exp_alerts") or []:
            assert set(expected.get("exp_annotations", {})) == {
                "summary",
                "description",
                "runbook_url",
            }, case["alertname"]


def test_alerts_have_severity_summary_description_and_a_runbook_section() -> None:
    headings = set(re.findall(r"^## (\S+)\s*$", RUNBOOKS.read_text(), flags=re.MULTILINE))
    for alert in alerts():
        name = alert["alert"]
        assert alert.get("labels", {}).get("severity") in SEVERITIES, name
        annotations = alert.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name
        match = RUNBOOK_URL.match(annotations.get("runbook_url", ""))
        assert match is not None, f"{name}: runbook_url must point at docs/runbooks.md#<alert>"
        assert match["anchor"] == name.lower(), name
        assert name in headings, f"docs/runbooks.md has no '## {name}' section"


def test_alerts_use_only_exported_metric_names() -> None:
    for alert in alerts():
        names = metric_names(alert["expr"])
        assert names, alert["alert"]
        assert unknown(names) == set(), f"{alert['alert']} selects unknown series"


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (namespace, le) (rate(a_bucket{pod=~"x.*"}[5m])))'
        " > 1e3 and on (namespace, pod) (b offset 2h) unless ignoring (kind) c:d == 0"
    )
    assert metric_names(expr) == {"a_bucket", "b", "c:d"}


def test_rules_scale_to_second_windows(promtool: Path, tmp_path: Path) -> None:
    """The test bed (1 s scrape and evaluation) loads the rules with windows divided by 60."""
    assert scaled_rule_groups(1) == rule_groups()
    scaled = {rule["alert"]: rule for g in scaled_rule_groups(1 / 60) for rule in g["rules"]}
    drift = scaled["RLJobRolloutThroughputDrift"]
    assert drift["for"] == "30s"
    assert "[5s]" in drift["expr"] and "[1m]" in drift["expr"]
    assert "offset 2m" in scaled["RLJobCheckpointStale"]["expr"]
    path = tmp_path / "scaled.yaml"
    path.write_text(yaml.safe_dump({"groups": scaled_rule_groups(1 / 60)}, sort_keys=False))
    _run([str(promtool), "check", "rules", str(path)])
