"""Key layout of a job's checkpoints (pure).

Under `<uri>/<namespace>/<job>/` (the job's *base*):

    v%012d-a%06d/<shard keys...>     one version per (step, attempt)
    v%012d-a%06d/manifest.json       written LAST: its presence commits the version
    attempts/a%06d.json              one marker per trainer attempt
    latest.json                      pointer to the newest version (a fast path only)

Zero padding makes the lexicographic key order equal the (step, attempt) order, which is what
lets discovery list "everything after the pointer" with one StartAfter listing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import total_ordering

MAX_STEP = 10**12 - 1
MAX_ATTEMPT = 10**6 - 1
MANIFEST_NAME = "manifest.json"
POINTER_NAME = "latest.json"
ATTEMPTS_DIR = "attempts"
VERSION_DIR_PREFIX = "v"

_VERSION = re.compile(r"^v([0-9]{12})-a([0-9]{6})$")
_MARKER = re.compile(r"^a([0-9]{6})\.json$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SEGMENT = re.compile(r"^[A-Za-z0-9._=+-]+$")
# Shard keys relative to the version prefix: no empty, "." or ".." segments, no leading slash.
_SHARD_SEGMENT = re.compile(r"^[A-Za-z0-9._=+@,-]+$")
MAX_SHARD_KEY_LENGTH = 512

# Environment variables the operator injects into trainer pods and the SDK reads.
ENV_JOB = "RLJOB_NAME"
ENV_NAMESPACE = "RLJOB_NAMESPACE"
ENV_ATTEMPT = "RLJOB_ATTEMPT"
ENV_JOB_UID = "RLJOB_JOB_UID"
ENV_CHECKPOINT_URI = "RLJOB_CHECKPOINT_URI"
ENV_S3_ENDPOINT = "RLJOB_S3_ENDPOINT"
ENV_S3_REGION = "RLJOB_S3_REGION"
ENV_S3_ADDRESSING_STYLE = "RLJOB_S3_ADDRESSING_STYLE"
ENV_RESUME_URI = "RLJOB_RESUME_URI"
ENV_RESUME_STEP = "RLJOB_RESUME_STEP"
ENV_RESUME_VERSION = "RLJOB_RESUME_VERSION"
ENV_POLICY_URI = "RLJOB_POLICY_URI"
ENV_POLICY_GENERATION = "RLJOB_POLICY_GENERATION"


@dataclass(frozen=True)
class DefaultStore:
    """The operator's own S3 endpoint and region: where a job whose spec names no endpoint keeps
    its checkpoints, for the operator's reads and its trainers' writes alike."""

    endpoint: str | None = None
    region: str | None = None

    def resolve(self, endpoint: str | None, region: str | None) -> tuple[str | None, str | None]:
        """(endpoint, region) a job's store is reached at, from its spec's values."""
        if endpoint or self.endpoint is None:
            return endpoint, region
        return self.endpoint, region or self.region


@total_ordering
@dataclass(frozen=True)
class VersionId:
    """A checkpoint version: the trainer step saved and the attempt that saved it.
    Ordered by (step, attempt), the same order as the keys."""

    step: int
    attempt: int

    def __post_init__(self) -> None:
        if not 0 <= self.step <= MAX_STEP:
            raise ValueError(f"step {self.step} out of range 0..{MAX_STEP}")
        if not 0 <= self.attempt <= MAX_ATTEMPT:
            raise ValueError(f"attempt {self.attempt} out of range 0..{MAX_ATTEMPT}")

    @property
    def name(self) -> str:
        return f"v{self.step:012d}-a{self.attempt:06d}"

    @classmethod
    def parse(cls, name: str) -> VersionId:
        """Parses `v000000001200-a000003` (a trailing slash is tolerated)."""
        match = _VERSION.match(name.rstrip("/"))
        if match is None:
            raise ValueError(f"not a checkpoint version name: {name!r}")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return self.name

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, VersionId):
            return NotImplemented
        return (self.step, self.attempt) < (other.step, other.attempt)


def marker_name(attempt: int) -> str:
    if not 0 <= attempt <= MAX_ATTEMPT:
        raise ValueError(f"attempt {attempt} out of range 0..{MAX_ATTEMPT}")
    return f"a{attempt:06d}.json"


def check_shard_key(key: str) -> str:
    """Returns key if it is a valid shard key relative to a version prefix, else raises."""
    if not key or len(key) > MAX_SHARD_KEY_LENGTH:
        raise ValueError(f"shard key must be 1..{MAX_SHARD_KEY_LENGTH} characters: {key!r}")
    segments = key.split("/")
    for segment in segments:
        if segment in ("", ".", "..") or not _SHARD_SEGMENT.match(segment):
            raise ValueError(
                f"shard key {key!r}: segments must be non-empty, not . or .., and use only "
                "A-Z a-z 0-9 . _ = + @ , -"
            )
    if key == MANIFEST_NAME:
        raise ValueError(f"shard key {key!r} is reserved for the manifest")
    return key


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("bucket", "a/b"); `s3://bucket` -> ("bucket", "")."""
    if not uri.startswith("s3://"):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    rest = uri[len("s3://") :].strip("/")
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise ValueError(f"invalid bucket name in {uri!r}")
    prefix = prefix.strip("/")
    if prefix and not all(_SEGMENT.match(s) for s in prefix.split("/")):
        raise ValueError(f"invalid prefix in {uri!r}")
    return bucket, prefix


class KeyKind(StrEnum):
    VERSION_OBJECT = "version-object"
    MARKER = "marker"
    POINTER = "pointer"
    OTHER = "other"


@dataclass(frozen=True)
class ParsedKey:
    """What a key under a job's base is."""

    kind: KeyKind
    version: VersionId | None = None
    relative: str = ""  # key relative to the version prefix, for version objects
    attempt: int | None = None  # for markers

    @property
    def is_manifest(self) -> bool:
        return self.kind is KeyKind.VERSION_OBJECT and self.relative == MANIFEST_NAME


@dataclass(frozen=True)
class CheckpointLocation:
    """Where one job's checkpoints live: `s3://<bucket>/<root>/<namespace>/<job>/`."""

    bucket: str
    root: str
    namespace: str
    job: str

    def __post_init__(self) -> None:
        for what, value in (("namespace", self.namespace), ("job", self.job)):
            if not value or not _SEGMENT.match(value):
                raise ValueError(f"invalid {what} {value!r}")

    @classmethod
    def from_uri(cls, uri: str, namespace: str, job: str) -> CheckpointLocation:
        """From spec.checkpoint.uri plus the job's namespace and name."""
        bucket, root = parse_s3_uri(uri)
        return cls(bucket, root, namespace, job)

    @classmethod
    def from_job_uri(cls, uri: str) -> CheckpointLocation:
        """From the job's own base URI: `s3://bucket/<root>/<namespace>/<job>`."""
        bucket, prefix = parse_s3_uri(uri)
        parts = prefix.split("/") if prefix else []
        if len(parts) < 2:
            raise ValueError(f"{uri!r} does not name <namespace>/<job> under a bucket")
        return cls(bucket, "/".join(parts[:-2]), parts[-2], parts[-1])

    @classmethod
    def from_version_uri(cls, uri: str) -> tuple[CheckpointLocation, VersionId]:
        """From a version URI such as RLJOB_RESUME_URI: `s3://bucket/<root>/<ns>/<job>/v...-a.../`."""
        bucket, prefix = parse_s3_uri(uri)
        parts = prefix.split("/") if prefix else []
        if len(parts) < 3:
            raise ValueError(f"{uri!r} does not name <namespace>/<job>/<version> under a bucket")
        version = VersionId.parse(parts[-1])
        return cls(bucket, "/".join(parts[:-3]), parts[-3], parts[-2]), version

    @property
    def base(self) -> str:
        """Key prefix of the job, with a trailing slash."""
        head = f"{self.root}/" if self.root else ""
        return f"{head}{self.namespace}/{self.job}/"

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.base}"

    @property
    def versions_prefix(self) -> str:
        return self.base + VERSION_DIR_PREFIX

    @property
    def attempts_prefix(self) -> str:
        return f"{self.base}{ATTEMPTS_DIR}/"

    @property
    def pointer_key(self) -> str:
        return self.base + POINTER_NAME

    def version_prefix(self, version: VersionId) -> str:
        return f"{self.base}{version.name}/"

    def version_uri(self, version: VersionId) -> str:
        return f"s3://{self.bucket}/{self.version_prefix(version)}"

    def manifest_key(self, version: VersionId) -> str:
        return self.version_prefix(version) + MANIFEST_NAME

    def shard_key(self, version: VersionId, relative: str) -> str:
        return self.version_prefix(version) + check_shard_key(relative)

    def marker_key(self, attempt: int) -> str:
        return self.attempts_prefix + marker_name(attempt)

    def start_after_version(self, version: VersionId) -> str:
        """A StartAfter key whose listing begins with `version`'s own objects."""
        return self.base + version.name

    def start_after_step(self, step: int) -> str:
        """A StartAfter key whose listing begins with the versions of `step` (any attempt)."""
        return f"{self.base}{VERSION_DIR_PREFIX}{step:012d}"

    def parse_key(self, key: str) -> ParsedKey:
        """Classifies a key under this job's base; keys elsewhere are OTHER."""
        if not key.startswith(self.base):
            return ParsedKey(KeyKind.OTHER)
        rest = key[len(self.base) :]
        if rest == POINTER_NAME:
            return ParsedKey(KeyKind.POINTER)
        head, sep, tail = rest.partition("/")
        if not sep:
            return ParsedKey(KeyKind.OTHER)
        if head == ATTEMPTS_DIR:
            match = _MARKER.match(tail)
            if match is None:
                return ParsedKey(KeyKind.OTHER)
            return ParsedKey(KeyKind.MARKER, attempt=int(match[1]))
        match = _VERSION.match(head)
        if match is None or not tail:
            return ParsedKey(KeyKind.OTHER)
        return ParsedKey(
            KeyKind.VERSION_OBJECT, VersionId(int(match[1]), int(match[2])), relative=tail
        )


def resume_env(location: CheckpointLocation, version: VersionId) -> dict[str, str]:
    """The variables the operator injects into a trainer attempt that resumes from version."""
    return {
        ENV_RESUME_URI: location.version_uri(version),
        ENV_RESUME_STEP: str(version.step),
        ENV_RESUME_VERSION: version.name,
    }


def policy_env(location: CheckpointLocation, generation: int | None) -> dict[str, str]:
    """The weight-sync variables of an engine the operator starts: where the trainer's
    versions live (the engine loads the newest) and the lowest generation it may serve."""
    env = {ENV_POLICY_URI: location.uri}
    if generation is not None:
        env[ENV_POLICY_GENERATION] = str(generation)
    return env
