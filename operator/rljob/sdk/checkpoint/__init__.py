"""Versioned checkpoints for trainers: write versions the operator can resume from, read them back.

Works with or without the operator. Under the operator the trainer pods get RLJOB_NAME,
RLJOB_NAMESPACE, RLJOB_ATTEMPT, RLJOB_CHECKPOINT_URI (spec.checkpoint.uri), optionally
RLJOB_JOB_UID, RLJOB_S3_ENDPOINT, RLJOB_S3_REGION, RLJOB_S3_ADDRESSING_STYLE, AWS credentials
from spec.checkpoint.credentialsSecret, and, when resuming, RLJOB_RESUME_URI, RLJOB_RESUME_STEP and
RLJOB_RESUME_VERSION. Without it, pass the same values as arguments.

Example::

    from rljob.sdk import CheckpointWriter, resolve_resume

    start = 0
    resume = resolve_resume()                  # None on a fresh start
    if resume is not None:
        resume.reader().download("/tmp/ckpt")  # verifies every shard's size and sha256
        load_state("/tmp/ckpt")
        start = resume.step

    writer = CheckpointWriter.from_env()
    for step in range(start + 1, total_steps + 1):
        train_one_step()
        if step % 100 == 0:
            save_state("/tmp/out")
            with writer.version(step, policy_generation=step) as version:
                version.write_file("model/rank0.pt", "/tmp/out/rank0.pt")
                version.write_bytes("train_state.json", json.dumps(state).encode())
            # leaving the block cleanly commits: manifest.json last, then latest.json

With several ranks, each rank writes its own shards in `writer.version(step, commit=False)` and
sends `version.entries` to rank 0, which adds them with `add_entries` and commits.

The writer refuses to commit (CommitRefused) when a newer attempt's marker exists: a zombie of a
superseded attempt must not publish. The operator's lineage rule fences such versions off anyway.
"""

from rljob.sdk.checkpoint.reader import CheckpointReader
from rljob.sdk.checkpoint.resume import ResumePoint, resolve_resume
from rljob.sdk.checkpoint.upload import (
    MAX_PARTS,
    MIN_PART_SIZE,
    MULTIPART_THRESHOLD,
    PART_SIZE,
    MiB,
)
from rljob.sdk.checkpoint.writer import CheckpointWriter, PendingVersion

__all__ = [
    "MAX_PARTS",
    "MIN_PART_SIZE",
    "MULTIPART_THRESHOLD",
    "PART_SIZE",
    "CheckpointReader",
    "CheckpointWriter",
    "MiB",
    "PendingVersion",
    "ResumePoint",
    "resolve_resume",
]
