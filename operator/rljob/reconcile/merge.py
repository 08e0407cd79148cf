"""How a role's free-form `podTemplate` is merged over the rendered pod template.

Rules, applied recursively from the template's root (metadata and spec):
- a mapping merges into a mapping key by key;
- null removes the key (as in a JSON merge patch), e.g. to drop a rendered probe;
- `containers` and `initContainers` merge item by item, matched by `name`; items with a new
  name are appended (sidecars);
- every other list, and every other value, replaces what was rendered (so a `volumeMounts`
  list given for the main container replaces the rendered one: repeat what you still need).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

NAMED_LISTS = frozenset({"containers", "initContainers"})


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A new mapping: `overrides` merged over `base` by the rules above (inputs untouched)."""
    merged = copy.deepcopy(dict(base))
    for key, value in overrides.items():
        current = merged.get(key)
        if value is None:
            merged.pop(key, None)
        elif key in NAMED_LISTS and isinstance(current, list) and isinstance(value, list):
            merged[key] = _merge_by_name(current, value)
        elif isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = merge_overrides(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _merge_by_name(base: list[Any], overrides: list[Any]) -> list[Any]:
    merged = list(base)
    positions = {
        item["name"]: index
        for index, item in enumerate(merged)
        if isinstance(item, Mapping) and "name" in item
    }
    for item in overrides:
        name = item.get("name") if isinstance(item, Mapping) else None
        if name in positions:
            merged[positions[name]] = merge_overrides(merged[positions[name]], item)
        else:
            merged.append(copy.deepcopy(item))
    return merged
