"""No module under operator/rljob/ is over 400 lines (one idea per module, DESIGN section 3)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "rljob"
LIMIT = 400


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_the_limit() -> None:
    over = {
        str(path.relative_to(PACKAGE)): _lines(path)
        for path in sorted(PACKAGE.rglob("*.py"))
        if _lines(path) > LIMIT
    }
    assert over == {}, f"split these (at most {LIMIT} lines a module): {over}"
