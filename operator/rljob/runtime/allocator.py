"""The operator process's allocator settings: at most two glibc malloc arenas, and a fixed
threshold above which a block gets a mapping of its own.

glibc gives each thread that allocates while another holds an arena its own arena, up to eight per
core. The operator's threads (the S3 executor, kopf's sync handlers, the metrics server) are short
and few, and each arena they leave keeps its freed fragments resident; two arenas bound that part
of the RSS (bench/analysis.md measures it).

glibc maps blocks above 128 KiB on their own, but each mapped block freed raises that threshold
to its size (up to 32 MiB): after the first Prometheus answer of a few hundred kilobytes, every
later one is carved from the heap, where the holes it leaves between long-lived objects stay
resident. A fixed threshold keeps such blocks mapped and returned whole when freed.

A setting the platform made in the environment wins."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

ARENA_MAX_ENV = "MALLOC_ARENA_MAX"
MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"
M_ARENA_MAX = -8  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
OPERATOR_ARENAS = 2
OPERATOR_MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, held


def limit_malloc_arenas(environ: Mapping[str, str] = os.environ) -> bool:
    """Sets glibc's arena limit for this process unless the environment sets one; False where
    the C library is not glibc or refuses (the setting is an optimisation, never a requirement)."""
    return not environ.get(ARENA_MAX_ENV) and _mallopt(M_ARENA_MAX, OPERATOR_ARENAS)


def hold_mmap_threshold(environ: Mapping[str, str] = os.environ) -> bool:
    """Fixes glibc's mmap threshold (which also stops its dynamic raise) unless the environment
    sets one; False where the C library is not glibc or refuses."""
    return not environ.get(MMAP_THRESHOLD_ENV) and _mallopt(
        M_MMAP_THRESHOLD, OPERATOR_MMAP_THRESHOLD
    )


def _mallopt(option: int, value: int) -> bool:
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(ctypes.c_int(option), ctypes.c_int(value)))
