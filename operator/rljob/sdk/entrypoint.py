"""`python -m rljob.sdk.entrypoint -- torchrun ... train.py`: runs the trainer and, when it dies,
writes a short root-cause summary (at most 4 KiB) to the container's termination message, so an
NCCL watchdog abort is visible to the operator even under torchrun's plain exit code 1. The
child's output still goes to the container log; the exit code is passed through."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO

from rljob.health.termination import NCCL_SIGNATURES

TERMINATION_LOG_ENV = "RLJOB_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
SUMMARY_LIMIT = 4096
_TAIL_LINES = 40
_ROOT_CAUSE_HINTS = ("Root Cause", "ChildFailedError", "Error", "Traceback", "exitcode")


def root_cause(lines: Iterable[str], exit_code: int) -> str:
    """The summary: the NCCL signature line if any, else the last error-looking lines, then the
    exit code; at most SUMMARY_LIMIT bytes of UTF-8, the end kept (where the failure is)."""
    tail = [line.rstrip() for line in lines if line.strip()]
    nccl = [line for line in tail if any(p.search(line) for p in NCCL_SIGNATURES)]
    hints = [line for line in tail if any(h in line for h in _ROOT_CAUSE_HINTS)]
    chosen = nccl[:1] + hints[-5:] if nccl else (hints[-8:] or tail[-8:])
    text = "\n".join([*chosen, f"exit code {exit_code}"])
    encoded = text.encode()[-SUMMARY_LIMIT:]
    return encoded.decode(errors="ignore")


def exit_status(returncode: int) -> int:
    """The status a shell gives a child killed by signal N, 128+N (Popen says -N, which
    sys.exit would turn into 256-N: a SIGABRT read as exit 250)."""
    return 128 - returncode if returncode < 0 else returncode


def _pump(stream: IO[str], sink: IO[str], tail: collections.deque[str]) -> None:
    for line in stream:
        sink.write(line)
        sink.flush()
        tail.append(line)


def run(command: Sequence[str], termination_log: Path) -> int:
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    child = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    for sig in (signal.SIGTERM, signal.SIGINT):  # the kubelet's stop reaches the trainer
        signal.signal(sig, lambda number, _: child.send_signal(number))
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, sys.stdout, tail), daemon=True),
        threading.Thread(target=_pump, args=(child.stderr, sys.stderr, tail), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    code = exit_status(child.wait())
    for pump in pumps:
        pump.join(timeout=5)
    # Outside Kubernetes there may be no termination log: the summary is in the output anyway.
    if code != 0:
        with contextlib.suppress(OSError):
            termination_log.write_text(root_cause(tail, code))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m rljob.sdk.entrypoint -- COMMAND [ARGS...]\n")
        return 2
    log = Path(os.environ.get(TERMINATION_LOG_ENV, DEFAULT_TERMINATION_LOG))
    return run(args, log)


if __name__ == "__main__":
    sys.exit(main())
