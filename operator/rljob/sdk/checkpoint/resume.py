"""The version a trainer attempt resumes from, as the operator names it in RLJOB_RESUME_*."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from rljob.checkpoint_protocol.layout import (
    ENV_RESUME_STEP,
    ENV_RESUME_URI,
    ENV_RESUME_VERSION,
    CheckpointLocation,
    VersionId,
)
from rljob.checkpoint_protocol.s3 import StoreEndpoint
from rljob.sdk.checkpoint.reader import CheckpointReader


@dataclass(frozen=True)
class ResumePoint:
    """The version a trainer attempt should load."""

    location: CheckpointLocation
    version: VersionId

    @property
    def step(self) -> int:
        return self.version.step

    @property
    def uri(self) -> str:
        return self.location.version_uri(self.version)

    def reader(self, endpoint: StoreEndpoint | None = None) -> CheckpointReader:
        return CheckpointReader(self.location, self.version, endpoint=endpoint)


def resolve_resume(env: Mapping[str, str] | None = None) -> ResumePoint | None:
    """The version to load from RLJOB_RESUME_URI (and the consistent RLJOB_RESUME_VERSION /
    RLJOB_RESUME_STEP when set), or None when the attempt starts from scratch."""
    env = os.environ if env is None else env
    uri = env.get(ENV_RESUME_URI, "").strip()
    if not uri:
        return None
    location, version = CheckpointLocation.from_version_uri(uri)
    named = env.get(ENV_RESUME_VERSION, "").strip()
    if named and VersionId.parse(named) != version:
        raise ValueError(f"{ENV_RESUME_VERSION}={named} does not match {ENV_RESUME_URI}={uri}")
    step = env.get(ENV_RESUME_STEP, "").strip()
    if step and int(step) != version.step:
        raise ValueError(f"{ENV_RESUME_STEP}={step} does not match {ENV_RESUME_URI}={uri}")
    return ResumePoint(location, version)
