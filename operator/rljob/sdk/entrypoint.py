"""`python -m rljob.sdk.entrypoint -- torchrun ... train.py`: runs the trainer and, when it dies,
writes the failure evidence it kept from the whole output (rljob.sdk.evidence, at most 4 KiB) to
the container's termination message, so an NCCL watchdog abort or a rank's exception is visible
to the operator under torchrun's plain exit code 1. The child's output still goes to the
container log byte for byte; the exit code is passed through (a signal death as 128+N).

With `--checkpoint-layout LAYOUT --checkpoint-dir DIR` before the `--` (LAYOUT: verl, nemo-rl,
megatron, deepspeed, openrlhf, dcp), a framework's own saves become checkpoint versions: the
resume version (RLJOB_RESUME_URI) is restored into DIR in the framework's layout before the
trainer starts, a mirror uploads each newly completed save beside it (rljob.sdk.mirror), and
one last pass runs when the trainer exits (RLJOB_MIRROR_FINAL_TIMEOUT seconds at most). A
restore that cannot be used (WorldSizeMismatch: the node count changed) writes its reason to
the termination log and exits NATIVE_RESTORE_FAILED without starting the trainer. With
`--checkpoint-shared` DIR is one volume every node sees (a Ray-launched framework, whose ranks
land on different nodes each attempt, needs one): node 0 restores and mirrors all of it alone.

With `--tensorboard-dir DIR --tensorboard-keys FRAMEWORK` (verl, openrlhf, nemo-rl, slime) the
event files the framework writes under DIR become the SDK's trainer series on RLJOB_METRICS_PORT
(9400): step, heartbeat, phase seconds and canaries (rljob.sdk.tensorboard_bridge), for
frameworks that export none themselves. It needs prometheus_client, which every engine image
has (vLLM and SGLang depend on it).

Light on purpose: the trainer image's Python has torch, not the operator's dependencies, so this
imports only the standard library, rljob.signatures and rljob.sdk.evidence at import time; the
mirror, the bridge and their dependencies load only when their flags are given."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from rljob.sdk.evidence import FEED_BYTES, SUMMARY_LIMIT, Evidence

__all__ = ["SUMMARY_LIMIT", "Evidence", "exit_status", "main", "run"]

TERMINATION_LOG_ENV = "RLJOB_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# torch's `record` writes a worker's uncaught exception to this file, and torchrun (itself under
# `record`) copies its first failed worker's file to its own (torch 2.15.0,
# torch/distributed/elastic/multiprocessing/errors/__init__.py: record, ChildFailedError).
ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"
# The flags that turn on native checkpoints, and the exit status of a restore that failed.
NATIVE_FLAGS = ("--checkpoint-layout", "--checkpoint-dir")
# A checkpoint directory every node sees: node 0 mirrors and restores it alone.
SHARED_FLAG = "--checkpoint-shared"
NATIVE_RESTORE_FAILED = 3
# The flags that turn on the TensorBoard bridge: both or neither; and its read interval.
BRIDGE_FLAGS = ("--tensorboard-dir", "--tensorboard-keys")
BRIDGE_INTERVAL_ENV = "RLJOB_TENSORBOARD_INTERVAL"
USAGE = (
    "usage: python -m rljob.sdk.entrypoint "
    "[--checkpoint-layout LAYOUT --checkpoint-dir DIR [--checkpoint-shared]] "
    "[--tensorboard-dir DIR --tensorboard-keys FRAMEWORK] -- COMMAND [ARGS...]\n"
)
# A read never holds more than this; the rest of a longer line follows in the next reads.
_CHUNK = 64 * 1024


def exit_status(returncode: int) -> int:
    """The status a shell gives a child killed by signal N, 128+N (Popen says -N, which
    sys.exit would turn into 256-N: a SIGABRT read as exit 250)."""
    return 128 - returncode if returncode < 0 else returncode


def _pump(stream: IO[bytes], sink: IO[bytes], evidence: Evidence) -> None:
    """Copies the stream as is and feeds the evidence the start of every line."""
    line_start = True
    while chunk := stream.readline(_CHUNK):
        sink.write(chunk)
        sink.flush()
        if line_start:
            evidence.feed(chunk[:FEED_BYTES].decode("utf-8", "replace"))
        line_start = chunk.endswith(b"\n")


def _error_file(env: dict[str, str]) -> tuple[Path, bool]:
    """The error file the trainer writes: the user's, or one this wrapper owns (and removes)."""
    given = env.get(ERROR_FILE_ENV)
    if given:
        return Path(given), False
    folder = tempfile.mkdtemp(prefix="rljob-entrypoint-")
    path = Path(folder) / "error.json"
    env[ERROR_FILE_ENV] = str(path)
    return path, True


def run(command: Sequence[str], termination_log: Path) -> int:
    env = dict(os.environ)
    error_file, owned = _error_file(env)
    evidence = Evidence()
    child = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    for sig in (signal.SIGTERM, signal.SIGINT):  # the kubelet's stop reaches the trainer
        signal.signal(sig, lambda number, _: child.send_signal(number))
    streams = ((child.stdout, sys.stdout.buffer), (child.stderr, sys.stderr.buffer))
    pumps = [
        threading.Thread(target=_pump, args=(source, sink, evidence), daemon=True)
        for source, sink in streams
    ]
    for pump in pumps:
        pump.start()
    code = exit_status(child.wait())
    for pump in pumps:
        pump.join(timeout=5)
    # Outside Kubernetes there may be no termination log: the evidence is in the output anyway.
    if code != 0:
        with contextlib.suppress(OSError):
            termination_log.write_text(evidence.summary(code, error_file))
    if owned:
        with contextlib.suppress(OSError):
            error_file.unlink(missing_ok=True)
            error_file.parent.rmdir()
    return code


def _flags(args: list[str]) -> tuple[dict[str, str], list[str]] | None:
    """The wrapper's flags before `--` and the command after it; None when malformed: an
    unknown flag, a missing value, a flag group given in part, or no command."""
    flags: dict[str, str] = {}
    while args and args[0] != "--":
        name, sep, value = args[0].partition("=")
        if name == SHARED_FLAG and not sep:
            flags[name], args = "", args[1:]
            continue
        if name not in (*NATIVE_FLAGS, *BRIDGE_FLAGS):
            return None
        if not sep:
            if len(args) < 2:
                return None
            value, args = args[1], args[2:]
        else:
            args = args[1:]
        flags[name] = value
    if not args or not args[1:]:
        return None
    for group in (NATIVE_FLAGS, BRIDGE_FLAGS):
        given = set(group) & set(flags)
        if given and given != set(group):
            return None
    if SHARED_FLAG in flags and NATIVE_FLAGS[0] not in flags:
        return None
    return flags, args[1:]


def run_native(
    layout: str,
    directory: Path,
    command: Sequence[str],
    termination_log: Path,
    *,
    shared: bool = False,
) -> int:
    """Restores the resume version, runs the trainer with the mirror beside it, then one last
    mirror pass."""
    from rljob.sdk import mirror  # the mirror and its dependencies load only here

    try:
        beside = mirror.launch(layout, directory, shared=shared)
    except Exception as exc:
        message = f"{getattr(exc, 'reason', type(exc).__name__)}: {exc}"
        sys.stderr.write(f"rljob-entrypoint: {message}\n")
        with contextlib.suppress(OSError):
            termination_log.write_text(message[:SUMMARY_LIMIT])
        return NATIVE_RESTORE_FAILED
    try:
        return run(command, termination_log)
    finally:
        if beside is not None:
            if not beside.stop(final_pass_timeout=mirror.final_pass_timeout()):
                sys.stderr.write("rljob-entrypoint: the last checkpoint mirror pass timed out\n")
            for error in beside.errors:
                sys.stderr.write(f"rljob-entrypoint: checkpoint mirror: {error}\n")


def _bridged(flags: dict[str, str]) -> Any:
    """The TensorBoard bridge the flags ask for, started; None without them. A framework the
    SDK has no key map for is refused before the trainer starts (ValueError)."""
    if BRIDGE_FLAGS[0] not in flags:
        return None
    from rljob.sdk.framework_keys import KEY_MAPS  # the bridge loads only here
    from rljob.sdk.metrics import RLMetrics
    from rljob.sdk.progress import ProgressExporter
    from rljob.sdk.tensorboard_bridge import DEFAULT_INTERVAL, TensorBoardBridge

    keys = KEY_MAPS.get(flags[BRIDGE_FLAGS[1]])
    if keys is None:
        known = ", ".join(sorted(KEY_MAPS))
        raise ValueError(f"--tensorboard-keys {flags[BRIDGE_FLAGS[1]]!r} is not one of {known}")
    progress = ProgressExporter()
    bridge = TensorBoardBridge(
        Path(flags[BRIDGE_FLAGS[0]]), keys, progress, RLMetrics(progress.registry)
    )
    try:
        interval = float(os.environ.get(BRIDGE_INTERVAL_ENV) or DEFAULT_INTERVAL)
    except ValueError:
        interval = DEFAULT_INTERVAL
    bridge.start(interval)
    return bridge


def _stop(bridge: Any) -> None:
    """The bridge's last read; never changes the trainer's exit status."""
    try:
        bridge.stop()
    except Exception as error:
        sys.stderr.write(f"rljob-entrypoint: the TensorBoard bridge's last read: {error!r}\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    log = Path(os.environ.get(TERMINATION_LOG_ENV, DEFAULT_TERMINATION_LOG))
    if args[:1] and args[0].startswith(("--checkpoint-", "--tensorboard-")):
        parsed = _flags(args)
        if parsed is None:
            sys.stderr.write(USAGE)
            return 2
        flags, command = parsed
        try:
            bridge = _bridged(flags)
        except ValueError as error:
            sys.stderr.write(f"rljob-entrypoint: {error}\n")
            return 2
        except Exception as error:  # metrics must never keep the trainer from running
            sys.stderr.write(f"rljob-entrypoint: no TensorBoard bridge: {error!r}\n")
            bridge = None
        try:
            if NATIVE_FLAGS[0] not in flags:
                return run(command, log)
            return run_native(
                flags["--checkpoint-layout"],
                Path(flags["--checkpoint-dir"]),
                command,
                log,
                shared=SHARED_FLAG in flags,
            )
        finally:
            if bridge is not None:
                _stop(bridge)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m rljob.sdk.entrypoint -- COMMAND [ARGS...]\n")
        return 2
    return run(args, log)


if __name__ == "__main__":
    sys.exit(main())
