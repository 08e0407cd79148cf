"""`kubectl rljob diagnose` never contradicts its own figures, and names a trainer gang short of
pods. One golden screen per verdict (tests/unit/golden/diagnose/, rewritten with
RLJOB_UPDATE_GOLDEN=1), each also checked for its `but:` line directly, then the cases where the
figures cut against the verdict and the gang's counts, table-driven."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from rljob.api.diagnosis import EngineLoad, PhaseShare, VerifierLoad
from rljob.kubectl import diagnose_view as view
from rljob.kubectl.diagnose_verdict import ROLE_MEANINGS
from rljob.vocabulary.enums import BottleneckRole
from tests.unit.golden_files import assert_matches_golden
from tests.unit.test_diagnose_view import NOW, bottleneck, curve, engine_loads, job

STEP_SECONDS = 40.0
BUT = "  but: "


def phases(**shares: float) -> list[PhaseShare]:
    """Phase shares of a 40 s step, by the SDK's phase names."""
    return [
        PhaseShare(phase=name, share=share, seconds_per_step=round(share * STEP_SECONDS, 1))
        for name, share in shares.items()
    ]


def saturated_engines(count: int, kv_usage: float = 0.95) -> list[EngineLoad]:
    """Engines queueing 7 requests most of the window."""
    return [
        engine.model_copy(update={"waiting": 7.0, "saturated": 0.9, "kv_usage": kv_usage})
        for engine in engine_loads("grpo-demo", count)
    ]


def running_job(diagnosis: dict[str, Any], nodes: int = 2, ready: int = 2) -> dict[str, Any]:
    """A running job whose trainer gang has `nodes` pods, `ready` of them ready."""
    body = job(
        phase="Running",
        bottleneck=diagnosis,
        roles={"trainer": {"desired": nodes, "ready": ready, "restarts": 0}},
    )
    body["spec"] = {"roles": {"trainer": {"nodes": nodes}}}
    return body


TRAINER_SHARES = {
    "training": 0.72,
    "waiting_for_rollouts": 0.12,
    "syncing_weights": 0.1,
    "checkpointing": 0.06,
}
TRAINER_EVIDENCE = (
    "trainer trained 72% of 15m; phases (2 pods: grpo-demo-trainer-0, grpo-demo-trainer-1): "
    "waiting 12%, training 72%, syncing 10%, checkpointing 6%, 40s per step"
)
TRAINER_ADVICE = (
    "training takes the largest share of the step: speed it up (more trainer GPUs, a larger "
    "micro-batch, activation checkpointing off); move GPUs from rollout only while its engines "
    "have room"
)
SATURATED_EVIDENCE = (
    "4 of 4 engines saturated: 13 requests in flight each, KV 95%, queue 7, 5994 tokens/s in all"
)


def diagnosis(role: BottleneckRole, shares: dict[str, float], **overrides: Any) -> dict[str, Any]:
    """status.bottleneck with these phase shares of a 40 s step and no recommendation."""
    fields: dict[str, Any] = {
        "role": role,
        "phases": phases(**shares),
        "step_seconds": STEP_SECONDS,
        "recommended_concurrency": None,
    }
    return bottleneck(**(fields | overrides))


def trainer_diagnosis(**overrides: Any) -> dict[str, Any]:
    fields = {"evidence": TRAINER_EVIDENCE, "advice": TRAINER_ADVICE, "verifier": None}
    return diagnosis(BottleneckRole.TRAINER, TRAINER_SHARES, **(fields | overrides))


@dataclass(frozen=True)
class Screen:
    """One golden case: its file's name, the body, and what its screen must say beyond the
    snapshot."""

    name: str
    body: dict[str, Any]
    but: str = ""  # the `but:` line's words; empty: the figures agree with the verdict
    header: list[str] = field(default_factory=list)  # lines under the headline


SCREENS = [
    Screen(
        "rollout",
        running_job(
            diagnosis(
                BottleneckRole.ROLLOUT,
                {"waiting_for_rollouts": 0.58, "training": 0.32, "syncing_weights": 0.06},
                evidence=f"trainer waited for rollouts 58% of 15m; {SATURATED_EVIDENCE}",
                advice="the engines are the limit: add rollout engines, about 6 more than the 4 "
                "running (x2.4)",
                engines=saturated_engines(4),
                curve=curve(current=52.0),
            )
        ),
    ),
    Screen("rollout-concurrency", running_job(bottleneck())),
    Screen(
        "verifier",
        running_job(
            diagnosis(
                BottleneckRole.VERIFIER,
                {"waiting_for_rollouts": 0.55, "training": 0.35, "syncing_weights": 0.1},
                evidence="trainer waited for rollouts 55% of 15m; verifier queue 12.0 requests "
                "over 2 pods; 4 engines unsaturated",
                advice="the verifiers hold rollouts back: add verifier replicas",
                verifier=VerifierLoad(p50_seconds=2.1, p99_seconds=9.5, queue_depth=12.0),
            )
        ),
    ),
    Screen("trainer", running_job(trainer_diagnosis())),
    Screen(
        "weight-sync",
        running_job(
            diagnosis(
                BottleneckRole.WEIGHT_SYNC,
                {"syncing_weights": 0.48, "training": 0.3, "waiting_for_rollouts": 0.22},
                evidence="trainer synced weights 48% of 15m, 19s per step",
                advice="weight sync bounds the step: broadcast over NCCL",
            )
        ),
    ),
    Screen(
        "unknown",
        running_job(
            diagnosis(
                BottleneckRole.UNKNOWN,
                {},
                evidence="no trainer phase counter (rljob_trainer_phase_seconds_total)",
                advice="report the trainer's phases (rljob.sdk progress.phase)",
                step_seconds=None,
                curve=None,
            )
        ),
    ),
    Screen(
        "trainer-vs-saturated-engines",
        running_job(
            trainer_diagnosis(
                phases=phases(
                    training=0.45,
                    waiting_for_rollouts=0.37,
                    syncing_weights=0.1,
                    checkpointing=0.08,
                ),
                engines=saturated_engines(4),
                curve=curve(current=52.0),
                evidence=f"trainer trained 45% of 15m; {SATURATED_EVIDENCE}",
            )
        ),
        but="4 of 4 engines are saturated with queued requests and 37% of the step waits for "
        "rollouts; both sides are near their limit",
    ),
    Screen(
        "trainer-below-gang",
        running_job(trainer_diagnosis(), nodes=2, ready=1),
        header=["  trainer: 1 of 2 pods ready; step times reflect half the gang"],
    ),
]
SCREEN_PARAMS = [pytest.param(screen, id=screen.name) for screen in SCREENS]


def one_line(text: str) -> str:
    """The screen with its wrapped paragraphs joined, to find a phrase across a wrap."""
    return " ".join(text.split())


@pytest.mark.parametrize("screen", SCREEN_PARAMS)
def test_screen_matches_its_golden_file(screen: Screen) -> None:
    assert_matches_golden(
        f"diagnose/{screen.name}.txt", view.render_diagnose(screen.body, NOW) + "\n"
    )


@pytest.mark.parametrize("screen", SCREEN_PARAMS)
def test_screen_says_but_exactly_when_its_figures_cut_against_the_verdict(screen: Screen) -> None:
    text = view.render_diagnose(screen.body, NOW)
    assert (BUT in text) == bool(screen.but), text
    if screen.but:
        assert f"but: {screen.but}" in one_line(text)
    # The gang line, when there is one, sits right under the headline.
    assert text.splitlines()[1 : 1 + len(screen.header)] == screen.header
    assert "not the problem" not in text


# ------------------------------------------------------------------------------ caveats


@pytest.mark.parametrize(
    ("diagnosis", "but"),
    [
        pytest.param(
            bottleneck(role=BottleneckRole.ROLLOUT, curve=curve(current=24.0)),
            "none of the 4 engines is saturated, KV 41%, 24 in flight under the curve's R of 51: "
            "the engines have room",
            id="rollout-while-engines-have-room",
        ),
        pytest.param(
            bottleneck(role=BottleneckRole.ROLLOUT, curve=curve(current=64.0)),
            "",
            id="rollout-at-the-curves-run-at",
        ),
        pytest.param(
            bottleneck(role=BottleneckRole.ROLLOUT, engines=[], curve=None),
            "no engine load in the window shows the engines at their limit",
            id="rollout-without-engine-load",
        ),
        pytest.param(
            bottleneck(engines=saturated_engines(4)),
            "4 of 4 engines are saturated with queued requests: more requests in flight would "
            "queue",
            id="concurrency-while-engines-saturate",
        ),
        pytest.param(
            bottleneck(role=BottleneckRole.VERIFIER, verifier=None),
            "the window shows no verifier queue or latency",
            id="verifier-without-verifier-figures",
        ),
        pytest.param(
            bottleneck(role=BottleneckRole.VERIFIER, engines=saturated_engines(3)),
            "3 of 3 engines are saturated with queued requests as well",
            id="verifier-while-engines-saturate",
        ),
        pytest.param(
            trainer_diagnosis(phases=bottleneck()["phases"]),
            "the step table has the rollout side at 62%, above training at 25%",
            id="trainer-held-below-the-rollout-side",
        ),
        pytest.param(
            trainer_diagnosis(engines=saturated_engines(4, kv_usage=0.5)),
            "4 of 4 engines are saturated with queued requests; a faster trainer would soon "
            "wait for rollouts",
            id="trainer-while-engines-saturate",
        ),
        pytest.param(
            trainer_diagnosis(
                engines=[e.model_copy(update={"kv_usage": 0.93}) for e in engine_loads("j", 4)]
            ),
            "the engines' KV caches are 93% full; a faster trainer would soon wait",
            id="trainer-while-kv-caches-fill",
        ),
        pytest.param(
            trainer_diagnosis(
                phases=phases(training=0.5, waiting_for_rollouts=0.2, generating=0.1)
            ),
            "30% of the step waits for or generates rollouts",
            id="trainer-with-a-large-rollout-share",
        ),
        pytest.param(
            trainer_diagnosis(phases=[]),
            "the window has no trainer phase table to show it",
            id="trainer-without-a-phase-table",
        ),
        pytest.param(
            bottleneck(
                role=BottleneckRole.WEIGHT_SYNC,
                phases=phases(waiting_for_rollouts=0.5, training=0.2, syncing_weights=0.3),
            ),
            "the step table has the rollout side at 50%, above weight sync at 30%",
            id="weight-sync-held-below-the-rollout-side",
        ),
        pytest.param(
            bottleneck(role=BottleneckRole.UNKNOWN),
            "the step table has the rollout side largest, at 62%",
            id="unknown-beside-a-phase-table",
        ),
        pytest.param(
            bottleneck(role=BottleneckRole.UNKNOWN, phases=phases(evaluating=1.0)),
            "",
            id="unknown-only-evaluating",
        ),
    ],
)
def test_figures_that_cut_against_the_verdict_are_said(diagnosis: dict[str, Any], but: str) -> None:
    text = view.render_diagnose(job(phase="Running", bottleneck=diagnosis), NOW)
    assert (BUT in text) == bool(but), text
    if but:
        assert f"but: {but}" in one_line(text)
        # Right under the verdict's meaning, before the evidence.
        assert text.index(BUT) < text.index("  computed ")


def test_every_meaning_restates_the_rule_without_an_absolute_claim() -> None:
    for role, meaning in ROLE_MEANINGS.items():
        assert "largest share" in meaning or role == BottleneckRole.UNKNOWN, role
        assert "not the problem" not in meaning, role


# ------------------------------------------------------------------------------ the gang


@pytest.mark.parametrize(
    ("nodes", "desired", "ready", "gang", "line"),
    [
        pytest.param(2, 2, 2, None, "", id="whole-gang"),
        pytest.param(
            2, 2, 1, (1, 2), "1 of 2 pods ready; step times reflect half the gang", id="half"
        ),
        pytest.param(
            4, 4, 3, (3, 4), "3 of 4 pods ready; step times reflect 75% of the gang", id="most"
        ),
        pytest.param(4, 4, 1, (1, 4), "step times reflect a quarter of the gang", id="quarter"),
        pytest.param(
            2, 2, 0, (0, 2), "0 of 2 pods ready; no trainer pod runs now", id="none-ready"
        ),
        pytest.param(2, 0, 0, None, "", id="stopped-by-the-operator"),
    ],
)
def test_a_trainer_below_its_gang_is_named_in_the_header_and_the_document(
    nodes: int, desired: int, ready: int, gang: tuple[int, int] | None, line: str
) -> None:
    body = running_job(trainer_diagnosis(), nodes=nodes, ready=ready)
    body["status"]["roles"]["trainer"]["desired"] = desired
    header = view.render_diagnose(body, NOW).split("\n\n", 1)[0]
    assert ("  trainer: " in header) == bool(line) and line in header
    expected = {"ready": gang[0], "nodes": gang[1]} if gang else None
    assert view.diagnosis_document(body)["trainerBelowGang"] == expected


def test_a_job_without_roles_in_spec_or_status_names_no_gang() -> None:
    assert view.trainer_below_gang(job(phase="Running")) is None


def test_a_trainer_without_nodes_is_a_gang_of_one() -> None:
    body = job(phase="Running", roles={"trainer": {"desired": 1, "ready": 0}})
    body["spec"] = {"roles": {"trainer": {}}}
    assert view.trainer_below_gang(body) == view.TrainerGang(ready=0, nodes=1)
    assert view.render_diagnose(body, NOW).splitlines()[1] == "  trainer: 0 of 1 pod ready"


def test_the_gang_line_without_a_diagnosis_says_only_the_counts() -> None:
    body = running_job(trainer_diagnosis(), nodes=2, ready=1)
    del body["status"]["bottleneck"]
    assert view.render_diagnose(body, NOW).splitlines()[1] == "  trainer: 1 of 2 pods ready"
