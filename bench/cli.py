"""`python -m bench [--smoke]`: every benchmark, then bench/RESULTS.md.
`python -m bench vllm-traces [...]`: traces of vLLM's page from vLLM's own core (bench/vllm_core).
`python -m bench goodput [--smoke] [--output bench/GOODPUT.md]`: effective training time of the
operator, restarting everything and a JobSet on one failure trace (bench/goodput).

Pure parts first (detection corpus, direct scrape against a loopback server; with --smoke also
the bottleneck-diagnosis matrix and the model soak, whose full runs are their own commands)
while the machine is idle; then a bench-profile control plane in a temporary folder with the
operator, a fleet grown through the sizes, and the recovery scenarios. The bed is always torn down.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from bench import (
    detection,
    diagnosis,
    diagnosis_judge,
    model_soak,
    profile,
    recovery,
    scale,
    scrape,
)
from bench.bed import PROBE_NAMESPACE, BenchBed
from bench.procfs import git_sha, machine
from bench.report import Results, per_job_slopes, render
from bench.stats import percentile
from bench.watch import Watcher

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")
# The diagnosis names a role after about 8 minutes of a job's phases; past this, the window
# starts anyway and the report says how many jobs had none.
VERDICT_TIMEOUT = 900.0


@dataclass(frozen=True)
class Mode:
    name: str
    scale: scale.ScaleSettings
    seeds: int
    endpoints: int
    scrape_rounds: int
    recovery_repetitions: int


SMOKE = Mode(
    "smoke",
    # Two sizes, so the per-job slopes of memory, CPU and writes are printed on every CI run.
    scale.ScaleSettings((5, 20), probes=5, window=60, settle=5),
    seeds=1,
    endpoints=200,
    scrape_rounds=1,
    recovery_repetitions=1,
)
FULL = Mode(
    "full",
    scale.ScaleSettings(
        (50, 200, 500), probes=30, window=300, settle=60, verdict_timeout=VERDICT_TIMEOUT
    ),
    seeds=5,
    endpoints=2000,
    scrape_rounds=3,
    recovery_repetitions=3,
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class BackgroundLoop:
    """An event loop in a thread, for the watches that time the bench's own actions."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> BackgroundLoop:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="N=5 and 20, short windows (CI)")
    parser.add_argument("--sizes", help="fleet sizes, e.g. 50,200,500 (default: by mode)")
    parser.add_argument("--skip-cluster", action="store_true", help="only the pure parts")
    parser.add_argument("--skip-pure", action="store_true", help="only the control plane parts")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "RESULTS.md")
    parser.add_argument("--keep-run-dir", action="store_true", help="keep logs for debugging")
    parser.add_argument(
        "--profile-operator",
        choices=["cpu", "memory"],
        help="run the operator under cProfile or tracemalloc: bench/profile-operator-<kind>.txt",
    )
    return parser


def _mode(args: argparse.Namespace) -> Mode:
    mode = SMOKE if args.smoke else FULL
    if not args.sizes:
        return mode
    sizes = tuple(sorted(int(n) for n in args.sizes.split(",")))
    return replace(mode, scale=replace(mode.scale, sizes=sizes))


def _pure(results: Results, mode: Mode) -> None:
    log(f"detection corpus, {mode.seeds} seed(s) per scenario")
    results.detection = detection.evaluate_corpus(mode.seeds)
    log(f"direct scrape of {mode.endpoints} endpoints")
    results.page = scrape.page_size()
    results.scrape = scrape.measure(REPO, mode.endpoints, mode.scrape_rounds)
    for r in results.scrape:
        log(f"  {r.mode}: {r.endpoints_per_second:.0f} endpoints/s")
    if mode is SMOKE:  # proves the matrix runs; bench/DIAGNOSIS.md is `python -m bench.diagnosis`
        log(f"bottleneck diagnosis matrix, 1 seed, {diagnosis.SMOKE_HOURS:g} h")
        log(f"  {diagnosis_judge.summary(diagnosis.smoke(lambda _: None))}")
    if mode is SMOKE:  # proves the soak runs; its long runs are `python -m bench.model_soak`
        log(f"action-engine model soak, {model_soak.SMOKE_SECONDS:.0f} s")
        soaked = model_soak.soak(model_soak.SMOKE_SECONDS, log)
        log(f"  {model_soak.summary(soaked)}")
        for failure in soaked.failures:
            log(failure)


def _cluster(results: Results, mode: Mode, run_dir: Path, profiling: str | None) -> None:
    bed = BenchBed(run_dir, REPO)
    if profiling is not None:
        bed.profile_to, bed.profile_kind = run_dir / "operator.profile", profiling
    try:
        log(f"starting the bench bed in {run_dir}")
        bed.start()
        with BackgroundLoop() as loop:
            _scale(results, mode, bed, loop)
            bed.dump_profile()
            log("recovery scenarios")
            results.recovery = recovery.measure(bed, mode.recovery_repetitions, loop.run, log)
    finally:
        log("tearing the bed down")
        bed.stop()
        if bed.profile_to is not None and bed.profile_to.exists():
            _save_profile(results, bed.profile_to, bed.profile_kind)


def _save_profile(results: Results, raw: Path, kind: str) -> None:
    target = REPO / "bench" / f"profile-operator-{kind}.txt"
    target.write_text(profile.summary(raw) if kind == "cpu" else raw.read_text())
    results.notes.append(f"the operator ran under a {kind} profiler (slower): {target.name}")


def _scale(results: Results, mode: Mode, bed: BenchBed, loop: BackgroundLoop) -> None:
    fleet = scale.Fleet(bed, mode.scale)
    watcher = Watcher(bed.api.creds, PROBE_NAMESPACE, ("RLJob", "Deployment", "Job", "Service"))
    loop.run(watcher.start())
    try:
        for size in mode.scale.sizes:
            log(f"fleet of {size} RLJobs")
            result = scale.measure_size(fleet, watcher, size, loop.run, log)
            results.scale.append(result)
            operator = result.usage[scale.OPERATOR]
            log(
                f"  p50 {percentile(result.latencies, 50):.2f} s, "
                f"{result.writes.per_minute:.1f} writes/min, operator "
                f"{operator.cpu_seconds_per_minute:.2f} CPU s/min and {operator.rss_mib:.0f} MiB"
            )
        for line in per_job_slopes(results.scale):
            log(line)
    finally:
        loop.run(watcher.stop())


def _cluster_parts(results: Results, mode: Mode, args: argparse.Namespace) -> None:
    if args.skip_cluster:
        results.notes.append("--skip-cluster: no control plane parts")
        return
    profiling = args.profile_operator
    if args.keep_run_dir:
        _cluster(results, mode, Path(tempfile.mkdtemp(prefix="rljob-bench-")), profiling)
        return
    with tempfile.TemporaryDirectory(prefix="rljob-bench-") as tmp:
        _cluster(results, mode, Path(tmp), profiling)


def _new_results(mode: Mode, argv: list[str]) -> Results:
    command = shlex.join(["python", "-m", "bench", *argv])
    started = dt.datetime.now(dt.UTC)
    return Results(
        mode.name, command, git_sha(REPO), machine(), started, 0.0, mode.scale.sizes, mode.seeds
    )


def _write(results: Results, output: Path) -> None:
    analysis = REPO / "bench" / "analysis.md"
    results.analysis = analysis.read_text() if analysis.exists() else ""
    output.write_text(render(results))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["vllm-traces"]:  # its own command: no bed, no RESULTS.md
        from bench.vllm_core import traces

        return traces.main(argv[1:])
    if argv[:1] == ["goodput"]:  # its own bed and page, bench/GOODPUT.md
        from bench.goodput import run

        return run.main(argv[1:])
    args = _parser().parse_args(argv)
    mode = _mode(args)
    # The binaries: RLJOB_BIN_DIR, else tools/build.sh's cached build (rljob.dev.binaries).
    os.environ.pop("KUBECONFIG", None)  # only ever our own plane
    # Stopping the bench must still tear the bed down (finally blocks); a background shell
    # starts it with SIGINT ignored.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    results = _new_results(mode, argv)
    clock = time.monotonic()
    try:
        if args.skip_pure:
            results.notes.append("--skip-pure: no detection corpus, no direct scrape")
        else:
            _pure(results, mode)
        _cluster_parts(results, mode, args)
    finally:
        results.seconds = time.monotonic() - clock
        _write(results, args.output)
        log(f"wrote {args.output} ({results.seconds / 60:.1f} min)")
    print(render(results))
    return 0
