"""`python -m bench vllm-traces [--out DIR] [--seconds N] [--seed S] [--scenarios a,b]`: traces
of vLLM's metrics page made by vLLM's own core (bench/vllm_core/README.md), one driver process
per scenario under the vLLM venv's python (RLJOB_VLLM_VENV, else tools/vllm-venv.sh's cached
venv, built if missing), then an index.json beside them with each trace's size and how long it
took. Runs from the operator's venv; imports no vLLM itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.vllm_core.scenarios import PRESETS, SCENARIOS

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = REPO / "tests" / "upstream" / "vllm" / "tiny_model"
# vLLM picks its platform at import; PYTHONHASHSEED fixes set orders, so a seed's trace repeats.
DRIVER_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "VLLM_LOGGING_LEVEL": "WARNING",
    "PYTHONHASHSEED": "0",
}


def vllm_python() -> Path:
    """The vLLM venv's python: RLJOB_VLLM_VENV, else the folder tools/vllm-venv.sh prints."""
    given = os.environ.get("RLJOB_VLLM_VENV")
    if given:
        return Path(given) / "bin" / "python"
    made = subprocess.run(
        ["bash", str(REPO / "tools" / "vllm-venv.sh")],
        check=True,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"


@dataclass(frozen=True)
class Spec:
    out: Path
    seconds: float | None  # None: the preset's
    seed: int
    preset: str = "bench"


def drive(python: Path, spec: Spec, scenario: str) -> dict[str, object]:
    """One scenario's trace; the driver's summary plus the process's wall time (import included)."""
    command = [str(python), "-m", "bench.vllm_core.drive", "--model-dir", str(TINY_MODEL)]
    command += ["--out", str(spec.out), "--scenarios", scenario, "--seed", str(spec.seed)]
    command += ["--preset", spec.preset]
    command += ["--seconds", str(spec.seconds)] if spec.seconds else []
    env = {**os.environ, **DRIVER_ENV, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{scenario}: driver failed\n{done.stderr[-3000:]}")
    summary: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    summary["process_seconds"] = round(time.monotonic() - started, 1)
    summary["file"] = Path(str(summary["file"])).name
    return summary


def make(
    spec: Spec, scenarios: list[str], command: str, log: Callable[[str], None] = print
) -> dict[str, object]:
    python = vllm_python()
    started = time.monotonic()
    made = []
    for name in scenarios:
        summary = drive(python, spec, name)
        log(
            f"{name}: {summary['bytes']} bytes, {summary['rows']} rows, {summary['steps']} engine "
            f"steps, {summary['cpu_seconds']} CPU s, {summary['process_seconds']} s"
        )
        made.append(summary)
    index = {
        "command": command,
        "preset": spec.preset,
        "seed": spec.seed,
        "seconds": spec.seconds or PRESETS[spec.preset].seconds,
        "traces": made,
        "total_seconds": round(time.monotonic() - started, 1),
    }
    (spec.out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench vllm-traces", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "traces" / "vllm")
    parser.add_argument("--seconds", type=float, help="simulated seconds (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--preset", choices=sorted(PRESETS), default="bench")
    argv = sys.argv[2:] if argv is None else argv
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios = args.scenarios.split(",")
    command = shlex.join(["python", "-m", "bench", "vllm-traces", *argv])
    spec = Spec(args.out, args.seconds, args.seed, args.preset)
    index = make(spec, scenarios, command)
    print(f"wrote {len(scenarios)} traces to {args.out} in {index['total_seconds']} s")
    return 0
