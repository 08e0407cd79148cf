"""Building the project's wheels and installing them into clean venvs, for the tests that check
what each distribution holds and that it runs alone (test_wheel, test_distributions).

Kept fast and offline: uv builds each wheel straight from the tree (from its cache; the images
build them the same way) and installs into a `python -m venv --without-pip` venv from its cache
(`--offline`: what this checkout's venv already installed is there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Each distribution's project folder (pyproject.toml) and its wheel's name.
PROJECTS = {
    "rljob-operator": REPO,
    "rljob-sdk": REPO / "operator" / "sdk",
    "rljob-vocabulary": REPO / "operator" / "vocabulary",
    "rljob-kubectl": REPO / "operator" / "kubectl",
    "rljob-bed": REPO / "operator" / "bed",
}


def uv() -> Path:
    if os.environ.get("RLJOB_UV"):
        return Path(os.environ["RLJOB_UV"])
    on_path = shutil.which("uv")
    if on_path:
        return Path(on_path)
    cache = Path(os.environ.get("RLJOB_CACHE_DIR") or Path.home() / ".cache" / "rljob-operator")
    installed = sorted(cache.glob("uv-*/bin/uv"))  # tools/bootstrap.sh's uv
    if not installed:
        pytest.skip("uv not found (tools/bootstrap.sh installs it; or set RLJOB_UV)")
    return installed[-1]


def call(
    command: list[str | Path], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def run(command: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    """The command's output; its failure, with both streams, fails the test."""
    result = call(command, cwd, env)
    assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def build_wheel(distribution: str, out: Path) -> Path:
    build: list[str | Path] = [uv(), "build", "--wheel", "--out-dir", out, PROJECTS[distribution]]
    if (
        call([*build, "--offline"], REPO).returncode != 0
    ):  # hatchling not in uv's cache yet: fetch it
        run(build, cwd=REPO)
    (built,) = out.glob(f"{distribution.replace('-', '_')}-*.whl")
    return built


def new_venv(root: Path) -> Path:
    """A venv without pip (uv installs into it); returns its python."""
    run([sys.executable, "-m", "venv", "--without-pip", root], cwd=root)
    return root / "bin" / "python"


def install(python: Path, *requirements: Path | str, deps: bool = True) -> None:
    """uv pip install, from uv's cache when it can (the index when a cache lacks a package)."""
    command: list[str | Path] = [uv(), "pip", "install", "--python", python, *requirements]
    if not deps:
        command.append("--no-deps")
    if call([*command, "--offline"], python.parent).returncode != 0:
        run(command, cwd=python.parent)


def install_local(python: Path, links: Path, *distributions: str) -> None:
    """uv pip install from the wheels in `links` and nothing else: no index, no cache fallback, so
    a requirement outside those wheels fails the install."""
    command: list[str | Path] = [uv(), "pip", "install", "--python", python, "--no-index"]
    run([*command, "--find-links", links, *distributions], cwd=python.parent)


def installed(python: Path) -> set[str]:
    """The names of the distributions installed in the venv of `python`."""
    code = "import importlib.metadata as m; print(*{d.metadata['Name'] for d in m.distributions()})"
    return set(run([python, "-c", code], python.parent, isolated_env()).split())


def isolated_env() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}
    }


def names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


def metadata(wheel: Path, file: str) -> str:
    """A file of the wheel's .dist-info (METADATA, entry_points.txt)."""
    with zipfile.ZipFile(wheel) as archive:
        (path,) = [name for name in archive.namelist() if name.endswith(f".dist-info/{file}")]
        return archive.read(path).decode()


def requirements(wheel: Path) -> set[str]:
    """The wheel's Requires-Dist names, without extras' requirements."""
    found = Parser().parsestr(metadata(wheel, "METADATA")).get_all("Requires-Dist") or []
    return {
        line.split(";")[0].split("<")[0].split(">")[0].split("=")[0].strip().lower()
        for line in found
        if "extra ==" not in line
    }
