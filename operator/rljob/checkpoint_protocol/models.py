"""The documents of the checkpoint protocol (pure): manifest, attempt marker and pointer.

Each carries `formatVersion`. A reader accepts the versions it knows (`FORMAT_VERSION` and
older) and ignores unknown fields, so a newer writer can add fields without breaking an older
reader; a change an older reader must not silently misread bumps the format version.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from rljob.api.base import camel_case
from rljob.checkpoint_protocol.layout import MAX_ATTEMPT, MAX_STEP, VersionId, check_shard_key

FORMAT_VERSION = 1

Step = Annotated[int, Field(ge=0, le=MAX_STEP)]
Attempt = Annotated[int, Field(ge=0, le=MAX_ATTEMPT)]
Sha256Hex = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
ShortText = Annotated[str, Field(min_length=1, max_length=253)]


class DocumentError(ValueError):
    """A document does not parse; the message is one line naming what is wrong."""


class _Wire(BaseModel):
    model_config = camel_case(extra="ignore", frozen=True)


class _Document(_Wire):
    format_version: int = Field(default=FORMAT_VERSION, ge=1)

    @field_validator("format_version")
    @classmethod
    def _known_format(cls, value: int) -> int:
        if value > FORMAT_VERSION:
            raise ValueError(f"format version {value} is newer than this reader's {FORMAT_VERSION}")
        return value

    def to_json(self) -> bytes:
        return self.model_dump_json(exclude_none=True, indent=1).encode()

    @classmethod
    def parse(cls, data: bytes | str) -> Self:
        """Parses a stored document; raises DocumentError with a one-line reason."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            raise DocumentError(_first_error(exc)) from None


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc)
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first.get("msg", "invalid"))
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {message}{more}" if where else f"{message}{more}"


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class ShardEntry(_Wire):
    """One object of a version, relative to the version prefix."""

    key: str = Field(description="Key relative to the version prefix, e.g. model/__0_0.distcp.")
    size: int = Field(ge=0, description="Size in bytes.")
    sha256: Sha256Hex = Field(description="SHA-256 of the content, lowercase hex.")

    @field_validator("key")
    @classmethod
    def _valid_key(cls, value: str) -> str:
        return check_shard_key(value)


class Manifest(_Document):
    """`manifest.json`: written last; its presence commits a version."""

    job: ShortText
    namespace: ShortText
    job_uid: str | None = None
    attempt: Attempt
    step: Step
    policy_generation: int | None = Field(default=None, ge=0)
    created_at: datetime
    shards: list[ShardEntry] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="Free-form writer data: epoch, consumed samples, world size, code version.",
    )

    @field_validator("created_at")
    @classmethod
    def _tz(cls, value: datetime) -> datetime:
        return _aware(value)

    @model_validator(mode="after")
    def _unique_shards(self) -> Self:
        seen: set[str] = set()
        for shard in self.shards:
            if shard.key in seen:
                raise ValueError(f"shard {shard.key} listed twice")
            seen.add(shard.key)
        return self

    @property
    def version(self) -> VersionId:
        return VersionId(self.step, self.attempt)

    @property
    def total_size(self) -> int:
        return sum(shard.size for shard in self.shards)


class AttemptMarker(_Document):
    """`attempts/a%06d.json`: written by the operator before it creates a trainer attempt."""

    job: ShortText
    namespace: ShortText
    job_uid: str | None = None
    attempt: Attempt
    started_at: datetime
    resumed_from_step: Step | None = Field(
        default=None, description="Step the attempt resumed from; empty: from scratch."
    )
    resumed_from_version: str | None = Field(default=None, max_length=32)

    @field_validator("started_at")
    @classmethod
    def _tz(cls, value: datetime) -> datetime:
        return _aware(value)


class Pointer(_Document):
    """`latest.json`: the newest committed version, as its writer saw it. A fast path only:
    discovery never trusts it beyond choosing where its listing starts."""

    version: str = Field(pattern=r"^v[0-9]{12}-a[0-9]{6}$")
    updated_at: datetime | None = None

    @field_validator("updated_at")
    @classmethod
    def _tz(cls, value: datetime | None) -> datetime | None:
        return None if value is None else _aware(value)

    @property
    def version_id(self) -> VersionId:
        return VersionId.parse(self.version)

    @classmethod
    def to(cls, version: VersionId, now: datetime | None = None) -> Pointer:
        return cls(version=version.name, updated_at=now or datetime.now(UTC))
