"""The operator process's allocator settings: at most two glibc malloc arenas, and the heap's
free pages handed back to the kernel after each health round.

glibc gives each thread that allocates while another holds an arena its own arena, up to eight per
core. The operator's threads (the S3 executor, kopf's sync handlers, the metrics server) are short
and few, and each arena they leave keeps its freed fragments resident; two arenas bound that part
of the RSS (bench/analysis.md measures it). A MALLOC_ARENA_MAX the platform set wins.

A health round decodes every job's Prometheus answers (megabytes at hundreds of jobs) and frees
them; glibc keeps freed pages between live chunks resident until malloc_trim asks it to give them
back, so the round's peak would otherwise stay in the RSS."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Mapping

ARENA_MAX_ENV = "MALLOC_ARENA_MAX"
M_ARENA_MAX = -8  # glibc's malloc.h
OPERATOR_ARENAS = 2


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has mallopt and malloc_trim), else None."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        library = ctypes.CDLL(name)
    except OSError:
        return None
    return library if hasattr(library, "mallopt") and hasattr(library, "malloc_trim") else None


def limit_malloc_arenas(environ: Mapping[str, str] = os.environ) -> bool:
    """Sets glibc's arena limit for this process unless the environment sets one; False where
    the C library is not glibc or refuses (the setting is an optimisation, never a requirement)."""
    if environ.get(ARENA_MAX_ENV):
        return False
    library = _glibc()
    if library is None:
        return False
    return bool(library.mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(OPERATOR_ARENAS)))


def release_free_heap() -> bool:
    """Hands the heap's free pages back to the kernel; True when glibc released any."""
    library = _glibc()
    return library is not None and bool(library.malloc_trim(ctypes.c_size_t(0)))
