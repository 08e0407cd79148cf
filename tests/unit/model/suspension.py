"""The failure policy's Suspend and its resume in the model (machine.py), read from the API
server's write log in order (the RLJob's status as each successful status write left it), never
from what the operator believed:

- a-policy-suspension-creates-no-pod-until-resumed: while the RLJob's status holds a suspension,
  no operator write creates a trainer Job or applies a Deployment with replicas above 0;
- a-policy-suspension-is-kept-and-applied-once: a held suspension never changes, is cleared
  only by a write that handled a new resume nonce (resumed: true), and there are never more
  suspensions journaled than Suspend findings fed;
- a-resume-nonce-is-handled-once-and-ends-only-a-later-suspension: a nonce's record
  (handledAt, resumed) never changes once written, and the nonce that clears a suspension was
  written by the user after the write that journaled it;
- a-suspension-is-no-restart: the writes that journal or clear a suspension leave
  restarts.total as it was (unless that write journals a restart of its own, the policy's or
  one the user requested).

After a resume the next attempt resumes from the newest committed eligible version: machine.py's
each-attempt-resumes-from-the-newest-eligible-valid-version covers every attempt's start.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.unit.model.cluster import RESTART_KINDS, Cluster, Write

JSON = dict[str, Any]
KIND = "RLJob"

CREATES_NOTHING = "a-policy-suspension-creates-no-pod-until-resumed"
KEPT_ONCE = "a-policy-suspension-is-kept-and-applied-once"
NONCE_ONCE = "a-resume-nonce-is-handled-once-and-ends-only-a-later-suspension"
NO_RESTART = "a-suspension-is-no-restart"
CHECKS = frozenset({CREATES_NOTHING, KEPT_ONCE, NONCE_ONCE, NO_RESTART})


@dataclass
class _Job:
    """One RLJob (by uid) as its status writes left it, up to the log's cursor."""

    suspension: JSON | None = None
    journaled_at: int = -1  # the log seq of the write that journaled the held suspension
    resume: JSON | None = None
    restarts: int = 0
    in_flight: str | None = None
    suspensions: int = 0
    nonces: dict[str, JSON] = field(default_factory=dict)


class SuspensionChecks:
    """Observes one machine's RLJobs; `faults(check)` says what broke each invariant. The
    machine tells it which Suspend findings it fed and which nonces the user wrote, when."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.recorded: dict[str, list[str]] = {check: [] for check in CHECKS}
        self.jobs: dict[str, _Job] = {}
        self.cursor = 0
        self.findings_fed = 0
        self.nonces_written: dict[str, int] = {}  # nonce -> log length when the user wrote it

    def finding_fed(self) -> None:
        self.findings_fed += 1

    def nonce_written(self, nonce: str) -> None:
        self.nonces_written[nonce] = len(self.cluster.log)

    def faults(self, check: str) -> list[str]:
        self._read_log()
        found = list(self.recorded[check])
        journaled = sum(job.suspensions for job in self.jobs.values())
        if check == KEPT_ONCE and journaled > self.findings_fed:
            found.append(f"{journaled} suspensions journaled for {self.findings_fed} findings")
        return found

    def _read_log(self) -> None:
        log = self.cluster.log
        for write in log[self.cursor :]:
            if write.code not in (200, 201) or not write.actor.startswith("operator"):
                continue
            if write.verb == "patch_status" and write.kind == KIND:
                self._status_written(write)
            elif write.verb == "apply" and write.kind in ("Job", "Deployment"):
                self._applied(write)
        self.cursor = len(log)

    def _applied(self, write: Write) -> None:
        job = self.jobs.get(str(write.detail.get("owner")))
        if job is None or job.suspension is None:
            return
        creates = write.kind == "Job" and write.code == 201
        if creates or int(write.detail.get("replicas") or 0) > 0:
            self.recorded[CREATES_NOTHING].append(
                f"{write.actor} applied {write.kind} {write.name} (replicas "
                f"{write.detail.get('replicas')}) while {_said(job.suspension)} held"
            )

    def _status_written(self, write: Write) -> None:
        job = self.jobs.setdefault(write.uid, _Job())
        after: JSON | None = write.detail.get("suspension_after")
        resume: JSON | None = write.detail.get("resume_after")
        self._check_nonce(job, resume)
        if job.suspension is not None and (after != job.suspension or _resumed(job, resume)):
            self._check_cleared(job, write, None if _resumed(job, resume) else after, resume)
            if after is not None:  # ended and journaled again in one write: a new one
                job.suspension = None
        if after is not None and job.suspension is None:
            job.suspensions += 1
            job.journaled_at = write.seq
            self._check_ledger(job, write, f"journaled {_said(after)}")
        job.suspension, job.resume = after, resume
        job.restarts = int(write.detail.get("restarts_after", 0))
        job.in_flight = (write.detail.get("in_flight_after") or {}).get("id")

    def _check_cleared(
        self, job: _Job, write: Write, after: JSON | None, resume: JSON | None
    ) -> None:
        held = _said(job.suspension)
        if after is not None:
            self.recorded[KEPT_ONCE].append(f"{held} became {_said(after)} while held")
            return
        before = (job.resume or {}).get("id")
        if resume is None or not resume.get("resumed") or resume.get("id") == before:
            self.recorded[KEPT_ONCE].append(f"{held} cleared without a new resume: {resume}")
            return
        written = self.nonces_written.get(str(resume["id"]))
        if written is None or written <= job.journaled_at:
            self.recorded[NONCE_ONCE].append(
                f"nonce {resume['id']} (written at {written}) ended {held}, journaled at "
                f"{job.journaled_at}"
            )
        self._check_ledger(job, write, f"cleared {held}")

    def _check_nonce(self, job: _Job, resume: JSON | None) -> None:
        if resume is None:
            return
        nonce = str(resume.get("id"))
        seen = job.nonces.setdefault(nonce, resume)
        if seen != resume:
            self.recorded[NONCE_ONCE].append(f"nonce {nonce} handled twice: {seen}, {resume}")

    def _check_ledger(self, job: _Job, write: Write, what: str) -> None:
        total = int(write.detail.get("restarts_after", 0))
        action: Mapping[str, Any] = write.detail.get("in_flight_after") or {}
        restarted = action.get("kind") in RESTART_KINDS and action.get("id") != job.in_flight
        if total != job.restarts and not restarted:
            self.recorded[NO_RESTART].append(
                f"the write that {what} moved restarts.total from {job.restarts} to {total}"
            )


def _resumed(job: _Job, resume: JSON | None) -> bool:
    """The write handled a new nonce that ended a suspension."""
    new = resume is not None and resume.get("id") != (job.resume or {}).get("id")
    return new and bool((resume or {}).get("resumed"))


def _said(suspension: Mapping[str, Any] | None) -> str:
    held = suspension or {}
    return f"suspension {held.get('reason')} at {held.get('suspendedAt')}"
