"""Environment variables the operator sets in the pods it renders (rljob.reconcile.render and
the checkpoint layout): a user's env entry may not set one, since they describe the topology,
attempt and checkpoints the operator chose."""

from __future__ import annotations

from rljob.vocabulary.enums import RoleName

RESERVED_ENV_NAMES: tuple[str, ...] = (
    # Every pod: its job and role, and the Services of the other roles.
    "RLJOB_NAME",
    "RLJOB_NAMESPACE",
    "RLJOB_ROLE",
    *(f"RLJOB_{role.value.upper()}_SERVICE" for role in RoleName),
    "RLJOB_ROLLOUT_HEADLESS_SERVICE",
    # Trainer: the gang's topology for torchrun (PET_*) and other launchers, and its attempt.
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "NNODES",
    "NODE_RANK",
    "RLJOB_ATTEMPT",
    # Trainer with launcher ray: the head's address, the pod's IP, Ray's directory and ports.
    "RLJOB_RAY_HEAD_ADDRESS",
    "RLJOB_RAY_NODE_IP",
    "RLJOB_RAY_TEMP_DIR",
    "RLJOB_RAY_GCS_PORT",
    "RLJOB_RAY_NODE_MANAGER_PORT",
    "RLJOB_RAY_OBJECT_MANAGER_PORT",
    "RLJOB_RAY_DASHBOARD_AGENT_GRPC_PORT",
    "RLJOB_RAY_RUNTIME_ENV_AGENT_PORT",
    "RLJOB_RAY_METRICS_EXPORT_PORT",
    "RLJOB_RAY_DASHBOARD_PORT",
    "RLJOB_RAY_DASHBOARD_AGENT_LISTEN_PORT",
    "RLJOB_RAY_CLIENT_SERVER_PORT",
    "RLJOB_RAY_MIN_WORKER_PORT",
    "RLJOB_RAY_MAX_WORKER_PORT",
    # Trainer: where checkpoints go and which version an attempt resumes from.
    "RLJOB_CHECKPOINT_URI",
    "RLJOB_JOB_UID",
    "RLJOB_S3_ENDPOINT",
    "RLJOB_S3_REGION",
    "RLJOB_S3_ADDRESSING_STYLE",
    "RLJOB_RESUME_URI",
    "RLJOB_RESUME_STEP",
    "RLJOB_RESUME_VERSION",
    # Rollout engines: the trainer's versions and the lowest policy generation they may serve.
    "RLJOB_POLICY_URI",
    "RLJOB_POLICY_GENERATION",
)
"""Every environment variable name the operator injects, in any role."""

RESERVED_ENV_MESSAGE = "must be none of the names the operator sets: " + ", ".join(
    RESERVED_ENV_NAMES
)
