"""The operator process's allocator setting: at most two glibc malloc arenas.

glibc gives each thread that allocates while another holds an arena its own arena, up to eight per
core. The operator's threads (the S3 executor, kopf's sync handlers, the metrics server) are short
and few, and each arena they leave keeps its freed fragments resident; two arenas bound that part
of the RSS (bench/analysis.md measures it). A MALLOC_ARENA_MAX the platform set wins."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Mapping

ARENA_MAX_ENV = "MALLOC_ARENA_MAX"
M_ARENA_MAX = -8  # glibc's malloc.h
OPERATOR_ARENAS = 2


def limit_malloc_arenas(environ: Mapping[str, str] = os.environ) -> bool:
    """Sets glibc's arena limit for this process unless the environment sets one; False where
    the C library is not glibc or refuses (the setting is an optimisation, never a requirement)."""
    if environ.get(ARENA_MAX_ENV):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(OPERATOR_ARENAS)))
