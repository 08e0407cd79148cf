"""`python -m bench goodput [--smoke] [--output bench/GOODPUT.md]`: the goodput benchmark on the
test bed (issue 33, items 2 and 3).

One bed in a temporary folder: the control plane (test profile), the S3 server, the simulator
(checkpoints on, its NCCL watchdog at the scaled timeout) scraped every second by Prometheus, the
operator watching the operator arms' namespaces, JobSet's controller manager. The calibration
run and the three arms (arms.py) start together, each in its namespace on its own node pool,
and the same failure trace (trace.py) is injected into the three arms at the same instants
(inject.py). The bench samples the simulator's trainers every 0.5 s, the operator's restart
ledgers and Warnings and the JobSet's restarts, then measures (measure.py) and writes the page
(report.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.goodput.arms import FAILURE_ARMS, Arm
from bench.goodput.bed import GoodputBed, create_job, create_pools, dump_final
from bench.goodput.inject import Injector
from bench.goodput.measure import (
    ArmRecord,
    event_from_json,
    event_json,
    record_from_json,
    record_json,
)
from bench.goodput.recorder import Recorder
from bench.goodput.trace import HOUR, FailureClass, FailureEvent, failure_trace
from bench.goodput.world import World

REPO = Path(__file__).resolve().parents[2]
SAMPLE_SECONDS = 0.5
STATUS_SECONDS = 1.0
# The smoke: one failure of each class, one a slot of this many seconds, at factor 60 (the
# drift needs onset-to-threshold + window, 90 s scaled, to be repaired within the run).
SMOKE_FACTOR = 60.0
SMOKE_SLOT_S = 70.0
FULL_FACTOR = 30.0
FULL_HOURS = 1.0
# Stress on the trace's rates (stated in the page): the hardware classes' cited rates give ~0.03
# trainer failures an hour at factor 30 on 64 GPUs, the assumed engine and verifier ones ~2.
FULL_STRESS_HARDWARE = 200.0
FULL_STRESS_ASSUMED = 5.0
# The full run's seed: the first of 1-10 whose hour holds six of the seven classes at these
# stresses (none holds all seven; seed 1 draws no trainer failure at all).
FULL_SEED = 5
HARDWARE = frozenset(
    {
        FailureClass.GPU_HARDWARE,
        FailureClass.NCCL_TIMEOUT,
        FailureClass.NODE_LOST,
        FailureClass.HUNG_RANK,
    }
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass(frozen=True)
class Settings:
    factor: float
    hours: float
    seed: int
    smoke: bool
    stress_hardware: float = 1.0
    stress_assumed: float = 1.0
    keep_run_dir: bool = False

    @property
    def run_s(self) -> float:
        return self.hours * HOUR

    def world(self) -> World:
        return World(self.factor, window_stress=1.0 if self.smoke else self.stress_assumed)

    def stress(self, failure_class: FailureClass) -> float:
        """How many times its cited rate a class arrives at in this run's Poisson trace."""
        if self.smoke:
            return 1.0
        return self.stress_hardware if failure_class in HARDWARE else self.stress_assumed

    def trace(self, world: World) -> list[FailureEvent]:
        """The trace of the run, in seconds from the jobs' creation: one failure of each class
        (smoke), else Poisson arrivals with the hardware classes' and the assumed classes'
        rates multiplied by their stress factors."""
        scaled = world.durations
        if self.smoke:
            return failure_trace(world.size, scaled, self.hours, self.seed, one_per_class=True)
        events: list[FailureEvent] = []
        for stress, classes in (
            (self.stress_hardware, HARDWARE),
            (self.stress_assumed, frozenset(FailureClass) - HARDWARE),
        ):
            stressed = dataclasses.replace(scaled, gpu_mtbf_s=scaled.gpu_mtbf_s / stress)
            drawn = failure_trace(world.size, stressed, self.hours, self.seed)
            events += [e for e in drawn if e.failure_class in classes]
        return sorted(events)


def _run_arms(
    bed: GoodputBed, settings: Settings, world: World, trace: list[FailureEvent]
) -> dict[Arm, ArmRecord]:
    api = bed.api
    assert bed.sim is not None and bed.prometheus is not None
    sim = bed.sim.client()
    log("node pools")
    create_pools(api, world)
    records: dict[Arm, ArmRecord] = {}
    for arm in Arm:
        created = create_job(api, arm, world, bed.prometheus.url)
        records[arm] = ArmRecord(arm.value, created)
    t0 = min(r.created for r in records.values())
    log(f"jobs created; {len(trace)} failures over {settings.run_s:.0f} s")
    recorder = Recorder(api, sim, records)
    injector = Injector(api, sim, world)
    pending = list(trace)
    next_sample = next_status = 0.0
    end = t0 + settings.run_s
    while True:
        now = time.time()
        if now >= end:
            break
        while pending and t0 + pending[0].time_s <= now:
            event = pending.pop(0)
            for arm in FAILURE_ARMS:
                injected = injector.inject(arm, event)
                records[arm].injected.append(injected)
                if injected.skipped:
                    records[arm].notes.append(
                        f"{event.failure_class} at {event.time_s:.0f} s skipped: {injected.skipped}"
                    )
            log(
                f"t={now - t0:6.1f} s {event.failure_class} on {event.role} {event.index}: "
                + ", ".join(f"{a.value} {records[a].injected[-1].pod or 'skipped'}"
                            for a in FAILURE_ARMS)
            )  # fmt: skip
        for node in injector.restore_due(now):
            log(f"t={now - t0:6.1f} s node {node} back")
        if now >= next_sample:
            recorder.sample_sim()
            recorder.poll_jobset()
            next_sample = now + SAMPLE_SECONDS
        if now >= next_status:
            recorder.poll_operator()
            next_status = now + STATUS_SECONDS
        time.sleep(0.05)
    recorder.sample_sim()
    recorder.poll_jobset()
    recorder.poll_operator()
    for record in records.values():
        record.ended = time.time()
    dump_final(api, bed.run_dir)
    if recorder.errors:
        log(f"{recorder.errors} reads failed during the run (the samples around them are missing)")
    return records


def run(settings: Settings) -> tuple[World, list[FailureEvent], dict[Arm, ArmRecord], float]:
    """Runs the bed; returns the world, the trace, the records and the seconds it took."""
    world = settings.world()
    trace = settings.trace(world)
    started = time.monotonic()
    run_dir = Path(tempfile.mkdtemp(prefix="rljob-goodput-"))
    bed = GoodputBed(run_dir, world)
    try:
        log(f"starting the bed in {run_dir}")
        bed.start()
        records = _run_arms(bed, settings, world, trace)
    finally:
        log("tearing the bed down")
        bed.stop()
        if settings.keep_run_dir:
            log(f"kept {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    return world, trace, records, time.monotonic() - started


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench goodput", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="one failure of each class, ~10 min")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "GOODPUT.md")
    parser.add_argument("--factor", type=float, help="time scale (smoke 60, full 30)")
    parser.add_argument("--hours", type=float, help=f"scaled hours of trace (full {FULL_HOURS})")
    parser.add_argument("--seed", type=int, help=f"trace seed (smoke 1, full {FULL_SEED})")
    parser.add_argument("--stress-hardware", type=float, default=FULL_STRESS_HARDWARE)
    parser.add_argument("--stress-assumed", type=float, default=FULL_STRESS_ASSUMED)
    parser.add_argument("--keep-run-dir", action="store_true")
    parser.add_argument("--records", type=Path, help="where to save the raw records (JSON)")
    parser.add_argument(
        "--from-records", type=Path, help="measure and render saved records, no bed"
    )
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    if args.smoke:
        factor = args.factor or SMOKE_FACTOR
        hours = args.hours or SMOKE_SLOT_S * len(FailureClass) / HOUR
        seed = 1 if args.seed is None else args.seed
        return Settings(factor, hours, seed, True, keep_run_dir=args.keep_run_dir)
    return Settings(
        args.factor or FULL_FACTOR,
        args.hours or FULL_HOURS,
        FULL_SEED if args.seed is None else args.seed,
        False,
        args.stress_hardware,
        args.stress_assumed,
        args.keep_run_dir,
    )


def save_records(
    path: Path,
    settings: Settings,
    trace: list[FailureEvent],
    records: dict[Arm, ArmRecord],
    seconds: float,
) -> None:
    from bench.goodput.report import checkout_commit

    data = {
        "commit": checkout_commit(),
        "settings": dataclasses.asdict(settings),
        "trace": [event_json(e) for e in trace],
        "seconds": seconds,
        "records": {arm.value: record_json(r) for arm, r in records.items()},
    }
    path.write_text(json.dumps(data))


def load_records(
    path: Path,
) -> tuple[Settings, list[FailureEvent], dict[Arm, ArmRecord], float, str]:
    """What save_records wrote, and the commit that ran ("" if not saved)."""
    data = json.loads(path.read_text())
    records = {Arm(k): record_from_json(v) for k, v in data["records"].items()}
    trace = [event_from_json(e) for e in data["trace"]]
    settings = Settings(**data["settings"])
    return settings, trace, records, float(data["seconds"]), str(data.get("commit") or "")


def main(argv: list[str] | None = None) -> int:
    from bench.goodput.report import Report, render, results

    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    commit = ""
    if args.from_records:
        settings, trace, records, seconds, commit = load_records(args.from_records)
        world = settings.world()
    else:
        settings = settings_from(args)
        os.environ.pop("KUBECONFIG", None)  # only ever our own plane
        world, trace, records, seconds = run(settings)
        saved = args.records or Path(tempfile.gettempdir()) / (
            f"rljob-goodput-{time.strftime('%Y%m%d-%H%M%S')}.json"
        )
        save_records(saved, settings, trace, records, seconds)
        log(f"records in {saved} (--from-records renders them again)")
    report = Report(settings, world, trace, results(world, records), seconds, commit)
    args.output.write_text(render(report))
    log(f"wrote {args.output} ({seconds / 60:.1f} min)")
    print(render(report))
    return 0


def smoke_report(seed: int = 1) -> Any:
    """The smoke's Report, for tests/integration/test_goodput_smoke.py."""
    from bench.goodput.report import Report, results

    settings = settings_from(_parser().parse_args(["--smoke", f"--seed={seed}"]))
    world, trace, records, seconds = run(settings)
    saved = (
        Path(tempfile.gettempdir()) / f"rljob-goodput-smoke-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    save_records(saved, settings, trace, records, seconds)
    log(f"records in {saved} (python -m bench goodput --from-records renders them)")
    return Report(settings, world, trace, results(world, records), seconds)


__all__ = ["Settings", "main", "run", "smoke_report"]
