"""The invalid-manifest corpus, shared by the model tests and the API server tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
INVALID = HERE / "invalid"
EXAMPLES = sorted((HERE.parents[1] / "examples").glob("*.yaml"))


def expected_field(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("# expect-field:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{path.name} has no '# expect-field:' line")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def example_rljob(path: Path) -> dict[str, Any]:
    """The one RLJob of an example (some carry the ServiceAccount and RoleBinding it needs)."""
    (body,) = [doc for doc in documents(path) if doc.get("kind") == "RLJob"]
    return body


def invalid_manifests(*, updates: bool) -> list[Any]:
    return [
        pytest.param(path, id=path.stem)
        for path in sorted(INVALID.glob("*.yaml"))
        if (len(documents(path)) == 2) == updates
    ]
