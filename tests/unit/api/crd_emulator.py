"""The API server's validation of an RLJob against the generated CRD, emulated without a control
plane: structural defaults, types, bounds, patterns, enums, unknown fields (as under
fieldValidation=Strict) and the CEL rules, translated to Python for the subset of CEL the
generator writes. tests/integration/test_spec_agreement.py holds the real server to the models;
this lets a unit test hold the CRD text itself to them. A rule outside the subset fails loudly."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable
from typing import Any

from rljob.api import crd_manifest
from rljob.api.durations import duration_nanoseconds

Node = dict[str, Any]
CEL_RULES = "x-kubernetes-validations"


@functools.cache
def root_schema() -> Node:
    """The CRD's openAPIV3Schema (shared: validation copies the body, never the schema)."""
    (version,) = crd_manifest()["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def node_at(path: str) -> Node:
    """The schema node at a dotted path of property names, [] for list items."""
    node = root_schema()
    for name in path.split("."):
        node = node["items"] if name == "[]" else node["properties"][name]
    return node


def rules_at(path: str) -> list[dict[str, str]]:
    return node_at(path).get(CEL_RULES, [])  # type: ignore[no-any-return]


def crd_refusals(body: dict[str, Any]) -> set[str]:
    """The field paths the API server would name in refusing `body` (empty: it is accepted)."""
    refused: set[str] = set()
    _validate(root_schema(), copy.deepcopy(body), "", refused)
    return refused


def _child(path: str, name: str) -> str:
    return ".".join(part for part in (path, name) if part)


def _validate(node: Node, value: Any, path: str, refused: set[str]) -> None:
    if not _shape_holds(node, value, path, refused):
        refused.add(path)
        return
    for rule in node.get(CEL_RULES, []):
        if "oldSelf" not in rule["rule"] and not _cel_holds(rule["rule"], value):
            refused.add(_child(path, rule.get("fieldPath", "").lstrip(".")))


def _shape_holds(node: Node, value: Any, path: str, refused: set[str]) -> bool:
    if node.get("x-kubernetes-int-or-string"):
        if isinstance(value, int):
            return _number_holds(node, value, int)
        return _string_holds(node, value)
    checks: dict[str, Callable[[], bool]] = {
        "object": lambda: _object_holds(node, value, path, refused),
        "array": lambda: _array_holds(node, value, path, refused),
        "string": lambda: _string_holds(node, value),
        "integer": lambda: _number_holds(node, value, int),
        "number": lambda: _number_holds(node, value, int | float),
        "boolean": lambda: isinstance(value, bool),
    }
    return checks[node["type"]]()


def _object_holds(node: Node, value: Any, path: str, refused: set[str]) -> bool:
    if not isinstance(value, dict):
        return False
    properties = node.get("properties", {})
    for name, child in properties.items():
        if name not in value and "default" in child:
            value[name] = copy.deepcopy(child["default"])
    missing = [name for name in node.get("required", []) if name not in value]
    refused.update(_child(path, name) for name in missing)
    values = node.get("additionalProperties")
    if len(value) > node.get("maxProperties", len(value)):
        return False
    for name, item in value.items():
        if name in properties:
            _validate(properties[name], item, _child(path, name), refused)
        elif values is not None:
            _validate(values, item, _child(path, name), refused)
        elif not node.get("x-kubernetes-preserve-unknown-fields") and path != "metadata":
            refused.add(_child(path, name))  # metadata is the API server's own to check
    return True


def _array_holds(node: Node, value: Any, path: str, refused: set[str]) -> bool:
    if not isinstance(value, list) or len(value) > node.get("maxItems", len(value)):
        return False
    keys = node.get("x-kubernetes-list-map-keys")
    unique = node.get("x-kubernetes-list-type") in ("set", "map")
    seen = set()
    for index, item in enumerate(value):
        _validate(node["items"], item, f"{path}[{index}]", refused)
        identity = repr([item.get(key) for key in keys]) if keys else repr(item)
        if unique and identity in seen:
            refused.add(f"{path}[{index}]")
        seen.add(identity)
    return True


def _string_holds(node: Node, value: Any) -> bool:
    return (
        isinstance(value, str)
        and node.get("minLength", 0) <= len(value) <= node.get("maxLength", len(value))
        and ("pattern" not in node or _re2_search(node["pattern"], value))
        and value in node.get("enum", [value])
    )


def _number_holds(node: Node, value: Any, kind: Any) -> bool:
    if not isinstance(value, kind) or isinstance(value, bool):
        return False
    low, high = node.get("minimum"), node.get("maximum")
    above = low is None or (value > low if node.get("exclusiveMinimum") else value >= low)
    below = high is None or (value < high if node.get("exclusiveMaximum") else value <= high)
    return above and below


def _re2_search(pattern: str, text: str) -> bool:
    # RE2's $ is the end of the text; Python's would also match before a final newline. Python
    # has no POSIX classes: [:cntrl:] is spelled out.
    pattern = pattern.replace("[:cntrl:]", "\\x00-\\x1f\\x7f")
    return re.search(re.sub(r"\$$", r"\\Z", pattern), text) is not None


# ------------------------------------------------------------------ CEL, the subset written


class _MissingFieldError(Exception):
    """A field that is absent: has() is false, any other use makes the rule fail."""


class _String(str):
    def matches(self, pattern: str) -> bool:
        return _re2_search(pattern, self)

    def indexOf(self, part: str) -> int:  # noqa: N802 (CEL's name)
        return self.find(part)

    def startsWith(self, prefix: str) -> bool:  # noqa: N802 (CEL's name)
        return self.startswith(prefix)

    def size(self) -> int:
        return len(self)

    def contains(self, part: str) -> bool:
        return part in self

    def lowerAscii(self) -> _String:  # noqa: N802 (CEL's name)
        return _String(self.lower())

    def split(self, separator: str) -> _List:  # type: ignore[override]
        return _List(str.split(self, separator))


class _Object:
    """An object (fields as attributes) or a map (keys for all())."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        if name not in self._fields:
            raise _MissingFieldError(name)
        return _cel_value(self._fields[name])

    def __getitem__(self, key: str) -> Any:
        return _cel_value(self._fields[key])

    def all(self, holds: Callable[[Any], bool]) -> bool:
        return all(holds(_String(key)) for key in self._fields)


class _List(list[Any]):
    """A list (items converted as they are read)."""

    def all(self, holds: Callable[[Any], bool]) -> bool:
        return all(holds(_cel_value(item)) for item in self)

    def exists(self, holds: Callable[[Any], bool]) -> bool:
        return any(holds(_cel_value(item)) for item in self)


class _Duration(int):
    def getSeconds(self) -> int:  # noqa: N802 (CEL's name)
        return int(self) // 10**9


def _cel_value(value: Any) -> Any:
    if isinstance(value, str):
        return _String(value)
    if isinstance(value, dict):
        return _Object(value)
    if isinstance(value, list):
        return _List(value)
    return value


def _type(value: Any) -> str:
    """CEL's type(), as the name of the type: what the rules compare with map, list, string."""
    kinds = ((_Object, "map"), (list, "list"), (str, "string"), (bool, "bool"), (int, "int"))
    return next((name for kind, name in kinds if isinstance(value, kind)), "other")


def _has(read: Callable[[], Any]) -> bool:
    try:
        read()
    except _MissingFieldError:
        return False
    return True


def _duration(text: str) -> _Duration:
    return _Duration(duration_nanoseconds(text))


_TRANSLATIONS = [
    (r"\bhas\(([^()]*)\)", r"_has(lambda: \1)"),
    (r"\.(all|exists)\((\w+), ", r".\1(lambda \2: "),
    (r"\btype\(", "_type("),
    (r"(==|!=) (map|list|string)\b", r"\1 '\2'"),
    (r"\bnull\b", "None"),
    (r"\bduration\(", "_duration("),
    (r"(?<![.\w])size\(", "_size("),
    (r"&&", " and "),
    (r"\|\|", " or "),
    (r"!(?!=)", " not "),
]


_STRING_LITERAL = re.compile(r"""("[^"]*"|'[^']*')""")


def python_of(rule: str) -> str:
    """A CEL rule of the generated subset as a Python expression over `self` (string literals
    are kept as they are: a regex may hold a !)."""
    parts = _STRING_LITERAL.split(rule)
    for index in range(0, len(parts), 2):  # even parts are outside literals
        for pattern, replacement in _TRANSLATIONS:
            parts[index] = re.sub(pattern, replacement, parts[index])
    return "".join(parts)


def _cel_holds(rule: str, value: Any) -> bool:
    # One namespace: the lambdas of has() and all() read names from the globals.
    scope = {
        "__builtins__": {},
        "self": _cel_value(value),
        "_has": _has,
        "_duration": _duration,
        "_type": _type,
        "_size": len,
    }
    try:
        return bool(eval(python_of(rule), scope))
    except SyntaxError as error:
        raise AssertionError(f"rule outside the emulated CEL subset: {rule}") from error
    except Exception:  # a CEL evaluation error refuses the object, as on the API server
        return False
