"""Both validators' verdicts on one RLJob body: the fields the model names in refusing it, and
those the CRD (emulated) names."""

from __future__ import annotations

import copy
from typing import Any

from rljob.api import InvalidRLJobError, parse_rljob
from tests.unit.api.crd_emulator import crd_refusals

Body = dict[str, Any]


def job(**spec: Any) -> Body:
    """A valid RLJob body, with `spec` fields set over it."""
    body: Body = {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "shapes", "namespace": "rl"},
        "spec": {
            "image": "registry.example.com/rl:1",
            "roles": {"rollout": {"replicas": 2}, "trainer": {"nodes": 2}},
        },
    }
    body["spec"].update(copy.deepcopy(spec))
    return body


def with_trainer(**fields: Any) -> Body:
    body = job()
    body["spec"]["roles"]["trainer"].update(copy.deepcopy(fields))
    return body


def model_refusals(body: Body) -> set[str]:
    try:
        parse_rljob(copy.deepcopy(body))
    except InvalidRLJobError as error:
        return {violation.field for violation in error.violations}
    return set()


def model_messages(body: Body) -> list[str]:
    try:
        parse_rljob(copy.deepcopy(body))
    except InvalidRLJobError as error:
        return [violation.message for violation in error.violations]
    return []


def both_refusals(body: Body) -> tuple[set[str], set[str]]:
    """(model, CRD): the same set from each when they agree."""
    return model_refusals(body), crd_refusals(body)
