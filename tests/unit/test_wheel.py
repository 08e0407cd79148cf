"""The wheel CI builds installs into a clean venv and runs: `rljob --version`, `rljob crd`, the
kubectl plugin, and the RBAC rules file the wheel embeds (pyproject force-include) for the dev
launcher outside a checkout.

Kept fast and offline: uv builds the wheel (from its cache; the images build it the same way),
the venv is made with `python -m venv --without-pip` and uv installs the wheel with --no-deps.
The wheel's dependencies come from this test run's own site-packages through a .pth file, which
adds their folder to sys.path but never imports this checkout (the editable install's hook is a
.pth inside that folder, and .pth files there are not processed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from rljob import __version__
from rljob.api import crd_yaml

REPO = Path(__file__).resolve().parents[2]
RBAC_RULES = REPO / "charts" / "rljob-operator" / "files" / "rbac-rules.yaml"


def _uv() -> Path | None:
    if os.environ.get("RLJOB_UV"):
        return Path(os.environ["RLJOB_UV"])
    on_path = shutil.which("uv")
    if on_path:
        return Path(on_path)
    cache = Path(os.environ.get("RLJOB_CACHE_DIR") or Path.home() / ".cache" / "rljob-operator")
    installed = sorted(cache.glob("uv-*/bin/uv"))  # tools/bootstrap.sh's uv
    return installed[-1] if installed else None


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = _uv()
    if uv is None:
        pytest.skip("uv not found (tools/bootstrap.sh installs it; or set RLJOB_UV)")
    out = tmp_path_factory.mktemp("dist")
    build = [str(uv), "build", "--wheel", "--out-dir", str(out), str(REPO)]
    offline = subprocess.run([*build, "--offline"], capture_output=True, text=True, check=False)
    if offline.returncode != 0:  # hatchling not in uv's cache yet: fetch it
        _run(build, cwd=REPO)
    (built,) = out.glob("rljob_operator-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = _uv()
    assert uv is not None
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    python = root / "bin" / "python"
    install = [str(uv), "pip", "install", "--python", str(python), "--no-deps", str(wheel)]
    _run([*install, "--offline"], cwd=root)
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], root
        ).strip()
    )
    (site / "_rljob_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root


def _isolated_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    }


def test_wheel_contents(wheel: Path) -> None:
    assert wheel.name == f"rljob_operator-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert archive.read("rljob/dev/rbac-rules.yaml") == RBAC_RULES.read_bytes()
        entry_points = archive.read(f"rljob_operator-{__version__}.dist-info/entry_points.txt")
    assert "rljob/cli.py" in names and "rljob/sdk/entrypoint.py" in names
    assert not any(name.startswith(("operator/", "tests/")) for name in names)
    assert b"rljob = rljob.cli:main" in entry_points
    assert b"kubectl-rljob = rljob.kubectl.plugin:main" in entry_points


def test_rljob_version_runs_from_the_clean_venv(venv: Path, tmp_path: Path) -> None:
    out = _run([str(venv / "bin" / "rljob"), "--version"], cwd=tmp_path, env=_isolated_env())
    assert out.strip() == f"rljob {__version__}"


def test_the_venv_imports_the_installed_package(venv: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.resources, rljob; print(rljob.__file__); "
        "print(importlib.resources.files('rljob.dev').joinpath('rbac-rules.yaml').read_text(), "
        "end='')"
    )
    out = _run([str(venv / "bin" / "python"), "-c", code], cwd=tmp_path, env=_isolated_env())
    location, _, rules = out.partition("\n")
    assert Path(location).is_relative_to(venv), f"rljob imported from {location}, not the venv"
    assert rules == RBAC_RULES.read_text()


def test_crd_and_kubectl_plugin_run_from_the_clean_venv(venv: Path, tmp_path: Path) -> None:
    env = _isolated_env()
    assert _run([str(venv / "bin" / "rljob"), "crd"], cwd=tmp_path, env=env) == crd_yaml()
    out = _run([str(venv / "bin" / "kubectl-rljob"), "--help"], cwd=tmp_path, env=env)
    for command in ("status", "restart", "checkpoints", "diagnose", "resume"):
        assert command in out
