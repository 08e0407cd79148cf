"""The generated CRD: checked in as generated, structural, and cheap enough for CEL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml
from pydantic import Field, TypeAdapter

from rljob.api import crd_manifest, crd_yaml

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "rljob.io_rljobs.yaml"

Node = dict[str, Any]


def version() -> Node:
    (only,) = crd_manifest()["spec"]["versions"]
    return only  # type: ignore[no-any-return]


def root() -> Node:
    return version()["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def walk(node: Node, path: str = "") -> Iterator[tuple[str, Node]]:
    """Every schema node with its path (properties by name, [] for items, {} for map values)."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")
    for branch in node.get("anyOf", []):
        yield from walk(branch, f"{path}|")


REFERENCE = re.compile(r"\b(?:self|oldSelf)((?:\.[A-Za-z_][A-Za-z0-9_]*)*)")


def referenced_nodes(node: Node, rule: str) -> Iterator[Node]:
    """The schema nodes a CEL rule on `node` reads: self, and each field along self.a.b."""
    for chain in REFERENCE.findall(rule):
        target = node
        yield target
        for name in chain.split(".")[1:]:
            if name not in target.get("properties", {}):
                break  # a method such as size() or matches()
            target = target["properties"][name]
            yield target


def at(path: str) -> Node:
    """The node at a walk() path, written with or without its leading dot."""
    return NODES["." + path.lstrip(".") if path else ""]


def rules_at(path: str) -> list[Node]:
    return at(path).get("x-kubernetes-validations", [])  # type: ignore[no-any-return]


ALL_NODES = list(walk(root()))
NODES = dict(ALL_NODES)
ALL_RULES = [(path, rule) for path, node in ALL_NODES for rule in rules_at(path)]


def rule_id(value: Any) -> str:
    if isinstance(value, str):
        return value or "<root>"
    return str(value.get("fieldPath", value["rule"][:30]))


# int-or-string branches ({type: integer}, {type: string}) may carry nothing else.
TYPED_NODES = [(path, node) for path, node in ALL_NODES if not path.endswith("|")]


def test_checked_in_crd_equals_generator_output() -> None:
    assert CRD_FILE.read_text() == crd_yaml(), "run `rljob crd > crds/rljob.io_rljobs.yaml`"


def test_names_and_scope() -> None:
    spec = crd_manifest()["spec"]
    assert crd_manifest()["metadata"]["name"] == "rljobs.rljob.io"
    assert spec["group"] == "rljob.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "RLJob",
        "listKind": "RLJobList",
        "plural": "rljobs",
        "singular": "rljob",
        "shortNames": ["rlj"],
        "categories": ["all"],
    }
    assert version()["name"] == "v1alpha1"
    assert version()["subresources"] == {"status": {}}


def test_printer_columns() -> None:
    columns = {c["name"]: (c["type"], c["jsonPath"]) for c in version()["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ("string", ".status.phase"),
        "Queue": ("string", ".status.queue.state"),
        "Step": ("integer", ".status.progress.step"),
        "Restarts": ("integer", ".status.restarts.total"),
        "Bottleneck": ("string", ".status.bottleneck.role"),
        "Checkpoint": ("date", ".status.checkpoint.latest.savedAt"),
        "Age": ("date", ".metadata.creationTimestamp"),
    }


@pytest.mark.parametrize("column", version()["additionalPrinterColumns"], ids=lambda c: c["name"])
def test_printer_columns_point_into_the_schema(column: Node) -> None:
    *parents, leaf = column["jsonPath"].lstrip(".").split(".")
    if parents == ["metadata"]:
        return
    assert leaf in at(".".join(parents))["properties"]


def offenders(nodes: list[tuple[str, Node]], broken: Any) -> list[str]:
    return [path for path, node in nodes if broken(node)]


def is_unbounded_string(node: Node) -> bool:
    return (
        node.get("type") == "string"
        and node.get("format") != "date-time"  # fixed size, and a timestamp in CEL
        and "maxLength" not in node
        and "enum" not in node
    )


class TestStructural:
    def test_every_node_has_a_type_unless_int_or_string(self) -> None:
        assert (
            offenders(
                TYPED_NODES, lambda n: "type" not in n and not n.get("x-kubernetes-int-or-string")
            )
            == []
        )

    def test_no_json_schema_leftovers(self) -> None:
        forbidden = {"$ref", "$defs", "title", "const", "uniqueItems", "propertyNames", "oneOf"}
        assert offenders(ALL_NODES, lambda n: forbidden & n.keys()) == []
        assert offenders(ALL_NODES, lambda n: n.get("additionalProperties") is False) == []

    def test_no_null_branches_and_anyof_only_for_int_or_string(self) -> None:
        int_or_string = [{"type": "integer"}, {"type": "string"}]
        assert offenders(ALL_NODES, lambda n: n.get("anyOf", int_or_string) != int_or_string) == []
        assert (
            offenders(ALL_NODES, lambda n: "anyOf" in n and not n.get("x-kubernetes-int-or-string"))
            == []
        )

    def test_exclusive_bounds_are_in_openapi_v3_0_form(self) -> None:
        assert (
            offenders(
                ALL_NODES,
                lambda n: (
                    n.get("exclusiveMinimum", True) is not True
                    or n.get("exclusiveMaximum", True) is not True
                ),
            )
            == []
        )
        threshold = at("spec.health.kvDrift.threshold")
        assert (threshold["minimum"], threshold["exclusiveMinimum"], threshold["maximum"]) == (
            0,
            True,
            1,
        )

    @pytest.mark.parametrize(
        "path", ["spec.roles.trainer.podTemplate", "spec.roles.rollout.env[].valueFrom"]
    )
    def test_free_form_nodes_keep_unknown_fields(self, path: str) -> None:
        free = at(path)
        assert free == {
            "type": "object",
            "description": free["description"],
            "x-kubernetes-preserve-unknown-fields": True,
        }

    def test_root_metadata_declares_only_name_and_generate_name(self) -> None:
        metadata = root()["properties"]["metadata"]
        assert set(metadata) == {"type", "properties"}
        assert set(metadata["properties"]) == {"name", "generateName"}


class TestBounds:
    """Bounded strings, lists and maps keep CEL cost estimates low and status finite."""

    def test_every_string_has_max_length(self) -> None:
        # apiVersion and kind are checked by the API server itself.
        user_strings = [(p, n) for p, n in TYPED_NODES if p not in (".apiVersion", ".kind")]
        assert offenders(user_strings, is_unbounded_string) == []

    def test_every_list_has_max_items(self) -> None:
        assert (
            offenders(TYPED_NODES, lambda n: n.get("type") == "array" and "maxItems" not in n) == []
        )

    def test_every_map_has_max_properties(self) -> None:
        assert (
            offenders(
                TYPED_NODES, lambda n: "additionalProperties" in n and "maxProperties" not in n
            )
            == []
        )


class TestPatterns:
    PATTERNS = sorted({node["pattern"] for _, node in ALL_NODES if "pattern" in node})

    @pytest.mark.parametrize("pattern", PATTERNS)
    def test_pattern_uses_no_backslash_d_and_compiles_in_python_and_rust_regex(
        self, pattern: str
    ) -> None:
        assert "\\d" not in pattern
        re.compile(pattern)
        # pydantic-core compiles patterns with Rust's regex crate, whose syntax is RE2's.
        TypeAdapter(Annotated[str, Field(pattern=pattern)])

    def test_defaults_satisfy_their_own_pattern_and_bounds(self) -> None:
        def violates(node: Node) -> bool:
            default = node.get("default")
            if isinstance(default, str) and "pattern" in node:
                return re.search(node["pattern"], default) is None
            if isinstance(default, int | float) and not isinstance(default, bool):
                return not node.get("minimum", default) <= default <= node.get("maximum", default)
            return False

        assert offenders(ALL_NODES, violates) == []


class TestDescriptions:
    def test_every_field_is_described(self) -> None:
        fields = [
            (p, n)
            for p, n in TYPED_NODES
            # items and map values are described by their list or map; metadata may say nothing
            if p and not p.endswith(("[]", "{}")) and not p.startswith(".metadata")
        ]
        assert offenders(fields, lambda n: not n.get("description", "").strip()) == []


class TestRequired:
    def test_spec_requires_roles_and_roles_require_the_trainer_only(self) -> None:
        assert root()["required"] == ["spec"]
        assert at("spec")["required"] == ["roles"]
        # rollout is left out when the engines run inside the trainer gang.
        assert at("spec.roles")["required"] == ["trainer"]

    def test_optional_fields_are_not_required(self) -> None:
        assert "required" not in at("spec.roles.rollout")
        assert "checkpoint" not in at("spec")["required"]
        assert at("spec.checkpoint")["required"] == ["uri"]


class TestCelRules:
    @pytest.mark.parametrize(("path", "rule"), ALL_RULES, ids=rule_id)
    def test_rule_has_a_message_and_no_backslash(self, path: str, rule: Node) -> None:
        assert rule["message"].strip()
        assert "\\" not in rule["rule"], "CEL string literals would read a backslash as an escape"

    @pytest.mark.parametrize(
        ("path", "rule"), [(p, r) for p, r in ALL_RULES if "fieldPath" in r], ids=rule_id
    )
    def test_field_path_names_a_field_under_the_rule(self, path: str, rule: Node) -> None:
        node = at(path)
        for name in rule["fieldPath"].lstrip(".").split("."):
            node = node["properties"][name]

    @pytest.mark.parametrize(("path", "rule"), ALL_RULES, ids=rule_id)
    def test_every_string_list_and_map_a_rule_reads_is_bounded(self, path: str, rule: Node) -> None:
        read = list(referenced_nodes(at(path), rule["rule"]))
        assert [n for n in read if is_unbounded_string(n)] == []
        assert [n for n in read if n.get("type") == "array" and "maxItems" not in n] == []
        assert [n for n in read if "additionalProperties" in n and "maxProperties" not in n] == []

    def test_cross_field_rules_sit_on_the_common_parent(self) -> None:
        assert {r["fieldPath"] for r in rules_at("spec.roles.rollout")} == {
            ".maxUnavailable",
            ".metricNames",
            ".generationFrom",
            ".slotServices",
        }
        assert rules_at("spec.failurePolicy.backoff") == [
            {
                "rule": "!has(self.initial) || !has(self.max)"
                " || duration(self.initial) <= duration(self.max)",
                "message": "initial must not exceed max",
                "fieldPath": ".initial",
            }
        ]
        for role in ("reference", "verifier"):
            assert [r["fieldPath"] for r in rules_at(f"spec.roles.{role}")] == [".maxUnavailable"]

    @pytest.mark.parametrize("path", ["spec.checkpoint.uri", "spec.roles.rollout.engine"])
    def test_immutable_fields_have_a_transition_rule_on_the_field(self, path: str) -> None:
        assert "self == oldSelf" in [r["rule"] for r in rules_at(path)]

    def test_trainer_nodes_change_only_while_suspended(self) -> None:
        (rule,) = [r for r in rules_at("spec") if r.get("fieldPath") == ".roles.trainer.nodes"]
        assert "oldSelf.roles.trainer.nodes" in rule["rule"]
        assert "self.suspend" in rule["rule"]
        assert "oldSelf.suspend" in rule["rule"]

    def test_checkpoint_uri_rule_requires_s3(self) -> None:
        (rule,) = [r for r in rules_at("spec.checkpoint.uri") if "matches" in r["rule"]]
        assert "^s3://" in rule["rule"]

    def test_name_rules_sit_at_the_root(self) -> None:
        rules = root()["x-kubernetes-validations"]
        assert [r["fieldPath"] for r in rules] == [".metadata.name", ".metadata.name"]
        assert rules[0]["rule"] == "self.metadata.name.size() <= 40"
        assert rules[1]["rule"] == "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"


class TestListTypes:
    def test_conditions_is_a_map_list_keyed_by_type(self) -> None:
        conditions = at("status.conditions")
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        assert "type" in conditions["items"]["required"]

    def test_map_list_keys_are_required_in_items(self) -> None:
        for path, node in ALL_NODES:
            if node.get("x-kubernetes-list-type") == "map":
                for key in node["x-kubernetes-list-map-keys"]:
                    assert key in node["items"].get("required", []), (path, key)

    def test_set_lists_hold_scalars(self) -> None:
        for path, node in ALL_NODES:
            if node.get("x-kubernetes-list-type") == "set":
                assert node["items"]["type"] in ("string", "integer"), path


class TestStatusSchema:
    def test_status_has_no_defaults(self) -> None:
        assert not [p for p, n in walk(at("status")) if "default" in n]

    def test_nested_spec_objects_default_to_empty(self) -> None:
        for path in ("spec.health", "spec.failurePolicy", "spec.health.kvDrift"):
            assert at(path)["default"] == {}, path


def test_crd_yaml_has_no_anchors() -> None:
    text = crd_yaml()
    assert "&id" not in text
    assert "*id" not in text
    assert yaml.safe_load(text) == crd_manifest()
