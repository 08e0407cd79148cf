"""What the entrypoint wrapper keeps from a trainer's whole output to explain its death: the first
lines that match a failure signature (rljob.signatures; the rank's own failures and the
symptoms of waiting for a peer have budgets of their own, so a flood of timeouts cannot push
out the error behind them), torchrun's ChildFailedError summary ("Failures:" and "Root Cause
(first observed failure)"), and the first failure's TORCHELASTIC_ERROR_FILE.

Memory stays bounded however long the run and its lines: a kept line is cut to MAX_LINE_BYTES
and each kind of kept line has a cap; the summary is at most SUMMARY_LIMIT bytes, the kubelet's
termination-message cap. The summary repeats torchrun's layout, so the operator reads it with
the same parser as a raw log tail."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from rljob.signatures import (
    BLOCK_END,
    FAILURES_HEADER,
    ROOT_CAUSE_HEADER,
    RankFailure,
    block_line,
    match_signature,
    strip_prefixes,
    torchrun_failures,
)

SUMMARY_LIMIT = 4096
MAX_LINE_BYTES = 512
# What of a line is matched against the signatures; the rest of a longer line is only copied.
FEED_BYTES = 8192
# First lines kept of each kind: the rank's own failures, and waiting for a peer.
MAX_PRIMARY = 6
MAX_WAITING = 6
# Lines of torchrun's summary kept (its fields and exception lines, not its tracebacks), and
# the entries written back: eight local ranks each fail in a full node.
MAX_BLOCK_LINES = 400
MAX_ENTRIES = 8
MAX_EXCEPTION_BYTES = 300
# An error file is a small JSON document; a larger one is not read past this.
MAX_ERROR_FILE_BYTES = 256 * 1024
HEADER = "rljob: failure evidence (first failure lines, torchrun's failures, error file)"


def clip(text: str, limit: int = MAX_LINE_BYTES) -> str:
    """At most `limit` UTF-8 bytes of the start of `text` (where a message says what happened)."""
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode("utf-8", "ignore") + "..."


def clip_keeping_signature(text: str, limit: int = MAX_LINE_BYTES) -> str:
    """`text` cut to `limit` bytes so that it still shows the signature it matched: a long
    DistBackendError may name the timeout only past its first few hundred bytes."""
    signature = match_signature(text)
    clipped = clip(text, limit)
    if signature is None or match_signature(clipped) == signature:
        return clipped
    found = signature.pattern.search(text.strip())
    if found is None:  # a Python exception line: its start is what matters
        return clipped
    return clip(text, limit // 2) + " " + clip(text.strip()[found.start() :], limit // 2 - 1)


class Evidence:
    """Fed every output line (from two pump threads); keeps what explains a failure."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.primary: list[str] = []
        self.waiting: list[str] = []
        self._seen: set[str] = set()
        self.block: list[str] = []
        self._in_block = False

    def feed(self, raw: str) -> None:
        """One line, or the first FEED_BYTES of a longer one."""
        line = raw[:FEED_BYTES].rstrip("\r\n")
        text, _ = strip_prefixes(line)
        with self._lock:
            self._feed_block(text)
            signature = match_signature(text)
            if signature is None:
                return
            kept = self.primary if signature.primary else self.waiting
            key = clip(text.strip())
            if key not in self._seen and len(kept) < (
                MAX_PRIMARY if signature.primary else MAX_WAITING
            ):
                kept.append(clip_keeping_signature(line.strip()))
                self._seen.add(key)

    def _feed_block(self, text: str) -> None:
        stripped = text.strip()
        if stripped in (ROOT_CAUSE_HEADER, FAILURES_HEADER):
            self._in_block = True
        if self._in_block and len(self.block) < MAX_BLOCK_LINES and block_line(text):
            self.block.append(clip_keeping_signature(text))
        if BLOCK_END.match(stripped):
            self._in_block = False

    def summary(self, exit_code: int, error_file: Path | None = None) -> str:
        """The termination message: at most SUMMARY_LIMIT bytes; the first failure lines give
        way (the last kept first) to torchrun's failures, the error file and the exit code."""
        with self._lock:
            first = [*self.primary, *self.waiting]
            failures = torchrun_failures(self.block)
        error = read_error_file(error_file)
        tail = [
            *render_failures(failures),
            *([f"error file: {error}"] if error else []),
            f"exit code {exit_code}",
        ]
        while True:
            text = "\n".join([HEADER, *first, *tail])
            if len(text.encode()) <= SUMMARY_LIMIT or not first:
                break
            first.pop()
        return text.encode()[-SUMMARY_LIMIT:].decode("utf-8", "ignore")


def render_failures(failures: list[RankFailure]) -> list[str]:
    """torchrun's summary, root cause first, without tracebacks: what torchrun_failures reads."""
    ordered = sorted(failures, key=lambda f: not f.root)[:MAX_ENTRIES]
    lines: list[str] = []
    for index, failure in enumerate(ordered):
        if index == 0 or failure.root != ordered[index - 1].root:
            lines.append(ROOT_CAUSE_HEADER if failure.root else FAILURES_HEADER)
        lines += [
            f"[{index}]:",
            f"  time      : {failure.time}",
            f"  rank      : {failure.rank}",
            f"  exitcode  : {'unknown' if failure.exitcode is None else failure.exitcode}",
        ]
        if failure.exception:
            lines.append(f"  {clip_keeping_signature(failure.exception, MAX_EXCEPTION_BYTES)}")
    return [*lines, "=" * 60] if lines else []


def read_error_file(path: Path | None) -> str | None:
    """The message of a TORCHELASTIC_ERROR_FILE that torch's `record` (or torchrun copying its
    first failed worker's file) wrote: {"message": {"message": ..., "extraInfo": {...}}}, or
    {"message": "..."} for a plain one (torch/distributed/elastic/multiprocessing/errors/
    error_handler.py, torch 2.15.0). None when there is none or it is unreadable."""
    if path is None:
        return None
    try:
        with path.open("rb") as handle:
            data = json.loads(handle.read(MAX_ERROR_FILE_BYTES))
    except (OSError, ValueError):
        return None
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    if not isinstance(message, str) or not message.strip():
        return None
    return clip(" ".join(message.split()))
