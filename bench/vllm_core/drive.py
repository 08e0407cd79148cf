"""`python -m bench.vllm_core.drive --model-dir DIR --out DIR [--scenarios a,b] [--preset bench]
[--seconds N] [--seed S] [--steps-dir DIR]`, run by the vLLM venv's python (VLLM_TARGET_DEVICE=cpu
HF_HUB_OFFLINE=1, PYTHONHASHSEED=0 for identical traces): one trace of vLLM's metrics page per
scenario (scenarios.py), made by vLLM's own scheduler and KV cache manager (core.py) under the RL
workload (workload.py), timed by the cost model (cost.py), faults injected by faults.py.

A trace is gzipped JSON lines: a header, then one row per scrape interval of simulated time with
the page's values as a scrape at that instant reads them (the page changes only when the engine
steps, as vLLM's does), the core's block accounting, the driver's view and the simulated memory
column. --steps-dir also writes one line per engine step (the tests' invariants). One JSON
summary line per scenario goes to stdout.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import vllm

from bench.vllm_core.core import Blocks, Core, SimClock, Stepped, page, page_names, use_sim_clock
from bench.vllm_core.cost import CostModel
from bench.vllm_core.faults import collapse_prefix_cache, leak_finished_blocks
from bench.vllm_core.scenarios import PRESETS, SCENARIOS, Preset, Scenario
from bench.vllm_core.workload import Group, HostMemory, Prompts

COLUMNS = {
    "t": "simulated seconds since the engine started",
    "phase": "the driver's phase: generate, train (engine idle), sync (paused for a weight "
    "sync), sleep, frozen",
    "vllm:*": "the page, sampled from vLLM's own PrometheusStatLogger registry",
    "core:free_blocks": "BlockPool free queue (cached blocks included): not on the page",
    "core:live_blocks": "distinct blocks held by requests the scheduler knows: not on the page",
    "core:leaked_blocks": "distinct blocks held by requests the scheduler forgot (leak fault)",
    "driver:in_flight": "requests submitted and not finished, as the RL client sees them",
    "sim:container_memory_working_set_bytes": "SIMULATED container working set (workload.py "
    "HostMemory), not from vLLM",
    "events": "what the driver did since the previous row",
}


class Run:
    """One scenario: the RL loop around the real core, on the simulated clock."""

    def __init__(
        self, scenario: Scenario, preset: Preset, seconds: float, seed: int, core: Core
    ) -> None:
        self.scenario, self.preset, self.core = scenario, preset, core
        self.clock = core.clock
        self.workload = preset.workload
        self.end = seconds
        self.onset = scenario.onset_seconds(seconds)
        self.cost, self.memory = CostModel(), HostMemory()
        self.prompts, self.rng = Prompts(seed), random.Random(seed + 1)
        self.rows: list[dict[str, object]] = []
        self.events: list[str] = []
        self.phase = "generate"
        self.in_flight: dict[str, int] = {}
        self.group_left: dict[int, int] = {}
        self.scrapes = 0
        self.steps = self.batches = 0
        self.injected = self.armed_freeze = self.frozen = self.asleep = False
        self.finished_since_onset = 0
        self.leaked: list[str] = []
        self.steps_out: IO[str] | None = None

    @property
    def done(self) -> bool:
        return self.clock.now >= self.end

    def go(self) -> None:
        if self.scenario.loop == "inflight":
            self._inflight()
        else:
            self._sync(colocated=self.scenario.loop == "colocated")

    # The clock: scrapes happen as time passes; the page holds what the last step recorded.
    def advance(self, seconds: float) -> None:
        target = min(self.clock.now + seconds, self.end)
        while (at := self.scrapes * self.preset.scrape_seconds) <= target:
            self.clock.now = at
            self._maybe_onset()
            self.rows.append(self._row())
            self.scrapes += 1
        self.clock.now = target

    def _next_scrape(self) -> float:
        return self.scrapes * self.preset.scrape_seconds

    # The RL loops.
    def _sync(self, colocated: bool) -> None:
        while not self.done:
            for _ in range(self.workload.prompts_per_step):
                self._submit(self.prompts.group(self.workload))
            self.batches += 1
            self.events.append("batch")
            self._generate()
            if self.done:
                return
            if colocated:
                self._sleep()
            else:
                self.phase = "train"
                self.advance(self.workload.train_seconds)
                self._weight_sync("abort")

    def _generate(self) -> None:
        self.phase = "generate"
        while not self.done and self.core.has_requests():
            if self.frozen:
                self.phase = "frozen"
                self.advance(self.end - self.clock.now)
                return
            self.step()

    def _inflight(self) -> None:
        next_sync = self.workload.train_seconds
        while not self.done:
            while len(self.group_left) < self.workload.prompts_per_step:
                self._submit(self.prompts.group(self.workload))
            if self.clock.now >= next_sync:
                self._weight_sync("keep")
                next_sync = self.clock.now + self.workload.train_seconds
                continue
            self.phase = "generate"
            self.step()

    def _weight_sync(self, mode: str) -> None:
        # Generation paused around the sync; the pause resets the prefix cache (vLLM's
        # pause_generation(mode, clear_cache)), the weights load, generation resumes.
        reset = self.core.pause(mode, clear_cache=self.scenario.clear_cache)
        self.events.append("weight_sync" if reset else "weight_sync:reset_prefix_cache_failed")
        self.phase = "sync"
        self.advance(self.workload.sync_seconds)
        self.core.resume()

    def _sleep(self) -> None:
        reset = self.core.sleep(1)
        self.events.append("sleep" if reset else "sleep:reset_prefix_cache_failed")
        self.phase, self.asleep = "sleep", True
        self.advance(self.workload.train_seconds + self.workload.sync_seconds)
        self.core.wake_up()
        self.asleep = False
        self.events.append("wake_up")

    def _submit(self, group: Group) -> None:
        for k, length in enumerate(group.response_lengths):
            rid = f"p{group.prompt_id}s{k}"
            self.core.add(rid, group.prompt, length, seed=group.prompt_id * 64 + k)
            self.in_flight[rid] = group.prompt_id
        self.group_left[group.prompt_id] = len(group.response_lengths)

    # One engine step.
    def step(self) -> None:
        self._maybe_onset()
        scheduled = self.core.schedule()
        if scheduled.scheduled_tokens:
            seconds = self.cost.step_seconds(scheduled.context_tokens, scheduled.scheduled_tokens)
        else:
            # Nothing fits and nothing runs: no state changes until time passes (the engine
            # would spin publishing the same page), so skip to the next scrape.
            seconds = max(self._next_scrape() - self.clock.now, 1e-3)
        self.advance(seconds)
        stepped = self.core.finish(scheduled)
        self.steps += 1
        self._finished(stepped.finished)
        self._log_step(stepped)
        if self.armed_freeze and stepped.stats is not None and stepped.stats.num_running_reqs:
            self.frozen, self.armed_freeze = True, False
            self.events.append("frozen")

    def _finished(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            group = self.in_flight.pop(rid, None)
            self.core.seeds.pop(rid, None)
            if group is None:
                continue
            if self.injected and self.scenario.fault == "memory-growth":
                self.finished_since_onset += 1
            self.group_left[group] -= 1
            if not self.group_left[group]:
                del self.group_left[group]

    def _maybe_onset(self) -> None:
        if self.injected or self.onset is None or self.clock.now < self.onset:
            return
        self.injected = True
        fault = self.scenario.fault
        if fault == "leak":
            self.leaked = leak_finished_blocks(self.core, self.preset.leak_fraction, self.rng)
        elif fault == "prefix-collapse":
            collapse_prefix_cache(self.core)
        elif fault == "frozen":
            self.armed_freeze = True
        if self.scenario.shift:
            self.workload = self.workload.shifted()
        self.events.append(f"onset:{fault or 'load-shift'}")

    # What is recorded.
    def _row(self) -> dict[str, object]:
        blocks = self.core.blocks()
        row: dict[str, object] = {"t": round(self.clock.now, 3), "phase": self.phase}
        row.update({name: _rounded(value) for name, value in page().items()})
        row.update(
            {
                "core:free_blocks": blocks.free,
                "core:live_blocks": blocks.live,
                "core:leaked_blocks": blocks.leaked,
                "driver:in_flight": len(self.in_flight),
                "sim:container_memory_working_set_bytes": self._memory(),
            }
        )
        if self.events:
            row["events"], self.events = self.events, []
        return row

    def _memory(self) -> int:
        m = self.memory
        total = m.base_bytes + m.per_in_flight_bytes * len(self.in_flight)
        total += m.offloaded_weight_bytes if self.asleep else 0
        return total + m.leak_bytes_per_request * self.finished_since_onset

    def _log_step(self, stepped: Stepped) -> None:
        if self.steps_out is None or stepped.stats is None:
            return
        stats, blocks = stepped.stats, self.core.blocks()
        line = {
            "t": round(self.clock.now, 6),
            "phase": self.phase,
            "batch": self.batches,
            "running": stats.num_running_reqs,
            "waiting": stats.num_waiting_reqs + stats.num_skipped_waiting_reqs,
            "usage": stats.kv_cache_usage,
            "queries": stats.prefix_cache_stats.queries,
            "hits": stats.prefix_cache_stats.hits,
            "reset": stats.prefix_cache_stats.reset,
            **_blocks(blocks),
            "injected": self.injected,
        }
        self.steps_out.write(json.dumps(line) + "\n")


def _blocks(blocks: Blocks) -> dict[str, int]:
    return {
        "total": blocks.total,
        "free": blocks.free,
        "live": blocks.live,
        "leaked": blocks.leaked,
    }


def _rounded(value: float) -> float | int:
    return int(value) if value.is_integer() else round(value, 6)


def header(run: Run, seed: int) -> dict[str, Any]:
    scenario, preset = run.scenario, run.preset
    return {
        "kind": "header",
        "vllm": {"version": vllm.__version__, "commit": _commit()},
        "seed": seed,
        "scenario": asdict(scenario),
        "onset_seconds": run.onset,
        "seconds": run.end,
        "scrape_seconds": preset.scrape_seconds,
        "steps": run.steps,
        "engine": asdict(preset.shape),
        "workload": preset.workload.header(),
        "workload_after_shift": preset.workload.shifted().header() if scenario.shift else None,
        "leak_fraction": preset.leak_fraction if scenario.fault == "leak" else None,
        "cost_model": run.cost.header(),
        "host_memory": run.memory.header(),
        "columns": COLUMNS,
        "page_names": page_names(),
        "real": "vLLM's Scheduler, KVCacheManager, BlockPool, OutputProcessor, "
        "StatLoggerManager/PrometheusStatLogger (bench/vllm_core/core.py)",
        "simulated": "the step time (cost_model), the workload, the sim: column, the faults' "
        "mechanics (bench/vllm_core/faults.py, drive.py)",
    }


def _commit() -> str | None:
    from vllm import _version

    commit = getattr(_version, "commit_id", None)
    return str(commit) if commit else None


def write(path: Path, head: dict[str, Any], rows: list[dict[str, object]]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(head, sort_keys=True)] + [json.dumps(row) for row in rows]
    with path.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        out.write(("\n".join(lines) + "\n").encode())
    return path.stat().st_size


def run_scenario(args: argparse.Namespace, name: str) -> dict[str, object]:
    preset = PRESETS[args.preset]
    seconds = args.seconds or preset.seconds
    wall, cpu = time.perf_counter(), time.process_time()
    clock = SimClock()
    use_sim_clock(clock)
    run = Run(
        SCENARIOS[name], preset, seconds, args.seed, Core(args.model_dir, preset.shape, clock)
    )
    steps_file = Path(args.steps_dir) / f"{name}.steps.jsonl" if args.steps_dir else None
    if steps_file is not None:
        steps_file.parent.mkdir(parents=True, exist_ok=True)
        run.steps_out = steps_file.open("w")
    try:
        run.go()
    finally:
        if run.steps_out is not None:
            run.steps_out.close()
    path = Path(args.out) / f"{name}.jsonl.gz"
    size = write(path, header(run, args.seed), run.rows)
    return {
        "scenario": name,
        "file": str(path),
        "bytes": size,
        "rows": len(run.rows),
        "steps": run.steps,
        "wall_seconds": round(time.perf_counter() - wall, 2),
        "cpu_seconds": round(time.process_time() - cpu, 2),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model-dir", required=True, help="a folder with a config.json")
    parser.add_argument("--out", required=True, help="the folder the traces go to")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--preset", choices=sorted(PRESETS), default="bench")
    parser.add_argument("--seconds", type=float, help="simulated seconds (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps-dir", help="also write one line per engine step here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in args.scenarios.split(","):
        print(json.dumps(run_scenario(args, name)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
