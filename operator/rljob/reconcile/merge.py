"""How a role's free-form `podTemplate` is merged over the rendered pod template.

Rules, applied recursively from the template's root (metadata and spec), as Kubernetes'
strategic merge patch does for a pod template:
- a mapping merges into a mapping key by key;
- null removes the key (as in a JSON merge patch), e.g. to drop a rendered probe;
- the lists of KEYED_LISTS merge item by item, matched by their key: in the pod spec
  `containers`, `initContainers`, `volumes` and `imagePullSecrets` by `name`; in each container
  `env` by `name`, `volumeMounts` by `mountPath` and `ports` by `containerPort` and `protocol`
  (TCP when unset, as the API defaults it). An item whose key matches a rendered item merges over
  it by these same rules (so null inside it removes one of its keys); any other item (a new key,
  or no key) is appended: a sidecar, a variable, a mount;
- every other list, and every other value, replaces what was rendered (e.g. `tolerations`,
  `readinessGates`, `command`, `args`).

A rendered item cannot be dropped by listing the others: what the role's own fields render
(env, volumes, volumeMounts, imagePullSecrets) is dropped there; a whole keyed list is dropped
with null. The operator's own items are kept whatever the podTemplate says: the api layer
refuses a podTemplate overriding them (rljob.api.pod_template).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Mapping
from typing import Any

Path = tuple[str, ...]
KeyOf = Callable[[Mapping[str, Any]], Hashable | None]


def _field(name: str) -> KeyOf:
    def key(item: Mapping[str, Any]) -> Hashable | None:
        value = item.get(name)
        return value if isinstance(value, str | int) and not isinstance(value, bool) else None

    return key


def _port(item: Mapping[str, Any]) -> Hashable | None:
    number, protocol = item.get("containerPort"), item.get("protocol", "TCP")
    if not isinstance(number, int) or isinstance(number, bool) or not isinstance(protocol, str):
        return None
    return (number, protocol)


_CONTAINER_LISTS: dict[str, KeyOf] = {
    "env": _field("name"),
    "volumeMounts": _field("mountPath"),
    "ports": _port,
}
# Where a list merges by key, by its path from the template's root; an item's own lists are
# found under the list's path (a container's env under ("spec", "containers", "env")).
KEYED_LISTS: dict[Path, KeyOf] = {
    ("spec", "volumes"): _field("name"),
    ("spec", "imagePullSecrets"): _field("name"),
}
for _kind in ("containers", "initContainers"):
    KEYED_LISTS[("spec", _kind)] = _field("name")
    KEYED_LISTS.update({("spec", _kind, name): key for name, key in _CONTAINER_LISTS.items()})


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A new mapping: `overrides` merged over the pod template `base` by the rules above (inputs
    untouched)."""
    return _merge(base, overrides, ())


def _merge(base: Mapping[str, Any], overrides: Mapping[str, Any], path: Path) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for name, value in overrides.items():
        current = merged.get(name)
        key = KEYED_LISTS.get((*path, name))
        if value is None:
            merged.pop(name, None)
        elif key is not None and isinstance(current, list) and isinstance(value, list):
            merged[name] = _merge_by_key(current, value, key, (*path, name))
        elif isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[name] = _merge(current, value, (*path, name))
        else:
            merged[name] = copy.deepcopy(value)
    return merged


def _merge_by_key(base: list[Any], overrides: list[Any], key: KeyOf, path: Path) -> list[Any]:
    merged = copy.deepcopy(base)
    positions: dict[Hashable, int] = {}
    for index, item in enumerate(merged):
        identity = key(item) if isinstance(item, Mapping) else None
        if identity is not None:
            positions.setdefault(identity, index)
    for item in overrides:
        identity = key(item) if isinstance(item, Mapping) else None
        if identity is not None and identity in positions:
            position = positions[identity]
            merged[position] = _merge(merged[position], item, path)
        else:
            if identity is not None:
                positions[identity] = len(merged)
            merged.append(copy.deepcopy(item))
    return merged
