"""Base classes: camelCase on the wire, strict spec models, tolerant status models."""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel
from typing_extensions import Unpack

from rljob.api.rules import (
    CEL_RULES_KEY,
    ObjectRule,
    TransitionRule,
    raise_rule_errors,
)


def _add_cel_rules(schema: dict[str, Any], model: type[Any]) -> None:
    rules = [*getattr(model, "cel_rules", ()), *getattr(model, "transition_rules", ())]
    cel = [rule_schema for rule in rules if (rule_schema := rule.schema()) is not None]
    if cel:
        schema[CEL_RULES_KEY] = cel


def camel_case(**settings: Unpack[ConfigDict]) -> ConfigDict:
    """camelCase on the wire, Python names accepted too; `settings` add to or override that."""
    return ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        **settings,
    )


class SpecModel(BaseModel):
    """Part of the user's spec: unknown fields are rejected and types are not coerced ("4" is not
    an integer), as the API server's structural schema does."""

    model_config = camel_case(
        extra="forbid", strict=True, frozen=True, json_schema_extra=_add_cel_rules
    )

    cel_rules: ClassVar[tuple[ObjectRule, ...]] = ()
    transition_rules: ClassVar[tuple[TransitionRule, ...]] = ()

    @model_validator(mode="after")
    def _check_cel_rules(self) -> Self:
        errors = [error for rule in type(self).cel_rules for error in rule.errors(self)]
        raise_rule_errors(type(self).__name__, errors)
        return self


class StatusModel(BaseModel):
    """Part of the status the operator writes: unknown fields are ignored so an older operator
    can read what a newer one wrote."""

    model_config = camel_case(extra="ignore")


def optional_text(description: str) -> Any:
    """A status text that may be empty: written only when it is not (absent, it reads back as
    empty; written empty, `kubectl describe` would show a bare key)."""
    return Field(default="", exclude_if=_empty, description=description)


def _empty(text: str) -> bool:
    return text == ""


def nested(model: type[SpecModel], description: str) -> Any:
    """A nested spec object defaulting to {} in the CRD: the API server then fills and stores
    every nested default, so a later operator version never silently changes a running job's
    settings."""
    return Field(default_factory=model, description=description, json_schema_extra={"default": {}})
