"""Minimal models of the Kubernetes types a role passes through to its pods. They check what is
cheap to check early (names, quantities, list keys) and leave the rest to the pod API."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from rljob.api.base import SpecModel
from rljob.api.kube_names import EnvName, LabelKeyOrEmpty, LabelValue
from rljob.api.reserved import RESERVED_ENV_MESSAGE, RESERVED_ENV_NAMES
from rljob.api.rules import CelCheck, CrossFieldRule, KubeList

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# The API server's resource.Quantity grammar, as controller-gen emits it.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUANTITY = re.compile(QUANTITY_PATTERN)

ObjectName = Annotated[str, Field(pattern=DNS1123_SUBDOMAIN, min_length=1, max_length=253)]
FreeForm = dict[str, Any]
"""An object passed through unchecked (x-kubernetes-preserve-unknown-fields)."""


def _string_map(value: object, where: str) -> None:
    if value is not None and not (
        isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    ):
        raise ValueError(f"{where} must be a map of strings")


def _pod_template_shape(template: dict[str, Any]) -> dict[str, Any]:
    """The parts of a free-form pod template the operator merges into what it renders: the
    server stores any object here, so a wrong shape is refused by name before it is used."""
    metadata, spec = template.get("metadata"), template.get("spec")
    if metadata is not None and not isinstance(metadata, dict):
        raise ValueError("metadata must be an object")
    for key in ("labels", "annotations"):
        _string_map((metadata or {}).get(key), f"metadata.{key}")
    if spec is not None and not isinstance(spec, dict):
        raise ValueError("spec must be an object")
    for key in ("containers", "initContainers"):
        items = (spec or {}).get(key)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError(f"spec.{key} must be a list of objects")
        if not all(isinstance(i.get("name"), str) for i in items):
            raise ValueError(f"spec.{key}[*].name must be a string")
    return template


PodTemplate = Annotated[FreeForm, AfterValidator(_pod_template_shape)]
"""A free-form pod template whose merged parts (metadata, containers) have the right shape."""

MAX_RESOURCES = 16
# The API server decodes JSON integers as int64: a larger number is a float there, and an
# integer field rejects it ("must be of type integer"). Checked in Python only: a schema
# maximum of 2**63-1 is read back as a float, which the API server refuses as a bound.
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def _int64(value: int) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise PydanticCustomError("int64", "must fit in 64 bits, as the API server reads it")
    return value


Int64Check = AfterValidator(_int64)
Int64 = Annotated[int, Int64Check]


class _QuantityType:
    """An integer or a quantity string ("500m", "16Gi"), as x-kubernetes-int-or-string."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(_validate_quantity)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }


def _validate_quantity(value: Any) -> int | str:
    if isinstance(value, int) and not isinstance(value, bool):
        return _int64(value)
    if isinstance(value, str) and _QUANTITY.fullmatch(value):
        return value
    raise PydanticCustomError("quantity", "must be an integer or a quantity such as 500m or 16Gi")


Quantity = Annotated[int | str, _QuantityType]


class ResourceRequirements(SpecModel):
    """Compute resources of the role's main container (GPUs come from `gpus`)."""

    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_RESOURCES,
        description="Resource limits by resource name, e.g. cpu: 4, memory: 64Gi.",
    )
    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_RESOURCES,
        description="Resource requests by resource name; default to the limits.",
    )


_RESERVED_ENV_LIST = ", ".join(f"'{name}'" for name in RESERVED_ENV_NAMES)


class EnvVar(SpecModel):
    """An environment variable of the role's main container."""

    name: Annotated[
        EnvName,
        CelCheck(
            cel=f"!(self in [{_RESERVED_ENV_LIST}])",
            message=RESERVED_ENV_MESSAGE,
            holds=lambda name: name not in RESERVED_ENV_NAMES,
        ),
    ] = Field(description="Variable name; unique within the role; not one the operator sets.")
    value: Annotated[str, Field(max_length=32768)] | None = Field(
        default=None, description="Literal value."
    )
    value_from: FreeForm | None = Field(
        default=None,
        description="Source of the value (secretKeyRef, configMapKeyRef, fieldRef, ...), "
        "as in a pod's env.",
    )


class Toleration(SpecModel):
    """A toleration added to the role's pods, as in a pod spec."""

    key: LabelKeyOrEmpty | None = Field(
        default=None, description="Taint key to tolerate; empty (with Exists) tolerates all."
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: LabelValue | None = Field(
        default=None, description="Taint value to match; empty with operator Exists."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute", ""] | None = Field(
        default=None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: Int64 | None = Field(
        default=None,
        description="How long a NoExecute taint is tolerated before eviction.",
    )

    # The pod API's own toleration rules, each at the field it names.
    cel_rules = (
        CrossFieldRule(
            cel="(has(self.key) && self.key != '')"
            " || (has(self.operator) && self.operator == 'Exists')",
            message="operator must be Exists when key is empty (which tolerates every taint)",
            field="operator",
            holds=lambda toleration: bool(toleration.key) or toleration.operator == "Exists",
        ),
        CrossFieldRule(
            cel="!has(self.operator) || self.operator != 'Exists' || !has(self.value)"
            " || self.value == ''",
            message="value must be empty when operator is Exists",
            field="value",
            holds=lambda toleration: toleration.operator != "Exists" or not toleration.value,
        ),
        CrossFieldRule(
            cel="!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            message="effect must be NoExecute when tolerationSeconds is set",
            field="effect",
            holds=lambda toleration: (
                toleration.toleration_seconds is None or toleration.effect == "NoExecute"
            ),
        ),
    )


class LocalObjectReference(SpecModel):
    """A reference to an object in the job's namespace."""

    name: ObjectName = Field(description="Name of the object.")


class Volume(SpecModel):
    """A pod volume, as in a pod spec; fields other than `name` pass through unchecked."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    name: ObjectName = Field(description="Volume name; unique within the role.")


class VolumeMount(SpecModel):
    """A volume mount of the role's main container; fields other than `name` and `mountPath`
    pass through unchecked."""

    model_config = ConfigDict(
        extra="allow", json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )

    name: ObjectName = Field(description="Name of the volume to mount.")
    mount_path: Annotated[str, Field(min_length=1, max_length=4096)] = Field(
        description="Path in the container; unique within the role."
    )


EnvList = Annotated[list[EnvVar], Field(max_length=128), KubeList("map", ("name",))]
TolerationList = Annotated[list[Toleration], Field(max_length=32)]
VolumeList = Annotated[list[Volume], Field(max_length=64), KubeList("map", ("name",))]
VolumeMountList = Annotated[
    list[VolumeMount], Field(max_length=64), KubeList("map", ("mountPath",))
]
PullSecretList = Annotated[
    list[LocalObjectReference], Field(max_length=16), KubeList("map", ("name",))
]
