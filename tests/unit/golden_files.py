"""Golden files under tests/unit/golden/: text a test compares with a file checked in there.
RLJOB_UPDATE_GOLDEN=1 rewrites the files instead (review the diff before committing it)."""

from __future__ import annotations

import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
UPDATE_VARIABLE = "RLJOB_UPDATE_GOLDEN"


def updating() -> bool:
    return os.environ.get(UPDATE_VARIABLE) == "1"


def assert_matches_golden(name: str, text: str) -> None:
    """`text` equals the golden file `name` (a path under tests/unit/golden/); with
    RLJOB_UPDATE_GOLDEN=1 it becomes the file."""
    path = GOLDEN_DIR / name
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    rerun = f"if intended, rerun with {UPDATE_VARIABLE}=1 and review the diff"
    assert path.exists(), f"no golden file {name}: {rerun}"
    assert text == path.read_text(), f"the output differs from tests/unit/golden/{name}: {rerun}"
