"""What the entrypoint wrapper keeps from a whole output stream: the first failure lines of each
kind (prefixed or not), torchrun's failures without their tracebacks, the error file; bounded in
memory and in the 4 KiB termination message however long the stream and its lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rljob.sdk.entrypoint import ERROR_FILE_ENV, run
from rljob.sdk.evidence import (
    MAX_LINE_BYTES,
    MAX_PRIMARY,
    MAX_WAITING,
    SUMMARY_LIMIT,
    Evidence,
    read_error_file,
)
from rljob.signatures import RankFailure, torchrun_failures

GLOO_TIMEOUT = (
    "[rank1]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
    "unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete"
)
WATCHDOG = (
    "[rank3]:[E1124 06:31:35.1 ProcessGroupNCCL.cpp:688] [Rank 3] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=41, OpType=ALLREDUCE) ran for 600000 milliseconds"
)
# torch 2.15.0's ChildFailedError layout, as captured from tests/upstream's sigkill run.
TORCHRUN_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/work/train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-24_06:31:40
  host      : localhost
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 21855)
  error_file: /tmp/torchelastic_x/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
    File "/work/train.py", line 51, in main
      dist.all_reduce(weights)
  RuntimeError: [../gloo/transport/tcp/pair.cc:561] Connection closed by peer [127.0.0.1]:42693
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-24_06:31:39
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : -9 (pid: 21857)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 21857
============================================================"""


def by_rank(failure: RankFailure) -> int:
    return failure.rank


def fed(*lines: str) -> Evidence:
    evidence = Evidence()
    for line in lines:
        evidence.feed(line + "\n")
    return evidence


KEEP_CASES = [
    pytest.param(
        ["step 1", GLOO_TIMEOUT, "step 2"], [], [GLOO_TIMEOUT], id="rank-prefixed-gloo-timeout"
    ),
    pytest.param(
        ["(WorkerDict pid=812, ip=10.0.0.3) [rank5]: torch.OutOfMemoryError: CUDA out of memory."],
        ["(WorkerDict pid=812, ip=10.0.0.3) [rank5]: torch.OutOfMemoryError: CUDA out of memory."],
        [],
        id="ray-and-rank-prefixed-cuda-oom",
    ),
    pytest.param(
        [
            "[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "train.py", line 30, in inject',
            '[rank3]:     raise MemoryError("no buffer")',
            "[rank3]: MemoryError: no buffer",
        ],
        ["[rank3]: MemoryError: no buffer"],
        [],
        id="exception-line-not-the-code-that-raised-it",
    ),
    pytest.param([WATCHDOG, WATCHDOG, WATCHDOG], [], [WATCHDOG], id="repeats-kept-once"),
    pytest.param(["loss 0.3", "Error rate 2%", "all good"], [], [], id="no-signature"),
]


@pytest.mark.parametrize(("lines", "primary", "waiting"), KEEP_CASES)
def test_the_first_failure_lines_are_kept_by_kind(
    lines: list[str], primary: list[str], waiting: list[str]
) -> None:
    evidence = fed(*lines)

    assert (evidence.primary, evidence.waiting) == (primary, waiting)


def test_a_flood_of_timeouts_does_not_push_out_the_error_behind_them() -> None:
    timeouts = [WATCHDOG.replace("SeqNum=41", f"SeqNum={n}") for n in range(1000)]

    evidence = fed(*timeouts, "[rank5]: ValueError: bad reward shape")

    assert len(evidence.waiting) == MAX_WAITING
    assert evidence.primary == ["[rank5]: ValueError: bad reward shape"]


def test_kept_lines_are_bounded_in_number_and_size() -> None:
    evidence = fed(*[f"[rank{n}]: ValueError: {n} {'x' * 100_000}" for n in range(100)])

    assert len(evidence.primary) == MAX_PRIMARY
    assert all(len(line.encode()) <= MAX_LINE_BYTES for line in evidence.primary)


def test_a_long_line_is_kept_with_the_signature_it_matched() -> None:
    line = f"[rank2]: torch.distributed.DistBackendError: {'context ' * 200}{WATCHDOG[8:]}"

    evidence = fed(line)

    (kept,) = evidence.waiting
    assert len(kept.encode()) <= MAX_LINE_BYTES
    assert "Watchdog caught collective operation timeout" in kept


def test_torchruns_failures_are_kept_without_tracebacks_and_read_back_alike() -> None:
    evidence = fed(*TORCHRUN_SUMMARY.splitlines())

    summary = evidence.summary(1)

    assert "dist.all_reduce" not in summary
    original = torchrun_failures(TORCHRUN_SUMMARY.splitlines())
    read_back = torchrun_failures(summary.splitlines())
    assert sorted(read_back, key=by_rank) == sorted(original, key=by_rank)
    assert original == [
        RankFailure(
            2,
            1,
            "2026-11-24_06:31:40",
            "RuntimeError: [../gloo/transport/tcp/pair.cc:561] Connection closed by peer "
            "[127.0.0.1]:42693",
        ),
        RankFailure(3, -9, "2026-11-24_06:31:39", "", root=True),
    ]
    assert summary.endswith("exit code 1")


def test_the_summary_fits_the_termination_message_and_keeps_its_end() -> None:
    lines = [f"[rank{n}]: ValueError: {'y' * 600}" for n in range(20)]
    evidence = fed(*lines, *TORCHRUN_SUMMARY.splitlines())

    summary = evidence.summary(137)

    assert len(summary.encode()) <= SUMMARY_LIMIT
    assert "rank      : 3" in summary
    assert summary.endswith("exit code 137")


ERROR_FILES = [
    pytest.param(
        {"message": {"message": "RuntimeError: loss is NaN", "extraInfo": {"timestamp": "1"}}},
        "RuntimeError: loss is NaN",
        id="written-by-record",
    ),
    pytest.param({"message": "a plain\nmessage"}, "a plain message", id="plain-message"),
    pytest.param({"errorCode": 1}, None, id="no-message"),
    pytest.param(["not", "a", "dict"], None, id="not-an-object"),
]


@pytest.mark.parametrize(("content", "expected"), ERROR_FILES)
def test_the_error_file_message_is_read(
    tmp_path: Path, content: object, expected: str | None
) -> None:
    path = tmp_path / "error.json"
    path.write_text(json.dumps(content))

    assert read_error_file(path) == expected


def test_a_missing_or_broken_error_file_is_none(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{not json")

    assert read_error_file(tmp_path / "missing.json") is None
    assert read_error_file(tmp_path / "broken.json") is None


RECORDING_CHILD = """
import json, os, sys
path = os.environ["TORCHELASTIC_ERROR_FILE"]
print(path)
with open(path, "w") as f:
    json.dump({"message": {"message": "ValueError: from the error file"}}, f)
sys.exit(1)
"""


def test_the_wrapper_gives_the_child_an_error_file_it_owns(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ERROR_FILE_ENV, raising=False)
    log = tmp_path / "termination-log"

    assert run([sys.executable, "-c", RECORDING_CHILD], log) == 1

    error_file = Path(capfd.readouterr().out.strip())
    assert "error file: ValueError: from the error file" in log.read_text()
    assert not error_file.exists() and not error_file.parent.exists()


def test_the_wrapper_keeps_an_error_file_the_user_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "mine.json"
    monkeypatch.setenv(ERROR_FILE_ENV, str(mine))

    assert run([sys.executable, "-c", RECORDING_CHILD], tmp_path / "log") == 1

    assert mine.exists()


def test_a_huge_line_passes_through_whole_and_the_summary_stays_bounded(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = (
        "import sys; sys.stderr.write('[rank0]: ValueError: ' + 'z' * 5_000_000 + '\\n'); "
        "sys.exit(2)"
    )
    log = tmp_path / "termination-log"

    assert run([sys.executable, "-c", script], log) == 2

    assert len(capfd.readouterr().err) == len("[rank0]: ValueError: ") + 5_000_000 + 1
    assert len(log.read_bytes()) <= SUMMARY_LIMIT
    assert "[rank0]: ValueError: zzz" in log.read_text()


def test_the_wrapper_imports_nothing_beyond_the_standard_library(tmp_path: Path) -> None:
    """The trainer image has torch, not pydantic or boto3: the wrapper must start there."""
    probe = (
        "import sys, rljob.sdk.entrypoint; "
        "heavy = {'pydantic', 'boto3', 'prometheus_client', 'rljob.api', 'rljob.health'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "operator")}
    shown = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert shown.stdout.strip() == "[]", shown.stderr
