"""`kubectl rljob diagnose`: the one-screen view of status.bottleneck and a policy suspension, and
the JSON document for scripts. Fixtures go through the API models (Bottleneck, PolicySuspension),
so they carry the operator's camelCase field names exactly."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from rljob.api.diagnosis import (
    Bottleneck,
    ConcurrencyCurveStatus,
    CurvePoint,
    EngineLoad,
    PhaseShare,
    PolicySuspension,
    VerifierLoad,
)
from rljob.kubectl import diagnose_view as view
from rljob.kubectl.diagnose_verdict import ROLE_MEANINGS
from rljob.vocabulary.enums import BottleneckRole

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
# The published sweep rljob.health.knee is calibrated on: knee 64, peak 64, run at 51.
SWEEP = [(8, 2100.0), (16, 4000.0), (32, 7200.0), (64, 8100.0), (128, 8300.0)]


def curve(**overrides: Any) -> ConcurrencyCurveStatus:
    fields: dict[str, Any] = {
        "role": "rollout",
        "points": [CurvePoint(concurrency=c, throughput=t, seconds=900.0) for c, t in SWEEP],
        "current": 24.0,
        "knee": 64.0,
        "peak": 64.0,
        "recommended": 51.2,
        "observed_from": 8.0,
        "observed_to": 128.0,
        "coverage": 1.0,
        "message": "throughput 8100 tokens/s at 64 in flight: the knee is at 64; run at 51",
    }
    return ConcurrencyCurveStatus(**(fields | overrides))


def engine_loads(job_name: str, count: int) -> list[EngineLoad]:
    """Engines running 6 requests each, none queued, the first busiest."""
    return [
        EngineLoad(
            pod=f"{job_name}-rollout-{i}",
            running=6.0,
            waiting=0.0,
            kv_usage=0.41,
            tokens_per_second=1500.0 - i,
            saturated=0.02,
        )
        for i in range(count)
    ]


def bottleneck(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "role": BottleneckRole.ROLLOUT_CONCURRENCY,
        "since": datetime(2026, 5, 1, 10, 0, tzinfo=UTC),
        "updated_at": datetime(2026, 5, 1, 11, 58, tzinfo=UTC),
        "window_seconds": 900.0,
        "step_seconds": 42.0,
        "phases": [
            PhaseShare(phase="training", share=0.25, seconds_per_step=10.5),
            PhaseShare(phase="waiting_for_rollouts", share=0.62, seconds_per_step=26.0),
            PhaseShare(phase="weight_sync", share=0.13, seconds_per_step=5.5),
        ],
        "evidence": "the trainer waits 62% of each step for rollouts while no engine queues",
        "advice": "raise the rollout driver's requests in flight",
        "recommended_concurrency": 51,
        "curve": curve(),
        "engines": engine_loads("grpo-demo", 4),
        "verifier": VerifierLoad(
            p50_seconds=0.8, p99_seconds=4.25, queue_depth=3.0, errors_per_second=0.0
        ),
    }
    model = Bottleneck(**(fields | overrides))
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


SUSPENSION = PolicySuspension(
    reason="RewardHackingSuspected",
    message="training reward +0.09/h over 2h while held-out eval gained 0.004/h",
    rule="canaries",
    suspended_at=datetime(2026, 5, 1, 11, 30, tzinfo=UTC),
).model_dump(mode="json", by_alias=True, exclude_none=True)


def job(annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "grpo-demo", "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": "RLJob", "metadata": meta, "spec": {}, "status": status}


def test_full_diagnosis_fits_one_screen() -> None:
    text = view.render_diagnose(job(phase="Running", bottleneck=bottleneck()), NOW)
    lines = text.splitlines()
    assert lines[0] == "RLJob team-a/grpo-demo: Running"
    assert len(lines) <= 50 and max(len(line) for line in lines) <= view.TEXT_WIDTH
    assert "BOTTLENECK RolloutConcurrency since 2026-05-01T10:00:00Z (2h ago)" in lines
    assert "the engines are not saturated and the verifiers keep up: room for more requests" in text
    assert "computed 2026-05-01T11:58:00Z (2m ago) over the last 15m" in text
    assert "evidence: the trainer waits 62% of each step" in text
    assert "advice: raise the rollout driver's requests in flight" in text
    assert "run the rollout driver at 51 requests in flight" in text
    # Phases by share, each with a bar as long as its share and its seconds per step.
    phases = [line.split()[0] for line in lines if re.match(r"  \w+ +[#.]{30} ", line)]
    assert phases == ["waiting_for_rollouts", "training", "weight_sync"]
    waiting = next(line for line in lines if line.startswith("  waiting_for_rollouts"))
    assert waiting.count("#") == round(0.62 * view.BAR_WIDTH)
    assert waiting.split()[-2:] == ["62%", "26.0"]
    assert "STEP TIME 42.0 s per step" in text
    # The curve: five points plotted, K and R on the axis, the facts beside it.
    assert sum(line.count("*") for line in lines) == len(SWEEP)
    axis = next(line for line in lines if re.match(r"\s+\+[-KR]+$", line))
    assert axis.count("K") == 1 and axis.count("R") == 1 and axis.index("R") < axis.index("K")
    assert "now 24 in flight; knee (K) 64; peak 64; run at (R) 51" in text
    assert "confidence: 5 bins covering 100% of 8-128 in flight observed" in text
    assert "beyond" not in text
    assert re.search(r"^  grpo-demo-rollout-0\s+6\.0\s+0\.0\s+41%\s+1500\s+2%$", text, re.M)
    assert "VERIFIER latency p50 0.80s p99 4.25s, queue 3.0, errors 0.00/s" in text
    assert "SUSPENDED" not in text


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        pytest.param({}, "the job is Pending", id="new-job"),
        pytest.param({"phase": "Succeeded"}, "the job is Succeeded", id="finished"),
        pytest.param({"phase": "Suspended"}, "the job is Suspended", id="suspended"),
        pytest.param(
            {
                "phase": "Running",
                "conditions": [
                    {
                        "type": "HealthSignalsAvailable",
                        "status": "False",
                        "reason": "NoMetricsSource",
                        "message": "no metrics source configured",
                    }
                ],
            },
            "no health metrics to diagnose from (NoMetricsSource: no metrics source configured)",
            id="no-metrics-source",
        ),
        pytest.param(
            {
                "phase": "Running",
                "conditions": [
                    {"type": "HealthSignalsAvailable", "status": "True", "reason": "SourceAnswers"}
                ],
            },
            "not computed yet",
            id="not-computed-yet",
        ),
    ],
)
def test_absent_bottleneck_says_why(status: dict[str, Any], reason: str) -> None:
    body = job(**status)
    text = view.render_diagnose(body, NOW)
    assert f"no diagnosis: {reason}" in text
    assert "BOTTLENECK" not in text and "STEP TIME" not in text
    assert reason in (view.unavailable_reason(body) or "")


def test_not_computed_yet_names_the_window() -> None:
    body = job(phase="Running")
    body["spec"] = {"health": {"bottleneck": {"window": "30m"}}}
    assert "spec.health.bottleneck.window (30m)" in view.render_diagnose(body)


@pytest.mark.parametrize(
    ("overrides", "present", "absent"),
    [
        pytest.param(
            {"role": BottleneckRole.UNKNOWN, "phases": [], "curve": None, "engines": []},
            [
                "BOTTLENECK Unknown since",
                "  too little to tell: the trainer's phase counters spanned too little",
                "no trainer phase seconds in the window",
                "no throughput-versus-concurrency curve yet",
            ],
            ["ENGINES", "knee (K)", "run at (R)", "in flight observed"],
            id="unknown-role-nothing-observed",
        ),
        pytest.param(
            {"step_seconds": None, "verifier": None, "recommended_concurrency": None},
            ["STEP TIME\n", "ROLLOUT CURVE"],
            ["VERIFIER", "run the rollout driver at"],
            id="no-step-time-no-verifier",
        ),
        pytest.param(
            {"curve": curve(points=[], knee=None, peak=None, recommended=None, coverage=0.0)},
            ["(no concurrency has enough time observed to plot)", "confidence: 0 bins"],
            ["knee (K)"],
            id="curve-without-points",
        ),
        pytest.param(
            {
                "engines": [
                    EngineLoad(pod=f"e{i}", running=1, waiting=0, tokens_per_second=10, saturated=0)
                    for i in range(view.MAX_ENGINE_ROWS + 3)
                ]
            },
            ["... and 3 more (kubectl rljob diagnose -o json)"],
            [f"e{view.MAX_ENGINE_ROWS} "],
            id="many-engines-cut",
        ),
    ],
)
def test_missing_parts_render_gracefully(
    overrides: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    text = view.render_diagnose(job(phase="Running", bottleneck=bottleneck(**overrides)), NOW)
    for snippet in present:
        assert snippet in text + "\n", snippet
    for snippet in absent:
        assert snippet not in text, snippet


def test_engine_without_kv_usage_shows_a_dash() -> None:
    engines = [EngineLoad(pod="e0", running=1, waiting=2, tokens_per_second=10, saturated=0.5)]
    text = view.render_diagnose(job(phase="Running", bottleneck=bottleneck(engines=engines)))
    assert re.search(r"^  e0\s+1\.0\s+2\.0\s+-\s+10\.0\s+50%$", text, re.M)


def test_garbled_fields_do_not_break_the_view() -> None:
    body = bottleneck()
    body["stepSeconds"] = "soon"
    body["curve"]["knee"] = "high"
    body["phases"][0]["share"] = None
    text = view.render_diagnose(job(phase="Running", bottleneck=body), NOW)
    assert "STEP TIME\n" in text and "knee (K)" not in text


def test_beyond_knee_curve_says_where_it_lies_and_recommends_doubling() -> None:
    climbing = curve(
        points=[CurvePoint(concurrency=c, throughput=100.0 * c, seconds=900.0) for c in (4, 8, 16)],
        knee=None,
        peak=16.0,
        recommended=None,
        beyond=True,
        current=16.0,
        observed_from=4.0,
        observed_to=16.0,
        message="the knee lies beyond 16: the job never ran above 16 in flight",
    )
    text = view.render_diagnose(
        job(phase="Running", bottleneck=bottleneck(curve=climbing, recommended_concurrency=32))
    )
    assert "the knee lies beyond 16: throughput still climbed there" in text
    assert "run at (R) 32" in text and "knee (K)" not in text
    axis = next(line for line in text.splitlines() if re.match(r"\s+\+[-KR]+$", line))
    # Double today's lies right of every observed point: R closes the axis.
    assert axis.rstrip().endswith("R") and "K" not in axis
    assert "32 in flight" in text


def test_policy_suspension_shows_reason_evidence_and_how_to_resume() -> None:
    body = job(phase="Suspended", suspension=SUSPENSION)
    text = view.render_diagnose(body, NOW)
    assert "no diagnosis: the job is Suspended" in text
    assert (
        "SUSPENDED BY POLICY RewardHackingSuspected (rule canaries) since "
        "2026-05-01T11:30:00Z (30m ago)" in text
    )
    assert "evidence: training reward +0.09/h over 2h" in text
    assert "resume, once the cause is dealt with: kubectl rljob resume grpo-demo -n team-a" in text


@pytest.mark.parametrize(
    ("annotation", "handled", "pending"),
    [
        pytest.param(None, None, None, id="never-requested"),
        pytest.param("n1", None, "n1", id="requested-not-handled"),
        pytest.param("n1", "n1", None, id="requested-and-handled"),
        pytest.param("n2", "n1", "n2", id="newer-request-pending"),
    ],
)
def test_pending_resume_request(
    annotation: str | None, handled: str | None, pending: str | None
) -> None:
    annotations = {"rljob.io/resume-request": annotation} if annotation else None
    status: dict[str, Any] = {"phase": "Suspended", "suspension": SUSPENSION}
    if handled:
        status["lastResumeRequest"] = {"id": handled, "handledAt": "2026-05-01T11:59:00Z"}
    body = job(annotations, **status)
    assert view.pending_resume(body) == pending
    text = view.render_diagnose(body, NOW)
    assert (f"resume requested ({pending}), waiting for the operator" in text) == bool(pending)


def test_every_role_has_a_meaning() -> None:
    assert set(ROLE_MEANINGS) == set(BottleneckRole)


DOCUMENT_KEYS = {
    "kind",
    "name",
    "namespace",
    "phase",
    "bottleneck",
    "bottleneckUnavailable",
    "suspension",
    "pendingResumeRequest",
    "lastResumeRequest",
    "trainerBelowGang",
}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            job(phase="Running", bottleneck=bottleneck()),
            {"phase": "Running", "bottleneckUnavailable": None, "suspension": None},
            id="diagnosed",
        ),
        pytest.param(
            job(phase="Suspended", suspension=SUSPENSION),
            {"bottleneck": None, "suspension": SUSPENSION, "pendingResumeRequest": None},
            id="suspended",
        ),
        pytest.param(
            job(), {"phase": "Pending", "bottleneck": None, "lastResumeRequest": None}, id="new"
        ),
    ],
)
def test_json_document_keys(body: dict[str, Any], expected: dict[str, Any]) -> None:
    document = view.diagnosis_document(body)
    assert set(document) == DOCUMENT_KEYS
    assert document["kind"] == "RLJobDiagnosis"
    assert (document["name"], document["namespace"]) == ("grpo-demo", "team-a")
    assert document["bottleneck"] == (body["status"].get("bottleneck") or None)
    assert (document["bottleneck"] is None) == (document["bottleneckUnavailable"] is not None)
    for key, value in expected.items():
        assert document[key] == value, key


def test_json_document_keys_are_documented() -> None:
    assert view.__doc__ is not None
    for key in DOCUMENT_KEYS:
        assert re.search(rf"^    {key}\b", view.__doc__, re.M) or f", {key}" in view.__doc__, key


def test_the_documented_screen_is_what_the_view_prints() -> None:
    """docs/writing-an-rljob.md shows a worked screen: it must stay what the code prints."""
    knee_message = (
        "throughput 8100 tokens/s at 64 in flight, +12% from 32 to 64 and +2% from 64 to 128: "
        "the knee is at 64; run at 51 (80% of the peak's 64)"
    )
    diagnosis = bottleneck(
        curve=curve(message=knee_message),
        engines=engine_loads("grpo-qwen7b", 2),
        evidence="the trainer waited for rollouts 62% of the window while no engine queued "
        "requests",
    )
    body = job(phase="Running", bottleneck=diagnosis)
    body["metadata"] = {"name": "grpo-qwen7b", "namespace": "rl"}
    doc = (REPO / "docs" / "writing-an-rljob.md").read_text()
    shown = doc.split("$ kubectl rljob diagnose grpo-qwen7b -n rl\n", 1)[1].split("```", 1)[0]
    assert shown == view.render_diagnose(body, NOW) + "\n"
