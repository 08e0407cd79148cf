"""Where the upstream binaries are: RLJOB_BIN_DIR, or a (cached) build from tools/build.sh."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from rljob.dev.components import COMPONENTS

_REQUIRED = (*COMPONENTS, "kubectl")


def repo_root() -> Path | None:
    """The source checkout this package runs from, if it runs from one."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "tools" / "build.sh").exists() else None


def bin_dir() -> Path:
    """The folder holding etcd, kube-apiserver, ..., kwok; builds them on a cache miss."""
    configured = os.environ.get("RLJOB_BIN_DIR")
    if configured:
        path = Path(configured)
    else:
        root = repo_root()
        if root is None:
            raise RuntimeError("set RLJOB_BIN_DIR: no source checkout to build the binaries from")
        out = subprocess.run(
            ["bash", str(root / "tools" / "build.sh")],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
        )
        path = Path(out.stdout.strip().splitlines()[-1])
    missing = [name for name in _REQUIRED if not (path / name).exists()]
    if missing:
        raise RuntimeError(f"{path} lacks {', '.join(missing)}")
    return path
