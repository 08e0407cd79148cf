"""deploy/krew/rljob.yaml, the krew manifest template of the kubectl plugin, renders to a manifest
krew's validation accepts (krew's pkg/index/validation: name, semver version, platforms with a
selector, an archive URI and its sha256, a bin the files put in place), and its launcher runs
the module the rljob-kubectl wheel's entry point names."""

from __future__ import annotations

import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.version import __version__
from tests.unit import wheels

REPO = Path(__file__).resolve().parents[2]
KREW = REPO / "deploy" / "krew"
EXAMPLE = {
    "VERSION": __version__,
    "ARCHIVE_URL": f"https://example.com/rljob-kubectl-v{__version__}.tar.gz",
    "SHA256": "0" * 64,
}
SELECTOR_KEYS = {"matchLabels", "matchExpressions"}
SEMVER = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")


def render(values: dict[str, str]) -> dict[str, Any]:
    text = (KREW / "rljob.yaml").read_text()
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", value)
    assert "{{" not in text, "a placeholder the release does not fill"
    document: dict[str, Any] = yaml.safe_load(text)
    return document


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return render(EXAMPLE)


def test_the_manifest_is_a_krew_plugin_named_after_its_file(manifest: dict[str, Any]) -> None:
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == (KREW / "rljob.yaml").stem
    assert SEMVER.match(manifest["spec"]["version"])
    assert manifest["spec"]["version"] == f"v{__version__}"
    assert 0 < len(manifest["spec"]["shortDescription"]) <= 50  # krew-index's limit


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda p: set(p["selector"]) <= SELECTOR_KEYS, id="selector"),
        pytest.param(lambda p: p["uri"].startswith("https://"), id="uri-is-https"),
        pytest.param(lambda p: p["uri"].endswith((".tar.gz", ".zip")), id="uri-is-an-archive"),
        pytest.param(lambda p: re.fullmatch(r"[0-9a-f]{64}", p["sha256"]), id="sha256"),
        pytest.param(lambda p: {f["to"] for f in p["files"]} == {"."}, id="files-at-the-root"),
        pytest.param(lambda p: p["bin"] in {f["from"] for f in p["files"]}, id="bin-is-installed"),
        pytest.param(lambda p: (KREW / p["bin"]).exists(), id="bin-is-in-deploy-krew"),
    ],
)  # fmt: skip
def test_every_platform(manifest: dict[str, Any], check: Any) -> None:
    platforms = manifest["spec"]["platforms"]
    assert platforms
    assert all(check(platform) for platform in platforms)


def test_the_caveats_install_the_same_version(manifest: dict[str, Any]) -> None:
    assert f"pip install rljob-kubectl=={__version__}" in manifest["spec"]["caveats"]


def test_the_launcher_runs_the_plugins_entry_point(tmp_path: Path) -> None:
    scripts = tomllib.loads((REPO / "operator" / "kubectl" / "pyproject.toml").read_text())
    module, _, function = scripts["project"]["scripts"]["kubectl-rljob"].partition(":")
    assert function == "main"
    assert f"-m {module} " in (KREW / "kubectl-rljob").read_text()
    env = {**os.environ, "RLJOB_PYTHON": sys.executable}
    out = wheels.run([KREW / "kubectl-rljob", "--help"], tmp_path, env)
    assert "diagnose" in out
