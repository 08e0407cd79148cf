"""rljob.sdk.process_memory: the resident memory of a process and its descendants, read from this
machine's /proc with real child processes; a page serves it under its page label; a /proc that
cannot be read gives no sample and no exception."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rljob.sdk import engine_page, process_memory
from rljob.sdk.engine_page import PAGE_LABEL, PAGES_ENV, PORT_ENV, serve
from rljob.sdk.process_memory import (
    METRIC,
    ProcessTreeMemory,
    parents,
    resident_bytes,
    tree,
    tree_resident_bytes,
)

MB = 1_000_000
# Writes 200 MiB (every page touched, so resident), says so, then waits to be killed.
ALLOCATE = (
    "import sys, time; held = bytes(range(256)) * (200 * 4096); "
    "sys.stdout.write('ready\\n'); sys.stdout.flush(); time.sleep(120)"
)
# Starts a grandchild that allocates, and allocates nothing itself.
VIA_CHILD = (
    "import subprocess, sys, time; "
    f"p = subprocess.Popen([sys.executable, '-c', {ALLOCATE!r}], stdout=subprocess.PIPE); "
    "sys.stdout.write(p.stdout.readline().decode()); sys.stdout.flush(); time.sleep(120)"
)

pytestmark = pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs Linux /proc")


Start = Callable[[str], "subprocess.Popen[bytes]"]


@pytest.fixture
def child() -> Iterator[Start]:
    """Starts `python -c code` and waits for its "ready"; kills it and its children after."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(code: str) -> subprocess.Popen[bytes]:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        processes.append(process)
        assert process.stdout is not None
        assert process.stdout.readline() == b"ready\n"
        return process

    yield start
    for process in processes:
        for pid in tree(process.pid, parents())[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(ALLOCATE, id="child-allocates-200-mib"),
        pytest.param(VIA_CHILD, id="grandchild-allocates-200-mib"),
    ],
)
def test_the_tree_sums_its_descendants(child: Start, code: str) -> None:
    before = tree_resident_bytes()
    assert before is not None and before > 0
    started = child(code)
    after = tree_resident_bytes()
    assert after is not None
    assert after - before >= 150 * MB
    assert started.pid in tree(os.getpid(), parents())


def test_a_process_alone_reads_its_own_resident_set() -> None:
    own = resident_bytes(os.getpid())
    assert own is not None and own > 10 * MB  # a Python interpreter with pytest loaded
    assert resident_bytes(2**22 + 7) is None  # no such process


@pytest.mark.parametrize(
    ("stat", "parent"),
    [
        pytest.param("12 (python3) S 7 12 12 0", 7, id="plain"),
        pytest.param("12 (a) b (c) R 99 12 12 0", 99, id="parentheses-in-the-name"),
        pytest.param("12 (x", None, id="truncated"),
    ],
)
def test_the_parent_comes_after_the_last_parenthesis(stat: str, parent: int | None) -> None:
    assert process_memory._parent(stat) == parent


def test_a_fake_proc_with_garbage_reads_what_it_can(tmp_path: Path) -> None:
    for pid, stat, statm in (
        (1, "1 (init) S 0", "100 10 0"),
        (5, "5 (engine) S 1", "100 20 0"),
        (6, "6 (core) S 5", "100 30 0"),
        (7, "7 (worker) S 6", "garbage"),
        (8, "8 (elsewhere) S 1", "100 40 0"),
    ):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat)
        (tmp_path / str(pid) / "statm").write_text(statm)
    (tmp_path / "self").mkdir()
    page = process_memory.PAGE_SIZE
    assert tree(5, parents(tmp_path)) == [5, 6, 7]
    assert tree_resident_bytes(5, tmp_path) == (20 + 30) * page  # the unreadable one left out
    assert tree_resident_bytes(9, tmp_path) is None


def test_a_proc_that_cannot_be_read_gives_no_sample(tmp_path: Path) -> None:
    missing = ProcessTreeMemory(root=1, proc=tmp_path / "absent")
    assert list(missing.collect()) == []
    (family,) = ProcessTreeMemory().collect()
    assert family.name == METRIC and family.samples[0].value > 0


def test_the_engine_page_serves_it_under_its_page_label(monkeypatch: pytest.MonkeyPatch) -> None:
    engine_page.reset_for_tests()
    monkeypatch.setenv(PORT_ENV, "9410")
    monkeypatch.setenv(PAGES_ENV, "2")
    started: list[CollectorRegistry] = []
    try:
        port = serve(CollectorRegistry(), start=lambda port, registry: started.append(registry))
    finally:
        engine_page.reset_for_tests()
    assert port == 9410
    samples = [s for family in started[0].collect() for s in family.samples]
    assert [(s.name, s.labels) for s in samples] == [(METRIC, {PAGE_LABEL: "0"})]
    assert samples[0].value > 10 * MB
