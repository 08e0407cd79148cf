"""`rljob dev up --all`, `status` and `down`, their pure parts: the launcher's command line, the
services' flags, the component list, the deadlines a waiting `up` keeps, the status rows, what
`up` prints next, the run-folder refusal and the cache folder (XDG_CACHE_HOME)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rljob.cli import _parser
from rljob.dev.bedstate import (
    CONTROL_PLANE,
    LAUNCHER,
    OPERATOR,
    PROMETHEUS,
    S3,
    SERVICES,
    SIMULATOR,
    WAIT_GRACE_SECONDS,
    BedState,
    ServiceRecord,
    StepDeadlines,
    start_steps,
    status_rows,
)
from rljob.dev.components import COMPONENTS
from rljob.dev.controlplane import ComponentStartError, ControlPlaneError, wait_until
from rljob.dev.demo import DemoBed
from rljob.dev.launcher import (
    RunDirInUseError,
    cache_root,
    fresh_run_dir,
    launcher_argv,
    next_steps,
    refusal,
)
from rljob.dev.processes import ProcessInfo, mentions, process_info
from rljob.dev.prometheus import PrometheusServer
from rljob.dev.rundir import RunState
from rljob.dev.services import BedServices, operator_flags
from rljob.dev.sim import Simulator
from tests.helpers import wait_for

REPO = Path(__file__).resolve().parents[2]
RUN = Path("/cache/run/dev")


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("whole_bed", "namespaces", "tail"),
    [
        pytest.param(False, (), ["--foreground-child"], id="control-plane-only"),
        pytest.param(True, (), ["--foreground-child", "--all"], id="whole-bed"),
        pytest.param(
            True,
            ("team-a", "team-b"),
            ["--foreground-child", "--all", "--namespace=team-a", "--namespace=team-b"],
            id="whole-bed-in-two-namespaces",
        ),
    ],
)
def test_the_launcher_runs_this_up_in_the_foreground(
    whole_bed: bool, namespaces: tuple[str, ...], tail: list[str]
) -> None:
    argv = launcher_argv(RUN, "test", whole_bed=whole_bed, namespaces=namespaces)
    assert argv[:3] == [sys.executable, "-m", "rljob.cli"]
    assert argv[-len(tail) :] == tail
    args = _parser().parse_args(argv[3:])  # what the launcher's own parser makes of it
    assert (args.dev_command, args.profile, args.run_dir) == ("up", "test", str(RUN))
    assert args.foreground_child and args.all is whole_bed
    assert tuple(args.namespace) == namespaces


@pytest.mark.parametrize(
    ("argv", "all_", "detach", "namespaces"),
    [
        pytest.param(["dev", "up"], False, False, [], id="plane-in-the-foreground"),
        pytest.param(["dev", "up", "--detach"], False, True, [], id="plane-detached"),
        pytest.param(["dev", "up", "--all"], True, False, [], id="whole-bed"),
        pytest.param(
            ["dev", "up", "--all", "--namespace", "rl-demo"], True, False, ["rl-demo"],
            id="whole-bed-one-namespace",
        ),
    ],
)  # fmt: skip
def test_dev_up_flags(argv: list[str], all_: bool, detach: bool, namespaces: list[str]) -> None:
    args = _parser().parse_args(argv)
    assert (args.all, args.detach, args.namespace) == (all_, detach, namespaces)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("Team", id="upper-case"),
        pytest.param("team-*", id="a-pattern"),
        pytest.param("-team", id="leading-dash"),
    ],
)
def test_dev_up_takes_namespace_names_only(name: str) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["dev", "up", "--all", "--namespace", name])


def test_dev_status_is_a_command() -> None:
    assert _parser().parse_args(["dev", "status", "--run-dir", "x"]).dev_command == "status"


def test_the_operator_defaults_to_and_allows_exactly_the_beds_servers() -> None:
    prometheus, s3 = "http://127.0.0.1:9090", "http://127.0.0.1:9000"
    flags = operator_flags(prometheus, s3)
    args = _parser().parse_args(["run", *flags])
    assert args.prometheus_url == prometheus
    assert args.allow_prometheus_url == [prometheus]
    assert args.allow_s3_endpoint == [s3]


@pytest.fixture
def services(tmp_path: Path) -> BedServices:
    return BedServices(tmp_path / "run", ("team-a",), binaries=tmp_path / "bin")


def test_the_beds_simulator_writes_checkpoints_to_the_beds_s3(services: BedServices) -> None:
    sim = services.simulator(Path("/kubeconfig"))
    assert "--checkpoints" in sim.argv()
    assert "--namespace=team-a" in sim.argv()
    assert sim.env["RLJOB_S3_ENDPOINT"] == services.store.endpoint
    assert sim.env["AWS_SECRET_ACCESS_KEY"] == services.store.secret_key


def test_the_demos_simulator_writes_checkpoints_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binaries = tmp_path / "bin"
    binaries.mkdir()
    for name in (*COMPONENTS, "kubectl", "versitygw"):  # bin_dir() only checks they are there
        (binaries / name).touch()
    monkeypatch.setenv("RLJOB_BIN_DIR", str(binaries))
    bed = DemoBed(tmp_path / "run")
    sim = bed.services.simulator(Path("/kubeconfig"))
    assert "--checkpoints" in sim.argv()
    assert sim.env["RLJOB_S3_ENDPOINT"] == bed.services.store.endpoint


# ---------------------------------------------------------------- the component list


@pytest.mark.parametrize(
    ("whole_bed", "names"),
    [
        pytest.param(False, ["launcher", "control plane"], id="control-plane-only"),
        pytest.param(
            True,
            ["launcher", "control plane", "s3", "simulator", "prometheus", "operator"],
            id="whole-bed",
        ),
    ],
)
def test_what_a_detached_up_waits_for_in_order(whole_bed: bool, names: list[str]) -> None:
    assert [step.name for step in start_steps(whole_bed)] == names


def test_each_services_log_is_where_its_process_writes(
    tmp_path: Path, services: BedServices
) -> None:
    run = services.run_dir
    sim = Simulator(run, Path("/kubeconfig"), control_port=1)
    prometheus = PrometheusServer(run, tmp_path, 1)
    written = {S3: services.store.log, SIMULATOR: sim.log, PROMETHEUS: prometheus.log}
    assert {component.name: run / component.log for component in written} == {
        component.name: log for component, log in written.items()
    }
    # start_operator's workdir is <run>/operator, and spawn names the log after the process.
    assert run / OPERATOR.log == run / "operator" / "operator.log"


def test_every_service_has_a_deadline_a_readiness_and_a_process_hint() -> None:
    assert [service.name for service in SERVICES] == ["s3", "simulator", "prometheus", "operator"]
    for component in (LAUNCHER, CONTROL_PLANE, *SERVICES):
        assert component.ready_within > 0 and component.readiness and component.process_hint


# ---------------------------------------------------------------- readiness deadlines


@pytest.mark.parametrize(
    ("seen", "overdue"),
    [
        pytest.param([("launcher", 0.0)], None, id="just-started"),
        pytest.param(
            [("launcher", 0.0), ("launcher", LAUNCHER.ready_within + WAIT_GRACE_SECONDS + 1)],
            "launcher",
            id="launcher-never-wrote-a-step",
        ),
        pytest.param(
            [("launcher", 0.0), ("control plane", 50.0), ("control plane", 340.0)],
            None,
            id="the-plane-counts-from-when-it-was-first-seen",
        ),
        pytest.param(
            [("control plane", 0.0), ("control plane", CONTROL_PLANE.ready_within + 16)],
            "control plane",
            id="the-plane-past-its-deadline-and-grace",
        ),
        pytest.param(
            [("s3", 0.0), ("simulator", 40.0), ("prometheus", 80.0), ("prometheus", 171.0)],
            "prometheus",
            id="a-slow-service-is-named",
        ),
        pytest.param(
            [("operator", 0.0), ("", 500.0)], None, id="nothing-under-way-is-never-overdue"
        ),
    ],
)
def test_the_component_that_ran_out_of_time_is_named(
    seen: list[tuple[str, float]], overdue: str | None
) -> None:
    deadlines = StepDeadlines(start_steps(True))
    found = [deadlines.overdue(under_way, now) for under_way, now in seen][-1]
    assert (found.name if found else None) == overdue


@pytest.mark.parametrize(
    ("reason", "first_lines"),
    [
        pytest.param(
            "timed out after 60s waiting for prometheus on http://127.0.0.1:9090",
            [
                "prometheus did not come up: timed out after 60s waiting for prometheus on "
                "http://127.0.0.1:9090",
                "its log: /run/logs/prometheus.log",
            ],
            id="one-line",
        ),
        pytest.param(
            "prometheus exited with 1:\nerror loading config",
            [
                "prometheus did not come up: prometheus exited with 1:",
                "its log: /run/logs/prometheus.log",
                "error loading config",
            ],
            id="the-log-path-before-the-tail",
        ),
    ],
)
def test_a_component_that_did_not_come_up_is_named_with_its_log(
    reason: str, first_lines: list[str]
) -> None:
    error = ComponentStartError("prometheus", Path("/run/logs/prometheus.log"), reason)
    assert str(error).splitlines() == first_lines


class _ExitedError(RuntimeError):
    """A server's "the process exited" from its readiness probe."""


def _exits() -> bool:
    raise _ExitedError("versitygw exited with 2")


def _refuses() -> bool:
    raise ConnectionRefusedError("not listening yet")


@pytest.mark.parametrize(
    ("probe", "gives_up", "raised", "message"),
    [
        pytest.param(
            _exits, (_ExitedError,), _ExitedError, "versitygw exited with 2",
            id="exited-ends-at-once",
        ),
        pytest.param(
            _refuses, (_ExitedError,), ControlPlaneError, "last error: not listening yet",
            id="not-listening-waits-for-the-deadline",
        ),
    ],
)  # fmt: skip
def test_a_probe_that_says_the_process_exited_ends_the_wait(
    probe: Callable[[], bool],
    gives_up: tuple[type[Exception], ...],
    raised: type[Exception],
    message: str,
) -> None:
    # Without gives_up an exit would wait out the deadline as a not-ready-yet probe does.
    with pytest.raises(raised, match=message):
        wait_until(probe, 0.3, "the server", interval=0.05, gives_up=gives_up)


# ---------------------------------------------------------------- status


def _plane() -> RunState:
    ports = {"etcd": 1, "etcd-peer": 2, "apiserver": 3, "controller-manager": 4, "scheduler": 5}
    pids = {"etcd": 11, "kube-apiserver": 12, "kube-controller-manager": 13}
    return RunState("demo", {**ports, "kwok": 6}, {**pids, "kube-scheduler": 14, "kwok": 15}, 10)


def _bed(exit_code: int | None = None) -> BedState:
    records = {
        name: ServiceRecord(pid, f"http://127.0.0.1:{pid}", "", f"/run/{name}.log")
        for name, pid in (("s3", 21), ("simulator", 22), ("prometheus", 23), ("operator", 24))
    }
    records["operator"].exit_code = exit_code
    return BedState(10, True, services=records, under_way="", ready=True)


@pytest.mark.parametrize(
    ("plane", "bed", "alive", "states"),
    [
        pytest.param(
            _plane(), _bed(), {10, 11, 12, 13, 14, 15, 21, 22, 23, 24}, {"running"},
            id="whole-bed-running",
        ),
        pytest.param(
            _plane(), _bed(exit_code=3), {10, 11, 12, 13, 14, 15, 21, 22, 23},
            {"running", "exited 3"},
            id="the-operator-exited",
        ),
        pytest.param(_plane(), None, set(), {"not running"}, id="plane-only-stopped"),
    ],
)  # fmt: skip
def test_status_lists_every_component(
    plane: RunState, bed: BedState | None, alive: set[int], states: set[str]
) -> None:
    rows = status_rows(Path("/run"), plane, bed, lambda pid, _: pid in alive)
    expected = ["launcher", "etcd", "kube-apiserver", "kube-controller-manager"]
    expected += ["kube-scheduler", "kwok"] + (
        ["s3", "simulator", "prometheus", "operator"] if bed else []
    )
    assert [row.component for row in rows] == expected
    assert {row.state for row in rows} == states
    by_name = {row.component: row for row in rows}
    assert by_name["kube-apiserver"].address == "https://127.0.0.1:3"
    assert by_name["etcd"].log == Path("/run/logs/etcd.log")


def test_a_service_not_started_yet_is_listed_as_not_running() -> None:
    bed = BedState(10, True, services={}, under_way="s3")
    rows = status_rows(Path("/run"), _plane(), bed, lambda pid, _: True)
    assert {row.component: row.state for row in rows}["s3"] == "not running"


# ---------------------------------------------------------------- what `up --all` prints


@pytest.mark.parametrize(
    ("namespaces", "option", "wanted"),
    [
        pytest.param(
            [], "",
            ['eval "$(rljob dev env)"', "kubectl apply -f examples/rljob-demo.yaml",
             "rljob dev down"],
            id="default-run-folder",
        ),
        pytest.param(
            ["rl-demo"], " --run-dir /tmp/bed",
            ['eval "$(rljob dev env --run-dir /tmp/bed)"', "kubectl create namespace rl-demo",
             "kubectl apply -n rl-demo -f examples/rljob-demo.yaml",
             "rljob dev down --run-dir /tmp/bed"],
            id="another-run-folder-one-namespace",
        ),
    ],
)  # fmt: skip
def test_up_prints_what_to_do_next(namespaces: list[str], option: str, wanted: list[str]) -> None:
    bed = _bed()
    bed.namespaces = namespaces
    text = next_steps(
        Path("/run"), _plane(), bed, example="examples/rljob-demo.yaml", run_dir_option=option
    )
    steps = [line.split("  #")[0].strip() for line in text.splitlines()]
    for line in wanted:
        assert line in steps, text
    assert "curl -s http://127.0.0.1:22/workloads" in steps  # the simulator's fault API
    assert "/run/logs/   control plane, audit, versitygw, simulator, prometheus" in text
    assert "/run/operator.log" in text


# ---------------------------------------------------------------- the run folder of a live bed


@pytest.mark.parametrize(
    ("argv", "names_it"),
    [
        pytest.param(["etcd", "--data-dir=/cache/run/dev/etcd"], True, id="a-path-below-it"),
        pytest.param(["rljob", "dev", "up", "--run-dir", "/cache/run/dev"], True, id="the-folder"),
        pytest.param(["x", "--config=/cache/run/dev"], True, id="after-an-equals-sign"),
        pytest.param(["x", "/cache/run/dev2/etcd"], False, id="a-sibling-folder"),
        pytest.param(["x", "/other/cache/run/dev/etcd"], False, id="the-same-name-elsewhere"),
        pytest.param(["x", "/cache/run/dev.old"], False, id="a-longer-name"),
        pytest.param(["sleep", "60"], False, id="unrelated"),
    ],
)
def test_which_command_lines_name_the_run_folder(argv: list[str], names_it: bool) -> None:
    assert mentions(argv, [RUN]) is names_it


def test_the_refusal_names_each_process_and_rljob_dev_down() -> None:
    users = [ProcessInfo(42, ("versitygw", "--port", "127.0.0.1:9000"))]
    text = refusal(RUN, users, "rljob dev down --run-dir /cache/run/dev")
    assert "/cache/run/dev is in use by a live bed, so it is not emptied" in text
    assert "pid 42: versitygw --port 127.0.0.1:9000" in text
    assert "`rljob dev down --run-dir /cache/run/dev`" in text


def _idle(*extra: str) -> subprocess.Popen[bytes]:
    """A process that idles until its stdin closes, with `extra` on its command line."""
    code = "import sys; sys.stdin.read()"
    process = subprocess.Popen([sys.executable, "-c", code, *extra], stdin=subprocess.PIPE)
    # Popen returns once exec has begun; the kernel fills /proc/<pid>/cmdline a moment later.
    wait_for(lambda: process_info(process.pid), 10, f"pid {process.pid}'s command line")
    return process


@pytest.mark.parametrize(
    ("names_the_folder", "recorded"),
    [
        pytest.param(True, False, id="a-component-names-the-folder"),
        pytest.param(False, True, id="bed-json-names-a-running-launcher"),
    ],
)
def test_up_refuses_to_empty_the_folder_of_a_live_bed(
    tmp_path: Path, names_the_folder: bool, recorded: bool
) -> None:
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "etcd.log").write_text("kept\n")
    # A foreground `rljob dev up` names no folder: only bed.json ties it to this one.
    process = _idle(f"--data-dir={run}/etcd" if names_the_folder else "rljob")
    try:
        if recorded:
            BedState(process.pid, True).save(run)
        with pytest.raises(RunDirInUseError) as refused:
            fresh_run_dir(run)
        assert f"pid {process.pid}:" in str(refused.value)
        assert "`rljob dev down --run-dir" in str(refused.value)
        assert (run / "logs" / "etcd.log").read_text() == "kept\n"
    finally:
        process.kill()
        process.wait()
    fresh_run_dir(run)  # nothing uses it any more
    assert list(run.iterdir()) == []


# ---------------------------------------------------------------- the cache folder


@pytest.mark.parametrize(
    ("env", "root"),
    [
        pytest.param({"RLJOB_CACHE_DIR": "/c", "XDG_CACHE_HOME": "/x"}, "/c", id="rljob-wins"),
        pytest.param({"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/rljob-operator", id="xdg"),
        pytest.param(
            {"RLJOB_CACHE_DIR": "", "XDG_CACHE_HOME": "/x"},
            "/x/rljob-operator",
            id="empty-is-unset",
        ),
        pytest.param({"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/rljob-operator", id="home"),
    ],
)
def test_the_cache_folder(env: dict[str, str], root: str) -> None:
    assert cache_root(env) == Path(root)


FAKE_APT = '#!/bin/sh\n[ "$1" = policy ] && exit 0\necho "apt must not run: $*" >&2; exit 1\n'


@pytest.mark.parametrize(
    ("env", "cache"),
    [
        pytest.param({"RLJOB_CACHE_DIR": "rljob"}, "rljob", id="rljob-cache-dir-wins"),
        pytest.param({"XDG_CACHE_HOME": "xdg"}, "xdg/rljob-operator", id="xdg-cache-home"),
        pytest.param({}, "home/.cache/rljob-operator", id="home"),
    ],
)
def test_prometheus_sh_finds_its_cache_where_the_launcher_looks(
    tmp_path: Path, env: dict[str, str], cache: str
) -> None:
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    for tool in ("apt-cache", "apt-get"):  # no candidate: the newest complete folder is used
        (fake_bin / tool).write_text(FAKE_APT)
        (fake_bin / tool).chmod(0o755)
    unpacked = tmp_path / cache / "prometheus-2.53.3+ds1-1"
    (unpacked / "usr" / "bin").mkdir(parents=True)
    (unpacked / ".complete").touch()
    environment = {
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "HOME": str(tmp_path / "home"),
        **{name: str(tmp_path / value) for name, value in env.items()},
    }
    done = subprocess.run(
        ["bash", str(REPO / "tools" / "prometheus.sh")],
        env=environment, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == str(unpacked / "usr" / "bin")
    assert cache_root(environment) == tmp_path / cache
