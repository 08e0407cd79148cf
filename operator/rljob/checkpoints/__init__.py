"""The operator's checkpoint logic (pure): lineage, selection, retention and attempt plans, over
the protocol that workloads share (rljob.checkpoint_protocol: layout, documents, validity,
errors, the S3 store). The operator's S3 side (discovery, retention's deletes, the async
wrapper, the CLI) is the subpackage rljob.checkpoints.s3; import it explicitly (this package
stays free of I/O imports)."""

from rljob.checkpoints.lineage import Lineage, next_attempt
from rljob.checkpoints.retention import RetentionPlan, plan_retention
from rljob.checkpoints.selection import Selection, checkpoint_ref, select_version

__all__ = [
    "Lineage",
    "RetentionPlan",
    "Selection",
    "checkpoint_ref",
    "next_attempt",
    "plan_retention",
    "select_version",
]
