"""docs/weight-sync.md stays true to the SDK: the EngineRoster signature it shows is the real
one, its driver loop imports real names, and the RBAC it tells users to bind is the chart's."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import yaml

from rljob.sdk import engine_generation
from rljob.sdk.roster import Engine, EngineRoster

REPO = Path(__file__).resolve().parents[3]
DOC = (REPO / "docs" / "weight-sync.md").read_text()
READER = REPO / "charts" / "rljob-operator" / "templates" / "workload-reader.yaml"


def fenced(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.DOTALL)


def test_the_signature_shown_is_engine_rosters() -> None:
    (signature,) = [block for block in fenced("python") if block.startswith("EngineRoster(")]
    shown = re.findall(r"^\s+(\w+)=", signature, flags=re.MULTILINE)
    shown += re.findall(r"\b(on_\w+)=", signature)
    real = [p for p in inspect.signature(EngineRoster.__init__).parameters if p != "self"]
    assert sorted(set(shown)) == sorted(real)


def test_the_driver_loop_uses_real_names() -> None:
    (loop,) = [block for block in fenced("python") if "while training" in block]
    for node in ast.walk(ast.parse(loop)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rljob"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
    for method in ("start", "serving", "wait_until"):
        assert hasattr(EngineRoster, method) and f".{method}(" in loop
    fields = [f.name for f in Engine.__dataclass_fields__.values()]
    assert f"dataclass `{', '.join(fields)}`" in DOC.replace("\n", " ")
    camel = {"required_generation": "requiredGeneration"}
    for field in fields:  # the roster fields table names each field
        assert f"| `{camel.get(field, field)}` |" in DOC, field


def test_the_engine_side_names_exist() -> None:
    for name in ("set_policy_generation", "register", "serve", "weight_version_from"):
        assert hasattr(engine_generation, name) and f"{name}(" in DOC
    assert f"`{engine_generation.METRIC}`" in DOC


def test_the_binding_names_the_charts_workload_reader() -> None:
    (binding,) = [yaml.safe_load(block) for block in fenced("yaml")]
    assert binding["kind"] == "RoleBinding"
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["roleRef"]["name"].endswith("-workload-reader")
    assert '{{ include "rljob-operator.fullname" . }}-workload-reader' in READER.read_text()
