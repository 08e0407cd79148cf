"""`rljob dev env`: after `eval "$(rljob dev env)"`, kubectl is the bed's own and `kubectl rljob`
finds the plugin, whatever else is on PATH."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rljob.dev.launcher import env_lines


def test_the_exports_put_the_beds_kubectl_and_the_plugin_first(tmp_path: Path) -> None:
    tools = tmp_path / "bin with space"
    tools.mkdir()
    (tools / "kubectl").write_text("#!/bin/sh\n")
    (tools / "kubectl").chmod(0o755)
    script = (
        env_lines(tmp_path / "run", tools) + "\ncommand -v kubectl kubectl-rljob; echo $KUBECONFIG"
    )
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30
    )
    kubectl, plugin, kubeconfig = done.stdout.splitlines()
    assert kubectl == str(tools / "kubectl")
    assert plugin == str(Path(sys.executable).parent / "kubectl-rljob")
    assert kubeconfig.startswith(str(tmp_path / "run"))
