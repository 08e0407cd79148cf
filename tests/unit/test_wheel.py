"""What the operator's image installs (its wheel, the SDK's and the vocabulary's,
images/operator/Dockerfile) runs from a clean venv: `rljob --version` and `rljob crd`, imported
from the venv, not this checkout.

The wheels' dependencies come from this test run's own site-packages through a .pth file, which
adds their folder to sys.path but never imports this checkout (the editable installs' hooks are
.pth files inside that folder, and .pth files there are not processed)."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import pytest

from rljob.api import crd_yaml
from rljob.version import __version__
from tests.unit import wheels


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheels.build_wheel("rljob-operator", tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    python = wheels.new_venv(root)
    sdk = wheels.build_wheel("rljob-sdk", tmp_path_factory.mktemp("sdk"))
    vocabulary = wheels.build_wheel("rljob-vocabulary", tmp_path_factory.mktemp("vocabulary"))
    wheels.install(python, wheel, sdk, vocabulary, deps=False)
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(wheels.run([python, "-c", code], root).strip())
    (site / "_rljob_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root


def test_wheel_contents(wheel: Path) -> None:
    assert wheel.name == f"rljob_operator-{__version__}-py3-none-any.whl"
    names = wheels.names(wheel)
    assert "rljob/cli.py" in names
    assert not any(name.startswith(("operator/", "tests/")) for name in names)
    # The plugin and the SDK are distributions of their own (test_distributions).
    assert wheels.metadata(wheel, "entry_points.txt").split("\n", 1)[1].strip() == (
        "rljob = rljob.cli:main"
    )


def test_rljob_version_runs_from_the_clean_venv(venv: Path, tmp_path: Path) -> None:
    out = wheels.run([venv / "bin" / "rljob", "--version"], tmp_path, wheels.isolated_env())
    assert out.strip() == f"rljob {__version__}"


def test_the_venv_imports_the_installed_package(venv: Path, tmp_path: Path) -> None:
    modules = ("rljob.cli", "rljob.signatures", "rljob.vocabulary.enums")
    code = f"import importlib; print(*(importlib.import_module(m).__file__ for m in {modules}))"
    out = wheels.run([venv / "bin" / "python", "-c", code], tmp_path, wheels.isolated_env())
    for location in out.split():
        assert Path(location).is_relative_to(venv), f"rljob imported from {location}, not the venv"


def test_crd_runs_from_the_clean_venv(venv: Path, tmp_path: Path) -> None:
    out = wheels.run([venv / "bin" / "rljob", "crd"], tmp_path, wheels.isolated_env())
    assert out == crd_yaml()


def test_the_test_run_is_not_the_venvs_python(venv: Path) -> None:
    assert not Path(sys.executable).is_relative_to(venv)
