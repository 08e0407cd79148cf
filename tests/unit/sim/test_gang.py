"""Rollout engines inside a simulated trainer pod, read the way the operator reads them: Ray's
metrics agent's names and WorkerId labels on the ray launcher's port (the operator's profile
of it is checked against real Ray in tests/upstream/test_ray_engine_metrics.py), vLLM's own
page on a port of their own; the pod's faults reach its engines."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim.gang import through_ray
from tests.unit.sim.test_app import NS, Bed, _free_port, make_pod

ASYNC = pytest.mark.asyncio(loop_scope="session")

VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 4.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1500.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 1.8e+09
"""


def test_through_ray_keeps_vllms_metrics_renamed_with_the_worker() -> None:
    samples = {
        (s.name, s.labels.get("WorkerId"), s.labels.get("engine")): s.value
        for f in text_string_to_metric_families(through_ray(VLLM_PAGE, "w1"))
        for s in f.samples
    }
    assert samples == {
        ("ray_vllm_num_requests_running", "w1", "0"): 4.0,
        ("ray_vllm_generation_tokens_total", "w1", "0"): 1500.0,
    }


def test_an_engine_that_stopped_stepping_shows_only_its_counters_through_ray() -> None:
    names = {
        s.name
        for f in text_string_to_metric_families(through_ray(VLLM_PAGE, "w1", gauges=False))
        for s in f.samples
    }
    assert names == {"ray_vllm_generation_tokens_total"}


def gang_pod(
    name: str, uid: str, ip: str, port_name: str, port: int, engines: int
) -> dict[str, Any]:
    pod = make_pod(name, "trainer", uid)
    pod["spec"]["containers"][0]["ports"] = [{"name": port_name, "containerPort": port}]
    pod["metadata"]["annotations"] = {
        "sim.rljob.io/profile": json.dumps({"colocated_engines": engines})
    }
    pod["status"]["podIP"] = ip
    return pod


async def scrape(ip: str, port: int) -> list[tuple[str, dict[str, str], float]]:
    def get() -> str:
        with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())

    text = await asyncio.to_thread(get)
    return [
        (s.name, dict(s.labels), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


@ASYNC
@pytest.mark.parametrize(
    ("port_name", "tokens", "told_apart_by"),
    [
        pytest.param(
            "ray-metrics", "ray_vllm_generation_tokens_total", "WorkerId", id="through-ray"
        ),
        pytest.param("engine-metrics", "vllm:generation_tokens_total", "engine", id="own-port"),
    ],
)
async def test_a_trainer_pod_serves_its_engines_where_it_declares_them(
    tmp_path: Path, port_name: str, tokens: str, told_apart_by: str
) -> None:
    bed = Bed(tmp_path)
    ip = "127.77.1.9"
    port = _free_port(ip)
    bed.pods = [gang_pod("t1", "u9", ip, port_name, port, engines=2)]
    await bed.app.start()
    try:
        await bed.app.sync()
        first = [s for s in await scrape(ip, port) if s[0] == tokens]
        assert len({labels[told_apart_by] for _, labels, _ in first}) == 2
        bed.clock.now += 10
        await bed.call("inject", "drift", namespace=NS, pod="t1", drop=0.5)
        bed.clock.now += 10
        later = [s for s in await scrape(ip, port) if s[0] == tokens]
        assert sum(v for *_, v in later) > sum(v for *_, v in first)
        engines = (await bed.call("workloads", pod="t1"))[0]["engines"]
        assert len(engines) == 2
        groups = json.loads(bed.config.targets_file.read_text())
        assert (
            sorted(g["targets"][0] for g in groups if g["labels"]["pod"] == "t1")[-1]
            == f"{ip}:{port}"
        )
    finally:
        await bed.app.close()


@ASYNC
async def test_a_trainer_without_colocated_engines_serves_no_engine_page(tmp_path: Path) -> None:
    bed = Bed(tmp_path)
    ip = "127.77.1.10"
    port = _free_port(ip)
    bed.pods = [gang_pod("t2", "u10", ip, "ray-metrics", port, engines=0)]
    await bed.app.start()
    try:
        await bed.app.sync()
        assert bed.app.workloads[f"{NS}/t2"].gang is None
    finally:
        await bed.app.close()
