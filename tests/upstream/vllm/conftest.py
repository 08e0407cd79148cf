"""Tests against the real vLLM from PyPI, run from the cached venv tools/vllm-venv.sh makes
(RLJOB_VLLM_VENV points elsewhere). Never skipped: a machine without it builds it here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.upstream.conftest import TOP, cached_venv

# A model's config.json alone (a two-layer Qwen2 of our own): enough for vLLM's ModelConfig
# offline; no weights and no tokenizer are loaded.
TINY_MODEL = Path(__file__).with_name("tiny_model")
# vLLM picks its platform at import; the PyPI build is CUDA's, and there is no GPU here.
VLLM_ENV = {"VLLM_TARGET_DEVICE": "cpu", "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "WARNING"}


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    return cached_venv("RLJOB_VLLM_VENV", "vllm-venv.sh")


@pytest.fixture(scope="session")
def sdk_installed(vllm_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rljob-sdk wheel as an image installs it (its entry points included), in a folder
    for PYTHONPATH: the cached venv itself stays as its lock made it."""
    target = tmp_path_factory.mktemp("sdk")
    xdg = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    uv = Path(os.environ.get("RLJOB_CACHE_DIR", xdg / "rljob-operator"))
    subprocess.run(
        [
            str(uv / "uv-0.13.8" / "bin" / "uv"),
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            "--python",
            str(vllm_venv / "bin" / "python"),
            str(TOP / "operator" / "sdk"),
        ],
        check=True,
        timeout=600,
    )
    return target
