"""The simulator application in-process, with a fake pod list and clock, on real loopback
listeners: attach, publish, serve, inject and clear, restart and detach semantics."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rljob.dev.sim.app import SimulatorApp
from rljob.dev.sim.client import SimClient, SimError
from rljob.dev.sim.simulation import SimConfig

# The fixture's server runs on the session loop (the project's fixture loop scope): so do the tests.
pytestmark = pytest.mark.asyncio(loop_scope="session")

NS = "team-a"
LABELS = {"app.kubernetes.io/managed-by": "rljob-operator", "rljob.io/job": "job1"}
T0 = 1_800_000_000.0


def make_pod(name: str, role: str, uid: str, restarts: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": extra.get("namespace", NS),
            "name": name,
            "uid": uid,
            "labels": {**LABELS, "rljob.io/role": role},
            "annotations": {"sim.rljob.io/profile": json.dumps({"noise": 0})}
            if role == "rollout"
            else {},
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running", "containerStatuses": [{"restartCount": restarts}]},
    }


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Bed:
    def __init__(self, tmp: Path) -> None:
        self.pods: list[dict[str, Any]] = [
            make_pod("r1", "rollout", "u1"),
            make_pod("r2", "rollout", "u2"),
            make_pod("t0", "trainer", "u3"),
        ]
        self.fail = False
        self.clock = Clock()
        self.config = SimConfig(
            control_port=0,
            targets_file=tmp / "targets.json",
        )
        self.app = SimulatorApp(self.config, self.list_pods, clock=self.clock)

    def list_pods(self) -> list[dict[str, Any]]:
        if self.fail:
            raise OSError("apiserver down")
        return [json.loads(json.dumps(p)) for p in self.pods]

    @property
    def client(self) -> SimClient:
        assert self.app.control is not None
        return SimClient(f"http://127.0.0.1:{self.app.control.port}")

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.client, method), *args, **kwargs)

    def port(self, pod: str) -> int:
        return self.app.workloads[f"{NS}/{pod}"].listener.port

    async def scrape(
        self, pod: str, port: int | None = None, host: str = "127.0.0.1"
    ) -> dict[str, float]:
        url = f"http://{host}:{port or self.port(pod)}/metrics"

        def get() -> str:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())

        text = await asyncio.to_thread(get)
        return {
            s.name + (f"/{s.labels['sleep_state']}" if "sleep_state" in s.labels else ""): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
        }


@pytest.fixture
async def bed(tmp_path: Path) -> AsyncIterator[Bed]:
    bed = Bed(tmp_path)
    await bed.app.start()
    await bed.app.sync()
    yield bed
    await bed.app.close()


TOKENS = "vllm:generation_tokens_total"


async def test_attaches_running_pods_and_publishes_targets(bed: Bed) -> None:
    assert sorted(bed.app.workloads) == [f"{NS}/r1", f"{NS}/r2", f"{NS}/t0"]
    groups = json.loads(bed.config.targets_file.read_text())
    assert [g["labels"]["pod"] for g in groups] == ["r1", "r2", "t0"]
    assert groups[0] == {
        "targets": [f"127.0.0.1:{bed.port('r1')}"],
        "labels": {"namespace": NS, "pod": "r1", "role": "rollout", "job": "job1"},
    }
    addresses = await bed.call("addresses")
    assert addresses[f"{NS}/t0"] == f"127.0.0.1:{bed.port('t0')}"
    assert await bed.call("targets") == groups
    listed = await bed.call("workloads", role="rollout")
    assert [w["pod"] for w in listed] == ["r1", "r2"]
    assert listed[0]["state"]["mode"] == "saturated"


async def test_scrapes_advance_with_the_clock(bed: Bed) -> None:
    first = await bed.scrape("r1")
    bed.clock.now += 10
    second = await bed.scrape("r1")
    assert second[TOKENS] - first[TOKENS] == pytest.approx(8000, abs=2)
    trainer = await bed.scrape("t0")
    assert trainer["rljob_trainer_heartbeat_timestamp_seconds"] == pytest.approx(T0 + 10)


async def test_drift_on_one_pod_only(bed: Bed) -> None:
    bed.clock.now += 10
    result = await bed.call("inject", "drift", namespace=NS, pod="r1", drop=0.3)
    assert result["matched"] == [f"{NS}/r1"]
    before = {pod: (await bed.scrape(pod))[TOKENS] for pod in ("r1", "r2")}
    bed.clock.now += 100
    after = {pod: (await bed.scrape(pod))[TOKENS] for pod in ("r1", "r2")}
    assert (after["r1"] - before["r1"]) / 100 == pytest.approx(560, abs=1)
    assert (after["r2"] - before["r2"]) / 100 == pytest.approx(800, abs=1)
    faults = await bed.call("faults")
    assert [f["kind"] for f in faults] == ["drift"]
    assert await bed.call("clear", id=result["id"]) == [result["id"]]
    bed.clock.now += 10
    assert (await bed.scrape("r1"))[TOKENS] - after["r1"] == pytest.approx(8000, abs=2)


async def test_job_wide_sleep_flattens_counters_and_sets_the_gauge(bed: Bed) -> None:
    result = await bed.call("inject", "sleep", namespace=NS, job="job1", role="rollout")
    assert sorted(result["matched"]) == [f"{NS}/r1", f"{NS}/r2"]
    before = await bed.scrape("r1")
    bed.clock.now += 30
    asleep = await bed.scrape("r1")
    assert asleep[TOKENS] == before[TOKENS]
    assert asleep["vllm:engine_sleep_state/awake"] == 0
    assert asleep["vllm:engine_sleep_state/weights_offloaded"] == 1
    await bed.call("inject", "sleep", namespace=NS, pod="r2", on=False)
    bed.clock.now += 10
    assert (await bed.scrape("r2"))["vllm:engine_sleep_state/awake"] == 1
    assert (await bed.scrape("r1"))["vllm:engine_sleep_state/awake"] == 0


async def test_restart_gives_a_fresh_engine_keeping_sticky_faults(bed: Bed) -> None:
    port = bed.port("r1")
    await bed.call("inject", "drift", namespace=NS, pod="r1", drop=0.5)
    await bed.call("inject", "load", namespace=NS, job="job1", role="rollout", waiting=0)
    bed.clock.now += 60
    assert (await bed.scrape("r1"))[TOKENS] > 0
    bed.pods[0]["status"]["containerStatuses"][0]["restartCount"] = 1
    await bed.app.sync()
    assert bed.port("r1") == port
    fresh = await bed.scrape("r1")
    assert fresh[TOKENS] == 0
    assert fresh["process_start_time_seconds"] == bed.clock.now
    bed.clock.now += 10
    fresh = await bed.scrape("r1")
    # The drift is gone with the old process; the load (the driver's doing) is not.
    assert fresh[TOKENS] == pytest.approx(10 * 800 * 0.4, abs=2)
    assert fresh["vllm:num_requests_waiting"] == 0
    assert [f["kind"] for f in await bed.call("faults")] == ["load"]
    events = [e["event"] for e in await bed.call("events")]
    assert "restarted" in events


async def test_gone_and_replaced_pods_detach(bed: Bed) -> None:
    old_port = bed.port("r2")
    bed.pods = [p for p in bed.pods if p["metadata"]["name"] != "r2"]
    bed.pods[0]["metadata"]["uid"] = "u1-new"
    old_r1 = bed.port("r1")
    await bed.app.sync()
    assert sorted(bed.app.workloads) == [f"{NS}/r1", f"{NS}/t0"]
    assert bed.app.workloads[f"{NS}/r1"].pod.uid == "u1-new"
    with pytest.raises(urllib.error.URLError):
        await bed.scrape("r2", port=old_port)
    if bed.port("r1") != old_r1:
        with pytest.raises(urllib.error.URLError):
            await bed.scrape("r1", port=old_r1)
    groups = json.loads(bed.config.targets_file.read_text())
    assert [g["labels"]["pod"] for g in groups] == ["r1", "t0"]


async def test_terminating_and_unlabelled_pods_are_not_served(bed: Bed) -> None:
    bed.pods[1]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    stranger = make_pod("x", "rollout", "u9")
    stranger["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone"
    bed.pods.append(stranger)
    await bed.app.sync()
    assert sorted(bed.app.workloads) == [f"{NS}/r1", f"{NS}/t0"]


async def test_a_failing_pod_list_keeps_the_workloads(bed: Bed) -> None:
    bed.fail = True
    assert not await bed.app.sync()
    assert len(bed.app.workloads) == 3
    health = await bed.call("health")
    assert health["last_poll_error"] == "OSError: apiserver down"
    with pytest.raises(SimError) as caught:
        await bed.call("sync")
    assert caught.value.status == 503
    bed.fail = False
    assert (await bed.call("sync"))["workloads"] == 3


async def test_hang_freezes_the_trainer(bed: Bed) -> None:
    bed.clock.now += 4
    await bed.call("inject", "hang", namespace=NS, job="job1", role="trainer")
    frozen = await bed.scrape("t0")
    bed.clock.now += 60
    assert await bed.scrape("t0") == frozen


async def test_unreachable_answers_503(bed: Bed) -> None:
    await bed.call("inject", "unreachable", namespace=NS, pod="r1")
    with pytest.raises(urllib.error.HTTPError) as caught:
        await bed.scrape("r1")
    assert caught.value.code == 503


async def test_control_api_errors(bed: Bed) -> None:
    with pytest.raises(SimError) as caught:
        await bed.call("inject", "drift", namespace=NS, pod="nope", drop=0.3)
    assert caught.value.status == 404
    with pytest.raises(SimError, match="is a trainer") as caught:
        await bed.call("inject", "sleep", namespace=NS, pod="t0")
    with pytest.raises(SimError, match="kind must be one of"):
        await bed.call("inject", "melt", namespace=NS, pod="r1")
    sticky = await bed.call("inject", "sleep", namespace=NS, job="later", role="rollout")
    assert sticky["matched"] == []


async def test_profile_overrides_rebase_matching_workloads(bed: Bed) -> None:
    result = await bed.call("set_profile", {"throughput": 1000}, namespace=NS, pod="r2")
    assert result["matched"] == [f"{NS}/r2"]
    before = await bed.scrape("r2")
    bed.clock.now += 10
    assert (await bed.scrape("r2"))[TOKENS] - before[TOKENS] == pytest.approx(10_000, abs=2)
    with pytest.raises(SimError, match="unknown EngineProfile field"):
        await bed.call("set_profile", {"speed": 2}, namespace=NS, pod="r2")


async def test_own_metrics(bed: Bed) -> None:
    def get() -> str:
        with urllib.request.urlopen(f"{bed.client.url}/metrics", timeout=5) as response:
            return str(response.read().decode())

    text = await asyncio.to_thread(get)
    assert 'rljob_sim_workloads{role="rollout"} 2.0' in text
    assert "process_resident_memory_bytes" in text


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _at(pod: dict[str, Any], ip: str, port: int) -> dict[str, Any]:
    pod["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    pod["status"]["podIP"] = ip
    return pod


async def test_a_pod_is_served_at_its_pod_ip_and_metrics_port(bed: Bed) -> None:
    """As on a cluster: what direct scraping resolves from the pod object answers there."""
    ip = "127.77.0.9"
    port = _free_port(ip)
    bed.pods.append(_at(make_pod("r3", "rollout", "u4"), ip, port))
    await bed.app.sync()
    assert (await bed.call("addresses"))[f"{NS}/r3"] == f"{ip}:{port}"
    assert TOKENS in await bed.scrape("r3", port, host=ip)


async def test_a_pod_ip_still_held_by_its_previous_pod_is_attached_once_free(bed: Bed) -> None:
    ip = "127.77.0.10"
    port = _free_port(ip)
    bed.pods.append(_at(make_pod("new", "rollout", "u6"), ip, port))
    squatter = socket.socket()
    squatter.bind((ip, port))  # the previous pod's listener, not closed yet
    squatter.listen()
    try:
        await bed.app.sync()
        assert f"{NS}/new" not in bed.app.workloads
    finally:
        squatter.close()
    await bed.app.sync()
    assert bed.app.workloads[f"{NS}/new"].listener.host == ip
