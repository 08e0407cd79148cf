"""Kept so older imports work: the S3 store now lives in rljob.checkpoints.s3."""

from rljob.checkpoints.s3 import *  # noqa: F403 - the whole public surface, unchanged
