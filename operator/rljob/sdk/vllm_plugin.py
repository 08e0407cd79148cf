"""The rljob SDK's vLLM stat-logger plugin: entry point `rljob` in the `vllm.stat_logger_plugins`
group (operator/sdk/pyproject.toml). Imported only by vLLM's loader, in an image with vLLM.

Where it loads (vllm 0.33.0): `load_stat_logger_plugin_factories` (vllm/v1/metrics/loggers.py)
is called by AsyncLLM's constructor (vllm/v1/engine/async_llm.py), in the process that runs the
engine client: the Ray actor of verl's vLLMHttpServer, OpenRLHF's LLMRayActor and NeMo-RL's
async worker. Not in the engine core or the TP workers (vllm/plugins/__init__.py: "loaded in
process0 only"), so one page per engine process. The synchronous `vllm.LLM` (LLMEngine) does not
load this group. A plugin logger turns statistics on even where the framework passed
`disable_log_stats=True`, and vLLM then adds its own PrometheusStatLogger beside it; this logger
records nothing itself and serves that registry (rljob.sdk.engine_page).
"""

from __future__ import annotations

from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase

from rljob.sdk import engine_page


class EnginePage(StatLoggerBase):
    """Serves the process's vLLM metrics on an engine page port (once per process: vLLM builds
    one per engine index)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.port = engine_page.serve()

    def record(self, *args: Any, **kwargs: Any) -> None:
        """vLLM's own PrometheusStatLogger records; the page only serves it."""

    def log_engine_initialized(self) -> None:
        """Nothing to log: the page says it."""


__all__ = ["EnginePage"]
