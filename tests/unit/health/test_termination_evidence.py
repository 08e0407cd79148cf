"""The classifier reads a trainer container's evidence (the wrapper's summary or a raw log tail)
for the first primary failure: its reason, rank and exit status. A rank that waited for a peer
(a collective timeout, a closed connection) is never the root cause while another shows its own
failure, and torchrun's root cause is overruled when it is such a victim."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rljob.health import ContainerTermination, classify_termination
from rljob.signatures import SIGNATURES, match_signature
from rljob.vocabulary.enums import FailureReason

R = FailureReason


def rank_lines(rank: int, *lines: str) -> str:
    return "\n".join(f"[rank{rank}]: {line}" for line in lines)


def entry(index: int, rank: int, exitcode: str, time: str, *extra: str) -> str:
    return "\n".join(
        [
            f"[{index}]:",
            f"  time      : 2026-11-24_06:31:{time}",
            "  host      : trainer-a1-0",
            f"  rank      : {rank} (local_rank: {rank % 4})",
            f"  exitcode  : {exitcode}",
            *extra,
        ]
    )


def torchrun(failures: list[str], root: str) -> str:
    return "\n".join(
        [
            "=" * 60,
            "train.py FAILED",
            "-" * 60,
            "Failures:",
            *(failures or ["  <NO_OTHER_FAILURES>"]),
            "-" * 60,
            "Root Cause (first observed failure):",
            root,
            "=" * 60,
        ]
    )


WATCHDOG = (
    "[E1124 06:31:35.426 ProcessGroupNCCL.cpp:688] [Rank {rank}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
)
CLOSED = "RuntimeError: [../gloo/transport/tcp/pair.cc:561] Connection closed by peer [::1]:5"


@dataclass(frozen=True)
class Expect:
    reason: FailureReason
    rank: int | None
    exit_code: int | None
    primary: bool = True


CASES = [
    pytest.param(
        "\n".join(
            [
                rank_lines(5, "Traceback (most recent call last):", "ValueError: reward shape"),
                *(rank_lines(r, WATCHDOG.format(rank=r)) for r in (0, 1, 2, 3, 4, 6, 7)),
            ]
        ),
        1,
        Expect(R.CONTAINER_FAILED, 5, 1),
        id="user-error-behind-watchdog-timeouts-is-that-error",
    ),
    pytest.param(
        "\n".join(rank_lines(r, WATCHDOG.format(rank=r)) for r in range(4)),
        1,
        Expect(R.NCCL_TIMEOUT, 0, 1, primary=False),
        id="only-timeouts-is-waiting",
    ),
    pytest.param(
        "(WorkerDict pid=4100, ip=10.0.0.7) [rank6]: torch.OutOfMemoryError: CUDA out of "
        "memory. Tried to allocate 2.00 GiB. GPU 6 has a total capacity of 79.10 GiB",
        1,
        Expect(R.CUDA_OUT_OF_MEMORY, 6, 1),
        id="ray-prefixed-cuda-oom",
    ),
    pytest.param(
        rank_lines(2, "RuntimeError: CUDA error: an illegal memory access was encountered"),
        1,
        Expect(R.CUDA_ERROR, 2, 1),
        id="illegal-memory-access-is-software",
    ),
    pytest.param(
        rank_lines(
            4,
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        ),
        1,
        Expect(R.GPU_HARDWARE_ERROR, 4, 1),
        id="ecc-behind-the-illegal-access-is-hardware",
    ),
    pytest.param(
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        1,
        Expect(R.GPU_HARDWARE_ERROR, None, 1),
        id="xid",
    ),
    pytest.param(
        rank_lines(
            3,
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.30.7",
        ),
        1,
        Expect(R.NCCL_NETWORK_ERROR, 3, 1),
        id="nccl-unhandled-system-error",
    ),
    pytest.param(
        rank_lines(
            1,
            "[PG ID 0 PG GUID 0(default_pg) Rank 1] ProcessGroupNCCL's watchdog got stuck for "
            "480 seconds without making progress in monitoring enqueued collectives.",
        ),
        134,
        Expect(R.NCCL_TIMEOUT, 1, 134),
        id="own-watchdog-stuck-is-primary",
    ),
    pytest.param(
        "\n".join(
            [
                rank_lines(3, "Traceback (most recent call last):", '    raise MemoryError("x")'),
                rank_lines(3, "MemoryError: x"),
            ]
        ),
        1,
        Expect(R.OOM_KILLED, 3, 1),
        id="host-memoryerror",
    ),
    pytest.param(
        torchrun(
            [entry(0, 2, "93 (pid: 22241)", "51", "  traceback : <N/A>")],
            entry(1, 3, "-15 (pid: 22243)  (SIGTERM)", "50", f"  {CLOSED}"),
        ),
        1,
        Expect(R.CONTAINER_FAILED, 2, 93),
        id="torchruns-root-is-a-victim-the-exit-93-is-the-cause",
    ),
    pytest.param(
        torchrun([], entry(0, 3, "-9 (pid: 21857)  (SIGKILL)", "39")),
        1,
        Expect(R.CONTAINER_FAILED, 3, 137),
        id="sigkilled-rank-is-128-plus-9",
    ),
    pytest.param(
        torchrun(
            [entry(1, 0, "1 (pid: 8)", "40", f"  {CLOSED}")],
            entry(0, 1, "-11 (pid: 9)  (SIGSEGV)", "40"),
        ),
        1,
        Expect(R.CONTAINER_FAILED, 1, 139),
        id="segfaulted-rank-before-the-peer-that-lost-it",
    ),
    pytest.param(
        torchrun(
            [entry(1, 3, "-15 (pid: 9)  (SIGTERM)", "48")],
            entry(
                0,
                2,
                "1 (pid: 8)",
                "47",
                "  RuntimeError: Timed out waiting 3000ms for recv operation",
            ),
        )
        + "\n"
        + rank_lines(2, "RuntimeError: Timed out waiting 3000ms for recv operation to complete"),
        1,
        Expect(R.NCCL_TIMEOUT, 2, 1, primary=False),
        id="gloo-timeout-and-a-stopped-rank-is-waiting",
    ),
    pytest.param(
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 77 got signal: 15",
        1,
        Expect(R.CONTAINER_FAILED, None, 1, primary=False),
        id="torchrun-stopped-from-outside-is-a-victim",
    ),
]


@pytest.mark.parametrize(("message", "exit_code", "expected"), CASES)
def test_the_first_primary_failure_is_the_verdict(
    message: str, exit_code: int, expected: Expect
) -> None:
    termination = ContainerTermination(exit_code, "Error", message, container="trainer")

    classified = classify_termination(termination)

    assert classified is not None
    got = (classified.reason, classified.rank, classified.exit_code, classified.primary)
    assert got == (expected.reason, expected.rank, expected.exit_code, expected.primary)


def test_the_kubelets_oom_kill_needs_no_message() -> None:
    classified = classify_termination(ContainerTermination(137, "OOMKilled", None))

    assert classified is not None
    assert (classified.reason, classified.exit_code, classified.primary) == (
        R.OOM_KILLED,
        137,
        True,
    )


def test_every_signature_reason_is_a_failure_reason() -> None:
    assert {FailureReason(signature.reason) for signature in SIGNATURES} <= set(FailureReason)


CODE_LINES = [
    '    raise MemoryError("no buffer")',
    '  File "train.py", line 3, in <module>',
    "        torch.cuda.OutOfMemoryError(...)",
]


@pytest.mark.parametrize("line", CODE_LINES)
def test_a_tracebacks_code_lines_match_nothing(line: str) -> None:
    assert match_signature(line) is None
