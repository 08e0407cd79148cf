"""`rljob dev up|down|env`: run the local control plane in the foreground or detached."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rljob.dev.binaries import bin_dir
from rljob.dev.components import COMPONENTS
from rljob.dev.controlplane import ControlPlane, ControlPlaneError, running_plane, wait_until
from rljob.dev.processes import pid_alive, pid_runs, terminate
from rljob.dev.rundir import RunDir, RunState


def cache_root() -> Path:
    configured = os.environ.get("RLJOB_CACHE_DIR")
    base = Path(configured) if configured else Path.home() / ".cache" / "rljob-operator"
    return base


def default_run_dir() -> Path:
    return cache_root() / "run" / "dev"


def fresh_run_dir(run_dir: Path) -> None:
    """Empties run_dir, refusing when a plane from it is still running."""
    try:
        running_plane(run_dir)
    except (OSError, ValueError, ControlPlaneError):
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        return
    raise ControlPlaneError(
        f"a control plane is already running in {run_dir}; `rljob dev down` first"
    )


def up(run_dir: Path, profile: str, *, fresh: bool = True) -> int:
    """Starts the plane and supervises it until SIGINT/SIGTERM or a component dies."""
    if fresh:
        fresh_run_dir(run_dir)
    plane = ControlPlane(run_dir, bin_dir(), profile)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started = time.monotonic()
    plane.start()
    print(f"control plane ({profile}) ready in {time.monotonic() - started:.1f}s", flush=True)
    print(env_lines(run_dir), flush=True)
    try:
        while not stop.wait(1.0):
            dead = [p.name for p in plane.procs if p.process.poll() is not None]
            if dead:
                print(f"component exited: {', '.join(dead)}; stopping", file=sys.stderr)
                return 1
    finally:
        plane.stop()
        print("control plane stopped", flush=True)
    return 0


def up_detached(run_dir: Path, profile: str, timeout: float = 300.0) -> int:
    """Starts a supervisor in its own session and returns once the plane is ready."""
    fresh_run_dir(run_dir)
    log = (run_dir / "launcher.log").open("ab")
    cmd = [
        sys.executable,
        "-m",
        "rljob.cli",
        "dev",
        "up",
        "--profile",
        profile,
        "--run-dir",
        str(run_dir),
        "--foreground-child",
    ]
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )

    def ready() -> bool:
        if proc.poll() is not None:
            raise ControlPlaneError(f"launcher exited; see {run_dir / 'launcher.log'}")
        return RunState.load(run_dir).ready if RunState.path(run_dir).exists() else False

    wait_until(ready, timeout, "the detached control plane")
    print(env_lines(run_dir))
    return 0


def down(run_dir: Path) -> int:
    """Stops the launcher, then any component left behind, in reverse start order."""
    if not RunState.path(run_dir).exists():
        print(f"nothing running in {run_dir}")
        return 0
    state = RunState.load(run_dir)
    if state.launcher_pid and pid_runs(state.launcher_pid, "rljob"):
        os.kill(state.launcher_pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while pid_alive(state.launcher_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    for name in reversed(COMPONENTS):
        pid = state.pids.get(name, 0)
        if pid and pid_runs(pid, name):
            terminate(pid)
    print("control plane stopped")
    return 0


def env_lines(run_dir: Path, tools: Path | None = None) -> str:
    """Shell lines that point kubectl at the bed: its kubeconfig, and PATH with the bed's
    kubectl (`tools`, default: the built binaries) and this venv's scripts (rljob and
    kubectl-rljob, so `kubectl rljob status` works) first."""
    tools = tools if tools is not None else bin_dir()
    scripts = Path(sys.executable).parent
    path = ":".join(shlex.quote(str(folder)) for folder in (tools, scripts))
    return f"export KUBECONFIG={shlex.quote(str(RunDir(run_dir).kubeconfig))}\n" + (
        f'export PATH={path}:"$PATH"'
    )
