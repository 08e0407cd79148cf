"""Test crash points cannot be armed in production: rljob.crashpoints only calls a hook, which
only the bed's operator entry (rljob.dev.crash_entry) installs, from RLJOB_TEST_CRASH_POINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rljob import crashpoints
from rljob.crashpoints import CRASH_POINTS, crash_point, install_crash_hook
from rljob.dev import crash_entry
from rljob.dev.crash_entry import CRASH_POINT_ENV, arm

PACKAGE = Path(crashpoints.__file__).resolve().parent


@pytest.fixture(autouse=True)
def no_hook() -> Iterator[None]:
    install_crash_hook(None)
    yield
    install_crash_hook(None)


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The bed hook's os.kill calls, recorded instead of made."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: calls.append((pid, sig)))
    return calls


@pytest.mark.parametrize("armed", CRASH_POINTS)
def test_without_the_hook_the_env_variable_arms_nothing(
    armed: str, monkeypatch: pytest.MonkeyPatch, kills: list[tuple[int, int]]
) -> None:
    monkeypatch.setenv(CRASH_POINT_ENV, armed)
    for name in CRASH_POINTS:
        crash_point(name)
    assert kills == []


@pytest.mark.parametrize("armed", CRASH_POINTS)
def test_the_bed_entry_fires_only_at_the_armed_point(
    armed: str, kills: list[tuple[int, int]]
) -> None:
    assert arm({CRASH_POINT_ENV: armed}) == armed
    for name in CRASH_POINTS:
        crash_point(name)
        assert kills == ([(os.getpid(), signal.SIGKILL)] if name == armed else [])
        kills.clear()


@pytest.mark.parametrize(
    ("environ", "armed"),
    [
        pytest.param({}, None, id="unset"),
        pytest.param({CRASH_POINT_ENV: ""}, None, id="empty"),
        pytest.param({"OTHER": "drain:started"}, None, id="other-variable"),
    ],
)
def test_the_bed_entry_arms_nothing_unless_told(
    environ: dict[str, str], armed: str | None, kills: list[tuple[int, int]]
) -> None:
    assert arm(environ) == armed
    for name in CRASH_POINTS:
        crash_point(name)
    assert kills == []


def test_an_unknown_point_is_refused_rather_than_never_firing() -> None:
    with pytest.raises(SystemExit, match="drain:begun"):
        arm({CRASH_POINT_ENV: "drain:begun"})


def test_the_armed_point_really_sigkills_the_process() -> None:
    script = (
        "import os, sys\n"
        "from rljob.dev.crash_entry import arm\n"
        "from rljob.crashpoints import crash_point\n"
        "arm(os.environ)\n"
        "crash_point('drain:started')\n"
        "print('passed the unarmed point', flush=True)\n"
        "crash_point('drain:pod-deleted')\n"
        "print('survived')\n"
    )
    env = {**os.environ, CRASH_POINT_ENV: "drain:pod-deleted"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL
    assert result.stdout == "passed the unarmed point\n"


def test_the_bed_entry_runs_the_rljob_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        crash_entry.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("rljob ")


def product_sources() -> list[Path]:
    """Every text file of the rljob package outside the bed (rljob.dev)."""
    return [
        path
        for path in sorted(PACKAGE.rglob("*"))
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.relative_to(PACKAGE).parts[0] != "dev"
    ]


def test_no_product_module_mentions_the_arming_variable() -> None:
    sources = product_sources()
    assert PACKAGE / "crashpoints.py" in sources
    assert CRASH_POINT_ENV in (PACKAGE / "dev" / "crash_entry.py").read_text()
    mentions = [
        str(path.relative_to(PACKAGE))
        for path in sources
        if CRASH_POINT_ENV.encode() in path.read_bytes()
    ]
    assert mentions == []


@pytest.mark.parametrize(
    ("reached_in", "fires"),
    [("rl-a", True), ("rl-b", False), ("", True)],
    ids=["its-namespace", "another-namespace", "namespace-unknown"],
)
def test_a_point_armed_for_a_namespace_fires_only_there(
    reached_in: str, fires: bool, kills: list[tuple[int, int]]
) -> None:
    arm(crash_entry.crash_env("gang-restart:journaled", "rl-a"))
    crash_point("gang-restart:journaled", reached_in)
    assert kills == ([(os.getpid(), signal.SIGKILL)] if fires else [])
