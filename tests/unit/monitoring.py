"""Shared by the monitoring tests: where the alert rules and the dashboard live, the metric names
their queries may use, and a crude but sufficient PromQL metric-name extractor."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "rljob-operator"
# Single sources inside the chart (read by its templates with .Files.Get) and their copies.
RULES_FILE = CHART / "files" / "rljob-rules.yaml"
RULES_COPY = REPO / "deploy" / "prometheus" / "rljob-rules.yaml"
DASHBOARD_FILE = CHART / "files" / "rljob-operator-dashboard.json"
DASHBOARD_COPY = REPO / "dashboards" / "rljob-operator.json"
RUNBOOKS = REPO / "docs" / "runbooks.md"
PROMTOOL_FIXTURES = REPO / "tests" / "prometheus"

# Exposed by workloads, not by the operator (shared/reference/workload-signals.md): vLLM's
# names come from the health profiles, the trainer's and the verifiers' from the SDK's exporters.
PROMETHEUS_SERIES = frozenset({"up"})

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
}


def promtool_or_skip() -> Path:
    """promtool from tools/prometheus.sh (or RLJOB_PROMETHEUS_DIR); skips the test, saying why,
    when it cannot be had (no apt, no network and no cache)."""
    import pytest

    from rljob.dev.prometheus import prometheus_bin_dir

    try:
        return prometheus_bin_dir() / "promtool"
    except Exception as exc:
        pytest.skip(f"promtool unavailable (tools/prometheus.sh or RLJOB_PROMETHEUS_DIR): {exc}")


@dataclass(frozen=True)
class MetricSpec:
    kind: str  # counter, gauge, histogram
    labels: tuple[str, ...]


def operator_metrics() -> dict[str, MetricSpec]:
    """Every metric rljob.observability defines, by family name (counters without _total): its
    prometheus_client metrics and the per-job gauge families JOB_SERIES serves."""
    from rljob import observability

    found: dict[str, MetricSpec] = {}
    for value in vars(observability).values():
        if isinstance(value, MetricWrapperBase):
            found[value._name] = MetricSpec(str(value._type), tuple(value._labelnames))
        elif isinstance(value, observability.JobFamily):
            found[value.name] = MetricSpec("gauge", tuple(value.labels))
    return found


def exposed_names(family: str, kind: str) -> set[str]:
    return {family + suffix for suffix in _SUFFIXES[kind]}


def operator_series() -> set[str]:
    names: set[str] = set()
    for family, metric in operator_metrics().items():
        names |= exposed_names(family, metric.kind)
    return names


def _registry_series(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names |= exposed_names(family.name, str(family.type))
    return names


def trainer_series() -> set[str]:
    """The progress exporter's series and the RL canaries served on its registry; the canary
    gauges are exported only once reported, so their names come from the SDK's list."""
    from rljob.sdk.metrics import GAUGES, RLMetrics
    from rljob.sdk.progress import ProgressExporter

    registry = CollectorRegistry()
    ProgressExporter(registry=registry, serve=False)
    RLMetrics(registry)
    return _registry_series(registry) | set(GAUGES)


def verifier_series() -> set[str]:
    from rljob.sdk.verifier import VerifierExporter

    registry = CollectorRegistry()
    VerifierExporter(registry=registry, serve=False)
    return _registry_series(registry)


def vllm_series() -> set[str]:
    from rljob.health.profiles import VLLM

    names = {
        VLLM.generation_tokens_total,
        VLLM.requests_running,
        VLLM.requests_waiting,
        VLLM.kv_cache_usage,
        VLLM.prefix_cache_hits_total,
        VLLM.prefix_cache_queries_total,
        VLLM.preemptions_total,
    }
    if VLLM.sleep is not None:
        names.add(VLLM.sleep.metric)
    return {name for name in names if name}


def known_series() -> set[str]:
    return (
        operator_series() | trainer_series() | vllm_series() | verifier_series() | PROMETHEUS_SERIES
    )


_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_MATCHERS = re.compile(r"\{[^}]*\}")
_STRINGS = re.compile(r"\"[^\"]*\"|'[^']*'")
_RANGES = re.compile(r"\[[^\]]*\]")
_NUMBERS = re.compile(r"\b\d+(?:\.\d+)?(?:e[+-]?\d+|ms|s|m|h|d|w|y)?\b")
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "offset", "bool", "inf", "nan",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects: identifiers that are neither functions,
    aggregations, keywords, label names nor inside strings or range brackets."""
    text = _STRINGS.sub("", expr)
    text = _MATCHERS.sub(" {}", text)
    text = _LABEL_LISTS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _NUMBERS.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        word = match.group(0)
        following = text[match.end() :].lstrip()
        if word.lower() in _KEYWORDS or following.startswith("("):
            continue  # a function or an aggregation
        names.add(word)
    return names


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES_FILE.read_text())["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD_FILE.read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def dashboard_queries(
    board: dict[str, Any], variables: dict[str, str] | None = None
) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every panel target, with dashboard variables replaced (default
    `.*`, which matches every value and a missing label), ready for the Prometheus HTTP API."""
    values = {"namespace": ".*", "job": ".*", **(variables or {})}
    found = []
    for panel in panels(board):
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            for name, value in values.items():
                expr = expr.replace(f"${{{name}}}", value).replace(f"${name}", value)
            found.append((panel.get("title", ""), expr))
    return found


def unknown(names: Iterable[str]) -> set[str]:
    return set(names) - known_series()


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_EXPR_DURATIONS = re.compile(r"(\[)([^\]:]+)((?::[^\]]*)?\])|(offset\s+)(\d[0-9a-z.]*)")


def _duration_seconds(text: str) -> float:
    parts = _DURATION.findall(text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text!r}"
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def _duration_text(seconds: float) -> str:
    milliseconds = max(1, round(seconds * 1000))
    if milliseconds % 1000:
        return f"{milliseconds}ms"
    whole = milliseconds // 1000
    for unit, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def scaled_rule_groups(factor: float) -> list[dict[str, Any]]:
    """The shipped rules with every time window (range selectors, offsets and `for`) multiplied
    by `factor`: a test bed with 1 s scrapes runs them at second scale with factor 1/60 (30m ->
    30s). Thresholds and annotations are unchanged."""

    def scale(text: str) -> str:
        return _duration_text(_duration_seconds(text) * factor)

    def scale_expr(expr: str) -> str:
        def one(match: re.Match[str]) -> str:
            if match.group(1):
                return f"{match.group(1)}{scale(match.group(2).strip())}{match.group(3)}"
            return f"{match.group(4)}{scale(match.group(5))}"

        return _EXPR_DURATIONS.sub(one, expr)

    groups = rule_groups()
    for group in groups:
        for rule in group["rules"]:
            rule["expr"] = scale_expr(rule["expr"])
            if "for" in rule:
                rule["for"] = scale(rule["for"])
    return groups
