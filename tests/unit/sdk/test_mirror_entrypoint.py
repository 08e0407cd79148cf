"""`python -m rljob.sdk.entrypoint --checkpoint-layout L --checkpoint-dir D -- CMD`: malformed
flags are a usage error, the mirror loads only with the flags, a refused restore never starts
the trainer and says why in the termination log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rljob.sdk import entrypoint, mirror


@pytest.mark.parametrize(
    "argv",
    [
        ["--checkpoint-layout", "verl", "--", "true"],
        ["--checkpoint-layout", "verl", "--checkpoint-dir", "/d", "true"],
        ["--checkpoint-layout", "verl", "--checkpoint-dir", "/d", "--"],
        ["--checkpoint-layout=verl", "--checkpoint-bogus=1", "--", "true"],
        ["--checkpoint-dir"],
        ["--checkpoint-layout=verl", "--checkpoint-dir=/d", "--checkpoint-shared=yes", "--", "t"],
        ["--tensorboard-dir=/tb", "--", "true"],
        ["--tensorboard-keys=verl", "--", "true"],
        ["--checkpoint-shared", "--tensorboard-dir=/tb", "--tensorboard-keys=verl", "--", "t"],
    ],
    ids=[
        "no-dir",
        "no-separator",
        "no-command",
        "unknown-flag",
        "flag-without-value",
        "shared-takes-no-value",
        "bridge-without-keys",
        "bridge-without-dir",
        "shared-without-checkpoints",
    ],
)
def test_malformed_checkpoint_flags_are_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert entrypoint.main(argv) == 2
    assert "--checkpoint-layout LAYOUT --checkpoint-dir DIR" in capsys.readouterr().err


def test_a_framework_without_a_key_map_is_refused_before_the_trainer_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = tmp_path / "started"
    argv = [
        "--tensorboard-dir",
        str(tmp_path),
        "--tensorboard-keys=trl",
        "--",
        "touch",
        str(started),
    ]
    assert entrypoint.main(argv) == 2
    assert "--tensorboard-keys 'trl' is not one of nemo-rl, openrlhf, slime, verl" in (
        capsys.readouterr().err
    )
    assert not started.exists()


def test_the_bridge_alone_runs_the_trainer_and_passes_its_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLJOB_METRICS_PORT", "0")  # any free port
    monkeypatch.setenv("RLJOB_TERMINATION_LOG", str(tmp_path / "termination-log"))
    argv = [
        "--tensorboard-dir",
        str(tmp_path),
        "--tensorboard-keys",
        "verl",
        "--",
        "sh",
        "-c",
        "exit 7",
    ]
    assert entrypoint.main(argv) == 7


def test_the_wrapper_loads_no_mirror_without_the_flags() -> None:
    probe = (
        "import sys, rljob.sdk.entrypoint as e; "
        "print(sorted(m for m in sys.modules if m.startswith(('rljob.sdk.mirror', 'boto'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_a_store_the_trainer_runs_unmirrored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RLJOB_CHECKPOINT_URI", "RLJOB_RESUME_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(entrypoint.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))
    argv = ["--checkpoint-layout=dcp", "--checkpoint-dir", str(tmp_path / "ckpt"), "--"]
    assert entrypoint.main([*argv, sys.executable, "-c", "raise SystemExit(7)"]) == 7


def test_a_refused_restore_never_starts_the_trainer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(layout: str, root: Path, **_: object) -> mirror.Mirror | None:
        from rljob.sdk.layouts import WorldSizeMismatch

        raise WorldSizeMismatch(layout, 2, 3, "v000000000010-a000001")

    monkeypatch.setattr(mirror, "launch", refuse)
    log = tmp_path / "termination-log"
    marker = tmp_path / "started"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    code = entrypoint.run_native("verl", tmp_path / "ckpt", command, log)
    assert code == entrypoint.NATIVE_RESTORE_FAILED
    assert not marker.exists()
    assert log.read_text().startswith("WorldSizeMismatch: v000000000010-a000001 was saved by 2")


@pytest.mark.parametrize(
    ("flags", "shared"),
    [
        pytest.param([], False, id="each-node-its-own-directory"),
        pytest.param(["--checkpoint-shared"], True, id="one-shared-directory"),
    ],
)
def test_the_shared_flag_reaches_the_mirror(
    flags: list[str], shared: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    def launch(layout: str, root: Path, *, shared: bool = False) -> mirror.Mirror | None:
        seen.append(shared)
        return None

    monkeypatch.setattr(mirror, "launch", launch)
    monkeypatch.setenv(entrypoint.TERMINATION_LOG_ENV, str(tmp_path / "termination-log"))
    argv = ["--checkpoint-layout=verl", *flags, f"--checkpoint-dir={tmp_path}", "--"]
    assert entrypoint.main([*argv, sys.executable, "-c", "raise SystemExit(0)"]) == 0
    assert seen == [shared]


def test_on_a_shared_directory_only_node_zero_restores(tmp_path: Path) -> None:
    """Node 1 returns before reading the store at all (no endpoint is configured here)."""
    from rljob.sdk.layouts import get_layout
    from rljob.sdk.native import materialise_from_env

    env = {
        "NNODES": "2",
        "NODE_RANK": "1",
        "RLJOB_RESUME_URI": "s3://b/p/rl/j/v000000000005-a000001",
    }
    assert materialise_from_env(get_layout("verl"), tmp_path, env, shared=True) is None
    assert list(tmp_path.iterdir()) == []
