"""A gang that fits: a job's serving roles start at zero replicas and scale up once every rank
of the current attempt's trainer is bound to a node; engines already serving are never held."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rljob.reconcile.decide import decide
from rljob.reconcile.inputs import PassInputs
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.placement import serving_held
from tests.unit.reconcile.test_policy_suspend import carry_out
from tests.unit.reconcile.world import World, example_body, example_job, pod


def _rank(index: int, attempt: int = 1, **fields: object) -> ObservedPod:
    return pod(f"trainer-a{attempt}-{index}", "trainer", attempt=attempt, **fields)


def _rollout(replicas: int) -> ObservedChild:
    return ObservedChild("Deployment", "rollout", "uid-r", "rollout", "h", None, replicas)


@dataclass(frozen=True)
class Case:
    id: str
    observed: Observed
    held: bool


CASES = [
    Case("fresh start, no rank yet", Observed((), ()), True),
    Case("one of two ranks bound", Observed((), (_rank(0), _rank(1, node=""))), True),
    Case("every rank bound", Observed((), (_rank(0), _rank(1))), False),
    Case(
        "bound ranks of the previous attempt only", Observed((), (_rank(0, 0), _rank(1, 0))), True
    ),
    Case("a bound rank going away", Observed((), (_rank(0), _rank(1, deleting=True))), True),
    Case("a bound rank that ended", Observed((), (_rank(0), _rank(1, phase="Failed"))), True),
    Case("serving already scaled up, no rank", Observed((_rollout(4),), ()), False),
    Case("serving at zero (suspended before)", Observed((_rollout(0),), ()), True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_serving_waits_for_the_trainers_ranks(case: Case) -> None:
    assert serving_held(example_job(), case.observed, attempt=1) is case.held


def _serving_replicas(w: World) -> list[int]:
    return sorted(c.replicas for c in w.children.values() if c.kind == "Deployment")


def _passes(w: World, count: int = 2) -> None:
    for _ in range(count):
        carry_out(w, decide(w.job, w.observed, PassInputs(now=w.now)))


def test_a_job_scales_its_serving_roles_up_once_its_gang_is_placed_and_keeps_them() -> None:
    body = example_body()
    body["spec"]["checkpoint"] = None  # attempts start without the store's answer
    w = World(body)
    _passes(w)
    assert _serving_replicas(w) == [0, 0, 0], "engines wait for the trainer's ranks"
    w.start_ranks(1, scheduled=1)
    _passes(w)
    assert _serving_replicas(w) == [0, 0, 0], "one rank still pending"
    w.start_ranks(1)
    _passes(w)
    assert _serving_replicas(w) == [1, 2, 4]
    w.fail_rank(1, 0, exit_code=1, reason="Error", message="Watchdog caught collective timeout")
    w.finish_job(1, failed=True)
    _passes(w)
    w.gone()
    _passes(w)
    assert w.job.status.attempt == 2
    assert _serving_replicas(w) == [1, 2, 4], "a gang restart keeps the engines"
