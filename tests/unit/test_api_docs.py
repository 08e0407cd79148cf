"""docs/api-reference.md is what tools/gen_api_docs.py generates from the models, and it covers
every field of the spec."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from pydantic import BaseModel

from rljob.api import RLJob

REPO = Path(__file__).resolve().parents[2]
GENERATOR = REPO / "tools" / "gen_api_docs.py"
DOC = REPO / "docs" / "api-reference.md"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api_docs", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_checked_in_reference_is_current() -> None:
    assert DOC.read_text() == generator().render(), (
        "docs/api-reference.md is out of date: run .venv/bin/python tools/gen_api_docs.py"
    )


def test_every_model_and_field_is_documented() -> None:
    module = generator()
    text = DOC.read_text()
    models, enums = module.models_in_order(RLJob)
    for model in models:
        assert f"### {model.__name__}\n" in text
        for name, field in model.model_fields.items():
            assert f"| `{field.alias or name}` |" in text, f"{model.__name__}.{name}"
    for kind in enums:
        assert f"### {kind.__name__}\n" in text
    assert issubclass(models[0], BaseModel) and models[0] is RLJob


def test_type_text() -> None:
    module = generator()
    from rljob.api import spec

    fields = spec.Role.model_fields
    assert module.type_text(fields["gpus"].annotation, fields["gpus"].metadata) == (
        "integer (>= 0, <= 64)"
    )
    window = spec.KVDrift.model_fields["window"]
    assert module.type_text(window.annotation, window.metadata) == "duration"
    env = fields["env"]
    assert module.type_text(env.annotation, env.metadata) == (
        "list of [EnvVar](#envvar) (at most 128 items; unique by `name`)"
    )
