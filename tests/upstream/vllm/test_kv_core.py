"""What vLLM's own KV cache manager and scheduler (the vLLM venv's 0.33.0) show on the page under a
short RL workload: bench/vllm_core drives the real Scheduler, KVCacheManager, BlockPool and
PrometheusStatLogger on CPU with the small "test" preset, once for every scenario below; each
check reads the traces (one row a simulated second) and the per-step logs it wrote."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.upstream.conftest import TOP
from tests.upstream.vllm.conftest import TINY_MODEL, VLLM_ENV

SCENARIOS = ("rl", "rl-no-reset", "leak", "prefix-collapse", "frozen")
SECONDS = 90
IDLE = ("train", "sync")
USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
Row = dict[str, Any]


@dataclass(frozen=True)
class Made:
    headers: dict[str, Row]
    rows: dict[str, list[Row]]  # one a scrape interval
    steps: dict[str, list[Row]]  # one an engine step

    def total_blocks(self, scenario: str) -> int:
        return int(self.headers[scenario]["engine"]["num_gpu_blocks"])

    def after_onset(self, scenario: str) -> list[Row]:
        onset = self.headers[scenario]["onset_seconds"]
        return [row for row in self.rows[scenario] if row["t"] >= onset]


@pytest.fixture(scope="module")
def made(vllm_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Made:
    out = tmp_path_factory.mktemp("kv_core")
    command = [str(vllm_venv / "bin" / "python"), "-m", "bench.vllm_core.drive"]
    command += ["--model-dir", str(TINY_MODEL), "--out", str(out), "--steps-dir", str(out)]
    command += ["--preset", "test", "--seconds", str(SECONDS), "--scenarios", ",".join(SCENARIOS)]
    env = {**os.environ, **VLLM_ENV, "PYTHONHASHSEED": "0", "PYTHONPATH": str(TOP)}
    done = subprocess.run(
        command, cwd=TOP, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    headers, rows, steps = {}, {}, {}
    for name in SCENARIOS:
        with gzip.open(out / f"{name}.jsonl.gz", "rt") as trace:
            head, *rows[name] = [json.loads(line) for line in trace]
        headers[name] = head
        steps[name] = [json.loads(line) for line in (out / f"{name}.steps.jsonl").open()]
    return Made(headers, rows, steps)


def blocks_are_conserved_at_every_step(made: Made, scenario: str) -> None:
    """Every block is free (cached or not), held by a live request, or leaked: the pool never
    loses one, and the page's usage is exactly the share not on the free queue."""
    for step in made.steps[scenario]:
        assert step["free"] + step["live"] + step["leaked"] + 1 == step["total"], step
        assert step["usage"] == pytest.approx(1 - step["free"] / (step["total"] - 1)), step
    if scenario != "leak":
        assert all(step["leaked"] == 0 for step in made.steps[scenario])


def an_idle_engine_shows_no_usage(made: Made, scenario: str) -> None:
    """Between batches every block is back on the free queue (its prefix cache kept or reset
    alike: cached blocks count as free), so the page reads 0 although the cache is full."""
    idle = [row for row in made.rows[scenario] if row["phase"] in IDLE]
    assert idle
    for row in idle:
        assert row[USAGE] == 0, row
        assert row["core:free_blocks"] == made.total_blocks(scenario) - 1, row


def _by_batch(steps: list[Row]) -> dict[int, list[Row]]:
    batches: dict[int, list[Row]] = defaultdict(list)
    for step in steps:
        batches[step["batch"]].append(step)
    return batches


def a_reset_costs_the_shared_prefix_once(made: Made, _scenario: str) -> None:
    """The same run with and without the weight syncs' prefix cache reset differs only in the
    first admission step after each sync, by exactly the shared chat-template prefix's full
    blocks: K samples of a prompt admitted together hit each other's blocks either way."""
    header = made.headers["rl"]
    block = header["engine"]["block_size"]
    shared = header["workload"]["system_tokens"] // block * block
    reset, kept = _by_batch(made.steps["rl"]), _by_batch(made.steps["rl-no-reset"])
    complete = sorted(set(reset) & set(kept))[1:-1]  # after the first sync, before the cut
    assert len(complete) >= 5
    for batch in complete:
        pairs = list(zip(reset[batch], kept[batch], strict=True))
        differing = [i for i, (a, b) in enumerate(pairs) if a["hits"] != b["hits"]]
        first_admission = next(i for i, (a, _) in enumerate(pairs) if a["queries"])
        assert differing == [first_admission], batch
        after, before = pairs[first_admission]
        assert after["reset"] and not before["reset"]
        assert before["hits"] - after["hits"] == shared
        assert [a["queries"] for a, _ in pairs] == [b["queries"] for _, b in pairs]


def leaked_blocks_keep_usage_high_with_few_running(made: Made, scenario: str) -> None:
    """A quarter of finished requests never free their blocks: nothing in the pool notices, an
    idle engine reads exactly the leaked share, the weight sync's prefix cache reset fails, and
    the cache fills until the waiting requests cannot be admitted at all."""
    total = made.total_blocks(scenario)
    later = made.after_onset(scenario)
    idle = [row for row in later if row["phase"] in IDLE and row["core:leaked_blocks"]]
    assert idle
    for row in idle:
        assert row[USAGE] == pytest.approx(row["core:leaked_blocks"] / (total - 1), abs=1e-6)
    events = [event for row in later for event in row.get("events", ())]
    assert "weight_sync:reset_prefix_cache_failed" in events
    stuck = [row for row in later if row[RUNNING] <= 2 and row["driver:in_flight"]]
    assert stuck
    assert max(row[USAGE] for row in stuck) >= 0.9


def a_collapsed_prefix_cache_hits_nothing(made: Made, scenario: str) -> None:
    """From the onset every lookup misses: queries keep growing with the same prompt mix, hits
    stop dead; before it the K samples of each prompt hit most of their prompt."""
    rows = made.rows[scenario]
    onset = made.after_onset(scenario)[0]
    before = [row for row in rows if row["t"] < onset["t"]][-1]
    assert before[HITS] / before[QUERIES] > 0.5
    last = rows[-1]
    assert last[QUERIES] > onset[QUERIES]
    assert last[HITS] == onset[HITS]


def a_frozen_page_keeps_every_value_with_requests_in_flight(made: Made, scenario: str) -> None:
    """Once the engine core stops stepping, the page repeats its last values (requests shown
    running, tokens not growing) while the client still waits for its requests."""
    rows = made.rows[scenario]
    start = next(i for i, row in enumerate(rows) if "frozen" in row.get("events", ()))
    frozen = rows[start:]
    assert len(frozen) >= 10
    page = [{k: v for k, v in row.items() if k.startswith("vllm:")} for row in frozen]
    assert all(values == page[0] for values in page)
    assert page[0][RUNNING] > 0
    assert all(row["driver:in_flight"] > 0 for row in frozen)


Check = Callable[[Made, str], None]
CHECKS: list[Any] = [
    *(
        pytest.param(blocks_are_conserved_at_every_step, s, id=f"{s}: blocks conserved")
        for s in SCENARIOS
    ),
    *(
        pytest.param(an_idle_engine_shows_no_usage, s, id=f"{s}: idle engine shows no usage")
        for s in ("rl", "rl-no-reset", "prefix-collapse")
    ),
    pytest.param(
        a_reset_costs_the_shared_prefix_once, "rl", id="rl: a reset costs the shared prefix once"
    ),
    pytest.param(
        leaked_blocks_keep_usage_high_with_few_running,
        "leak",
        id="leak: usage stays high with few running",
    ),
    pytest.param(
        a_collapsed_prefix_cache_hits_nothing, "prefix-collapse", id="prefix-collapse: no hits"
    ),
    pytest.param(
        a_frozen_page_keeps_every_value_with_requests_in_flight,
        "frozen",
        id="frozen: the page keeps every value with requests in flight",
    ),
]


@pytest.mark.parametrize(("check", "scenario"), CHECKS)
def test_the_real_core(made: Made, check: Check, scenario: str) -> None:
    check(made, scenario)
