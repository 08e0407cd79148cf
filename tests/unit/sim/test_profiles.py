"""Profile overrides: known fields, kinds and ranges; nested traces schedules."""

from __future__ import annotations

import pytest

from rljob.dev.sim.profiles import (
    EngineProfile,
    ProfileError,
    Profiles,
    TrainerProfile,
    VerifierProfile,
    as_json,
    override,
)
from rljob.dev.traces import Cycle


def test_override_converts_and_validates() -> None:
    profile = override(
        EngineProfile(), {"throughput": 1200, "max_running": 32.0, "model_name": "m"}
    )
    assert (profile.throughput, profile.max_running, profile.model_name) == (1200.0, 32, "m")
    assert isinstance(profile.max_running, int)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"speed": 1}, "unknown EngineProfile field"),
        ({"throughput": "fast"}, "must be a number"),
        ({"throughput": -1}, ">= 0"),
        ({"throughput": True}, "must be a number"),
        ({"cache_symptoms": 1}, "true or false"),
        ({"kv_usage": 1.5}, "between 0 and 1"),
        ({"max_running": 0}, "at least 1"),
        ({"cycle": 5}, "object or null"),
        ({"cycle": {"period": 5}}, "cycle"),
    ],
)
def test_bad_overrides_name_the_field(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        override(EngineProfile(), changes)


def test_cycle_and_bounds() -> None:
    profile = override(EngineProfile(), {"cycle": {"generate": 30, "drain": 5, "train": 10}})
    assert profile.cycle == Cycle(generate=30, drain=5, train=10)
    assert as_json(profile)["cycle"]["generate"] == 30
    verifier = override(VerifierProfile(), {"bounds": [0.1, 1, 10]})
    assert verifier.bounds == (0.1, 1.0, 10.0)
    with pytest.raises(ProfileError, match="ascending"):
        override(VerifierProfile(), {"bounds": [1, 0.1]})
    with pytest.raises(ProfileError, match="durations"):
        override(TrainerProfile(), {"step_seconds": 0})


def test_roles() -> None:
    profiles = Profiles()
    assert isinstance(profiles.for_role("rollout"), EngineProfile)
    with pytest.raises(ProfileError, match="unknown role"):
        profiles.for_role("for_role")
    changed = profiles.with_role("trainer", TrainerProfile(step_seconds=9))
    assert isinstance(changed.trainer, TrainerProfile) and changed.trainer.step_seconds == 9
