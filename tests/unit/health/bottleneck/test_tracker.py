"""Hysteresis: a new role takes over only after holding for two evaluations in a row."""

from __future__ import annotations

import pytest

from rljob.health.bottleneck.attribution import Verdict
from rljob.health.bottleneck.tracker import RoleTracker
from rljob.vocabulary.enums import BottleneckRole

R = BottleneckRole.ROLLOUT
V = BottleneckRole.VERIFIER
T = BottleneckRole.TRAINER
U = BottleneckRole.UNKNOWN

SEQUENCES = [
    # verdicts per evaluation, roles shown, since (evaluation index) of the last
    pytest.param([R, R, R], [R, R, R], 0, id="steady"),
    pytest.param([R, V, R, V, R], [R, R, R, R, R], 0, id="alternating-never-flips"),
    pytest.param([R, V, V, V], [R, R, V, V], 2, id="two-in-a-row-flip"),
    pytest.param([R, V, T, T], [R, R, R, T], 3, id="a-different-candidate-starts-over"),
    pytest.param([U, R, R], [U, U, R], 2, id="unknown-to-known-needs-two-too"),
    pytest.param([R, U, R, U, U], [R, R, R, R, U], 4, id="data-gaps-do-not-flap"),
]


@pytest.mark.parametrize(("verdicts", "shown", "since"), SEQUENCES)
def test_hysteresis(
    verdicts: list[BottleneckRole], shown: list[BottleneckRole], since: int
) -> None:
    tracker = RoleTracker()
    results = [
        tracker.update(Verdict(role, f"{role} evidence", "advice"), float(i))
        for i, role in enumerate(verdicts)
    ]
    assert [r.verdict.role for r in results] == shown
    assert results[-1].since == float(since)
    assert tracker.role is shown[-1]


def test_a_held_role_says_what_is_pending_and_a_flip_names_the_replaced_role() -> None:
    tracker = RoleTracker()
    tracker.update(Verdict(R, "engines saturated", "add engines"), 0.0)
    held = tracker.update(Verdict(V, "queue deep", "scale verifiers"), 1.0)
    assert held.verdict.role is R and held.verdict.advice == "add engines"
    assert "Rollout held: the last 1 evaluation(s) pointed to Verifier" in held.verdict.evidence
    assert not held.changed
    flipped = tracker.update(Verdict(V, "queue deeper", "scale verifiers"), 2.0)
    assert (flipped.replaced, flipped.changed, flipped.verdict.evidence) == (
        R,
        True,
        "queue deeper",
    )


def test_the_first_verdict_is_a_change_from_nothing() -> None:
    first = RoleTracker().update(Verdict(T, "e", "a"), 5.0)
    assert (first.changed, first.replaced, first.since) == (True, None, 5.0)


def test_one_confirmation_flips_at_once() -> None:
    tracker = RoleTracker(confirmations=1)
    tracker.update(Verdict(R, "e", "a"), 0.0)
    assert tracker.update(Verdict(V, "e", "a"), 1.0).verdict.role is V
