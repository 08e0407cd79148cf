"""Which rank failed first in one trainer container's evidence (the wrapper's summary or the
log's tail), and whether that failure is the rank's own or a symptom of waiting for a peer.

torchrun's ChildFailedError names one node's first failure by its error file's timestamp (whole
seconds), which can be a victim: a rank whose earlier "connection closed" error was written
before the peer that exited 93 was seen, or a rank torchrun itself stopped (SIGTERM) after
another failed. So the root cause here is the first *primary* failure: torchrun's root entry if
it is one, else the earliest other entry that is one, else the first primary line in the output.
A rank that timed out or lost a peer is never the root cause while a primary failure is seen;
when nothing else is seen the container is a waiting symptom (primary False: NCCLTimeout for a
collective that timed out or lost its peer, ContainerFailed for torchrun stopped from outside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rljob.signatures import (
    CONTAINER_FAILED,
    NCCL_TIMEOUT,
    SIGNATURES,
    RankFailure,
    Signature,
    match_signature,
    strip_prefixes,
    torchrun_failures,
)

# torchrun stops a node's other workers with SIGTERM once one failed: those are victims.
_SIGTERM = -15
_SIGABRT = -6
_NCCL = re.compile(r"nccl", re.IGNORECASE)
_RANKING = {signature.name: index for index, signature in enumerate(SIGNATURES)}


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one container's evidence says: the reason (a FailureReason value), whether it is the
    rank's own failure, the rank (None when the output names none), the rank's exit status
    (128+N for signal N) and the line that shows it."""

    reason: str
    primary: bool
    rank: int | None
    exit_code: int | None
    line: str | None


@dataclass(frozen=True, slots=True)
class _Seen:
    signature: Signature
    rank: int | None
    text: str


def _signature_lines(lines: list[str]) -> list[_Seen]:
    seen = []
    for line in lines:
        text, rank = strip_prefixes(line)
        signature = match_signature(text)
        if signature is not None:
            seen.append(_Seen(signature, rank, text.strip()))
    return seen


def _most_specific(candidates: list[_Seen]) -> _Seen | None:
    """A rank's most telling primary line: a Xid beats the CUDA error it caused, any specific
    signature beats a bare Python exception."""
    primaries = [seen for seen in candidates if seen.signature.primary]
    return min(primaries, key=lambda s: _RANKING.get(s.signature.name, len(_RANKING)), default=None)


def _entry_verdict(failure: RankFailure, seen: list[_Seen], nccl: bool) -> Verdict | None:
    """One torchrun entry: primary, waiting, or None for a victim torchrun stopped."""
    own = [s for s in seen if s.rank == failure.rank]
    exception = match_signature(failure.exception) if failure.exception else None
    if exception is not None:
        own.append(_Seen(exception, failure.rank, failure.exception))
    best = _most_specific(own)
    if best is not None:
        return Verdict(best.signature.reason, True, failure.rank, failure.status, best.text)
    waiting = next((s for s in own if not s.signature.primary), None)
    if waiting is not None:
        reason = waiting.signature.reason
        return Verdict(reason, False, failure.rank, failure.status, waiting.text)
    if failure.exitcode == _SIGTERM:
        return None
    if failure.exitcode == _SIGABRT and nccl:
        # ProcessGroupNCCL's watchdog aborts the process after a timeout or a peer's error.
        return Verdict(NCCL_TIMEOUT, False, failure.rank, failure.status, None)
    detail = f"rank {failure.rank} exitcode {failure.exitcode}"
    return Verdict(CONTAINER_FAILED, True, failure.rank, failure.status, detail)


def read_evidence(lines: list[str], exit_code: int | None) -> Verdict | None:
    """The container's verdict, or None when its evidence shows no failure signature and no
    torchrun summary."""
    seen = _signature_lines(lines)
    failures = sorted(torchrun_failures(lines), key=lambda f: (not f.root, f.time, f.rank))
    nccl = any(_NCCL.search(line) for line in lines)
    verdicts = [_entry_verdict(failure, seen, nccl) for failure in failures]
    judged = [verdict for verdict in verdicts if verdict is not None]
    primary = next((verdict for verdict in judged if verdict.primary), None)
    if primary is not None:
        return primary
    first = next((s for s in seen if s.signature.primary), None)
    if first is not None:
        # Lines naming no rank are the container's own (a Ray driver's): its most telling one.
        best = _most_specific([s for s in seen if s.rank == first.rank]) or first
        return Verdict(best.signature.reason, True, first.rank, exit_code, best.text)
    if judged:
        return judged[0]
    waiting = next(iter(seen), None)
    if waiting is not None:
        return Verdict(waiting.signature.reason, False, waiting.rank, exit_code, waiting.text)
    return None
