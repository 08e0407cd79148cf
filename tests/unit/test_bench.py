"""The pure parts of bench/: percentiles, growth classes, write counting and RESULTS.md, the
KV-drift matrix's cells and the bottleneck-diagnosis matrix's jobs and judging."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections import Counter

import pytest
from bench import diagnosis, diagnosis_job, diagnosis_judge, operating_point, status_size
from bench.procfs import Usage
from bench.report import Results, per_job_slopes, render
from bench.scale import OPERATOR, OperatorCounters, ProbeWaits, QueryCounts, SizeResult, Verdicts
from bench.stats import growth, percentile, size_at
from bench.writes import WriteCount, count_writes

from rljob.dev.audit import AuditWrite
from rljob.dev.scrape import HistogramReading
from rljob.dev.sim.models.concurrency import knee_truth
from rljob.dev.sim.profiles import EngineProfile

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
OPERATOR_USER = "system:serviceaccount:rljob-system:rljob-operator"


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([3.0], 50, 3.0, id="one-value"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 50, 2.5, id="median-interpolates"),
        pytest.param([4.0, 1.0, 3.0, 2.0], 0, 1.0, id="p0-is-min-of-unsorted"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 100, 4.0, id="p100-is-max"),
        pytest.param([float(v) for v in range(1, 101)], 99, 99.01, id="p99-of-100"),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 50))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([1.0, 1.1, 1.2], "flat", id="within-25-percent"),
        pytest.param([5.0, 4.0, 3.0], "flat", id="shrinking"),
        pytest.param([0.0, 0.0, 0.0], "flat (zero)", id="all-zero"),
        pytest.param([0.0, 1.0, 5.0], "grows from zero", id="from-zero"),
        pytest.param([10.0, 20.0, 30.0], "sublinear", id="sqrt-like"),
        pytest.param([10.0, 40.0, 100.0], "linear", id="proportional"),
        pytest.param([10.0, 160.0, 1000.0], "worse than linear", id="quadratic"),
        pytest.param([1.0, math.nan, 1.1], "flat", id="nan-ignored"),
    ],
)
def test_growth_over_50_200_500(values: list[float], expected: str) -> None:
    assert growth([50, 200, 500], values) == expected


def test_growth_needs_two_sizes() -> None:
    assert growth([5], [1.0]) == "n/a (one size)"


@pytest.mark.parametrize(
    ("values", "bound", "expected"),
    [
        pytest.param([100.0, 180.0], 200.0, 612.5, id="extrapolated-beyond-the-largest"),
        pytest.param([100.0, 180.0], 150.0, 331.25, id="already-reached-in-between"),
        pytest.param([100.0, 90.0], 200.0, math.inf, id="not-growing-never"),
    ],
)
def test_size_at_which_a_bound_is_reached_from_50_and_500(
    values: list[float], bound: float, expected: float
) -> None:
    assert size_at([50, 500], values, bound) == pytest.approx(expected)


def test_size_at_needs_two_sizes() -> None:
    assert math.isnan(size_at([5], [1.0], 2.0))


def write(
    seconds: float, verb: str = "patch", user: str = OPERATOR_USER, code: int = 200
) -> AuditWrite:
    return AuditWrite(
        time=T0 + dt.timedelta(seconds=seconds),
        user=user,
        verb=verb,
        resource="rljobs",
        subresource="status" if verb == "patch" else "",
        namespace="ns",
        name="job",
        code=code,
    )


@pytest.mark.parametrize(
    ("writes", "total", "per_minute", "described"),
    [
        pytest.param([], 0, 0.0, "none", id="no-writes"),
        pytest.param(
            [write(1), write(2), write(3, "create")],
            3,
            1.5,
            "patch rljobs/status x2, create rljobs x1",
            id="by-kind-most-frequent-first",
        ),
        pytest.param([write(1, user="kwok")], 0, 0.0, "none", id="other-users-ignored"),
        pytest.param([write(-1), write(120)], 0, 0.0, "none", id="outside-the-window"),
        pytest.param([write(0)], 1, 0.5, "patch rljobs/status x1", id="start-is-inclusive"),
        pytest.param(
            [write(1, code=409), write(2)],
            2,
            1.0,
            "patch rljobs/status (HTTP 409) x1, patch rljobs/status x1",
            id="conflicts-apart",
        ),
    ],
)
def test_count_writes_over_two_minutes(
    writes: list[AuditWrite], total: int, per_minute: float, described: str
) -> None:
    counted = count_writes(writes, OPERATOR_USER, T0, T0 + dt.timedelta(minutes=2))

    assert counted.total == total
    assert counted.per_minute == pytest.approx(per_minute)
    assert counted.describe() == described


def size_result(size: int, writes: int) -> SizeResult:
    return SizeResult(
        size=size,
        pods=2 * size,
        latencies=(0.2, 0.3, 0.4),
        writes=WriteCount(180.0, Counter({"patch rljobs/status": writes})),
        status_changes=Counter({"policyGeneration+progress": 2}),
        usage={OPERATOR: Usage(1.2, 90.0, 95.0), "kube-apiserver": Usage(20.0, 400.0, 410.0)},
        queries=QueryCounts(operator=78.0, instant=78.0, range=0.0),
        window=180.0,
        fill_seconds=30.0,
        verdicts=Verdicts(size - 1, size, 420.0, WriteCount(420.0, Counter({"create events": 7}))),
        counters=OperatorCounters(0.36, {"resync": size, "own_write": size, "child": 0.0}),
        waits=ProbeWaits(
            lag=HistogramReading({0.1: 28.0, 1.0: 29.0, 2.5: 30.0, math.inf: 30.0}, 3.5),
            queue={
                "user": HistogramReading({0.01: 3.0, math.inf: 3.0}, 0.006),
                "event": HistogramReading({0.5: 1.0, 5.0: 2.0, math.inf: 2.0}, 4.0),
                "resync": HistogramReading({}, 0.0),
            },
        ),
    )


def results(*sizes: SizeResult) -> Results:
    return Results(
        mode="full",
        command="python -m bench",
        sha="abc123",
        machine="2 x Test CPU, 4.0 GiB RAM, Linux 6",
        started=T0,
        seconds=600.0,
        sizes=tuple(s.size for s in sizes),
        seeds=1,
        scale=list(sizes),
        notes=["a note"],
        analysis="Why it missed.",
    )


@pytest.mark.parametrize(
    ("rendered", "expected"),
    [
        pytest.param(results(), "- git SHA: `abc123`", id="sha"),
        pytest.param(results(), "- machine: 2 x Test CPU, 4.0 GiB RAM, Linux 6", id="machine"),
        pytest.param(results(), "- command: `python -m bench`", id="command"),
        pytest.param(results(), "fleet sizes N = ", id="sizes-line"),
        pytest.param(results(), "- note: a note", id="notes"),
        pytest.param(results(), "## Analysis\n\nWhy it missed.", id="analysis"),
        pytest.param(
            results(),
            "| apply -> reconciled p50 <= 0.5 s, p99 <= 2 s | - | not measured |",
            id="unmeasured-target",
        ),
        pytest.param(
            results(size_result(50, 0), size_result(500, 0)),
            "| 500 | 3 | 0.30 | 0.40 | 0.40 | 0 |",
            id="latency-row",
        ),
        pytest.param(
            results(size_result(500, 0)),
            "| 500 | 30 | 2 / 1 | <= 2.5 | 3, 0.002, <= 0.01 | 2, 2.000, <= 5 | none |",
            id="what-the-probes-waited-on",
        ),
        pytest.param(
            results(size_result(50, 0), size_result(500, 600)),
            "| operator writes per minute | 0 | 200 | 0.44 | grows from zero |",
            id="growth-row",
        ),
        pytest.param(
            results(size_result(500, 600)),
            "200.00/min at 500 jobs (allowed 100/min) | **missed** |",
            id="missed-write-target",
        ),
        pytest.param(
            results(size_result(500, 0)),
            "| operator RSS <= 200 MiB (500 jobs) | 90 MiB (peak 95) | met |",
            id="met-rss-target",
        ),
        pytest.param(
            results(size_result(500, 0)),
            "| none | policyGeneration+progress x2 |",
            id="status-fields-changed",
        ),
        pytest.param(
            results(size_result(500, 0)),
            "| 500 | 499/500 | 420 s | 7 | create events x7 |",
            id="one-off-verdict-writes-apart",
        ),
        pytest.param(
            results(size_result(500, 0)),
            "- 500 jobs: the garbage collector took 0.12 CPU s/min (10 % of the operator's); "
            "reconcile wakes in the window: resync 500, own_write 500.",
            id="gc-share-and-wakes-by-cause",
        ),
    ],
)
def test_results_md(rendered: Results, expected: str) -> None:
    assert expected in render(rendered)


# ---------------------------------------------------------------- KV drift at the operating point


def _outcome(delays: dict[str, float], false_restarts: int = 0) -> operating_point.Outcome:
    return operating_point.Outcome(delays=delays, false_restarts=false_restarts)


@pytest.mark.parametrize(
    ("outcomes", "recall", "median_minutes", "false_restarts"),
    [
        ([_outcome({"rollout-1": 600.0}), _outcome({})], 0.5, 10.0, 0),
        ([_outcome({"rollout-1": 4000.0}), _outcome({"rollout-1": 0.0}, 2)], 0.5, 2000 / 60, 2),
        ([_outcome({}, 3)], 0.0, None, 3),
    ],
    ids=["one-missed", "one-too-late", "none-found"],
)
def test_an_operating_point_cell_counts_recall_within_two_windows(
    outcomes: list[operating_point.Outcome],
    recall: float,
    median_minutes: float | None,
    false_restarts: int,
) -> None:
    scenario = operating_point.Scenario("x", "async", {}, ("rollout-1",))
    cell = operating_point.cell(scenario, outcomes)
    assert cell.recall == recall
    delay = cell.median_delay
    assert (None if delay is None else delay / 60) == (
        None if median_minutes is None else pytest.approx(median_minutes)
    )
    assert cell.false_restarts == false_restarts


def test_the_operating_point_matrix_covers_the_issue_scenarios_in_sync_and_async() -> None:
    names = {s.name for s in operating_point.scenarios("sync")}
    assert names == {s.name for s in operating_point.scenarios("async")}
    faults = [s for s in operating_point.scenarios("async") if s.victims]
    assert {len(s.profiles) for s in faults} >= {1, 2, 4}
    assert any(len(s.victims) == len(s.profiles) > 1 for s in faults)  # fleet-wide
    assert len(names) - len(faults) >= 6  # no-fault scenarios


def test_an_operating_point_run_writes_a_table_row_per_scenario() -> None:
    rows = operating_point.matrix(1, 1.0, only="1-engine job")
    text = operating_point.table(rows, 1, 1.0)
    assert [s.driver for s, _ in rows] == ["sync", "async"]
    assert text.count("| 1-engine job fragments |") == 2
    assert "| RL | scenario | operating point | today | naive rule |" in text


# ---------------------------------------------------------------- bottleneck diagnosis matrix

ROLLOUT, VERIFIER, UNKNOWN = (
    diagnosis_judge.Role.ROLLOUT,
    diagnosis_judge.Role.VERIFIER,
    diagnosis_judge.Role.UNKNOWN,
)


def _scenario(*expected: tuple[float, diagnosis_judge.Role | None]) -> diagnosis_judge.Scenario:
    return diagnosis_judge.Scenario(
        "x", lambda seed, hours: pytest.fail("not built"), expected, diagnosis_judge.Truth(50, 64)
    )


def _verdicts(*roles: diagnosis_judge.Role) -> list[diagnosis_judge.Verdict]:
    return [diagnosis_judge.Verdict(60.0 * i, role, None, None) for i, role in enumerate(roles)]


@pytest.mark.parametrize(
    ("expected", "roles", "right_at_end", "share", "confident_after"),
    [
        pytest.param(
            ((0.0, ROLLOUT),),
            (UNKNOWN, UNKNOWN, ROLLOUT, ROLLOUT),
            True,
            1.0,
            120.0,
            id="unknown-warm-up-is-before-the-first-answer",
        ),
        pytest.param(
            ((0.0, ROLLOUT),),
            (ROLLOUT, VERIFIER, ROLLOUT, ROLLOUT),
            True,
            0.75,
            120.0,
            id="a-wrong-answer-in-between-delays-confidence",
        ),
        pytest.param(
            ((0.0, ROLLOUT),), (ROLLOUT, ROLLOUT, VERIFIER), False, 2 / 3, None, id="wrong-at-end"
        ),
        pytest.param(
            ((0.0, ROLLOUT), (100.0, VERIFIER)),
            (ROLLOUT, ROLLOUT, ROLLOUT, VERIFIER, VERIFIER),
            True,
            0.8,
            80.0,
            id="after-a-change-confidence-counts-from-the-change",
        ),
        pytest.param(
            ((0.0, None), (100.0, ROLLOUT)),
            (VERIFIER, VERIFIER, ROLLOUT, ROLLOUT),
            True,
            1.0,
            20.0,
            id="unjudged-stretch-is-not-counted",
        ),
        pytest.param(((0.0, UNKNOWN),), (UNKNOWN, UNKNOWN), True, 1.0, 0.0, id="unknown-right"),
    ],
)
def test_a_diagnosis_run_is_judged_by_the_expected_role_over_time(
    expected: tuple[tuple[float, diagnosis_judge.Role | None], ...],
    roles: tuple[diagnosis_judge.Role, ...],
    right_at_end: bool,
    share: float,
    confident_after: float | None,
) -> None:
    judged = diagnosis_judge.judge(_scenario(*expected), _verdicts(*roles))
    assert judged.right_at_end is right_at_end
    assert judged.share_right == pytest.approx(share)
    assert judged.confident_after == confident_after


def test_a_diagnosis_cell_reports_relative_errors_against_the_truth() -> None:
    scenario = _scenario((0.0, ROLLOUT))
    judged = [
        diagnosis_judge.Judged(ROLLOUT, True, 1.0, 0.0, 40, 64.0),
        diagnosis_judge.Judged(VERIFIER, False, 0.5, None, 60, None),
    ]
    cell = diagnosis_judge.cell(scenario, judged)
    assert cell.right_at_end == 1
    assert cell.wrong_roles == ("Verifier",)
    assert cell.recommendation_errors == pytest.approx((-0.2, 0.2))
    assert cell.knee_errors == pytest.approx((0.0,))


@pytest.mark.parametrize(
    ("c", "rollouts"),
    [
        pytest.param(8, 2.1, id="8"),
        pytest.param(16, 4.0, id="16"),
        pytest.param(64, 8.1, id="64-the-knee"),
        pytest.param(128, 8.3, id="128"),
        pytest.param(512, 8.3, id="flat-past-the-last-point"),
    ],
)
def test_the_published_sweep_is_replayed_at_its_points(c: float, rollouts: float) -> None:
    assert diagnosis.published(c) == pytest.approx(1000 * rollouts)


def test_the_diagnosis_matrix_names_every_role_and_the_issue_scenarios() -> None:
    matrix = diagnosis.scenarios(3.0)
    roles = {role for s in matrix for _, role in s.expected if role is not None}
    assert roles == set(diagnosis_judge.Role)
    names = " ".join(s.name for s in matrix)
    for part in ("published doubling sweep", "verifier slows", "no SDK phase counters"):
        assert part in names
    clean = [s for s in matrix if s.garbage == diagnosis_job.Garbage()]
    assert sum("under-driven" in s.name for s in clean) >= 3


def test_an_under_driven_sync_job_waits_on_rollouts_and_has_the_test_beds_truth() -> None:
    scenario = diagnosis.under_driven(16, 4)
    truth = knee_truth(EngineProfile(concurrency=16, knee=256, throughput=5000.0))
    assert scenario.truth == diagnosis_judge.Truth(4 * truth.recommended, 4 * truth.plateau_from)
    job = scenario.build("0", 1.0)
    for _ in range(3600):
        job.tick()
    seconds = job.trainer.seconds
    assert seconds["waiting_for_rollouts"] > seconds["training"] > seconds["syncing_weights"]


def test_a_slow_verifier_starves_the_engines_of_a_coupled_job() -> None:
    scenario = next(s for s in diagnosis.scenarios(2.0) if "verifier slows" in s.name)
    job = scenario.build("0", 2.0)
    assert isinstance(job, diagnosis_job.Pipeline)
    readings = {}
    for t in range(7200):
        job.tick()
        if t in (3500, 7100):
            readings[t] = (job.engine(0).running, job.verifier_depth())
    (running_before, depth_before), (running_after, depth_after) = readings[3500], readings[7100]
    assert running_before == 256 and depth_before == 0  # saturated, nothing queued
    assert running_after < 64 and depth_after > 100


def test_a_diagnosis_smoke_run_judges_every_scenario() -> None:
    rows = diagnosis.matrix(1, 1.0, only="trainer-bound; all three", log=lambda _: None)
    text = diagnosis_judge.table(rows, 1, 1.0)
    assert "| trainer-bound; all three | Trainer | 1/1 |" in text
    assert diagnosis_judge.summary(rows) == "1 of 1 scenario-seeds right at the end"


def test_the_smoke_prints_per_job_slopes_of_memory_cpu_and_writes() -> None:
    small, large = size_result(5, 5), size_result(20, 35)
    large = dataclasses.replace(large, usage={OPERATOR: Usage(2.7, 120.0, 125.0)})
    lines = per_job_slopes([small, large])
    assert lines == [
        "per added job, N=5..20: operator writes per minute +0.6667 (1.67 -> 11.67)",
        "per added job, N=5..20: operator RSS (MiB) +2.0000 (90.00 -> 120.00)",
        "per added job, N=5..20: operator CPU (s/min) +0.1000 (1.20 -> 2.70)",
    ]
    assert per_job_slopes([small]) == [], "one size has no slope"


@pytest.mark.parametrize(
    ("node", "shape", "expected"),
    [
        ({"type": "string", "maxLength": 5}, status_size.BOUND, "xxxxx"),
        (
            {"type": "string", "maxLength": 253},
            status_size.REAL,
            "x" * status_size.REAL_NAME_LENGTH,
        ),
        ({"type": "string", "maxLength": 1024}, status_size.REAL, "x" * 1024),
        ({"type": "string", "format": "date-time"}, status_size.BOUND, status_size.TIMESTAMP),
        ({"type": "string", "enum": ["a", "bbb"]}, status_size.BOUND, "bbb"),
        ({"type": "integer", "maximum": 7}, status_size.BOUND, 7),
        (
            {"type": "array", "maxItems": 3, "items": {"type": "boolean"}},
            status_size.BOUND,
            [False] * 3,
        ),
        (
            {"type": "object", "maxProperties": 2, "additionalProperties": {"type": "integer"}},
            dataclasses.replace(status_size.BOUND, integer=1, key_length=8),
            {"key-0000": 1, "key-0001": 1},
        ),
    ],
    ids=[
        "string",
        "name-capped",
        "free-text-kept",
        "timestamp",
        "longest-enum",
        "integer",
        "list-full",
        "map-full",
    ],
)
def test_the_largest_value_a_schema_admits(
    node: dict[str, object], shape: status_size.Shape, expected: object
) -> None:
    assert status_size.largest(node, shape) == expected


def test_the_status_is_bounded_and_a_real_job_at_its_largest_stays_well_under_the_limit() -> None:
    size = status_size.measure()
    assert size.unbounded == (), "a list, map or string in status without a bound"
    # 1,024 engines in the roster and the in-turn journal, every ledger full: 749 KiB today.
    assert size.real_bytes < 0.6 * status_size.OBJECT_LIMIT_BYTES
    assert size.bound_bytes > size.real_bytes
