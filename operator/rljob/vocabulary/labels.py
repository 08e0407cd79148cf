"""Every label and annotation key the operator writes or reads on Kubernetes objects, and the
managed-by value it selects its children by (the kubectl plugin writes the request annotations).
Fixed by docs/architecture.md section 2: changing one
orphans live objects (their watches, selectors and spec hashes stop matching)."""

from __future__ import annotations

# The prefix of kopf's own annotations (handler progress).
ANNOTATION_PREFIX = "rljob.io"
FINALIZER = "rljob.io/finalizer"

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "rljob-operator"
JOB_LABEL = "rljob.io/job"
ROLE_LABEL = "rljob.io/role"
ATTEMPT_LABEL = "rljob.io/attempt"
# On the pods (and in the selectors) of a role named by the fallback name: the RLJob's own, so its
# Services never select the pods a leftover namesake still runs (reconcile/names.py).
INSTANCE_LABEL = "rljob.io/instance"

SPEC_HASH_ANNOTATION = "rljob.io/spec-hash"
# On a pod template: the remediation action that rolled the role (its action id).
RESTARTED_AT_ANNOTATION = "rljob.io/restarted-at"
# On the RLJob: `<role>/<nonce>`, written by `kubectl rljob restart`.
RESTART_REQUEST_ANNOTATION = "rljob.io/restart-request"
# On the RLJob: a nonce, written by `kubectl rljob resume`; ends a policy suspension once.
RESUME_REQUEST_ANNOTATION = "rljob.io/resume-request"
# Tests only: on a pod template, stands in for a new operator version rendering differently.
RENDER_MARKER_ANNOTATION = "rljob.io/render-marker"
# Set by the Job controller on each pod of an Indexed Job: the trainer rank.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
# A rollout pod's readiness gate in weightSync Gated mode: set True by the operator (pods/status)
# once the engine reports the job's current policy generation.
POLICY_CURRENT_GATE = "rljob.io/policy-current"
# On a rollout pod (slotServices): `rljob.io/slot-<k>: held` puts it behind slot k's Service.
SLOT_LABEL_PREFIX = "rljob.io/slot-"
SLOT_HELD = "held"


def slot_label(slot: int) -> str:
    return f"{SLOT_LABEL_PREFIX}{slot}"


def slots_held(labels: dict[str, str]) -> frozenset[int]:
    """The slots a pod's labels say it holds."""
    held = set()
    for key, value in labels.items():
        number = key.removeprefix(SLOT_LABEL_PREFIX)
        if value == SLOT_HELD and number != key and number.isdigit():
            held.add(int(number))
    return frozenset(held)
