"""Memories: job memory by uid, found by key in constant time, and nothing left of a forgotten
job."""

from __future__ import annotations

import pytest

from rljob.runtime.memory import JobKey, JobMemory, Memories

OLD, NEW, OTHER = ("rl", "grpo"), ("rl", "grpo"), ("rl", "ppo")


def memories(forgotten: list[JobKey] | None = None) -> Memories:
    return Memories(lambda key, _: (forgotten if forgotten is not None else []).append(key))


@pytest.mark.parametrize(
    ("held", "dropped", "key", "expected"),
    [
        pytest.param([("u1", OLD)], [], OLD, "u1", id="the-one-job"),
        pytest.param([("u1", OLD), ("u2", OTHER)], [], OTHER, "u2", id="another-job"),
        pytest.param([("u1", OLD), ("u2", NEW)], [], NEW, "u1", id="recreated:-the-old-first"),
        pytest.param([("u1", OLD), ("u2", NEW)], ["u1"], NEW, "u2", id="recreated:-old-forgotten"),
        pytest.param([("u1", OLD)], ["u1"], OLD, None, id="forgotten"),
        pytest.param([], [], OLD, None, id="never-known"),
    ],
)
def test_by_key_finds_the_oldest_memory_held_under_a_key(
    held: list[tuple[str, JobKey]], dropped: list[str], key: JobKey, expected: str | None
) -> None:
    known = memories()
    made: dict[str, JobMemory] = {uid: known.of(uid, k) for uid, k in held}
    for uid in dropped:
        known.forget(uid)
    found = known.by_key(key)
    assert found is (made[expected] if expected is not None else None)


def test_retain_forgets_what_a_relist_lost_and_says_so() -> None:
    forgotten: list[JobKey] = []
    known = memories(forgotten)
    known.of("u1", OLD)
    known.of("u2", OTHER)
    assert known.retain(["u2"]) == ["u1"]
    assert forgotten == [OLD] and known.by_key(OLD) is None and len(known) == 1
