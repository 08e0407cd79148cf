"""The pure checkpoint modules import no I/O library: the operator imports them freely, boto3
only where it touches S3 (rljob.checkpoints.s3)."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "rljob.checkpoints",
    "rljob.checkpoints.errors",
    "rljob.checkpoints.layout",
    "rljob.checkpoints.lineage",
    "rljob.checkpoints.models",
    "rljob.checkpoints.retention",
    "rljob.checkpoints.selection",
    "rljob.checkpoints.validity",
]
FORBIDDEN = ["boto3", "botocore", "kopf", "kubernetes", "aiohttp", "prometheus_client"]


def test_pure_modules_import_no_io_libraries() -> None:
    code = (
        "import importlib, sys\n"
        f"for name in {PURE!r}: importlib.import_module(name)\n"
        f"print(','.join(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == ""
