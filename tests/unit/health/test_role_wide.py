"""A cause every engine of a role has at once becomes one finding naming them all (restarted in
turn by the policy); anything less stays per engine."""

from __future__ import annotations

import pytest

from rljob.health.causes.role_wide import role_wide
from rljob.health.evaluation import ENGINES_EVIDENCE, KV_LEAK, Evaluation, finding, healthy
from rljob.vocabulary.enums import FailureReason

LEAK, COLLAPSE = FailureReason.KV_CACHE_LEAK, FailureReason.PREFIX_CACHE_COLLAPSE


def verdicts(**by_engine: FailureReason | None) -> list[Evaluation]:
    return [
        finding(KV_LEAK, name, reason, f"{name} leaks", {"usage": 0.4})
        if reason is not None
        else healthy(KV_LEAK, name, f"{name} is fine")
        for name, reason in by_engine.items()
    ]


@pytest.mark.parametrize(
    ("by_engine", "watched"),
    [
        pytest.param({"e1": LEAK}, ["e1"], id="a-one-engine-role"),
        pytest.param({"e1": LEAK, "e2": None}, ["e1", "e2"], id="one-engine-of-two"),
        pytest.param({"e1": LEAK, "e2": COLLAPSE}, ["e1", "e2"], id="two-causes"),
        pytest.param({"e1": LEAK, "e2": LEAK}, ["e1", "e2", "e3"], id="an-engine-not-judged"),
    ],
)  # fmt: skip
def test_anything_less_than_the_whole_role_stays_per_engine(
    by_engine: dict[str, FailureReason | None], watched: list[str]
) -> None:
    evaluations = verdicts(**by_engine)

    assert role_wide(evaluations, watched) == evaluations


def test_the_whole_role_is_one_finding_naming_every_engine_in_the_in_turn_order() -> None:
    # e3 was created first and e2 last: the order the in-turn restart takes them in.
    result = role_wide(verdicts(e2=LEAK, e1=LEAK, e3=LEAK), ["e3", "e1", "e2"])

    whole, *others = result
    assert (whole.target, whole.reason) == ("e3", LEAK)
    assert whole.evidence[ENGINES_EVIDENCE] == "e3 e1 e2"
    assert whole.evidence["usage"] == 0.4, "the first engine's evidence is kept"
    assert whole.message.startswith("every engine of the role (3) has it: restart e3, e1, e2")
    assert sorted(e.target for e in others) == ["e1", "e2"]
    assert all(not e.is_finding and "role-wide" in e.message for e in others)
