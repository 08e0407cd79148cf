"""The operator's malloc arena limit: threads allocating at once share two glibc arenas, and a
limit the platform set in the environment is left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rljob.runtime.allocator import OPERATOR_ARENAS, limit_malloc_arenas

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
