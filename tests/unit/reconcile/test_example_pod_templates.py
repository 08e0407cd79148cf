"""Every example RLJob (examples/, recursively), each role rendered by the operator: after the
podTemplate merge the main container keeps every env var, volumeMount and port, and the pod every
volume, rendered without a podTemplate; and every entry the podTemplate lists is there, merged
over the rendered one of the same key or appended. Each role is rendered with its own podTemplate
(if any), and with PROBE entries added that append and that merge over rendered ones by key.

The ports the operator declares are also what the api layer refuses in a podTemplate
(rljob.api.declared_ports): checked here against the renderer for every example and more."""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rljob.api import RESERVED_ENV_NAMES, RLJob, RoleName, parse_rljob
from rljob.api.declared_ports import declared_ports
from rljob.checkpoint_protocol.layout import CheckpointLocation, VersionId, policy_env, resume_env
from rljob.reconcile import DesiredChild, RenderContext, render_children
from rljob.reconcile.pods import SHM_PATH, SHM_VOLUME
from tests.unit.reconcile.world import EXAMPLES, NAMESPACE

Item = dict[str, Any]
KeyOf = Callable[[Item], Hashable]

EXAMPLE_FILES = sorted(EXAMPLES.rglob("*.yaml"))


def rljobs(path: Path) -> list[Item]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] == "RLJob"]


EXAMPLE_ROLES = [
    pytest.param(path, index, role, id=f"{path.relative_to(EXAMPLES).with_suffix('')}-{role}")
    for path in EXAMPLE_FILES
    for index, body in enumerate(rljobs(path))
    for role in body["spec"]["roles"]
]


def test_every_example_has_an_rljob() -> None:
    assert EXAMPLE_FILES and all(rljobs(path) for path in EXAMPLE_FILES)


def by_name(item: Item) -> Hashable:
    return item.get("name")


def by_mount_path(item: Item) -> Hashable:
    return item.get("mountPath")


def by_port(item: Item) -> Hashable:
    return (item.get("containerPort"), item.get("protocol", "TCP"))


def rendered_template(body: Item, role: str) -> Item:
    """The pod template of `role` as the operator renders it, with every optional input set."""
    job: RLJob = parse_rljob(body)
    location = CheckpointLocation.from_uri("s3://bucket/ckpt", NAMESPACE, job.metadata.name)
    context = RenderContext(
        name=job.metadata.name,
        namespace=NAMESPACE,
        uid="job-uid",
        attempt=2,
        resume_env=resume_env(location, VersionId(step=100, attempt=1)),
        policy_env=policy_env(location, generation=7),
    )
    children: list[DesiredChild] = render_children(job, context)
    (child,) = [c for c in children if c.role == role and c.kind in ("Deployment", "Job")]
    return child.body["spec"]["template"]  # type: ignore[no-any-return]


def main_of(template: Item, role: str) -> Item:
    (main,) = [c for c in template["spec"]["containers"] if c["name"] == role]
    return main  # type: ignore[no-any-return]


def probe(role: str, rendered: Item) -> Item:
    """podTemplate entries for `role`: new ones (appended), and ones keyed like what the role's
    own fields render (merged over them): its own literal env vars and its own mounts."""
    main = main_of(rendered, role)
    own_env = [
        {"name": v["name"], "value": "from-podTemplate"}
        for v in main.get("env", [])
        if v["name"] not in RESERVED_ENV_NAMES and "value" in v
    ]
    own_mounts = [
        {"mountPath": m["mountPath"], "readOnly": True}
        for m in main.get("volumeMounts", [])
        if m["mountPath"] != SHM_PATH
    ]
    return {
        "metadata": {"labels": {"team.example.com/probe": "1"}},
        "spec": {
            "volumes": [{"name": "probe-cache", "emptyDir": {}}],
            "containers": [
                {
                    "name": role,
                    "env": [{"name": "PROBE_VAR", "value": "1"}, *own_env],
                    "volumeMounts": [{"name": "probe-cache", "mountPath": "/probe"}, *own_mounts],
                    "ports": [{"name": "probe", "containerPort": 45678}],
                },
                {"name": "probe-sidecar", "image": "busybox:1"},
            ],
        },
    }


def with_probe(own: Item | None, extra: Item) -> Item:
    """`own` with `extra`'s labels, volumes and containers listed after its own."""
    combined = copy.deepcopy(own or {})
    metadata = combined.setdefault("metadata", {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **extra["metadata"]["labels"]}
    spec = combined.setdefault("spec", {})
    for key in ("volumes", "containers"):
        spec[key] = [*(spec.get(key) or []), *extra["spec"][key]]
    return combined


CONTAINER_LISTS: tuple[tuple[str, KeyOf], ...] = (
    ("env", by_name),
    ("volumeMounts", by_mount_path),
    ("ports", by_port),
)


def keyed(items: list[Item] | None, key: KeyOf) -> dict[Hashable, Item]:
    return {key(item): item for item in items or []}


def provides_shm(template: Item | None) -> bool:
    """The podTemplate brings its own /dev/shm: the operator then renders none."""
    spec = (template or {}).get("spec") or {}
    volumes = {v.get("name") for v in spec.get("volumes") or []}
    mounts = {
        mount.get("mountPath")
        for container in spec.get("containers") or []
        for mount in container.get("volumeMounts") or []
    }
    return SHM_VOLUME in volumes or SHM_PATH in mounts


def assert_kept_and_listed(body: Item, role: str, template: Item | None) -> Item:
    """Renders `role` of `body` with `template` as its podTemplate, checks it, returns it."""
    bare = copy.deepcopy(body)
    bare["spec"]["roles"][role].pop("podTemplate", None)
    baseline = rendered_template(bare, role)
    templated = copy.deepcopy(body)
    if template is not None:
        templated["spec"]["roles"][role]["podTemplate"] = template
    merged = rendered_template(templated, role)
    main, merged_main = main_of(baseline, role), main_of(merged, role)
    own_shm = provides_shm(template)

    # Everything rendered is still there, by key.
    for field, key in CONTAINER_LISTS:
        kept = keyed(merged_main.get(field), key)
        for item in main.get(field, []):
            if own_shm and item.get("mountPath") == SHM_PATH:
                continue
            assert key(item) in kept, f"rendered {field} {key(item)} lost"
    volumes = keyed(merged["spec"].get("volumes"), by_name)
    for volume in baseline["spec"].get("volumes", []):
        if not (own_shm and volume["name"] == SHM_VOLUME):
            assert volume["name"] in volumes, f"rendered volume {volume['name']} lost"

    # Everything the podTemplate lists is there, over the rendered item of its key.
    spec = (template or {}).get("spec") or {}
    containers = keyed(merged["spec"]["containers"], by_name)
    for container in spec.get("containers", []):
        assert container["name"] in containers
        merged_container = containers[container["name"]]
        for field, key in CONTAINER_LISTS:
            present = keyed(merged_container.get(field), key)
            for item in container.get(field, []):
                assert present.get(key(item), {}) | item == present.get(key(item)), (field, item)
    for volume in spec.get("volumes", []):
        assert volumes.get(volume["name"], {}) | volume == volumes.get(volume["name"])
    labels = merged["metadata"]["labels"]
    assert labels | ((template or {}).get("metadata") or {}).get("labels", {}) == labels
    return merged


@pytest.mark.parametrize(("path", "index", "role"), EXAMPLE_ROLES)
def test_example_role_keeps_rendered_entries_and_lists_its_own(
    path: Path, index: int, role: str
) -> None:
    body = rljobs(path)[index]
    assert_kept_and_listed(body, role, body["spec"]["roles"][role].get("podTemplate"))


@pytest.mark.parametrize(("path", "index", "role"), EXAMPLE_ROLES)
def test_example_role_with_probe_entries(path: Path, index: int, role: str) -> None:
    body = rljobs(path)[index]
    own = body["spec"]["roles"][role].get("podTemplate")
    extra = probe(role, rendered_template(body, role))
    template = with_probe(own, extra)

    merged_main = main_of(assert_kept_and_listed(body, role, template), role)
    env = keyed(merged_main["env"], by_name)
    assert env["PROBE_VAR"] == {"name": "PROBE_VAR", "value": "1"}
    for variable in extra["spec"]["containers"][0]["env"][1:]:
        assert env[variable["name"]]["value"] == "from-podTemplate"  # merged, not duplicated
    names = [variable["name"] for variable in merged_main["env"]]
    assert len(names) == len(set(names))


ROLE_VARIANTS = [
    pytest.param("rollout", {}, id="rollout-vllm"),
    pytest.param("rollout", {"engine": "sglang"}, id="rollout-sglang"),
    pytest.param("rollout", {"metrics": {"port": 9000}}, id="rollout-metrics-port"),
    pytest.param(
        "rollout",
        {
            "engine": "custom",
            "metricNames": {
                "generationTokensTotal": "a",
                "requestsRunning": "b",
                "requestsWaiting": "c",
            },
        },
        id="rollout-custom",
    ),
    pytest.param("trainer", {}, id="trainer-torchrun"),
    pytest.param("trainer", {"launcher": "ray", "command": ["d"]}, id="trainer-ray"),
    pytest.param(
        "trainer",
        {"launcher": "ray", "command": ["d"], "engines": {"exporter": "engine", "port": 8001}},
        id="trainer-ray-engines-own-port",
    ),
    pytest.param(
        "trainer", {"engines": {"exporter": "ray", "port": 9090}}, id="trainer-engines-ray-port"
    ),
    pytest.param("reference", {}, id="reference"),
    pytest.param("reference", {"metrics": {"port": 9300}}, id="reference-metrics-port"),
    pytest.param("verifier", {}, id="verifier"),
]


@pytest.mark.parametrize(("role", "fields"), ROLE_VARIANTS)
def test_declared_ports_are_what_the_renderer_declares(role: str, fields: Item) -> None:
    roles: dict[str, Item] = {"trainer": {}, role: fields}
    body = {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "ports", "namespace": NAMESPACE},
        "spec": {"image": "registry.example.com/rl:1", "roles": roles},
    }
    job = parse_rljob(body)
    rendered = main_of(rendered_template(body, role), role).get("ports", [])
    declared = declared_ports(RoleName(role), getattr(job.spec.roles, role))
    assert sorted((p["name"], p["containerPort"]) for p in rendered) == sorted(declared)


@pytest.mark.parametrize(("path", "index", "role"), EXAMPLE_ROLES)
def test_declared_ports_of_the_examples(path: Path, index: int, role: str) -> None:
    body = rljobs(path)[index]
    job = parse_rljob(body)
    rendered = main_of(rendered_template(body, role), role).get("ports", [])
    declared = declared_ports(RoleName(role), getattr(job.spec.roles, role))
    assert sorted((p["name"], p["containerPort"]) for p in rendered) == sorted(declared)
