"""tools/build.sh builds nothing on a cache hit and rebuilds when its key changes.

`go` is replaced by a recording stand-in on PATH: what is under test is the script's cache
logic, not the Go toolchain (the integration suite runs the real binaries)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_GO = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_GO_LOG"
if [ "$1" = version ]; then echo "go version go1.26.8 linux/amd64"; exit 0; fi
if [ "$1" = list ]; then  # a module folder holding the manifests the kueue and jobset builds copy
  mod="$(dirname "$FAKE_GO_LOG")/module"
  mkdir -p "$mod/config/components/crd/bases" "$mod/config/components/webhook/patches"
  touch "$mod/config/components/crd/bases/workloads.yaml"
  touch "$mod/config/components/webhook/manifests.yaml"
  touch "$mod/config/components/webhook/kustomization.yaml"
  touch "$mod/config/components/webhook/patches/pod-patch.yaml"
  echo "$mod"; exit 0
fi
if [ "$1" = mod ]; then  # go mod download -json: the .info file the jobset build reads
  info="$(dirname "$FAKE_GO_LOG")/module.info"
  echo '{"Origin":{"Hash":"09e9a3bb4b64dbe75b5b0119d3623903f0434643"}}' > "$info"
  printf '{\n\t"Info": "%s",\n}\n' "$info"; exit 0
fi
out=""; prev=""; pkgs=()
for a in "$@"; do
  if [ "$prev" = -o ]; then out=$a; elif [[ $a == */* && $a != -* ]]; then pkgs+=("$a"); fi
  prev=$a
done
if [[ $out != */ ]]; then touch "$out"; exit 0; fi
for p in "${pkgs[@]}"; do touch "$out$(basename "$p")"; done
"""


@pytest.fixture
def sandbox(tmp_path: Path) -> dict[str, str]:
    shutil.copytree(REPO / "tools", tmp_path / "tools")
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    (fake_bin / "go").write_text(FAKE_GO)
    (fake_bin / "go").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
        "RLJOB_CACHE_DIR": str(tmp_path / "cache"),
        "FAKE_GO_LOG": str(tmp_path / "go.log"),
        "TOOLS": str(tmp_path / "tools"),
    }


def _build(env: dict[str, str]) -> tuple[Path, list[str]]:
    log = Path(env["FAKE_GO_LOG"])
    log.write_text("")
    out = subprocess.run(
        ["bash", f"{env['TOOLS']}/build.sh"], env=env, check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip()), [
        line for line in log.read_text().splitlines() if line.startswith("build")
    ]


def test_cache_hit_builds_nothing_and_a_changed_key_rebuilds_only_its_tool(
    sandbox: dict[str, str],
) -> None:
    first, builds = _build(sandbox)
    assert len(builds) == 7, builds  # kube (two go builds), kwok, s3, helm, kueue, jobset
    assert {
        "kube-apiserver",
        "etcd",
        "kwok",
        "kubectl",
        "versitygw",
        "helm",
        "kueue",
        "jobset",
    } <= {p.name for p in first.iterdir()}

    again, builds = _build(sandbox)
    assert (again, builds) == (first, [])

    for tool, built in (("kwok", "sigs.k8s.io/kwok/cmd/kwok"), ("s3", "versitygw/cmd/versitygw")):
        go_sum = Path(sandbox["TOOLS"]) / tool / "go.sum"
        go_sum.write_text(go_sum.read_text() + "\n")
        changed, builds = _build(sandbox)
        assert changed != first
        assert len(builds) == 1 and built in builds[0], builds
        assert {p.name for p in changed.iterdir()} == {p.name for p in first.iterdir()}
        first = changed


def test_editing_one_tools_build_rebuilds_only_that_tool(sandbox: dict[str, str]) -> None:
    """The key holds the tool's own build function, not the whole script: adding a tool, or
    changing how helm is built, leaves the 25-minute Kubernetes build cached."""
    _build(sandbox)
    script = Path(sandbox["TOOLS"]) / "build.sh"
    text = script.read_text()
    script.write_text(text.replace('ld="-s -w -X helm.sh', 'ld="-s -w -buildid= -X helm.sh', 1))
    _, builds = _build(sandbox)
    assert len(builds) == 1 and "helm.sh/helm/v3/cmd/helm" in builds[0], builds
