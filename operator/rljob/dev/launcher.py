"""`rljob dev up|down|status|env`: run the local bed in the foreground or detached.

`up` runs the control plane in the foreground; `up --detach` starts it in a launcher process of
its own session and returns once it is ready; `up --all` does the same for the whole bed (the
control plane, S3, the simulator, Prometheus and the operator: rljob.dev.services). `down`
stops what `up` started, `status` lists each component's state, `env` prints the exports."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rljob.dev.bedstate import (
    LAUNCHER,
    SERVICES,
    WAIT_GRACE_SECONDS,
    BedState,
    Component,
    StepDeadlines,
    start_steps,
    status_headline,
    status_rows,
    status_table,
)
from rljob.dev.binaries import bin_dir, repo_root
from rljob.dev.components import COMPONENTS
from rljob.dev.controlplane import ComponentStartError, ControlPlaneError
from rljob.dev.processes import (
    ProcessInfo,
    own_lineage,
    pid_runs,
    process_info,
    processes_mentioning,
    tail,
    terminate,
)
from rljob.dev.rundir import RunDir, RunState

# How long `down` lets the launcher stop everything in order (the components' grace periods
# added up) before it kills what is left.
LAUNCHER_STOP_SECONDS = 90.0
POLL_SECONDS = 0.2


class RunDirInUseError(ControlPlaneError):
    """A live bed still uses the run folder: emptying it would pull its files from under it."""


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """RLJOB_CACHE_DIR, else $XDG_CACHE_HOME/rljob-operator, else ~/.cache/rljob-operator: the
    rule of tools/build.sh and tools/prometheus.sh, so all of them use one folder."""
    env = os.environ if env is None else env
    if env.get("RLJOB_CACHE_DIR"):
        return Path(env["RLJOB_CACHE_DIR"])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "rljob-operator"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".cache" / "rljob-operator"


def default_run_dir() -> Path:
    return cache_root() / "run" / "dev"


def run_dir_flag(run_dir: Path) -> str:
    """` --run-dir <run_dir>` for the commands a user types next, unless it is the default."""
    if run_dir.absolute() == default_run_dir().absolute():
        return ""
    return f" --run-dir {shlex.quote(str(run_dir))}"


def refusal(run_dir: Path, users: Sequence[ProcessInfo], down: str) -> str:
    """Why `up` will not empty run_dir, what uses it and how to stop it."""
    listed = "\n".join(f"  {user.describe()}" for user in users)
    return (
        f"{run_dir} is in use by a live bed, so it is not emptied; these processes use it:\n"
        f"{listed}\n"
        f"`{down}` stops what `rljob dev up` started there (stop anything you started by hand "
        "yourself), or pass another --run-dir."
    )


def _recorded_launchers(run_dir: Path) -> list[ProcessInfo]:
    """The launchers the state files name that still run (a foreground `rljob dev up` names
    no folder on its command line)."""
    pids = set()
    for state in (RunState, BedState):
        try:
            pids.add(state.load(run_dir).launcher_pid)
        except (OSError, ValueError, TypeError):
            continue  # none, or an older layout: the process scan still sees its users
    running = [process_info(pid) for pid in pids if pid and pid_runs(pid, LAUNCHER.process_hint)]
    return [info for info in running if info is not None]


def live_processes(run_dir: Path) -> list[ProcessInfo]:
    """Every process using run_dir: a recorded launcher, or any process whose command line names
    a path in it (the components, and whatever was started there by hand)."""
    lineage = own_lineage()
    users = {info.pid: info for info in processes_mentioning(run_dir, exclude=lineage)}
    for info in _recorded_launchers(run_dir):
        if info.pid not in lineage:
            users.setdefault(info.pid, info)
    return [users[pid] for pid in sorted(users)]


def fresh_run_dir(run_dir: Path) -> None:
    """Empties run_dir for a new bed; refuses while any process still uses it."""
    users = live_processes(run_dir)
    if users:
        raise RunDirInUseError(refusal(run_dir, users, f"rljob dev down{run_dir_flag(run_dir)}"))
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)


def up(
    run_dir: Path,
    profile: str,
    *,
    fresh: bool = True,
    whole_bed: bool = False,
    namespaces: Sequence[str] = (),
) -> int:
    """Runs the bed in this process until SIGINT/SIGTERM or a control plane component dies."""
    from rljob.dev.supervisor import run_bed

    if fresh:
        fresh_run_dir(run_dir)
    return run_bed(
        run_dir,
        profile,
        whole_bed=whole_bed,
        namespaces=namespaces,
        on_ready=lambda: print(env_lines(run_dir), flush=True),
    )


def launcher_argv(
    run_dir: Path, profile: str, *, whole_bed: bool, namespaces: Sequence[str] = ()
) -> list[str]:
    """The detached launcher's command: this `up` in the foreground of its own session."""
    argv = [
        sys.executable, "-m", "rljob.cli", "dev", "up",
        "--profile", profile, "--run-dir", str(run_dir), "--foreground-child",
    ]  # fmt: skip
    if whole_bed:
        argv += ["--all", *(f"--namespace={each}" for each in namespaces)]
    return argv


def _tool_env(whole_bed: bool) -> dict[str, str]:
    """The binaries' folders, found (and built or unpacked on a cache miss) before any deadline
    runs, and handed to the launcher so it does not look again."""
    env = {"RLJOB_BIN_DIR": str(bin_dir())}
    if whole_bed:
        from rljob.dev.prometheus import prometheus_bin_dir

        env["RLJOB_PROMETHEUS_DIR"] = str(prometheus_bin_dir())
    return env


def up_detached(
    run_dir: Path, profile: str, *, whole_bed: bool = False, namespaces: Sequence[str] = ()
) -> int:
    """Starts the launcher in its own session and returns once the bed is ready. When a
    component does not come up, stops what did and raises ComponentStartError naming it."""
    fresh_run_dir(run_dir)
    env = {**os.environ, **_tool_env(whole_bed)}
    started = time.monotonic()
    argv = launcher_argv(run_dir, profile, whole_bed=whole_bed, namespaces=namespaces)
    with (run_dir / LAUNCHER.log).open("ab") as log:
        launcher = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env,
        )  # fmt: skip
    try:
        _wait_for_bed(run_dir, launcher, start_steps(whole_bed))
    except BaseException:  # a component, a deadline or Ctrl-C: leave nothing half-started
        _stop_bed(run_dir)
        with contextlib.suppress(subprocess.TimeoutExpired):
            launcher.wait(timeout=LAUNCHER_STOP_SECONDS)
        raise
    if not whole_bed:
        print(env_lines(run_dir))  # as before: `eval "$(rljob dev up --detach)"` keeps working
        return 0
    print(f"the bed is up in {time.monotonic() - started:.1f}s")
    plane, bed = RunState.load(run_dir), BedState.load(run_dir)
    flag = run_dir_flag(run_dir)
    print(next_steps(run_dir, plane, bed, example=_example(), rljob=_rljob(), run_dir_option=flag))
    return 0


def _wait_for_bed(
    run_dir: Path, launcher: subprocess.Popen[bytes], steps: Sequence[Component]
) -> None:
    deadlines = StepDeadlines(steps)
    while True:
        bed = BedState.load_if_any(run_dir)
        if bed is not None and bed.ready:
            return
        if launcher.poll() is not None:
            raise _launcher_failure(run_dir, bed, launcher.returncode)
        under_way = bed.under_way if bed is not None else LAUNCHER.name
        late = deadlines.overdue(under_way, time.monotonic())
        if late is not None:
            raise _overdue(run_dir, late)
        time.sleep(POLL_SECONDS)


def _launcher_failure(run_dir: Path, bed: BedState | None, code: int) -> ComponentStartError:
    bed = BedState.load_if_any(run_dir) or bed  # it may have recorded why just before it exited
    if bed is not None and bed.failed:
        return ComponentStartError(bed.failed, Path(bed.failed_log), bed.failure)
    log = run_dir / LAUNCHER.log
    return ComponentStartError(LAUNCHER.name, log, f"exited with {code}\n{tail(log)}")


def _overdue(run_dir: Path, late: Component) -> ComponentStartError:
    log = run_dir / late.log
    within = late.ready_within + WAIT_GRACE_SECONDS
    reason = f"not ready within {within:.0f}s (ready means: {late.readiness})"
    return ComponentStartError(late.name, log, reason + (f"\n{tail(log)}" if log.is_file() else ""))


def _example() -> str:
    """examples/rljob-demo.yaml, relative to the working folder when it is inside it."""
    root = repo_root()
    path = (root or Path.cwd()) / "examples" / "rljob-demo.yaml"
    return str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)


def _rljob() -> str:
    """This installation's `rljob`, by name when PATH finds that one."""
    script = Path(sys.executable).parent / "rljob"
    found = shutil.which("rljob")
    return "rljob" if found and Path(found) == script else shlex.quote(str(script))


def _apply_lines(example: str, namespaces: Sequence[str]) -> list[str]:
    if not namespaces:
        return [f"kubectl apply -f {example}"]
    first = namespaces[0]
    return [f"kubectl create namespace {first}", f"kubectl apply -n {first} -f {example}"]


def next_steps(
    run_dir: Path,
    plane: RunState,
    bed: BedState,
    *,
    example: str,
    rljob: str = "rljob",
    run_dir_option: str = "",
) -> str:
    """Where each part answers and what to do next, printed once the whole bed is up."""
    sim = bed.services["simulator"].url
    scope = ", ".join(bed.namespaces) if bed.namespaces else "every namespace"
    parts = [
        f"  control plane  https://127.0.0.1:{plane.ports['apiserver']} (profile {plane.profile})",
        f"  s3             {bed.services['s3'].url} (bucket rljob-demo)",
        f"  simulator      {sim} (its fault API)",
        f"  prometheus     {bed.services['prometheus'].url}",
        f"  operator       {bed.services['operator'].url}, "
        f"{bed.services['operator'].health_url} ({scope})",
    ]
    steps = [
        f'eval "$({rljob} dev env{run_dir_option})"   # KUBECONFIG, PATH: the bed\'s kubectl',
        *_apply_lines(example, bed.namespaces),
        "kubectl get rlj -A -o wide",
        f"curl -s {sim}/workloads   # the fault API: docs/local-bed.md, section 7 (Faults)",
        f"{rljob} dev status{run_dir_option}   # each component's state",
        f"{rljob} dev down{run_dir_option}     # stops all of it",
    ]
    logs = [
        f"  {run_dir / 'logs'}/   control plane, audit, versitygw, simulator, prometheus",
        f"  {bed.services['operator'].log}",
        f"  {run_dir / LAUNCHER.log}",
    ]
    return "\n".join([*parts, "next:", *(f"  {step}" for step in steps), "logs:", *logs])


def _leftovers(plane: RunState | None, bed: BedState | None) -> list[tuple[str, int, str]]:
    """(name, pid, process hint) of every recorded component, in reverse start order."""
    services = [
        (service.name, bed.services[service.name].pid, service.process_hint)
        for service in SERVICES
        if bed is not None and service.name in bed.services
    ]
    components = [
        (name, plane.pids[name], name) for name in COMPONENTS if plane and name in plane.pids
    ]
    return [*reversed(services), *reversed(components)]


def _stop_launcher(pid: int) -> None:
    """SIGTERM, time to stop everything in order, then SIGKILL (its components die with it)."""
    if not pid_runs(pid, LAUNCHER.process_hint):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + LAUNCHER_STOP_SECONDS
    while pid_runs(pid, LAUNCHER.process_hint) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_runs(pid, LAUNCHER.process_hint):
        terminate(pid, grace=0)


def _stop_bed(run_dir: Path) -> list[str]:
    """Stops the launcher, then whatever component outlived it; returns those."""
    plane = RunState.load(run_dir) if RunState.path(run_dir).exists() else None
    bed = BedState.load_if_any(run_dir)
    for pid in {state.launcher_pid for state in (plane, bed) if state is not None}:
        if pid:
            _stop_launcher(pid)
    outlived = []
    for name, pid, hint in _leftovers(plane, bed):
        if pid and pid_runs(pid, hint):
            terminate(pid)
            outlived.append(name)
    return outlived


def down(run_dir: Path) -> int:
    """Stops the launcher (which stops its components in reverse start order), then any
    component left behind, each by its process group."""
    if not RunState.path(run_dir).exists() and not BedState.path(run_dir).exists():
        print(f"nothing running in {run_dir}")
        return 0
    outlived = _stop_bed(run_dir)
    if outlived:
        print(f"stopped what outlived the launcher: {', '.join(outlived)}")
    print(f"bed stopped ({run_dir})")
    return 0


def status(run_dir: Path) -> int:
    """Prints each component's state; 0 when every one of them runs."""
    plane = RunState.load(run_dir) if RunState.path(run_dir).exists() else None
    bed = BedState.load_if_any(run_dir)
    if plane is None and bed is None:
        print(f"nothing started in {run_dir}")
        return 1
    rows = status_rows(run_dir, plane, bed, pid_runs)
    print(status_headline(run_dir, bed, rows))
    print(status_table(rows))
    if bed is not None and bed.failed:
        print(ComponentStartError(bed.failed, Path(bed.failed_log), bed.failure))
    return 0 if all(row.state == "running" for row in rows) else 1


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
