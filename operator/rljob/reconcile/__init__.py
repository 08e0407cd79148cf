"""PURE reconcile layer: desired children, status, conditions and Events of an RLJob from its
spec, its status and what was observed of its children. No I/O, no Kubernetes client."""

from rljob.reconcile.events import EventSpec
from rljob.reconcile.lifecycle import TrainerDecision, TrainerState, decide_trainer
from rljob.reconcile.merge import merge_overrides
from rljob.reconcile.names import (
    ATTEMPT_LABEL,
    JOB_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    ROLE_LABEL,
    SPEC_HASH_ANNOTATION,
    trainer_job_name,
)
from rljob.reconcile.observed import Observed, ObservedChild, ObservedPod
from rljob.reconcile.plan import (
    DeleteChild,
    Plan,
    ReconcileExtras,
    reconcile,
    render_context,
    status_patch,
)
from rljob.reconcile.render import DesiredChild, RenderContext, render_children

__all__ = [
    "ATTEMPT_LABEL",
    "JOB_LABEL",
    "MANAGED_BY_LABEL",
    "MANAGER",
    "ROLE_LABEL",
    "SPEC_HASH_ANNOTATION",
    "DeleteChild",
    "DesiredChild",
    "EventSpec",
    "Observed",
    "ObservedChild",
    "ObservedPod",
    "Plan",
    "ReconcileExtras",
    "RenderContext",
    "TrainerDecision",
    "TrainerState",
    "decide_trainer",
    "merge_overrides",
    "reconcile",
    "render_children",
    "render_context",
    "status_patch",
    "trainer_job_name",
]
