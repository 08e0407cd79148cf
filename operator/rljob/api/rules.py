"""Validation rules written once for both validators: each carries the CEL expression the API
server evaluates (x-kubernetes-validations in the generated CRD) and the Python predicate pydantic
evaluates, with one message and one field path, so both reject the same objects the same way."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic.alias_generators import to_snake
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError, core_schema

CEL_RULES_KEY = "x-kubernetes-validations"


@dataclass(frozen=True)
class FieldViolation:
    """One rejected field. `field` is a Kubernetes-style path such as
    "spec.failurePolicy.rules[0].action", as the API server puts it in details.causes[].field."""

    field: str
    message: str


def field_path(loc: Sequence[int | str]) -> str:
    """Turns a pydantic error location into a Kubernetes field path: names joined by dots, list
    indexes as [i]."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def value_at(model: Any, loc: Sequence[str]) -> Any:
    """The value at a path of wire names (camelCase) under a model; None where a part is unset."""
    value: Any = model
    for alias in loc:
        value = getattr(value, to_snake(alias), None)
    return value


def rule_error(loc: tuple[int | str, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("rule", message), loc=loc, input=value)


def raise_rule_errors(title: str, errors: list[InitErrorDetails]) -> None:
    """Raises the errors from inside a validator; pydantic prefixes their locations with the
    location of the value being validated, so they name the offending field, not the parent."""
    if errors:
        raise ValidationError.from_exception_data(title, errors)


@dataclass(frozen=True)
class CrossFieldRule:
    """A rule over several fields of one object, placed on that object (the nearest common
    parent) with `field` (dotted, camelCase, relative to it; empty for the object itself) as the
    path that errors name."""

    cel: str
    message: str
    field: str
    holds: Callable[[Any], bool]

    def schema(self) -> dict[str, str]:
        return _rule_schema(self.cel, self.message, self.field)

    @property
    def loc(self) -> tuple[str, ...]:
        return _loc(self.field)

    def errors(self, model: Any) -> list[InitErrorDetails]:
        if self.holds(model):
            return []
        return [rule_error(self.loc, self.message, value_at(model, self.loc))]


Loc = tuple[int | str, ...]


@dataclass(frozen=True)
class FreeFormRule:
    """A rule over what a free-form field (x-kubernetes-preserve-unknown-fields) holds, placed on
    the object with that field; `offenders` yields the paths, inside `field`, of the values it
    refuses, and pydantic names each by its full path. Checked by pydantic only, so the operator
    refuses such a spec (Accepted=False) after the API server stored it: CRD validation rules
    cannot read inside a free-form field (the API server declares none of its unknown fields to
    CEL: "undefined field" when the CRD is created)."""

    message: str
    field: str
    offenders: Callable[[Any], Iterable[Loc]]

    def schema(self) -> None:
        return None

    def errors(self, model: Any) -> list[InitErrorDetails]:
        return [
            rule_error((*_loc(self.field), *inner), self.message, None)
            for inner in self.offenders(model)
        ]


ObjectRule = CrossFieldRule | FreeFormRule
"""A rule placed on an object (a model's `cel_rules`)."""


@dataclass(frozen=True)
class TransitionRule:
    """A rule comparing an update with the stored object (CEL `oldSelf`); checked by
    validate_update, never on create."""

    cel: str
    message: str
    field: str
    holds: Callable[[Any, Any], bool]

    def schema(self) -> dict[str, str]:
        return _rule_schema(self.cel, self.message, self.field)

    @property
    def loc(self) -> tuple[str, ...]:
        return _loc(self.field)


def _rule_schema(cel: str, message: str, field: str) -> dict[str, str]:
    schema = {"rule": cel, "message": message}
    if field:
        schema["fieldPath"] = f".{field}"
    return schema


def _loc(field: str) -> tuple[str, ...]:
    return tuple(field.split(".")) if field else ()


@dataclass(frozen=True)
class CelCheck:
    """Annotated marker for a rule on a single value (CEL `self` is the value itself)."""

    cel: str
    message: str
    holds: Callable[[Any], bool]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.setdefault(CEL_RULES_KEY, []).append(
            {"rule": self.cel, "message": self.message}
        )
        return json_schema

    def _check(self, value: Any) -> Any:
        if not self.holds(value):
            raise PydanticCustomError("rule", self.message)
        return value


@dataclass(frozen=True)
class Immutable:
    """Annotated marker: the field may not change once set (CEL transition rule
    `self == oldSelf` on the field); validate_update finds fields by this marker."""

    message: str

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.setdefault(CEL_RULES_KEY, []).append(
            {"rule": "self == oldSelf", "message": self.message}
        )
        return json_schema


@dataclass(frozen=True)
class KubeList:
    """Annotated marker for Kubernetes list semantics: `set` (unique scalars) or `map` (items
    unique by `keys`, wire names). Duplicates are rejected at the second occurrence's index, as
    the API server does."""

    kind: Literal["set", "map"]
    keys: tuple[str, ...] = ()

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["x-kubernetes-list-type"] = self.kind
        if self.kind == "map":
            json_schema["x-kubernetes-list-map-keys"] = list(self.keys)
        return json_schema

    def _check(self, items: list[Any]) -> list[Any]:
        seen: set[Hashable] = set()
        errors = []
        for index, item in enumerate(items):
            identity = self._identity(item)
            if identity in seen:
                errors.append(rule_error((index,), self._duplicate_message(identity), item))
            seen.add(identity)
        raise_rule_errors("list", errors)
        return items

    def _identity(self, item: Any) -> Hashable:
        if self.kind == "set":
            scalar: Hashable = item.value if isinstance(item, Enum) else item
            return scalar
        return tuple(getattr(item, to_snake(key)) for key in self.keys)

    def _duplicate_message(self, identity: Any) -> str:
        if self.kind == "set":
            return f"duplicate value {identity!r}"
        keys = ", ".join(f"{key}={value!r}" for key, value in zip(self.keys, identity, strict=True))
        return f"duplicate entry with {keys}"
