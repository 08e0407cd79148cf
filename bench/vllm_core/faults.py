"""Failure shapes injected into the real core of this process only: instance attributes of this
engine's KVCacheManager and BlockPool are wrapped; no vLLM file is changed. The frozen page and
the host-memory growth are the driver's (drive.py): an engine that stops stepping, a column."""

from __future__ import annotations

import random
from typing import Any

from vllm.v1.request import RequestStatus

from bench.vllm_core.core import Core

FINISHED_NORMALLY = (RequestStatus.FINISHED_LENGTH_CAPPED, RequestStatus.FINISHED_STOPPED)


def leak_finished_blocks(core: Core, fraction: float, rng: random.Random) -> list[str]:
    """Some finished requests' KV blocks are never returned to the pool: the scheduler frees a
    finished request through KVCacheManager.free (Scheduler._free_request_blocks), which here
    keeps the blocks of `fraction` of them. Preempted and aborted requests free as usual.
    Returns the list the leaked request ids are appended to."""
    manager = core.scheduler.kv_cache_manager
    real_free = manager.free
    leaked: list[str] = []

    def free(request: Any) -> None:
        if request.status in FINISHED_NORMALLY and rng.random() < fraction:
            leaked.append(request.request_id)
            return
        real_free(request)

    manager.free = free
    return leaked


def collapse_prefix_cache(core: Core) -> None:
    """The prefix cache stops reusing: every lookup of a cached block hash misses
    (BlockPool.get_cached_block, which find_longest_cache_hit asks per block), while blocks are
    still hashed and cached as before and the workload does not change."""
    pool = core.scheduler.kv_cache_manager.block_pool

    def miss(*_args: Any, **_kwargs: Any) -> None:
        return None

    pool.get_cached_block = miss
