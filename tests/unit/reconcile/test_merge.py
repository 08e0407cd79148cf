"""The podTemplate merge rule: mappings merge, null removes, the lists a strategic merge patch
keys (containers, volumes, env, volumeMounts, ports, ...) merge item by item, every other list
replaces."""

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
            {**BASE, "spec": {**BASE["spec"], "volumes": [{"name": "v1"}, {"name": "v2"}]}},
            id="volumes-with-a-new-name-append",
        ),
        pytest.param(
            {"spec": {"volumes": None}},
            {
                "metadata": BASE["metadata"],
                "spec": {k: v for k, v in BASE["spec"].items() if k != "volumes"},
            },
            id="null-removes-a-whole-keyed-list",
        ),
        pytest.param(
            {"spec": {"tolerations": [{"operator": "Exists"}]}},
            {**BASE, "spec": {**BASE["spec"], "tolerations": [{"operator": "Exists"}]}},
            id="other-lists-replace",
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
                        {
                            "name": "main",
                            "image": "x",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                        }
                    ],
                },
            },
            id="env-with-a-new-name-appends",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "9"}]}]}},
            {
                **BASE,
                "spec": {
                    **BASE["spec"],
                    "containers": [
                        {"name": "main", "image": "x", "env": [{"name": "A", "value": "9"}]}
                    ],
                },
            },
            id="env-with-a-rendered-name-merges-over-it",
        ),
    ],
)
def test_merge_rule(overrides: dict[str, Any], expected: dict[str, Any]) -> None:
    assert merge_overrides(BASE, overrides) == expected


RENDERED: dict[str, Any] = {
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"x": "y"}}],
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
                "ports": [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
            }
        ],
        "initContainers": [{"name": "init", "env": [{"name": "A", "value": "1"}]}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        "imagePullSecrets": [{"name": "registry"}],
    }
}


def merged_spec(**spec: Any) -> dict[str, Any]:
    return merge_overrides(RENDERED, {"spec": spec})["spec"]  # type: ignore[no-any-return]


def main(**fields: Any) -> dict[str, Any]:
    (container,) = merged_spec(containers=[{"name": "trainer", **fields}])["containers"]
    return container  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("fields", "key", "expected"),
    [
        pytest.param(
            {"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
            "volumeMounts",
            [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/data"}],
            id="mount-at-a-new-path-appends",
        ),
        pytest.param(
            {"volumeMounts": [{"name": "big-shm", "mountPath": "/dev/shm"}]},
            "volumeMounts",
            [{"name": "big-shm", "mountPath": "/dev/shm"}],
            id="mount-at-a-rendered-path-merges-by-mountPath-not-name",
        ),
        pytest.param(
            {"ports": [{"name": "debug", "containerPort": 5678}]},
            "ports",
            [
                {"name": "metrics", "containerPort": 9400, "protocol": "TCP"},
                {"name": "debug", "containerPort": 5678},
            ],
            id="port-with-a-new-number-appends",
        ),
        pytest.param(
            {"ports": [{"containerPort": 9400, "hostPort": 9400}]},
            "ports",
            [{"name": "metrics", "containerPort": 9400, "protocol": "TCP", "hostPort": 9400}],
            id="port-with-a-rendered-number-merges-protocol-defaulting-to-tcp",
        ),
        pytest.param(
            {"ports": [{"containerPort": 9400, "protocol": "UDP"}]},
            "ports",
            [
                {"name": "metrics", "containerPort": 9400, "protocol": "TCP"},
                {"containerPort": 9400, "protocol": "UDP"},
            ],
            id="same-number-other-protocol-appends",
        ),
        pytest.param(
            {"env": [{"name": "B", "valueFrom": None, "value": "literal"}]},
            "env",
            [{"name": "A", "value": "1"}, {"name": "B", "value": "literal"}],
            id="null-inside-a-matched-item-removes-its-key",
        ),
        pytest.param(
            {"env": [{"value": "no name"}, {"name": ["not", "a", "key"]}]},
            "env",
            [
                {"name": "A", "value": "1"},
                {"name": "B", "valueFrom": {"x": "y"}},
                {"value": "no name"},
                {"name": ["not", "a", "key"]},
            ],
            id="items-without-a-usable-key-append",
        ),
        pytest.param(
            {"env": {"A": "not a list"}},
            "env",
            {"A": "not a list"},
            id="a-list-replaced-by-a-non-list-is-replaced",
        ),
        pytest.param({"volumeMounts": None}, "volumeMounts", None, id="null-drops-the-list"),
    ],
)
def test_container_lists_merge_by_key(fields: dict[str, Any], key: str, expected: Any) -> None:
    assert main(**fields).get(key) == expected


@pytest.mark.parametrize(
    ("spec", "key", "expected"),
    [
        pytest.param(
            {"volumes": [{"name": "dshm", "emptyDir": {"sizeLimit": "8Gi"}}]},
            "volumes",
            [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
            id="volume-with-a-rendered-name-merges",
        ),
        pytest.param(
            {"volumes": [{"name": "dshm", "emptyDir": None, "hostPath": {"path": "/dev/shm"}}]},
            "volumes",
            [{"name": "dshm", "hostPath": {"path": "/dev/shm"}}],
            id="volume-source-swapped-with-null",
        ),
        pytest.param(
            {"imagePullSecrets": [{"name": "mirror"}]},
            "imagePullSecrets",
            [{"name": "registry"}, {"name": "mirror"}],
            id="pull-secrets-merge-by-name",
        ),
        pytest.param(
            {"initContainers": [{"name": "init", "env": [{"name": "C", "value": "3"}]}]},
            "initContainers",
            [{"name": "init", "env": [{"name": "A", "value": "1"}, {"name": "C", "value": "3"}]}],
            id="init-containers-env-merges-by-name",
        ),
    ],
)
def test_pod_spec_lists_merge_by_key(spec: dict[str, Any], key: str, expected: Any) -> None:
    assert merged_spec(**spec)[key] == expected


def test_keys_merge_only_where_a_pod_template_keys_them() -> None:
    """A list named like a keyed one elsewhere (inside a volume source, say) still replaces."""
    base = {"spec": {"volumes": [{"name": "cfg", "projected": {"sources": [{"name": "a"}]}}]}}
    override = {"spec": {"volumes": [{"name": "cfg", "projected": {"sources": [{"name": "b"}]}}]}}
    (volume,) = merge_overrides(base, override)["spec"]["volumes"]
    assert volume["projected"]["sources"] == [{"name": "b"}]
    nested = {"metadata": {"annotations": {"env": "x"}}, "spec": {"x": {"env": [{"name": "A"}]}}}
    over = {"spec": {"x": {"env": [{"name": "B"}]}}}
    assert merge_overrides(nested, over)["spec"]["x"]["env"] == [{"name": "B"}]


def test_repeated_keys_in_the_override_merge_into_one_item() -> None:
    container = main(env=[{"name": "C", "value": "1"}, {"name": "C", "value": "2"}])
    assert container["env"][2:] == [{"name": "C", "value": "2"}]


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
