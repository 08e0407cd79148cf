"""The bed's control plane: a component that finds one of its ports taken between the moment it
was chosen free and its bind (another process's client took it from the ephemeral range) starts
again on fresh ports; any other failure to start is raised at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rljob.dev.components import PORT_NAMES
from rljob.dev.controlplane import ComponentStartError, ControlPlane

TAKEN = 1  # a port no test binds: the fake component fails as if it were taken

FAKE = """#!/bin/sh
# First run: fail as a component whose port was taken; later runs: ready, then wait.
if [ ! -e "$0.tried" ]; then
  touch "$0.tried"
  echo 'failed to listen on 127.0.0.1:1: listen tcp 127.0.0.1:1: bind: {failure}' >&2
  exit 1
fi
touch "$0.ready"
exec sleep 30
"""


@pytest.fixture
def plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ControlPlane]:
    made = ControlPlane(tmp_path / "run", tmp_path / "bin")
    made.dir.logs.mkdir(parents=True)
    made.state.ports = dict.fromkeys(PORT_NAMES, TAKEN)
    monkeypatch.setattr(made, "_argv", lambda name: [])
    ready = tmp_path / "bin" / "kube-scheduler.ready"
    monkeypatch.setattr(made, "_ready_check", lambda name: ready.exists)
    yield made
    made.stop()


def _fake_scheduler(plane: ControlPlane, failure: str) -> None:
    plane.bin_dir.mkdir()
    binary = plane.bin_dir / "kube-scheduler"
    binary.write_text(FAKE.format(failure=failure))
    binary.chmod(0o755)


def test_a_component_whose_port_was_taken_starts_again_on_a_fresh_one(
    plane: ControlPlane,
) -> None:
    _fake_scheduler(plane, "address already in use")

    plane._await_bound(plane._spawn("kube-scheduler", []), timeout=30)

    assert plane.state.ports["scheduler"] != TAKEN
    others = {name: port for name, port in plane.state.ports.items() if name != "scheduler"}
    assert set(others.values()) == {TAKEN}, "only the component's own port is chosen again"
    assert [proc.name for proc in plane.procs] == ["kube-scheduler"]
    assert plane.procs[0].process.poll() is None, "the second start runs"


def test_any_other_failure_to_start_is_raised_at_once(plane: ControlPlane) -> None:
    _fake_scheduler(plane, "permission denied")

    with pytest.raises(ComponentStartError, match="permission denied"):
        plane._await_bound(plane._spawn("kube-scheduler", []), timeout=30)

    assert plane.state.ports["scheduler"] == TAKEN
