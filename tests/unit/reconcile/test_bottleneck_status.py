"""status.bottleneck through decide(): written at once when the advice moves, else with the
progress refresh; a role change says BottleneckChanged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rljob.api.diagnosis import Bottleneck
from rljob.reconcile.bottleneck import bottleneck_event, with_bottleneck
from rljob.reconcile.progress import ProgressReading
from rljob.vocabulary.enums import BottleneckRole
from tests.unit.reconcile.test_decide import decide_now, journal, running_world

AT = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def diagnosis(
    role: BottleneckRole, recommended: int | None = None, evidence: str = ""
) -> Bottleneck:
    return Bottleneck(
        role=role,
        since=AT,
        updated_at=AT,
        window_seconds=900.0,
        evidence=evidence or f"{role.value} evidence",
        advice=f"{role.value} advice",
        recommended_concurrency=recommended,
    )


R = BottleneckRole


@pytest.mark.parametrize(
    ("before", "after", "written"),
    [
        pytest.param(None, diagnosis(R.ROLLOUT), True, id="first-diagnosis"),
        pytest.param(diagnosis(R.ROLLOUT), diagnosis(R.VERIFIER), True, id="another-role"),
        pytest.param(
            diagnosis(R.ROLLOUT), diagnosis(R.ROLLOUT, evidence="x"), False, id="same-role"
        ),
        pytest.param(
            diagnosis(R.ROLLOUT_CONCURRENCY, 40),
            diagnosis(R.ROLLOUT_CONCURRENCY, 52),
            True,
            id="recommendation-moved-30pct",
        ),
        pytest.param(
            diagnosis(R.ROLLOUT_CONCURRENCY, 50),
            diagnosis(R.ROLLOUT_CONCURRENCY, 52),
            False,
            id="recommendation-moved-4pct",
        ),
        pytest.param(
            diagnosis(R.ROLLOUT_CONCURRENCY),
            diagnosis(R.ROLLOUT_CONCURRENCY, 52),
            True,
            id="recommendation-appeared",
        ),
        pytest.param(diagnosis(R.TRAINER), None, False, id="no-diagnosis-keeps-the-last"),
        pytest.param(None, diagnosis(R.UNKNOWN), False, id="unknown-first-waits-for-refresh"),
        pytest.param(diagnosis(R.ROLLOUT), diagnosis(R.UNKNOWN), False, id="unknown-later"),
        pytest.param(diagnosis(R.UNKNOWN), diagnosis(R.ROLLOUT), True, id="first-verdict"),
    ],
)
def test_written_at_once_only_when_the_advice_moves(
    before: Bottleneck | None, after: Bottleneck | None, written: bool
) -> None:
    w = running_world()
    status = w.job.status.model_copy(update={"bottleneck": before})
    result = with_bottleneck(status, after, refreshed=False)
    assert result.bottleneck == (after if written else before)
    refreshed = with_bottleneck(status, after, refreshed=True)
    assert refreshed.bottleneck == (after if after is not None else before)


@pytest.mark.parametrize(
    ("before", "after", "said"),
    [
        pytest.param(None, diagnosis(R.ROLLOUT), "bottleneck: Rollout: ", id="first"),
        pytest.param(
            diagnosis(R.ROLLOUT),
            diagnosis(R.VERIFIER),
            "bottleneck: Verifier (was Rollout)",
            id="changed",
        ),
        pytest.param(diagnosis(R.ROLLOUT), diagnosis(R.ROLLOUT), None, id="same-role"),
        pytest.param(diagnosis(R.ROLLOUT), None, None, id="none"),
        pytest.param(None, diagnosis(R.UNKNOWN), None, id="unknown-first"),
        pytest.param(diagnosis(R.ROLLOUT), diagnosis(R.UNKNOWN), None, id="unknown-later"),
        pytest.param(
            diagnosis(R.UNKNOWN),
            diagnosis(R.ROLLOUT),
            "bottleneck: Rollout (was Unknown)",
            id="first-verdict",
        ),
    ],
)
def test_a_role_change_says_bottleneck_changed(
    before: Bottleneck | None, after: Bottleneck | None, said: str | None
) -> None:
    event = bottleneck_event(before, after)
    if said is None:
        assert event is None
    else:
        assert event is not None and event.reason == "BottleneckChanged"
        assert event.message.startswith(said) and "advice" in event.message


def test_decide_journals_the_diagnosis_and_says_the_change_once() -> None:
    w = running_world()
    first = decide_now(w, bottleneck=diagnosis(R.ROLLOUT_CONCURRENCY, 51))
    assert first.plan.status.bottleneck is not None
    assert first.plan.status.bottleneck.recommended_concurrency == 51
    assert [e.reason for e in first.events] == ["BottleneckChanged"]
    journal(w, first)
    again = decide_now(w, bottleneck=diagnosis(R.ROLLOUT_CONCURRENCY, 52))
    assert again.plan.status.bottleneck == first.plan.status.bottleneck  # not worth a write
    assert [e.reason for e in again.events] == []


def test_the_progress_refresh_carries_a_new_diagnosis_of_the_same_role() -> None:
    w = running_world()
    journal(w, decide_now(w, bottleneck=diagnosis(R.TRAINER)))
    newer = diagnosis(R.TRAINER, evidence="training took 71% of 15m")
    reading = ProgressReading(step=12, tokens_per_second=1000.0)
    refreshed = decide_now(w, bottleneck=newer, progress=reading)
    assert refreshed.plan.status.bottleneck == newer
    assert [e.reason for e in refreshed.events] == []
