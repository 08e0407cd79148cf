"""What `kubectl rljob restart` and `kubectl rljob resume` write: a fresh nonce in an annotation
the operator honours once per nonce (rljob.io/restart-request, rljob.io/resume-request), the
kubectl command that writes it, when a resume is refused, and what the user is told."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from rljob.kubectl.text import Body, job_name, namespace_flag, when
from rljob.vocabulary.enums import RoleName
from rljob.vocabulary.labels import RESTART_REQUEST_ANNOTATION, RESUME_REQUEST_ANNOTATION

# ------------------------------------------------------------------------------ restart


def new_nonce(now: datetime, token: str | None = None) -> str:
    """A fresh request id: UTC time plus random hex, e.g. 20260501T100000Z-3f9a1c."""
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-{token or secrets.token_hex(3)}"


def restart_request(role: str, nonce: str) -> str:
    """The rljob.io/restart-request value the operator honours once per nonce."""
    return f"{RoleName(role).value}/{nonce}"


def annotate_command(
    name: str, namespace: str | None, value: str, annotation: str = RESTART_REQUEST_ANNOTATION
) -> list[str]:
    command = ["kubectl", "annotate", "rljob", name, f"{annotation}={value}", "--overwrite"]
    if namespace:
        command += ["-n", namespace]
    return command


def render_restart(name: str, namespace: str | None, role: str, nonce: str) -> str:
    gang = (
        " The trainer restarts as a new attempt that resumes from the newest valid checkpoint."
        if role == RoleName.TRAINER.value
        else ""
    )
    return (
        f"Requested a restart of role {role} of RLJob {name} (request {nonce}).{gang}\n"
        f"Follow it: kubectl rljob status {name}{namespace_flag(namespace)}"
    )


# ------------------------------------------------------------------------------ resume


def resume_refusal(job: Body) -> str | None:
    """Why `kubectl rljob resume` without --force writes nothing; None when the failure policy
    holds the job suspended (status.suspension)."""
    if (job.get("status") or {}).get("suspension"):
        return None
    name, flag = job["metadata"]["name"], namespace_flag(job["metadata"].get("namespace"))
    lines = [
        f"RLJob {job_name(job)} is not suspended by its failure policy (status.suspension is "
        "empty): there is nothing to resume."
    ]
    if (job.get("spec") or {}).get("suspend"):
        patch = """'{"spec":{"suspend":false}}'"""
        lines.append(
            f"It is suspended by its spec: kubectl patch rlj {name}{flag} --type merge -p {patch}"
        )
    lines.append(f"To write the request anyway: kubectl rljob resume {name}{flag} --force")
    return "\n".join(lines)


def render_resume(job: Body, nonce: str, now: datetime | None = None) -> str:
    name, flag = job["metadata"]["name"], namespace_flag(job["metadata"].get("namespace"))
    suspension = (job.get("status") or {}).get("suspension")
    what = (
        f"suspended by policy for {suspension.get('reason')} since "
        f"{when(suspension.get('suspendedAt'), now)}"
        if suspension
        else "not suspended by policy: the operator records the request and changes nothing"
    )
    return (
        f"Requested a resume of RLJob {job_name(job)} (request {nonce}, "
        f"{RESUME_REQUEST_ANNOTATION}), {what}.\n"
        "The operator handles it once (status.lastResumeRequest); a resumed job starts a new "
        "trainer attempt from the newest valid checkpoint.\n"
        f"Follow it: kubectl rljob status {name}{flag}"
    )
