"""The podTemplate merge rule: mappings merge, null removes, containers match by name, every
other list replaces."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.reconcile import merge_overrides

BASE: dict[str, Any] = {
    "metadata": {"labels": {"a": "1"}},
    "spec": {
        "containers": [
            {"name": "main", "image": "x", "env": [{"name": "A", "value": "1"}]},
        ],
        "volumes": [{"name": "v1"}],
        "nodeSelector": {"pool": "gpu"},
    },
}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param({}, BASE, id="nothing"),
        pytest.param(
            {"metadata": {"labels": {"b": "2"}}},
            {**BASE, "metadata": {"labels": {"a": "1", "b": "2"}}},
            id="mappings-merge",
        ),
        pytest.param(
            {"spec": {"nodeSelector": None}},
            {
                "metadata": BASE["metadata"],
                "spec": {k: v for k, v in BASE["spec"].items() if k != "nodeSelector"},
            },
            id="null-removes",
        ),
        pytest.param(
            {"spec": {"volumes": [{"name": "v2"}]}},
            {**BASE, "spec": {**BASE["spec"], "volumes": [{"name": "v2"}]}},
            id="lists-replace",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "main", "image": "y"}]}},
            {
                **BASE,
                "spec": {
                    **BASE["spec"],
                    "containers": [
                        {"name": "main", "image": "y", "env": [{"name": "A", "value": "1"}]}
                    ],
                },
            },
            id="containers-match-by-name",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "sidecar", "image": "s"}]}},
            {
                **BASE,
                "spec": {
                    **BASE["spec"],
                    "containers": [*BASE["spec"]["containers"], {"name": "sidecar", "image": "s"}],
                },
            },
            id="new-containers-append",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
            {
                **BASE,
                "spec": {
                    **BASE["spec"],
                    "containers": [
                        {"name": "main", "image": "x", "env": [{"name": "B", "value": "2"}]}
                    ],
                },
            },
            id="lists-inside-containers-replace",
        ),
    ],
)
def test_merge_rule(overrides: dict[str, Any], expected: dict[str, Any]) -> None:
    assert merge_overrides(BASE, overrides) == expected


def test_inputs_are_not_modified() -> None:
    overrides = {"spec": {"containers": [{"name": "main", "image": "y"}]}}
    merged = merge_overrides(BASE, overrides)
    merged["spec"]["containers"][0]["env"].append({"name": "C"})
    assert BASE["spec"]["containers"][0] == {
        "name": "main",
        "image": "x",
        "env": [{"name": "A", "value": "1"}],
    }
    assert overrides == {"spec": {"containers": [{"name": "main", "image": "y"}]}}
