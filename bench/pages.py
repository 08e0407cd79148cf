"""A realistic vLLM /metrics page, and a small HTTP server that serves it on every path.

The simulator's engine page carries only the series the detectors read (~55 lines); a real vLLM
server adds a dozen latency and size histograms, info gauges, HTTP instrumentation and process
metrics, which is what makes a full parse cost milliseconds (shared/reference/
workload-signals.md lists them). The page here is the simulator's plus those families with
vLLM's bucket bounds, so a direct scrape is measured on a page of realistic size.

`python -m bench.pages --port P` serves it until terminated (a separate process, so the server
does not share the measured client's core).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools

from rljob.dev.sim.exposition import Page, labels_text
from rljob.dev.sim.models import EngineModel
from rljob.dev.sim.profiles import EngineProfile

_LATENCY = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
            7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_TOKEN_LATENCY = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
            120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_TOKENS = tuple(float(m * 10**e) for e in range(5) for m in (1, 2, 5))
_HTTP = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_HISTOGRAMS = {
    "vllm:iteration_tokens_total": tuple(float(2**k) for k in range(15)),
    "vllm:time_to_first_token_seconds": _LATENCY,
    "vllm:inter_token_latency_seconds": _TOKEN_LATENCY,
    "vllm:time_per_output_token_seconds": _TOKEN_LATENCY,
    "vllm:request_time_per_output_token_seconds": _TOKEN_LATENCY,
    "vllm:e2e_request_latency_seconds": _REQUEST,
    "vllm:request_queue_time_seconds": _REQUEST,
    "vllm:request_inference_time_seconds": _REQUEST,
    "vllm:request_prefill_time_seconds": _REQUEST,
    "vllm:request_decode_time_seconds": _REQUEST,
    "vllm:request_prompt_tokens": _TOKENS,
    "vllm:request_generation_tokens": _TOKENS,
    "vllm:request_params_n": _TOKENS,
    "vllm:request_params_max_tokens": _TOKENS,
    "vllm:request_max_num_generation_tokens": _TOKENS,
}
_HANDLERS = ("/v1/completions", "/v1/chat/completions", "/health", "/metrics", "/v1/models",
             "/tokenize", "/detokenize", "/sleep", "/wake_up", "/collective_rpc")  # fmt: skip
_PROCESS = ("process_virtual_memory_bytes", "process_resident_memory_bytes",
            "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds",
            "process_max_fds", "python_gc_objects_collected_total",
            "python_gc_collections_total")  # fmt: skip
_CACHE_CONFIG = (
    ("block_size", "16"),
    ("cache_dtype", "auto"),
    ("enable_prefix_caching", "True"),
    ("gpu_memory_utilization", "0.9"),
    ("num_gpu_blocks", "27000"),
    ("engine", "0"),
)
MODEL = 'model_name="Qwen/Qwen2.5-7B-Instruct",engine="0"'


def _buckets(bounds: tuple[float, ...], total: float) -> list[tuple[float, float]]:
    # Cumulative counts that grow towards the last bound, like a real latency distribution.
    counts = [round(total * (index + 1) / (len(bounds) + 1)) for index in range(len(bounds))]
    return [*zip(bounds, map(float, counts), strict=True), (float("inf"), total)]


def _histograms(page: Page) -> None:
    for name, bounds in _HISTOGRAMS.items():
        page.histogram(
            name,
            f"Histogram of {name}.",
            labels="{" + MODEL + "}",
            buckets=_buckets(bounds, 12345.0),
            total=98765.4,
            created=1.7e9,
        )
    for handler, method in itertools.product(_HANDLERS, ("GET", "POST")):
        labels = labels_text((("handler", handler), ("method", method)))
        page.histogram(
            "http_request_duration_seconds",
            "Latency of HTTP requests.",
            labels=labels,
            buckets=_buckets(_HTTP, 4321.0),
            total=123.4,
            created=1.7e9,
        )
    statuses = [
        (labels_text((("handler", h), ("method", "POST"), ("status", s))), 100.0)
        for h, s in itertools.product(_HANDLERS, ("2xx", "4xx", "5xx"))
    ]
    page.counter("http_requests", "Total number of requests.", statuses, 1.7e9)


def _info_and_process(page: Page) -> None:
    config = labels_text(_CACHE_CONFIG)
    page.gauge(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig.", [(config, 1.0)]
    )
    for name in _PROCESS:
        page.gauge(name, f"{name}.", 12345.0)


def vllm_page() -> str:
    """One engine's page: the simulator's detector series plus the rest of a vLLM page."""
    engine = EngineModel(EngineProfile(), "bench", 0.0)
    engine.advance(600.0)
    page = Page()
    _histograms(page)
    _info_and_process(page)
    return engine.render() + page.text()


async def _serve(port: int) -> None:
    from aiohttp import web

    body = vllm_page().encode()

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/{tail:.*}", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(_serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
