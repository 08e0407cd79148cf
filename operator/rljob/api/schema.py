"""Turns pydantic's JSON Schema into a Kubernetes structural schema (OpenAPI v3 as CRDs take it):
refs inlined, optional means absent from `required` (no null branches), JSON Schema 2020-12
exclusive bounds in OpenAPI 3.0 form, no titles, and free-form objects marked to keep unknown
fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

JsonSchema = dict[str, Any]

_NULL = {"type": "null"}
_DROPPED_KEYS = frozenset({"title", "$defs", "$schema"})
_FIRST_KEYS = ("type", "description")
_LAST_KEYS = ("required", "properties", "additionalProperties", "items", "anyOf")


def structural_schema(model: type[BaseModel], *, keep_defaults: bool = True) -> JsonSchema:
    """The structural schema of a model's wire form (camelCase, as validated)."""
    json_schema = model.model_json_schema(by_alias=True, mode="validation")
    return to_structural(json_schema, json_schema.get("$defs", {}), keep_defaults=keep_defaults)


def to_structural(
    node: Mapping[str, Any], defs: Mapping[str, Any], *, keep_defaults: bool
) -> JsonSchema:
    """Converts one JSON Schema node (and everything under it)."""
    flat = _inline(node, defs)
    result: JsonSchema = {}
    for key, value in flat.items():
        if key in _DROPPED_KEYS:
            continue
        result.update(_convert_keyword(key, value, defs, keep_defaults))
    return _readable_order(result)


def _readable_order(node: JsonSchema) -> JsonSchema:
    """type and description first, nested schemas last, the rest alphabetically."""
    head = [key for key in _FIRST_KEYS if key in node]
    tail = [key for key in _LAST_KEYS if key in node]
    middle = sorted(key for key in node if key not in _FIRST_KEYS and key not in _LAST_KEYS)
    return {key: node[key] for key in (*head, *middle, *tail)}


def _inline(node: Mapping[str, Any], defs: Mapping[str, Any]) -> JsonSchema:
    """Replaces `$ref` with its definition and `anyOf: [X, null]` with X; keys at the reference
    site (the field's description and default) win over the definition's."""
    flat = dict(node)
    branches = flat.get("anyOf", [])
    if _NULL in branches:
        (only,) = [branch for branch in branches if branch != _NULL]
        del flat["anyOf"]
        flat = {**_inline(only, defs), **flat}
    if "$ref" in flat:
        target = defs[flat.pop("$ref").rsplit("/", 1)[-1]]
        flat = {**_inline(target, defs), **flat}
    return flat


def _convert_keyword(
    key: str, value: Any, defs: Mapping[str, Any], keep_defaults: bool
) -> JsonSchema:
    def convert(child: Mapping[str, Any]) -> JsonSchema:
        return to_structural(child, defs, keep_defaults=keep_defaults)

    match key:
        case "properties":  # the API server drops an empty one: a stored CRD would differ
            return {key: {name: convert(child) for name, child in value.items()}} if value else {}
        case "items":
            return {key: convert(value)}
        case "anyOf":  # only int-or-string is left once null branches are gone
            return {key: [convert(branch) for branch in value]}
        case "additionalProperties":
            return _additional_properties(value, convert)
        case "default":
            return _default(value, keep_defaults)
        case "const":
            return {"enum": [value]}
        case "exclusiveMinimum":
            return {"minimum": value, "exclusiveMinimum": True}
        case "exclusiveMaximum":
            return {"maximum": value, "exclusiveMaximum": True}
        case _:
            return {key: value}


def _additional_properties(value: Any, convert: Any) -> JsonSchema:
    if value is True:
        return {"x-kubernetes-preserve-unknown-fields": True}
    if value is False:
        return {}  # unknown fields are pruned, or rejected under fieldValidation=Strict
    return {"additionalProperties": convert(value)}


def _default(value: Any, keep_defaults: bool) -> JsonSchema:
    if not keep_defaults or value is None:
        return {}
    return {"default": value}
