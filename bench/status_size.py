"""`python -m bench.status_size`: the size of an RLJob's status at its largest, against the
object size the API server stores (etcd's request limit, 1.5 MiB by default).

The status is built from the CRD's own schema (rljob.api.crd), so a field added later counts
without this file changing: every list at its maxItems (1,024 engines in the roster and in an
in-turn restart's journal, a full attempt history and restart ledger), every map at its
maxProperties, every number at 16 digits. Two figures: the bound, every string at its
maxLength; and the largest a real job reaches, names as long as a 40-character RLJob's children
get and free text (messages, evidence) still at its maxLength. A list or string without a bound
in the schema is reported: the status could then grow without one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rljob.api.crd import crd_manifest

# etcd's default --max-request-bytes; the API server refuses a larger object.
OBJECT_LIMIT_BYTES = int(1.5 * 1024 * 1024)
# A rollout pod of a 40-character RLJob renamed with its fallback name:
# <name>-<uid 5>-rollout-<ReplicaSet hash 10>-<5>.
REAL_NAME_LENGTH = 40 + 6 + 8 + 11 + 6
# Strings this long or longer are free text (messages, evidence, advice), not names.
FREE_TEXT_LENGTH = 1024
TIMESTAMP = "2026-11-29T10:00:00.000000Z"
NUMBER = 1234567890.123456


@dataclass(frozen=True)
class StatusSize:
    bound_bytes: int  # every string at its maxLength
    real_bytes: int  # names as long as real ones, free text at its maxLength
    unbounded: tuple[str, ...]  # paths of lists, maps and strings the schema leaves unbounded


def status_schema() -> Mapping[str, Any]:
    version = crd_manifest()["spec"]["versions"][0]
    schema: Mapping[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


@dataclass(frozen=True)
class Shape:
    """How large `largest` makes each kind of value."""

    name_cap: int | None = None  # strings shorter than FREE_TEXT_LENGTH at most this long
    integer: int = 2**53 - 1
    key_length: int = 63  # of a map's keys (status.health.engines[].values)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # path -> value, where real jobs differ


BOUND = Shape()
UID = "01234567-89ab-cdef-0123-456789abcdef"
# A real job: names of a 40-character RLJob's children, IPv6 addresses, uids, counters below
# 10^10, detectors' value names (at most 21 characters today), and an engine roster on the
# rollout role only (the schema has it on every role).
REAL = Shape(
    name_cap=REAL_NAME_LENGTH,
    integer=9_999_999_999,
    key_length=24,
    fixed={
        **{f"status.roles.{role}.engines": None for role in ("trainer", "reference", "verifier")},
        "status.roles.rollout.engines[].address": "fd00:0:0:0:ffff:ffff:ffff:ffff",
        **dict.fromkeys(
            (
                "status.inFlight.pods[].uid",
                "status.inFlight.target.uid",
                "status.attempts[].jobUid",
            ),
            UID,
        ),
    },
)


def largest(node: Mapping[str, Any], shape: Shape = BOUND, path: str = "status") -> Any:
    """The largest value `node` admits, shaped by `shape`."""
    if path in shape.fixed:
        return shape.fixed[path]
    kind = node.get("type")
    if "enum" in node:
        return max(node["enum"], key=lambda value: len(json.dumps(value)))
    if kind == "object":
        return _object(node, shape, path)
    if kind == "array":
        return [largest(node["items"], shape, f"{path}[]") for _ in range(node.get("maxItems", 1))]
    if kind == "string":
        return _string(node, shape)
    if kind == "integer":
        return min(int(node.get("maximum", shape.integer)), shape.integer)
    if kind == "number":
        return NUMBER
    if kind == "boolean":
        return False
    return {}  # x-kubernetes-preserve-unknown-fields and the like: empty


def _object(node: Mapping[str, Any], shape: Shape, path: str) -> dict[str, Any]:
    value = {
        key: largest(child, shape, f"{path}.{key}")
        for key, child in node.get("properties", {}).items()
    }
    entries = node.get("additionalProperties")
    if isinstance(entries, Mapping):
        for index in range(node.get("maxProperties", 1)):
            key = f"key-{index:04d}".ljust(shape.key_length, "k")
            value[key] = largest(entries, shape, f"{path}{{}}")
    return {key: item for key, item in value.items() if item is not None}


def _string(node: Mapping[str, Any], shape: Shape) -> str:
    if node.get("format") == "date-time":
        return TIMESTAMP
    length = int(node.get("maxLength", 0))
    if shape.name_cap is not None and length < FREE_TEXT_LENGTH:
        length = min(length, shape.name_cap)
    return "x" * length


def unbounded(node: Mapping[str, Any], path: str = "status") -> Iterator[str]:
    kind = node.get("type")
    if kind == "array" and "maxItems" not in node:
        yield f"{path}[]"
    if kind == "string" and not {"maxLength", "enum", "format"} & node.keys():
        yield path
    entries = node.get("additionalProperties")
    if kind == "object" and isinstance(entries, Mapping) and "maxProperties" not in node:
        yield f"{path}{{}}"
    for key, child in node.get("properties", {}).items():
        yield from unbounded(child, f"{path}.{key}")
    if "items" in node:
        yield from unbounded(node["items"], f"{path}[]")
    if isinstance(entries, Mapping):
        yield from unbounded(entries, f"{path}{{}}")


def measure() -> StatusSize:
    schema = status_schema()
    return StatusSize(
        bound_bytes=_bytes(largest(schema, BOUND)),
        real_bytes=_bytes(largest(schema, REAL)),
        unbounded=tuple(unbounded(schema)),
    )


def _bytes(value: Any) -> int:
    return len(json.dumps({"status": value}, separators=(",", ":")).encode())


def main() -> int:
    size = measure()
    print(f"the API server stores objects of at most {OBJECT_LIMIT_BYTES / 1024:.0f} KiB")
    for what, count in (
        ("status at its bound", size.bound_bytes),
        ("status of a real job at its largest", size.real_bytes),
    ):
        print(f"{what}: {count / 1024:.0f} KiB ({count / OBJECT_LIMIT_BYTES:.0%})")
    for path in size.unbounded:
        print(f"unbounded in the schema: {path}")
    return 1 if size.unbounded else 0


if __name__ == "__main__":
    raise SystemExit(main())
