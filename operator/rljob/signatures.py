"""Failure signatures in trainer output, shared by the in-workload entrypoint wrapper (which keeps
the lines that match) and the operator's termination classifier (which reads them).

Standard library only: the wrapper runs under the trainer image's Python, which has torch but not
the operator's dependencies. Reasons are FailureReason values as plain strings for the same
reason (rljob.api imports pydantic); a unit test checks each one is a FailureReason.

`primary` says whether a line shows the rank's own failure (an exception, a CUDA fault, a dead
link) or a symptom of waiting for a peer that failed (a collective timeout, a closed connection,
an aborted communicator). The waiting kind is never a root cause when a primary one is seen.

Every message is quoted from the upstream binaries of the pinned toolchain (tests/upstream:
torch 2.15.0's libtorch_cuda.so, libtorch_cpu.so (gloo) and libc10_cuda.so, NCCL 2.30.7's
libnccl.so, CUDA runtime 13.2's libcudart.so) unless its comment says otherwise;
tests/fixtures/nccl/README.md lists where each one comes from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# FailureReason values (rljob.vocabulary.enums), as strings.
NCCL_TIMEOUT = "NCCLTimeout"
NCCL_NETWORK_ERROR = "NCCLNetworkError"
CUDA_OUT_OF_MEMORY = "CUDAOutOfMemory"
CUDA_ERROR = "CUDAError"
GPU_HARDWARE_ERROR = "GPUHardwareError"
OOM_KILLED = "OOMKilled"
CONTAINER_FAILED = "ContainerFailed"
RAY_ACTOR_DIED = "RayActorDied"
RAY_NODE_DIED = "RayNodeDied"
RAY_OUT_OF_MEMORY = "RayOutOfMemory"
CONFIG_ERROR = "ConfigError"


@dataclass(frozen=True, slots=True)
class Signature:
    """One kind of failure line: its name for evidence, the reason it gives, and whether it is
    the rank's own failure (primary) or a symptom of waiting for a peer."""

    name: str
    pattern: re.Pattern[str]
    reason: str
    primary: bool


def _sig(name: str, pattern: str, reason: str, *, primary: bool) -> Signature:
    return Signature(name, re.compile(pattern), reason, primary)


# Most specific first: the first signature a line matches decides what the line means (a
# RuntimeError whose text is a CUDA fault is that fault, not a generic exception).
SIGNATURES: tuple[Signature, ...] = (
    # The entrypoint refused to restore a version saved by another node count in a layout that
    # does not reshard (rljob.sdk.layouts.WorldSizeMismatch; it exits before the trainer starts):
    # a restart would be refused the same way, so it is the spec's to change.
    _sig("world-size-mismatch", r"\bWorldSizeMismatch: ", CONFIG_ERROR, primary=True),
    # CUDA runtime (libcudart): cudaErrorECCUncorrectable; NVIDIA's Xid kernel messages
    # ("NVRM: Xid (PCI:...): 79, ...", docs.nvidia.com/deploy/xid-errors) when a tool echoes them.
    _sig("ecc", r"uncorrectable ECC error", GPU_HARDWARE_ERROR, primary=True),
    _sig("xid", r"\bXid\b[^0-9]{0,40}\d+", GPU_HARDWARE_ERROR, primary=True),
    _sig("fell-off-bus", r"GPU has fallen off the bus", GPU_HARDWARE_ERROR, primary=True),
    # c10/cuda/CUDACachingAllocator.cpp: "CUDA out of memory. Tried to allocate ..."; raised as
    # torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class).
    _sig(
        "cuda-oom",
        r"CUDA out of memory|torch(\.cuda)?\.OutOfMemoryError",
        CUDA_OUT_OF_MEMORY,
        primary=True,
    ),
    _sig(
        "cuda-error",
        r"an illegal memory access was encountered|device-side assert triggered"
        r"|unspecified launch failure|misaligned address|CUDA error: |unhandled cuda error",
        CUDA_ERROR,
        primary=True,
    ),
    # NCCL's ncclSystemError (socket, IB verbs) and its IB completion errors: the link under this
    # rank failed. ncclRemoteError, below, is the peer's side of the same story.
    _sig(
        "nccl-system-error",
        r"unhandled system error|ncclSystemError|NET/IB\s?: .{0,40}[Gg]ot completion"
        r"|NET/Socket : socket progress error",
        NCCL_NETWORK_ERROR,
        primary=True,
    ),
    # The heartbeat monitor ends a rank whose own watchdog is stuck (a CUDA/NCCL call hung).
    _sig(
        "nccl-watchdog-stuck",
        r"ProcessGroupNCCL('s)? watchdog (got stuck|hang)",
        NCCL_TIMEOUT,
        primary=True,
    ),
    # Ray's own failures as a driver sees them (ray 2.60.0 from PyPI). After the CUDA and NCCL
    # signatures: a Ray task error wrapping one shows that error's line too, which wins.
    # The memory monitor killing a task or actor: src/ray/raylet/node_manager.cc ("%d worker(s)
    # were killed due to the node running low on memory", "Memory on the node (IP: %s, ID: %s)
    # was %sGB used / %sGB limit"), src/ray/common/memory_monitor ("Workers (tasks / actors)
    # killed due to memory pressure (OOM)"); python/ray/exceptions.py OutOfMemoryError.
    _sig(
        "ray-oom",
        r"ray\.exceptions\.OutOfMemoryError|killed due to the node running low on memory"
        r"|killed due to memory pressure \(OOM\)|Memory on the node \(IP: ",
        RAY_OUT_OF_MEMORY,
        primary=True,
    ),
    # A node of the cluster died: src/ray/gcs/gcs_actor_manager.cc ("The actor died because its
    # node has died. Node Id: "), python/ray/exceptions.py NodeDiedError and
    # LocalRayletDiedError ("The task's local raylet died"), and a worker pod's own
    # `ray start --block` once its raylet or another Ray process exited (python/ray/scripts/
    # scripts.py: "Some Ray subprocesses exited unexpectedly:").
    _sig(
        "ray-node-died",
        r"The actor died because its node has died|ray\.exceptions\.(NodeDiedError"
        r"|LocalRayletDiedError)|The task's local raylet died"
        r"|Some Ray subprocesses exited unexpectedly",
        RAY_NODE_DIED,
        primary=True,
    ),
    # An actor's worker process died: python/ray/exceptions.py (ActorDiedError.BASE_ERROR_MSG,
    # WorkerCrashedError), src/ray/gcs/gcs_actor_manager.cc ("The actor is dead because its
    # worker process has died"). ActorUnavailableError ("The actor ... is unavailable: ...
    # Connection refused") is what a driver calling an actor on a node that just died raises
    # first, before the GCS marks the node dead (measured with ray 2.60.0 on loopback).
    _sig(
        "ray-actor-died",
        r"ray\.exceptions\.(ActorDiedError|ActorUnavailableError|RayActorError"
        r"|WorkerCrashedError)"
        r"|The actor died unexpectedly before finishing this task"
        r"|The actor is dead because its worker process has died"
        r"|The worker died unexpectedly while executing this task",
        RAY_ACTOR_DIED,
        primary=True,
    ),
    # The process's host memory: Python's MemoryError (not torch.OutOfMemoryError: \b).
    _sig("memory-error", r"\bMemoryError\b", OOM_KILLED, primary=True),
    # Waiting for a peer: collective timeouts and torn-down communicators.
    _sig(
        "nccl-watchdog-timeout",
        r"Watchdog caught collective operation timeout|NCCL operation timed out"
        r"|Exception \(either an error or timeout\) detected by watchdog"
        r"|failure detected by watchdog at work sequence id|Timeout at NCCL work"
        r"|ProcessGroupNCCL.{0,120}?(timed out|[Tt]imeout)",
        NCCL_TIMEOUT,
        primary=False,
    ),
    _sig(
        "nccl-aborted",
        r"NCCL communicator was aborted|Some NCCL operations have failed or timed out"
        r"|[Ww]atchdog thread terminated with exception|ncclRemoteError"
        r"|remote process exited or there was a network error|c10::DistBackendError",
        NCCL_TIMEOUT,
        primary=False,
    ),
    # gloo (libtorch_cpu): the CPU backend's collective timeout and a peer's closed socket.
    _sig(
        "gloo-timeout",
        r"Timed out waiting \d+ms for (recv|send) operation",
        NCCL_TIMEOUT,
        primary=False,
    ),
    _sig(
        "gloo-peer-gone",
        r"Connection closed by peer|Connection reset by peer|Broken pipe|ECONNRESET",
        NCCL_TIMEOUT,
        primary=False,
    ),
    # torchrun stopped from outside (the kubelet's SIGTERM when the Job controller ends the
    # gang): torch/distributed/elastic/multiprocessing/api.py, _terminate_process_handler,
    # "Process {pid} got signal: {sigval}" (torch 2.15.0). A victim, never a root cause.
    _sig(
        "stopped",
        r"SignalException: Process \d+ got signal: (1|2|15)\b",
        CONTAINER_FAILED,
        primary=False,
    ),
)

# The last line of a Python traceback, "module.Name: text" or a bare "SystemExit".
EXCEPTION_LINE = re.compile(
    r"^([A-Za-z_][\w]*\.)*[A-Z]\w*(Error|Exception|Exit|Interrupt|Failure)\b(:\s.*)?$"
)
TRACEBACK_START = "Traceback (most recent call last):"
PYTHON_EXCEPTION = Signature("python-exception", EXCEPTION_LINE, CONTAINER_FAILED, primary=True)

# Prefixes launchers put before a rank's line: torchrun's "[rank3]:" (and "[default0]:" from
# --tee), Ray's "(WorkerDict pid=123, ip=10.0.0.1)". The rank is taken from the first.
_PREFIX = re.compile(r"^(\[rank(?P<rank>\d+)\]:|\[default\d+\]:|\([\w.]+ pid=\d+[^)]*\)) ?")
# The rank named inside a message: ProcessGroupNCCL's "[Rank 3]" or "[PG ... Rank 3]", NCCL's
# "on rank 3".
_RANK_IN_TEXT = re.compile(r"\bRank (?P<rank>\d+)\]|\bon rank (?P<on>\d+)\b")

# torchrun's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors/
# __init__.py, ChildFailedError.format_msg, torch 2.15.0).
ROOT_CAUSE_HEADER = "Root Cause (first observed failure):"
FAILURES_HEADER = "Failures:"
ENTRY = re.compile(r"^\s*\[(\d+)\]:\s*$")
FIELD = re.compile(r"^\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)$")
BLOCK_END = re.compile(r"^\s*={20,}\s*$")
_RANK_FIELD = re.compile(r"^(\d+)(\s*\(local_rank:\s*(\d+)\))?")
_EXITCODE_FIELD = re.compile(r"^(-?\d+)")


_CODE_INDENT = ("    ", "\t")
# A traceback's frame and code lines, should their indentation have been lost on the way.
_CODE_STARTS = ('File "', "raise ", "^")


def strip_prefixes(line: str) -> tuple[str, int | None]:
    """The line without launcher prefixes (its indentation kept: a traceback's code lines are
    indented), and the rank its first `[rankN]:`, or else the message, names."""
    rank: int | None = None
    text = line
    for _ in range(4):  # a Ray worker's torchrun line carries two
        match = _PREFIX.match(text)
        if match is None:
            break
        if rank is None and match.group("rank") is not None:
            rank = int(match.group("rank"))
        text = text[match.end() :]
    if rank is None:
        named = _RANK_IN_TEXT.search(text)
        if named is not None:
            rank = int(named.group("rank") or named.group("on"))
    return text.rstrip(), rank


def match_signature(text: str) -> Signature | None:
    """The most specific signature a (prefix-stripped) line shows, a Python exception line
    included, or None. A traceback's code lines (indented 4 or more) are none: the line that
    raised a MemoryError is not one."""
    text, indented = text.strip(), text.startswith(_CODE_INDENT)
    if indented or text.startswith(_CODE_STARTS):
        return None
    for signature in SIGNATURES:
        if signature.pattern.search(text):
            return signature
    # torchrun's own ChildFailedError reports the workers' failures; it is none itself.
    if EXCEPTION_LINE.match(text) and "ChildFailedError" not in text:
        return PYTHON_EXCEPTION
    return None


@dataclass(frozen=True, slots=True)
class RankFailure:
    """One entry of torchrun's ChildFailedError summary: a worker that failed, when (to the
    second), how it ended (a negative exitcode is the signal), the exception it raised if its
    traceback shows one, and whether torchrun named it the root cause."""

    rank: int
    exitcode: int | None
    time: str = ""
    exception: str = ""
    root: bool = False

    @property
    def status(self) -> int | None:
        """The exit status a shell gives it: 128+N for signal N."""
        if self.exitcode is None:
            return None
        return 128 - self.exitcode if self.exitcode < 0 else self.exitcode


def block_line(text: str) -> bool:
    """Whether a (prefix-stripped) line is part of what torchrun_failures reads."""
    stripped = text.strip()
    if stripped in (ROOT_CAUSE_HEADER, FAILURES_HEADER):
        return True
    if ENTRY.match(stripped) or FIELD.match(stripped) or BLOCK_END.match(stripped):
        return True
    return match_signature(text) is not None


class _Entry:
    def __init__(self, root: bool) -> None:
        self.root = root
        self.fields: dict[str, str] = {}
        self.exception = ""

    def failure(self) -> RankFailure | None:
        rank = _RANK_FIELD.match(self.fields.get("rank", ""))
        if rank is None:
            return None
        code = _EXITCODE_FIELD.match(self.fields.get("exitcode", ""))
        exitcode = int(code.group(1)) if code else None
        time = self.fields.get("time", "")
        return RankFailure(int(rank.group(1)), exitcode, time, self.exception, self.root)


def torchrun_failures(lines: list[str]) -> list[RankFailure]:
    """The entries of torchrun's ChildFailedError summaries found in `lines` (torch 2.15.0,
    torch/distributed/elastic/multiprocessing/errors/__init__.py, ChildFailedError.format_msg:
    a "Failures:" section, then "Root Cause (first observed failure):", each entry "[i]:" with
    time, host, rank, exitcode, error_file and traceback fields; the traceback's exception
    line is the last line in the entry that matches a signature). The wrapper's summary keeps
    the same layout, so a raw log tail and a summary read alike."""
    entries: list[_Entry] = []
    section: bool | None = None  # in the root cause section, in Failures, or outside
    current: _Entry | None = None
    for line in lines:
        text, _ = strip_prefixes(line)
        stripped = text.strip()
        if stripped in (ROOT_CAUSE_HEADER, FAILURES_HEADER):
            section, current = stripped == ROOT_CAUSE_HEADER, None
        elif BLOCK_END.match(stripped):
            section, current = None, None
        elif section is not None and ENTRY.match(stripped):
            current = _Entry(root=section)
            entries.append(current)
        elif current is not None and (field := FIELD.match(stripped)) is not None:
            current.fields.setdefault(field.group(1), field.group(2).strip())
        elif current is not None and match_signature(text) is not None:
            current.exception = stripped
    failures = [entry.failure() for entry in entries]
    return [failure for failure in failures if failure is not None]
