"""Lineage, the fence: which versions a restart may resume from and retention may count."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rljob.checkpoint_protocol.models import AttemptMarker
from rljob.checkpoints.lineage import Lineage, next_attempt

from ._build import NOW, v

FIRST = {1: None}
SECOND = {1: None, 2: 100}  # attempt 2 resumed from step 100
THIRD = {1: None, 2: 100, 3: 180}
ROLLBACK = {1: None, 2: 100, 3: 50}  # attempt 3 was told to resume from step 50
NO_MARKER_2 = {1: None, 3: 100}
SCRATCH = {1: None, 2: None}


@pytest.mark.parametrize(
    ("markers", "current", "version", "eligible", "why"),
    [
        pytest.param(FIRST, 1, v(500, 1), True, None, id="current-attempt-any-step"),
        pytest.param(SECOND, 2, v(100, 1), True, None, id="older-at-resume-step"),
        pytest.param(SECOND, 2, v(90, 1), True, None, id="older-below-resume-step"),
        pytest.param(
            SECOND,
            2,
            v(150, 1),
            False,
            "attempt 2 resumed from step 100 < 150",
            id="zombie-after-resume-step",
        ),
        pytest.param(SECOND, 2, v(110, 2), True, None, id="current-after-resume"),
        pytest.param(SECOND, 2, v(50, 2), True, None, id="current-below-resume"),
        pytest.param(THIRD, 3, v(100, 1), True, None, id="two-back-within-both-fences"),
        pytest.param(
            THIRD, 3, v(150, 1), False, "attempt 2 resumed from step 100", id="two-back-zombie"
        ),
        pytest.param(THIRD, 3, v(180, 2), True, None, id="previous-at-resume-step"),
        pytest.param(
            THIRD, 3, v(190, 2), False, "attempt 3 resumed from step 180", id="previous-zombie"
        ),
        pytest.param(ROLLBACK, 3, v(50, 1), True, None, id="rollback-at-point"),
        pytest.param(
            ROLLBACK,
            3,
            v(80, 1),
            False,
            "attempt 3 resumed from step 50 < 80",
            id="rollback-fences-older-attempts-too",
        ),
        pytest.param(
            ROLLBACK,
            3,
            v(60, 2),
            False,
            "attempt 3 resumed from step 50",
            id="rollback-fences-previous",
        ),
        pytest.param(
            NO_MARKER_2, 3, v(50, 1), False, "attempt 2 has no marker", id="missing-marker"
        ),
        pytest.param(NO_MARKER_2, 3, v(50, 2), True, None, id="missing-own-marker-ok"),
        pytest.param(
            FIRST, 2, v(10, 1), False, "attempt 2 has no marker", id="current-marker-missing"
        ),
        pytest.param(
            SCRATCH, 2, v(10, 1), False, "attempt 2 started from scratch", id="scratch-start"
        ),
        pytest.param(
            SECOND, 2, v(10, 3), False, "newer than the current attempt 2", id="future-attempt"
        ),
    ],
)
def test_eligibility(
    markers: dict[int, int | None], current: int, version: object, eligible: bool, why: str | None
) -> None:
    lineage = Lineage(current, markers)
    assert lineage.eligible(version) is eligible  # type: ignore[arg-type]
    reason = lineage.why_ineligible(version)  # type: ignore[arg-type]
    if why is None:
        assert reason is None
    else:
        assert reason is not None and why in reason


def test_fence_values() -> None:
    lineage = Lineage(3, THIRD)
    assert lineage.fence(3) is None
    assert lineage.fence(2) == 180
    assert lineage.fence(1) == 100
    assert Lineage(3, ROLLBACK).fence(1) == 50
    assert Lineage(2, SCRATCH).fence(1) == -1


def test_from_markers_defaults_to_highest() -> None:
    markers = [
        AttemptMarker(job="j", namespace="n", attempt=a, started_at=NOW, resumed_from_step=s)
        for a, s in SECOND.items()
    ]
    lineage = Lineage.from_markers(markers)
    assert lineage.current_attempt == 2
    assert lineage.resumed_from == SECOND
    with pytest.raises(ValueError):
        Lineage.from_markers([])


@pytest.mark.parametrize(
    ("markers", "versions", "expected"),
    [
        pytest.param([], [], 1, id="nothing-yet"),
        pytest.param([1, 2, 3], [], 4, id="after-highest-marker"),
        pytest.param([1, 3], [], 4, id="gaps-do-not-matter"),
        pytest.param([1], [5], 6, id="versions-of-a-later-attempt"),
    ],
)
def test_next_attempt(markers: list[int], versions: list[int], expected: int) -> None:
    assert next_attempt(markers, versions) == expected


def _naive_eligible(current: int, markers: dict[int, int | None], step: int, attempt: int) -> bool:
    """The rule as written: k current, or every later attempt has a marker resuming at >= s."""
    if attempt == current:
        return True
    if attempt > current:
        return False
    later = range(attempt + 1, current + 1)
    return all(markers.get(j) is not None and step <= markers[j] for j in later)  # type: ignore[operator]


@given(
    current=st.integers(1, 8),
    markers=st.dictionaries(st.integers(1, 8), st.one_of(st.none(), st.integers(0, 50))),
    step=st.integers(0, 60),
    attempt=st.integers(0, 9),
)
def test_fence_matches_the_rule(
    current: int, markers: dict[int, int | None], step: int, attempt: int
) -> None:
    lineage = Lineage(current, markers)
    assert lineage.eligible(v(step, attempt)) is _naive_eligible(current, markers, step, attempt)
    assert (lineage.why_ineligible(v(step, attempt)) is None) is lineage.eligible(v(step, attempt))
