"""The operator's malloc arena limit: threads allocating at once share two glibc arenas, and a
limit the platform set in the environment is left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rljob.runtime.allocator import OPERATOR_ARENAS, hold_mmap_threshold, limit_malloc_arenas

# Eight threads malloc and free at once (ctypes drops the GIL in C calls, so they contend), then
# glibc's malloc_stats prints one "Arena N:" block per arena to stderr.
CONTENDED_THREADS = """
import ctypes, ctypes.util, sys, threading
from rljob.runtime.allocator import limit_malloc_arenas
if sys.argv[1] == "limited":
    assert limit_malloc_arenas({})
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
start = threading.Barrier(8)
def churn():
    start.wait()
    for _ in range(20000):
        libc.free(ctypes.c_void_p(libc.malloc(4096)))
threads = [threading.Thread(target=churn) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
libc.malloc_stats()
"""


def _arenas(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CONTENDED_THREADS, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@pytest.mark.parametrize(
    ("mode", "bounded"),
    [
        pytest.param("limited", True, id="the-operator's-limit:-two-arenas"),
        pytest.param("glibc-default", False, id="without-it:-one-per-contending-thread"),
    ],
)
def test_contending_threads_share_the_operators_arenas(mode: str, bounded: bool) -> None:
    arenas = _arenas(mode)
    assert (arenas <= OPERATOR_ARENAS) is bounded, f"{arenas} arenas"


def test_a_limit_the_platform_set_is_left_alone() -> None:
    assert limit_malloc_arenas({"MALLOC_ARENA_MAX": "4"}) is False


# A 1 MiB block is freed and another allocated; mallinfo2's hblks counts the blocks mapped on
# their own (the interpreter's too, so the second block's change is printed): glibc's default
# raised its threshold past 1 MiB at the first free.
REALLOCATED_BLOCK = """
import ctypes, ctypes.util, sys
from rljob.runtime.allocator import hold_mmap_threshold
if sys.argv[1] == "held":
    assert hold_mmap_threshold({})
class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.mallinfo2.restype = Mallinfo2
libc.free(ctypes.c_void_p(libc.malloc(1 << 20)))
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)
print(libc.mallinfo2().hblks - before)
"""


@pytest.mark.parametrize(
    ("mode", "mapped"),
    [
        pytest.param("held", 1, id="the-operator's-threshold:-a-big-block-stays-mapped"),
        pytest.param("glibc-default", 0, id="without-it:-the-second-comes-from-the-heap"),
    ],
)
def test_a_big_block_freed_and_allocated_again(mode: str, mapped: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", REALLOCATED_BLOCK, mode],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert int(done.stdout.split()[-1]) == mapped


def test_a_threshold_the_platform_set_is_left_alone() -> None:
    assert hold_mmap_threshold({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False
