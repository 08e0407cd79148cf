"""The whole RLJob object, and parsing a body from the API into it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from rljob.api.base import camel_case
from rljob.api.rules import FieldViolation, field_path
from rljob.api.spec import RLJobSpec
from rljob.api.status import RLJobStatus

GROUP = "rljob.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "RLJob"
PLURAL = "rljobs"

# Child names append at most 23 characters, and Service names are DNS-1035 labels of at most 63.
NAME_MAX_LENGTH = 40
DNS1035_LABEL_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_LENGTH_MESSAGE = (
    f"must be at most {NAME_MAX_LENGTH} characters: child names add up to 23 to it"
)
NAME_FORMAT_MESSAGE = (
    "must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter "
    "and ending with a letter or digit"
)


class ObjectMeta(BaseModel):
    """The parts of metadata the operator reads; the rest is ignored."""

    model_config = camel_case(extra="ignore", frozen=True)

    name: str = Field(description="Job name: a DNS-1035 label of at most 40 characters.")
    namespace: str | None = Field(default=None, description="Namespace of the job.")
    uid: str | None = Field(default=None, description="Unique id of this incarnation.")
    generation: int | None = Field(default=None, description="Spec generation.")
    resource_version: str | None = Field(default=None, description="For optimistic writes.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations.")
    creation_timestamp: datetime | None = Field(default=None, description="Creation time.")
    deletion_timestamp: datetime | None = Field(default=None, description="Deletion time.")

    @field_validator("name")
    @classmethod
    def _dns1035_label_of_limited_length(cls, name: str) -> str:
        if len(name) > NAME_MAX_LENGTH:
            raise PydanticCustomError("name", NAME_LENGTH_MESSAGE)
        if not re.fullmatch(DNS1035_LABEL_PATTERN, name):
            raise PydanticCustomError("name", NAME_FORMAT_MESSAGE)
        return name


class RLJob(BaseModel):
    """An RLJob as read from the API."""

    model_config = camel_case(extra="ignore", frozen=True)

    api_version: Literal["rljob.io/v1alpha1"] = Field(description="rljob.io/v1alpha1.")
    kind: Literal["RLJob"] = Field(description="RLJob.")
    metadata: ObjectMeta = Field(description="Object metadata.")
    spec: RLJobSpec = Field(description="What the user asks for.")
    status: RLJobStatus = Field(
        default_factory=RLJobStatus, description="What the operator observed and did."
    )

    @field_validator("status", mode="before")
    @classmethod
    def _no_status_yet(cls, status: Any) -> Any:
        return {} if status is None else status


class InvalidRLJobError(ValueError):
    """An RLJob body the models (or the platform's allowlists: `reason` NotAllowed) reject;
    `violations` name each field as the API server would."""

    def __init__(self, violations: list[FieldViolation], reason: str = "InvalidSpec") -> None:
        self.violations = violations
        self.reason = reason
        super().__init__("; ".join(f"{v.field}: {v.message}" for v in violations))


def violations_of(error: ValidationError) -> list[FieldViolation]:
    """The errors of a pydantic validation as Kubernetes-style field violations."""
    return [FieldViolation(field_path(e["loc"]), e["msg"]) for e in error.errors()]


def parse_rljob(body: Mapping[str, Any]) -> RLJob:
    """Parses an RLJob body (e.g. kopf's `body`); raises InvalidRLJobError naming each bad field."""
    try:
        return RLJob.model_validate(dict(body))
    except ValidationError as error:
        raise InvalidRLJobError(violations_of(error)) from error
