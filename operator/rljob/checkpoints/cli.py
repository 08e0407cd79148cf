"""Kept so older imports work: the `rljob checkpoints` CLI now lives in rljob.checkpoints.s3.cli."""

from rljob.checkpoints.s3.cli import EXIT_ERROR, EXIT_INVALID, EXIT_OK, main

__all__ = ["EXIT_ERROR", "EXIT_INVALID", "EXIT_OK", "main"]
