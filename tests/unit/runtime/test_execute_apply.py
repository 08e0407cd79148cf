"""The ApplyChild step's applier: a child the job does not have yet is applied only where its
name is free or held by the job's own object (a watch that lags); a name held by any other
object is left alone and remembered, so the next pass names the child by its fallback."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from rljob.adapters.kube import KubeError
from rljob.api import parse_rljob
from rljob.reconcile.steps import ApplyChild
from rljob.runtime.execute import APPLIERS, Context
from rljob.runtime.memory import JobMemory
from tests.unit.reconcile.world import example_body

NOW = dt.datetime(2026, 3, 1, 12, 0, 5, tzinfo=dt.UTC)
SERVICE = {"apiVersion": "v1", "kind": "Service",
           "metadata": {"name": "grpo-demo-verifier", "namespace": "rl"}}  # fmt: skip


class _Kube:
    def __init__(self, held: dict[str, Any] | None) -> None:
        self.held = held
        self.applied: list[str] = []

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        assert (method, path) == ("get", "/api/v1/namespaces/rl/services/grpo-demo-verifier")
        if self.held is None:
            raise KubeError(404, "not found")
        return self.held

    async def apply(self, body: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(body["metadata"]["name"])
        return body


def _owned_by(uid: str) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [{"uid": uid, "controller": True}]}}


@pytest.mark.parametrize(
    ("new", "held", "applied"),
    [
        pytest.param(True, None, True, id="a-free-name"),
        pytest.param(True, _owned_by("job-uid"), True, id="the-jobs-own-object-a-watch-lags"),
        pytest.param(True, _owned_by("another-uid"), False, id="another-rljob's"),
        pytest.param(True, {"metadata": {}}, False, id="an-object-nobody-owns"),
        pytest.param(False, _owned_by("another-uid"), True, id="an-update-of-the-jobs-own-child"),
    ],
)
async def test_a_new_child_never_takes_over_a_name(
    new: bool, held: dict[str, Any] | None, applied: bool
) -> None:
    body = example_body()
    kube = _Kube(held)
    memory = JobMemory(("rl", body["metadata"]["name"]))
    ctx = Context(kube, None, body, parse_rljob(body), memory, NOW, lambda: True)  # type: ignore[arg-type]

    await APPLIERS[ApplyChild](ApplyChild(SERVICE, new=new), ctx)

    assert kube.applied == (["grpo-demo-verifier"] if applied else [])
    assert memory.taken == (set() if applied else {("Service", "grpo-demo-verifier")})
