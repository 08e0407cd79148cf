"""The `rljob.io/spec-hash` of each child, computed from the user's spec and the few lifecycle
inputs that belong to the child, never from the rendered manifest: a new operator version that
renders a template differently produces the same hash and so does not roll running roles.

Fields left at their defaults are omitted from the hash input, so a field added to the API with a
default (and filled in by the API server) does not change the hash of existing jobs either."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

HASH_LENGTH = 16
# Role fields only the operator reads, which shape no pod template: editing one rolls nothing.
# (weightSync is not one: Gated adds a readiness gate, so switching it rolls the engines once.)
OPERATOR_ONLY_FIELDS = frozenset({"drain_timeout", "generation_from"})


def spec_hash(inputs: Mapping[str, Any]) -> str:
    """A short stable hex digest of JSON-able inputs (key order does not matter)."""
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:HASH_LENGTH]


def canonical_model(model: BaseModel, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The model as the user wrote it, minus defaults and `exclude` (field names), in wire
    (camelCase) form."""
    return model.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude=set(exclude))


def serving_role_hash(
    role_name: str,
    role: BaseModel,
    image: str,
    *,
    scaled_to_zero: bool,
    policy_env: Mapping[str, str],
) -> str:
    """The hash of a Deployment: its role spec (but its operator-only fields), effective image,
    whether it is scaled to zero (suspended or finished) and, for engines, the policy the
    engines must serve."""
    inputs: dict[str, Any] = {
        "role": role_name,
        "spec": canonical_model(role, exclude=OPERATOR_ONLY_FIELDS),
        "image": image,
        "scaledToZero": scaled_to_zero,
    }
    if policy_env:
        inputs["policyEnv"] = dict(policy_env)
    return spec_hash(inputs)


def trainer_hash(
    role: BaseModel,
    image: str,
    *,
    attempt: int,
    resume_env: Mapping[str, str],
    avoid_nodes: tuple[str, ...],
) -> str:
    """The hash of one attempt's trainer Job."""
    return spec_hash(
        {
            "role": "trainer",
            "spec": canonical_model(role),
            "image": image,
            "attempt": attempt,
            "resumeEnv": dict(resume_env),
            "avoidNodes": sorted(avoid_nodes),
        }
    )


def service_hash(service_name_suffix: str, ports: Mapping[str, int]) -> str:
    """The hash of a Service: which Service it is and the ports the spec gives it."""
    return spec_hash({"service": service_name_suffix, "ports": dict(ports)})
