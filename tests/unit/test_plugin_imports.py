"""The kubectl plugin and the vocabulary it reads RLJobs with import light: in a fresh interpreter,
importing one of them loads nothing of the operator's dependencies and no rljob module beyond the
plugin's and the vocabulary's (their wheels are all `pip install rljob-kubectl` brings;
test_distributions installs them alone). A package counts with its __init__: rljob.api's and
rljob.health's import pydantic, so nothing in them may be reached."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import rljob.vocabulary

# What the operator's wheel requires and the plugin's must never load.
HEAVY = ("pydantic", "kopf", "kubernetes", "yaml", "boto3", "structlog", "prometheus_client")
# The rljob packages the plugin's install holds.
LIGHT = ("rljob.kubectl", "rljob.vocabulary")
VOCABULARY = sorted(
    module.name for module in pkgutil.iter_modules(rljob.vocabulary.__path__, "rljob.vocabulary.")
)
PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_by(module: str) -> list[str]:
    """Every module a fresh interpreter holds after importing `module`."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, module],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


@pytest.mark.parametrize("module", ["rljob.kubectl.plugin", "rljob.vocabulary", *VOCABULARY])
def test_importing_loads_none_of_the_operators_dependencies(module: str) -> None:
    loaded = _loaded_by(module)
    assert [name for name in loaded if name.split(".")[0] in HEAVY] == []
    rljob = [name for name in loaded if name.startswith("rljob.")]
    assert [name for name in rljob if not name.startswith(LIGHT)] == []


def test_the_vocabulary_has_the_modules_the_plugin_reads() -> None:
    # An empty list would let the parametrized test above pass on nothing.
    assert {"rljob.vocabulary.enums", "rljob.vocabulary.labels"} <= set(VOCABULARY)
