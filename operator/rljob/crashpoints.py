"""Tests only: SIGKILL the operator at a named point of an action, to prove that it resumes the
action after a restart instead of repeating it. Selected by one environment variable."""

from __future__ import annotations

import os
import signal

CRASH_POINT_ENV = "RLJOB_TEST_CRASH_POINT"
GANG_RESTART_CRASH_POINTS = (
    "gang-restart:journaled",
    "gang-restart:old-job-deleted",
    "gang-restart:new-job-created",
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
    *POD_RESTART_CRASH_POINTS,
    *ROLE_RESTART_CRASH_POINTS,
    *IN_TURN_RESTART_CRASH_POINTS,
    *DRAIN_CRASH_POINTS,
    *ATTEMPT_CRASH_POINTS,
)


def crash_point(name: str) -> None:
    if os.environ.get(CRASH_POINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
