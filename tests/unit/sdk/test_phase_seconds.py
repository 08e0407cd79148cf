"""rljob_trainer_phase_seconds_total{phase}: seconds accrue to the phase entered last, at each
change and at each scrape (the current phase's elapsed time included), on an injected clock; the
phase gauge keeps working beside it."""

from __future__ import annotations

import pytest

from rljob.sdk.phase_time import COUNTED_PHASES, STEP_PHASES
from rljob.sdk.progress import EVALUATING, PHASES, ProgressExporter
from tests.unit.sdk.exposition import FakeClock, scrape

SECONDS = "rljob_trainer_phase_seconds_total"

# (phase entered, seconds spent in it before the next entry or the scrape), then the totals.
SCRIPTS = [
    pytest.param([("generating", 5.0)], {"generating": 5.0}, id="scraped-mid-phase"),
    pytest.param(
        [("generating", 3.0), ("training", 7.0)],
        {"generating": 3.0, "training": 7.0},
        id="change-adds-the-previous-phase",
    ),
    pytest.param(
        [("generating", 2.0), ("training", 1.0), ("generating", 4.0), ("training", 0.5)],
        {"generating": 6.0, "training": 1.5},
        id="revisited-phases-add-up",
    ),
    pytest.param(
        [
            ("generating", 1.0),
            ("waiting_for_rollouts", 2.0),
            ("training", 3.0),
            ("syncing_weights", 4.0),
            ("evaluating", 5.0),
            ("checkpointing", 6.0),
        ],
        {
            "generating": 1.0,
            "waiting_for_rollouts": 2.0,
            "training": 3.0,
            "syncing_weights": 4.0,
            "evaluating": 5.0,
            "checkpointing": 6.0,
        },
        id="every-counted-phase",
    ),
    pytest.param([("starting", 30.0)], {}, id="starting-is-not-step-time"),
    pytest.param(
        [("training", 2.0), ("my_custom_phase", 9.0), ("training", 1.0)],
        {"training": 3.0},
        id="an-unmapped-phase-accrues-nothing",
    ),
    pytest.param([("training", 0.0), ("generating", 0.0)], {}, id="no-time-no-seconds"),
]


@pytest.mark.parametrize(("script", "expected"), SCRIPTS)
def test_seconds_accrue_to_the_phase_entered_last(
    script: list[tuple[str, float]], expected: dict[str, float]
) -> None:
    clock = FakeClock()
    progress = ProgressExporter(serve=False, clock=clock)
    clock.advance(12.0)  # in `starting` since construction
    for phase, seconds in script:
        progress.phase(phase)
        clock.advance(seconds)
    totals = scrape(progress.registry).labelled(SECONDS, "phase")
    assert totals == {phase: expected.get(phase, 0.0) for phase in COUNTED_PHASES}


def test_a_mid_phase_scrape_includes_the_elapsed_time_and_stores_nothing() -> None:
    clock = FakeClock()
    progress = ProgressExporter(serve=False, clock=clock)
    progress.phase("training")
    readings = []
    for _ in range(3):
        clock.advance(10.0)
        readings.append(scrape(progress.registry).value(SECONDS, phase="training"))
        readings.append(scrape(progress.registry).value(SECONDS, phase="training"))
    assert readings == [10.0, 10.0, 20.0, 20.0, 30.0, 30.0]
    progress.phase("syncing_weights")  # the change adds what the scrapes only showed
    clock.advance(4.0)
    after = scrape(progress.registry)
    assert after.value(SECONDS, phase="training") == 30.0
    assert after.value(SECONDS, phase="syncing_weights") == 4.0


def test_a_clock_stepping_back_never_lowers_the_counter() -> None:
    clock = FakeClock()
    progress = ProgressExporter(serve=False, clock=clock)
    progress.phase("generating")
    clock.advance(5.0)
    progress.phase("training")
    clock.advance(-3.0)
    totals = scrape(progress.registry).labelled(SECONDS, "phase")
    assert (totals["generating"], totals["training"]) == (5.0, 0.0)


def test_the_counter_is_exposed_as_a_counter_of_every_phase_from_the_start() -> None:
    parsed = scrape(ProgressExporter(serve=False, clock=FakeClock()).registry)
    assert parsed.types["rljob_trainer_phase_seconds"] == "counter"
    assert parsed.names("rljob_trainer_phase_seconds") == {SECONDS}
    assert parsed.labelled(SECONDS, "phase") == dict.fromkeys(COUNTED_PHASES, 0.0)
    assert set(STEP_PHASES) <= set(COUNTED_PHASES)


@pytest.mark.parametrize(
    ("sequence", "current"),
    [
        pytest.param(["generating", "training"], "training", id="listed-phases"),
        pytest.param([EVALUATING, "training"], "training", id="leaving-evaluating-resets-it"),
        pytest.param(["custom", "generating"], "generating", id="leaving-a-custom-name-resets-it"),
        pytest.param(["training", EVALUATING], EVALUATING, id="evaluating"),
    ],
)
def test_the_phase_gauge_has_exactly_the_current_phase_at_one(
    sequence: list[str], current: str
) -> None:
    progress = ProgressExporter(serve=False, clock=FakeClock())
    for name in sequence:
        progress.phase(name)
    gauge = scrape(progress.registry).labelled("rljob_trainer_phase", "phase")
    assert {name for name, value in gauge.items() if value == 1.0} == {current}
    assert set(PHASES) <= set(gauge)
