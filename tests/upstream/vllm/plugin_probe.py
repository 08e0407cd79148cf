"""Run by tests/upstream/vllm/test_vllm_plugin.py with the vLLM venv's python: what vLLM's own
loader makes of the SDK's stat-logger plugin, as AsyncLLM does it, printed as one JSON line.

AsyncLLM (vllm 0.33.0, vllm/v1/engine/async_llm.py) extends its stat loggers with
load_stat_logger_plugin_factories() and builds StatLoggerManager with enable_default_loggers
set to the framework's log_stats; the engine client then calls record() per engine step. An
AsyncLLM itself cannot start here (no vllm._C on CPU), so this drives that same layer with a
VllmConfig built from a local config.json (HF_HUB_OFFLINE=1)."""

from __future__ import annotations

import json
import socket
import sys
import urllib.request

from vllm.config import ModelConfig, VllmConfig
from vllm.v1.metrics.loggers import StatLoggerManager, load_stat_logger_plugin_factories
from vllm.v1.metrics.stats import IterationStats, SchedulerStats


def main(model_dir: str, base_port: int) -> None:
    factories = load_stat_logger_plugin_factories()
    config = VllmConfig(model_config=ModelConfig(model=model_dir, skip_tokenizer_init=True))
    # Another engine process of the pod holds the first page port already.
    holder = socket.socket()
    holder.bind(("127.0.0.1", base_port))
    holder.listen()
    manager = StatLoggerManager(
        config, engine_idxs=[0], custom_stat_loggers=factories, enable_default_loggers=False
    )
    iteration = IterationStats()
    iteration.num_generation_tokens = 7
    manager.record(
        SchedulerStats(num_running_reqs=3, num_waiting_reqs=1, kv_cache_usage=0.4), iteration
    )
    plugin = next(
        logger.per_engine_stat_loggers[0]
        for logger in manager.stat_loggers
        if hasattr(logger, "per_engine_stat_loggers")
    )
    from prometheus_client import REGISTRY

    own = sorted(
        sample.name
        for family in REGISTRY.collect()
        if family.name.startswith("vllm:")
        for sample in family.samples
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{plugin.port}/metrics", timeout=10) as page:
        text = page.read().decode()
    print(
        json.dumps(
            {
                "factories": [f"{f.__module__}.{f.__qualname__}" for f in factories],
                "loggers": [type(logger).__name__ for logger in manager.stat_loggers],
                "port": plugin.port,
                "own_samples": own,
                "page": text,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
