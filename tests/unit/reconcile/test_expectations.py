"""Deletes this operator issued count as deleting before the watch says so, for a while."""

from __future__ import annotations

import pytest

from rljob.reconcile.expectations import EXPECTATION_SECONDS, Recent, with_deletes_issued
from rljob.reconcile.observed import Observed, ObservedChild

from .world import pod


def _job(uid: str, *, deleting: bool = False) -> ObservedChild:
    return ObservedChild(
        kind="Job",
        name=f"job-{uid}",
        uid=uid,
        role="trainer",
        spec_hash="h",
        attempt=1,
        deleting=deleting,
    )


@pytest.mark.parametrize(
    ("added_at", "asked_at", "expected"),
    [
        pytest.param(0.0, 0.0, {"a"}, id="just-done"),
        pytest.param(0.0, EXPECTATION_SECONDS - 1, {"a"}, id="within-the-ttl"),
        pytest.param(0.0, EXPECTATION_SECONDS, set(), id="expired"),
    ],
)
def test_recent_forgets_after_its_ttl(added_at: float, asked_at: float, expected: set[str]) -> None:
    recent = Recent()
    recent.add("a", added_at)
    assert recent.current(asked_at) == expected


@pytest.mark.parametrize(
    ("issued", "deleting_children", "deleting_pods"),
    [
        pytest.param(set(), set(), {"p-gone"}, id="nothing-issued-changes-nothing"),
        pytest.param({"j-old"}, {"j-old"}, {"p-gone"}, id="an-issued-job-delete"),
        pytest.param({"p-victim"}, set(), {"p-gone", "p-victim"}, id="an-issued-pod-delete"),
        pytest.param({"unknown"}, set(), {"p-gone"}, id="a-uid-not-observed"),
    ],
)
def test_with_deletes_issued(
    issued: set[str], deleting_children: set[str], deleting_pods: set[str]
) -> None:
    observed = Observed(
        children=(_job("j-old"), _job("j-new")),
        pods=(
            pod("victim", "rollout", uid="p-victim"),
            pod("gone", "rollout", uid="p-gone", deleting=True),
        ),
    )
    marked = with_deletes_issued(observed, issued)
    assert {c.uid for c in marked.children if c.deleting} == deleting_children
    assert {p.uid for p in marked.pods if p.deleting} == deleting_pods
