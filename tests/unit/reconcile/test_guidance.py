"""Values below production guidance: named field by field, and said in one Warning per
generation, on the pass that first accepts it."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import parse_rljob
from rljob.api.durations import parse_duration
from rljob.reconcile.acceptance import with_accepted
from rljob.reconcile.guidance import FLOORS, GUIDANCE_REASON, below_guidance, guidance_event
from tests.unit.reconcile.world import T0, example_body

DEMO_BELOW = [
    "health.interval",
    "health.kvDrift.window",
    "health.kvDrift.warmup",
    "health.kvDrift.cooldown",
    "health.engineStall.timeout",
    "health.trainerStall.timeout",
    "health.trainerStall.startupGrace",
    "health.verifierLatency.window",
]


def _with_health(body: dict[str, Any], path: str, value: str) -> dict[str, Any]:
    *parents, leaf = path.split(".")[1:]
    node = body["spec"].setdefault("health", {})
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value
    return body


def _fields(lines: list[str]) -> list[str]:
    return [line.split(" ", 1)[0] for line in lines]


@pytest.mark.parametrize(
    ("example", "below"),
    [
        pytest.param("rljob-demo", DEMO_BELOW, id="the-demo:-seconds-everywhere"),
        pytest.param("rljob-minimal", [], id="production-values:-nothing"),
    ],
)
def test_the_examples_fields_below_guidance(example: str, below: list[str]) -> None:
    assert _fields(below_guidance(parse_rljob(example_body(example)).spec)) == below


@pytest.mark.parametrize(("floor"), [pytest.param(f, id=f.field) for f in FLOORS])
def test_a_value_at_its_floor_is_production_and_just_under_it_is_not(floor: Any) -> None:
    at = parse_rljob(_with_health(example_body("rljob-minimal"), floor.field, floor.least))
    just_under = f"{int(parse_duration(floor.least)) - 1}s"
    under = _with_health(example_body("rljob-minimal"), "health.interval", "1s")
    under = _with_health(under, floor.field, just_under)
    assert floor.field not in _fields(below_guidance(at.spec))
    assert floor.field in _fields(below_guidance(parse_rljob(under).spec))


def test_one_warning_per_generation_on_the_pass_that_accepts_it() -> None:
    job = parse_rljob(example_body("rljob-demo"))
    first = guidance_event(job)
    assert first is not None and (first.type, first.reason) == ("Warning", GUIDANCE_REASON)
    assert "health.kvDrift.window 30s < 10m" in first.message

    accepted = job.model_copy(update={"status": with_accepted(job.status, job, T0)})
    assert guidance_event(accepted) is None, "said once: this generation is accepted"

    edited = accepted.model_copy(
        update={"metadata": accepted.metadata.model_copy(update={"generation": 2})}
    )
    assert guidance_event(edited) is not None, "a new generation is said again"
