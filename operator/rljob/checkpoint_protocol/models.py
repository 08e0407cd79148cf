"""The documents of the checkpoint protocol (pure, standard library only): manifest, attempt
marker and pointer.

Each carries `formatVersion`. A reader accepts the versions it knows (`FORMAT_VERSION` and
older) and ignores unknown fields, so a newer writer can add fields without breaking an older
reader; a change an older reader must not silently misread bumps the format version.

On the wire: camelCase keys in field order, absent optional fields left out, one-space indent,
UTF-8 text, times in ISO 8601 with `Z` for UTC (what the pydantic models before them wrote, byte
for byte; tests/unit/checkpoints/wire holds documents they wrote). Parsing is strict: a field
has the JSON type it is written with (no "5" for 5, no number for a time), and an error names
the wire field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Self, TypeVar, cast

from rljob.checkpoint_protocol.layout import MAX_ATTEMPT, MAX_STEP, VersionId, check_shard_key

FORMAT_VERSION = 1
MAX_TEXT = 253  # job and namespace: a Kubernetes name's limit
MAX_VERSION_NAME = 32

_SHA256 = re.compile(r"[0-9a-f]{64}")
_VERSION_NAME = re.compile(r"v[0-9]{12}-a[0-9]{6}")

T = TypeVar("T")
W = TypeVar("W", bound="_Wire")


class DocumentError(ValueError):
    """A document does not parse; the message is one line naming what is wrong."""


def wire_name(name: str) -> str:
    """A field's key on the wire: camelCase (created_at -> createdAt)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


# -- field checks: each returns the value or raises DocumentError naming the wire field ------


def _fail(name: str, message: str) -> DocumentError:
    return DocumentError(f"{wire_name(name)}: {message}")


def _integer(name: str, value: object, low: int, high: int | None = None) -> int:
    # bool is an int in Python, never in a document.
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(name, f"must be an integer, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise _fail(name, f"{value} is out of range ({bound})")
    return value


def _text(name: str, value: object, max_length: int, pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str):
        raise _fail(name, f"must be a string, not {type(value).__name__}")
    if not 1 <= len(value) <= max_length:
        raise _fail(name, f"must be 1 to {max_length} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise _fail(name, f"{value!r} does not match {pattern.pattern}")
    return value


def _optional_text(name: str, value: object, max_length: int = 2**16) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_length:
        raise _fail(name, f"must be a string of at most {max_length} characters")
    return value


def _time(name: str, value: object) -> datetime:
    """An aware time: a naive one is UTC (what the writers mean)."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise _fail(name, f"{value!r} is not an ISO 8601 time") from None
    if not isinstance(value, datetime):
        raise _fail(name, f"must be an ISO 8601 time, not {type(value).__name__}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _optional(check: Callable[[str, object], T]) -> Callable[[str, object], T | None]:
    def optional(name: str, value: object) -> T | None:
        return None if value is None else check(name, value)

    return optional


# -- the wire format ---------------------------------------------------------------------------


def _format_time(value: datetime) -> str:
    text = value.isoformat()
    return text[: -len("+00:00")] + "Z" if text.endswith("+00:00") else text


def _format_float(value: float) -> str:
    # Python writes 1e-07, the old writer 1e-7; NaN and infinities are not JSON: null.
    if not math.isfinite(value):
        return "null"
    return re.sub(r"e-0(\d)$", r"e-\1", repr(value))


def _dump(value: object, depth: int) -> str:
    """JSON with a one-space indent, as json.dumps(indent=1, ensure_ascii=False) writes it but
    for floats (see _format_float)."""
    inner, outer = "\n" + " " * (depth + 1), "\n" + " " * depth
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = (
            f"{json.dumps(str(k), ensure_ascii=False)}: {_dump(v, depth + 1)}"
            for k, v in value.items()
        )
        return "{" + inner + ("," + inner).join(items) + outer + "}"
    if isinstance(value, list | tuple):
        if not value:
            return "[]"
        return "[" + inner + ("," + inner).join(_dump(v, depth + 1) for v in value) + outer + "]"
    if isinstance(value, float):
        return _format_float(value)
    return json.dumps(value, ensure_ascii=False)


def _load_object(data: bytes | str) -> dict[str, Any]:
    try:
        loaded = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DocumentError(f"not JSON: {exc}") from None
    if not isinstance(loaded, dict):
        raise DocumentError(f"must be a JSON object, not {type(loaded).__name__}")
    return loaded


def _known_fields(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """The document's fields by Python name; unknown keys are left out (a newer writer's)."""
    by_wire = {wire_name(f.name): f.name for f in fields(cls)}
    return {by_wire[key]: value for key, value in data.items() if key in by_wire}


def _construct(cls: type[W], data: Mapping[str, Any]) -> W:
    known = _known_fields(cls, data)
    for each in fields(cast("type[Any]", cls)):  # every _Wire is a dataclass
        required = each.default is MISSING and each.default_factory is MISSING
        if required and each.name not in known:
            raise _fail(each.name, "Field required")  # the old (pydantic) wording
    return cls(**known)


class _Wire:
    """Frozen dataclasses that check themselves on construction and write camelCase JSON."""

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        raise NotImplementedError

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # a normalized value of a frozen dataclass

    def to_wire(self, *, keep_none: bool = False) -> dict[str, Any]:
        """The JSON value: camelCase keys in field order, None left out (kept as null for a
        display of every field, such as `rljob checkpoints show --json`)."""
        wire: dict[str, Any] = {}
        for each in fields(self):  # type: ignore[arg-type]  # every subclass is a dataclass
            value = getattr(self, each.name)
            if value is not None or keep_none:
                wire[wire_name(each.name)] = _wire_value(value)
        return wire


def _wire_value(value: object) -> object:
    if isinstance(value, _Wire):
        return value.to_wire()
    if isinstance(value, datetime):
        return _format_time(value)
    if isinstance(value, list):
        return [_wire_value(v) for v in value]
    return value


@dataclass(frozen=True, kw_only=True)
class _Document(_Wire):
    format_version: int = FORMAT_VERSION

    def _check(self) -> None:
        version = _integer("format_version", self.format_version, 1)
        if version > FORMAT_VERSION:
            raise _fail(
                "format_version",
                f"format version {version} is newer than this reader's {FORMAT_VERSION}",
            )

    def to_json(self) -> bytes:
        return _dump(self.to_wire(), 0).encode()

    @classmethod
    def parse(cls, data: bytes | str) -> Self:
        """Parses a stored document; raises DocumentError with a one-line reason."""
        return _construct(cls, _load_object(data))


@dataclass(frozen=True, kw_only=True)
class ShardEntry(_Wire):
    """One object of a version, relative to the version prefix."""

    key: str  # relative to the version prefix, e.g. model/__0_0.distcp
    size: int  # bytes
    sha256: str  # of the content, lowercase hex

    def _check(self) -> None:
        try:
            check_shard_key(_text("key", self.key, 2**16))
        except ValueError as exc:
            raise _fail("key", str(exc)) from None
        _integer("size", self.size, 0)
        _text("sha256", self.sha256, 64, _SHA256)

    @classmethod
    def from_wire(cls, data: object) -> ShardEntry:
        """A shard entry from its JSON value (an object)."""
        if not isinstance(data, Mapping):
            raise DocumentError(f"shard must be a JSON object, not {type(data).__name__}")
        return _construct(cls, data)


@dataclass(frozen=True, kw_only=True)
class _AttemptDocument(_Document):
    """What a manifest and a marker both begin with: whose attempt wrote it (in this order on
    the wire, after formatVersion)."""

    job: str
    namespace: str
    job_uid: str | None = None
    attempt: int

    def _check(self) -> None:
        super()._check()
        _text("job", self.job, MAX_TEXT)
        _text("namespace", self.namespace, MAX_TEXT)
        _optional_text("job_uid", self.job_uid)
        _integer("attempt", self.attempt, 0, MAX_ATTEMPT)


@dataclass(frozen=True, kw_only=True)
class Manifest(_AttemptDocument):
    """`manifest.json`: written last; its presence commits a version."""

    step: int
    policy_generation: int | None = None
    created_at: datetime
    shards: list[ShardEntry] = field(default_factory=list)
    # Free-form writer data: epoch, consumed samples, world size, code version.
    metadata: dict[str, Any] = field(default_factory=dict)

    def _check(self) -> None:
        super()._check()
        _integer("step", self.step, 0, MAX_STEP)
        _optional(lambda n, v: _integer(n, v, 0))("policy_generation", self.policy_generation)
        self._set("created_at", _time("created_at", self.created_at))
        self._set("shards", _shards(self.shards))
        if not isinstance(self.metadata, dict):
            raise _fail("metadata", f"must be a JSON object, not {type(self.metadata).__name__}")

    @property
    def version(self) -> VersionId:
        return VersionId(self.step, self.attempt)

    @property
    def total_size(self) -> int:
        return sum(shard.size for shard in self.shards)


def _shards(value: object) -> list[ShardEntry]:
    """Shard entries (parsed from JSON values where they are not entries yet), each key once."""
    if not isinstance(value, list):
        raise _fail("shards", f"must be a JSON array, not {type(value).__name__}")
    entries: list[ShardEntry] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        try:
            entry = item if isinstance(item, ShardEntry) else ShardEntry.from_wire(item)
        except DocumentError as exc:
            raise DocumentError(f"shards.{index}.{exc}") from None
        if entry.key in seen:
            raise _fail("shards", f"shard {entry.key} listed twice")
        seen.add(entry.key)
        entries.append(entry)
    return entries


@dataclass(frozen=True, kw_only=True)
class AttemptMarker(_AttemptDocument):
    """`attempts/a%06d.json`: written by the operator before it creates a trainer attempt."""

    started_at: datetime
    resumed_from_step: int | None = None  # the step the attempt resumed from; None: scratch
    resumed_from_version: str | None = None

    def _check(self) -> None:
        super()._check()
        self._set("started_at", _time("started_at", self.started_at))
        _optional(lambda n, v: _integer(n, v, 0, MAX_STEP))(
            "resumed_from_step", self.resumed_from_step
        )
        _optional_text("resumed_from_version", self.resumed_from_version, MAX_VERSION_NAME)


@dataclass(frozen=True, kw_only=True)
class Pointer(_Document):
    """`latest.json`: the newest committed version, as its writer saw it. A fast path only:
    discovery never trusts it beyond choosing where its listing starts."""

    version: str
    updated_at: datetime | None = None

    def _check(self) -> None:
        super()._check()
        _text("version", self.version, MAX_VERSION_NAME, _VERSION_NAME)
        self._set("updated_at", _optional(_time)("updated_at", self.updated_at))

    @property
    def version_id(self) -> VersionId:
        return VersionId.parse(self.version)

    @classmethod
    def to(cls, version: VersionId, now: datetime | None = None) -> Pointer:
        return cls(version=version.name, updated_at=now or datetime.now(UTC))
