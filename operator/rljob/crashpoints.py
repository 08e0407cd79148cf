"""Tests only: named points of an action where a test may kill the operator, to prove that it
resumes the action after a restart instead of repeating it. Nothing here can arm a point: the bed
installs a hook (rljob.dev.crash_entry), so no production setting (env, flag) reaches it."""

from __future__ import annotations

from collections.abc import Callable

CrashHook = Callable[[str, str], None]  # (point, the namespace of the job at it; "": unknown)

GANG_RESTART_CRASH_POINTS = (
    "gang-restart:journaled",
    "gang-restart:old-job-deleted",
    "gang-restart:new-job-created",
)
# A whole job's restart: a gang restart's points, and each serving Deployment's roll.
JOB_RESTART_CRASH_POINTS = (
    "job-restart:journaled",
    "job-restart:old-job-deleted",
    "job-restart:rolled",
    "job-restart:new-job-created",
)
POD_RESTART_CRASH_POINTS = ("pod-restart:journaled", "pod-restart:pod-deleted")
ROLE_RESTART_CRASH_POINTS = ("role-restart:journaled", "role-restart:rolled")
# An in-turn restart journaled (its first turn stamped, not yet deleted), and one turn's delete.
IN_TURN_RESTART_CRASH_POINTS = ("in-turn:journaled", "in-turn:pod-deleted")
# A Gated engine's drain: begun (journaled, the pod not deleted yet), and its delete once drained.
DRAIN_CRASH_POINTS = ("drain:started", "drain:pod-deleted")
# Starting an attempt: its marker written, not yet recorded in status; retention halfway
# (manifests deleted, their shards not yet).
ATTEMPT_CRASH_POINTS = ("attempt:marker-written", "retention:manifests-deleted")
CRASH_POINTS = (
    *GANG_RESTART_CRASH_POINTS,
    *JOB_RESTART_CRASH_POINTS,
    *POD_RESTART_CRASH_POINTS,
    *ROLE_RESTART_CRASH_POINTS,
    *IN_TURN_RESTART_CRASH_POINTS,
    *DRAIN_CRASH_POINTS,
    *ATTEMPT_CRASH_POINTS,
)


# The installed hook, if any (a list rather than a global statement); none in production.
_installed: list[CrashHook] = []


def install_crash_hook(hook: CrashHook | None) -> None:
    """Sets what crash_point calls; None takes it away, so crash points do nothing again."""
    _installed[:] = [] if hook is None else [hook]


def crash_point(name: str, namespace: str = "") -> None:
    for hook in _installed:
        hook(name, namespace)
