"""The health loop's per-job series: set, changed, removed when no longer seen or forgotten."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY, generate_latest

from rljob.runtime.health_series import HealthSeries
from rljob.vocabulary.enums import BottleneckRole

KEY = ("series-ns", "series-job")


def _phase(phase: str) -> float | None:
    labels = {"namespace": KEY[0], "job": KEY[1], "phase": phase}
    return REGISTRY.get_sample_value("rljob_job_step_phase_seconds", labels)


def _role(role: BottleneckRole) -> float | None:
    labels = {"namespace": KEY[0], "job": KEY[1], "role": role.value}
    return REGISTRY.get_sample_value("rljob_job_bottleneck", labels)


@pytest.mark.parametrize(
    ("rounds", "train", "rollouts"),
    [
        pytest.param([{"train": 2.0}], 2.0, None, id="set"),
        pytest.param([{"train": 2.0}, {"train": 3.0}], 3.0, None, id="changed"),
        pytest.param([{"train": 2.0}, {"train": 2.0}], 2.0, None, id="unchanged"),
        pytest.param([{"train": 2.0, "rollouts": 1.0}, {"train": 2.0}], 2.0, None, id="dropped"),
        pytest.param([{"train": 2.0}, {}], None, None, id="all-gone"),
        pytest.param([{}, {"rollouts": 1.0}], None, 1.0, id="appeared"),
    ],
)
def test_phase_series_follow_the_last_round(
    rounds: list[dict[str, float]], train: float | None, rollouts: float | None
) -> None:
    series = HealthSeries()
    for phases in rounds:
        series.diagnosis(KEY, BottleneckRole.TRAINER, phases)

    assert (_phase("train"), _phase("rollouts")) == (train, rollouts)
    series.forget(KEY)


def test_the_held_role_is_one_the_others_zero_and_forgetting_removes_every_series() -> None:
    series = HealthSeries()
    series.diagnosis(KEY, BottleneckRole.TRAINER, {"train": 2.0})
    series.diagnosis(KEY, BottleneckRole.ROLLOUT, {"train": 2.0})
    assert (_role(BottleneckRole.ROLLOUT), _role(BottleneckRole.TRAINER)) == (1.0, 0.0)

    series.diagnosis(KEY, None, {"train": 2.0})
    assert _role(BottleneckRole.ROLLOUT) is None

    series.forget(KEY)
    assert _phase("train") is None


def test_a_scrape_serves_each_family_with_its_help_and_labels() -> None:
    """The series live as floats in one dictionary (issue #28: about 120 bytes a series against
    800 for a prometheus_client child); the exposition is what a Gauge would serve."""
    series = HealthSeries()
    series.diagnosis(KEY, BottleneckRole.TRAINER, {"train": 2.5})
    text = generate_latest(REGISTRY).decode()
    series.forget(KEY)

    assert "# TYPE rljob_job_step_phase_seconds gauge" in text
    assert (
        'rljob_job_step_phase_seconds{job="series-job",namespace="series-ns",phase="train"} 2.5'
        in text
    )
    assert 'rljob_job_bottleneck{job="series-job",namespace="series-ns",role="Trainer"} 1.0' in text
    assert "series-job" not in generate_latest(REGISTRY).decode()
