"""The SDK's vLLM stat-logger plugin under the real vLLM 0.33.0: vLLM's own loader finds it from
the installed wheel's entry point, building the loggers as AsyncLLM does adds vLLM's own
PrometheusStatLogger beside it although the framework turned statistics off, and the page it
serves carries every name that logger records, on the first page port no other engine process
of the pod holds, each sample with its page label."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

from rljob.health.profiles.workloads import VLLM
from rljob.sdk.engine_page import PAGE_LABEL, PAGES_ENV, PORT_ENV
from tests.unit.monitoring import vllm_series
from tests.upstream.vllm.conftest import TINY_MODEL, VLLM_ENV

PROBE = Path(__file__).with_name("plugin_probe.py")
_SAMPLE = re.compile(r"^(?P<name>[^\s{#]+)(?:\{(?P<labels>[^}]*)\})?\s")


def _free_port_pair() -> int:
    """A port whose next one is free too (the probe holds the first, the plugin takes the next)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        with socket.socket() as following:
            try:
                following.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two free ports in a row on loopback")


def _probe(vllm_venv: Path, sdk: Path) -> dict[str, object]:
    port = _free_port_pair()
    env = {
        **os.environ,
        **VLLM_ENV,
        "PYTHONPATH": str(sdk),
        PORT_ENV: str(port),
        PAGES_ENV: "2",
    }
    done = subprocess.run(
        [str(vllm_venv / "bin" / "python"), str(PROBE), str(TINY_MODEL), str(port)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    found["base"] = port
    return found


def test_vllms_loader_finds_the_plugin_and_its_page_carries_vllms_own_names(
    vllm_venv: Path, sdk_installed: Path
) -> None:
    found = _probe(vllm_venv, sdk_installed)

    assert found["factories"] == ["rljob.sdk.vllm_plugin.EnginePage"]
    assert found["loggers"] == ["PerEngineStatLoggerAdapter", "PrometheusStatLogger"]
    assert found["port"] == int(str(found["base"])) + 1  # the first page port was held
    page = [m for line in str(found["page"]).splitlines() if (m := _SAMPLE.match(line))]
    on_page = {m["name"] for m in page if m["name"].startswith("vllm:")}
    own = found["own_samples"]
    assert isinstance(own, list)
    assert on_page == set(own)
    assert all(f'{PAGE_LABEL}="1"' in (m["labels"] or "") for m in page)
    read_by_detectors = vllm_series() | {
        VLLM.token_latency_seconds_total,
        VLLM.finished_generation_tokens_total,
    }
    assert read_by_detectors <= on_page, read_by_detectors - on_page
