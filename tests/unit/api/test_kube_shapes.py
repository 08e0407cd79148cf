"""Kubernetes shapes an RLJob copies into its pods (image references, node selectors,
tolerations, env names) are refused on the RLJob itself, by the model and by the CRD alike, at
the field the child would have named; good values pass both."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.api import RESERVED_ENV_NAMES
from rljob.api.kube_names import IMAGE_MESSAGE, IMAGE_PATTERN
from rljob.api.reserved import RESERVED_ENV_MESSAGE
from tests.unit.api.crd_emulator import CEL_RULES, node_at, rules_at
from tests.unit.api.verdicts import both_refusals, job, model_messages, with_trainer

TRAINER = "spec.roles.trainer"
DIGEST = "sha256:" + "0123456789abcdef" * 4

IMAGES = [
    pytest.param("rl", True, id="bare-name"),
    pytest.param("registry.example.com/team/rl:1.4", True, id="registry-path-tag"),
    pytest.param("localhost:5000/rl:dev", True, id="registry-port"),
    pytest.param("Registry.Example.COM/rl", True, id="registry-host-upper-case"),
    pytest.param("docker.io/library/python:3.12-slim", True, id="docker-hub"),
    pytest.param("ghcr.io/org/my_image__x/sub-part.v2:v1.0_rc-1", True, id="path-separators"),
    pytest.param(f"rl@{DIGEST}", True, id="digest"),
    pytest.param(f"registry.example.com/rl:1.4@{DIGEST}", True, id="tag-and-digest"),
    pytest.param("rl:" + "t" * 128, True, id="tag-128"),
    pytest.param("r" * 512, True, id="at-max-length"),
    pytest.param("r" * 513, False, id="over-max-length"),
    pytest.param("", False, id="empty"),
    pytest.param("rl 1.4", False, id="space"),
    pytest.param(" rl", False, id="leading-space"),
    pytest.param("rl\n", False, id="trailing-newline"),
    pytest.param("RL", False, id="upper-case-name"),
    pytest.param("registry.example.com/Team/rl", False, id="upper-case-path"),
    pytest.param("rl:", False, id="empty-tag"),
    pytest.param("rl:-dev", False, id="tag-starts-with-dash"),
    pytest.param("rl:.dev", False, id="tag-starts-with-dot"),
    pytest.param("rl:" + "t" * 129, False, id="tag-129"),
    pytest.param("rl:1.4:5", False, id="two-tags"),
    pytest.param("rl@sha256:abc", False, id="short-digest"),
    pytest.param("rl@sha256:" + "A" * 64, False, id="upper-case-digest"),
    pytest.param("rl@md5:" + "a" * 64, False, id="other-digest-algorithm"),
    pytest.param("registry:port/rl", False, id="non-numeric-port"),
    pytest.param("rl//x", False, id="empty-path-component"),
    pytest.param("/rl", False, id="leading-slash"),
    pytest.param("rl/", False, id="trailing-slash"),
    pytest.param("rl___x", False, id="triple-underscore"),
    pytest.param("rl.-x", False, id="mixed-separator"),
    pytest.param("https://registry.example.com/rl", False, id="url-scheme"),
]


@pytest.mark.parametrize(("image", "valid"), IMAGES)
@pytest.mark.parametrize(
    "where", ["spec.image", "spec.roles.trainer.image", "spec.roles.verifier.image"]
)
def test_image_references(where: str, image: str, valid: bool) -> None:
    body = job(roles={"rollout": {}, "trainer": {}, "verifier": {}})
    *parents, leaf = where.split(".")[1:]
    target = body["spec"]
    for name in parents:
        target = target[name]
    target[leaf] = image

    expected = set() if valid else {where}
    assert both_refusals(body) == (expected, expected)


def test_an_image_refusal_explains_the_grammar() -> None:
    assert model_messages(job(image="rl 1.4")) == [IMAGE_MESSAGE]


SELECTOR = f"{TRAINER}.nodeSelector"
LONG_PREFIX = "a" * 253

NODE_SELECTORS = [
    pytest.param({"pool": "gpu"}, None, id="plain"),
    pytest.param({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}, None, id="prefixed-key"),
    pytest.param({"kubernetes.io/arch": ""}, None, id="empty-value"),
    pytest.param({"K8s_Pool.x": "Gpu_1.x-y"}, None, id="mixed-case-name-and-value"),
    pytest.param({"a" * 63: "b" * 63}, None, id="name-and-value-at-63"),
    pytest.param({f"{LONG_PREFIX}/x": "v"}, None, id="prefix-at-253"),
    pytest.param({f"k{i}": "v" for i in range(32)}, None, id="32-entries"),
    pytest.param({f"k{i}": "v" for i in range(33)}, SELECTOR, id="33-entries"),
    pytest.param({"a" * 64: "v"}, SELECTOR, id="name-over-63"),
    pytest.param({f"{LONG_PREFIX}a/x": "v"}, SELECTOR, id="prefix-over-253"),
    pytest.param({"Example.com/pool": "v"}, SELECTOR, id="upper-case-prefix"),
    pytest.param({"/pool": "v"}, SELECTOR, id="empty-prefix"),
    pytest.param({"pool/": "v"}, SELECTOR, id="empty-name"),
    pytest.param({"a/b/c": "v"}, SELECTOR, id="two-slashes"),
    pytest.param({"pool name": "v"}, SELECTOR, id="space-in-key"),
    pytest.param({"-pool": "v"}, SELECTOR, id="key-starts-with-dash"),
    pytest.param({"": "v"}, SELECTOR, id="empty-key"),
    pytest.param({"pool": "g" * 64}, f"{SELECTOR}.pool", id="value-over-63"),
    pytest.param({"pool": "gpu pool"}, f"{SELECTOR}.pool", id="space-in-value"),
    pytest.param({"pool": "-gpu"}, f"{SELECTOR}.pool", id="value-starts-with-dash"),
    pytest.param({"pool": "gpu\n"}, f"{SELECTOR}.pool", id="value-trailing-newline"),
]


@pytest.mark.parametrize(("selector", "refused_at"), NODE_SELECTORS)
def test_node_selectors(selector: dict[str, str], refused_at: str | None) -> None:
    expected = {refused_at} if refused_at else set()
    assert both_refusals(with_trainer(nodeSelector=selector)) == (expected, expected)


FIRST = f"{TRAINER}.tolerations[0]"

TOLERATIONS = [
    pytest.param(
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, None, id="gpu"
    ),
    pytest.param({"operator": "Exists"}, None, id="tolerates-everything"),
    pytest.param({"key": "pool", "value": "gpu"}, None, id="operator-defaults-to-equal"),
    pytest.param({"key": "pool", "operator": "Equal", "value": ""}, None, id="equal-empty-value"),
    pytest.param({"key": "pool", "operator": "Exists", "effect": ""}, None, id="any-effect"),
    pytest.param(
        {"key": "pool", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        None,
        id="seconds-with-no-execute",
    ),
    pytest.param({"key": "pool", "operator": "In"}, f"{FIRST}.operator", id="operator-unknown"),
    pytest.param({"key": "pool", "operator": "exists"}, f"{FIRST}.operator", id="operator-case"),
    pytest.param({"value": "gpu"}, f"{FIRST}.operator", id="no-key-needs-exists"),
    pytest.param({"key": "", "operator": "Equal"}, f"{FIRST}.operator", id="empty-key-equal"),
    pytest.param({"key": "pool", "effect": "NoRun"}, f"{FIRST}.effect", id="effect-unknown"),
    pytest.param({"key": "bad key", "operator": "Exists"}, f"{FIRST}.key", id="key-with-space"),
    pytest.param({"key": "k" * 64, "operator": "Exists"}, f"{FIRST}.key", id="key-over-63"),
    pytest.param(
        {"key": "pool", "operator": "Exists", "value": "gpu"},
        f"{FIRST}.value",
        id="exists-with-value",
    ),
    pytest.param({"key": "pool", "value": "gpu pool"}, f"{FIRST}.value", id="value-with-space"),
    pytest.param({"key": "pool", "value": "v" * 64}, f"{FIRST}.value", id="value-over-63"),
    pytest.param(
        {"key": "pool", "operator": "Exists", "tolerationSeconds": 60},
        f"{FIRST}.effect",
        id="seconds-without-effect",
    ),
    pytest.param(
        {"key": "pool", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60},
        f"{FIRST}.effect",
        id="seconds-with-no-schedule",
    ),
]


@pytest.mark.parametrize(("toleration", "refused_at"), TOLERATIONS)
def test_tolerations(toleration: dict[str, Any], refused_at: str | None) -> None:
    expected = {refused_at} if refused_at else set()
    assert both_refusals(with_trainer(tolerations=[toleration])) == (expected, expected)


def test_tolerations_are_bounded() -> None:
    many = [{"key": f"k{i}", "operator": "Exists"} for i in range(33)]
    expected = {f"{TRAINER}.tolerations"}
    assert both_refusals(with_trainer(tolerations=many)) == (expected, expected)


ENV_NAMES = [
    pytest.param("NCCL_DEBUG", True, id="upper-snake"),
    pytest.param("my.var-1", True, id="dots-and-dashes"),
    pytest.param("_X", True, id="leading-underscore"),
    pytest.param("RLJOB_METRICS_PORT", True, id="sdk-setting-the-user-owns"),
    pytest.param("RLJOB_NAME_SUFFIX", True, id="reserved-name-as-prefix"),
    pytest.param("pet_nnodes", True, id="reserved-name-lower-case"),
    pytest.param("1X", False, id="leading-digit"),
    pytest.param("A B", False, id="space"),
    pytest.param("A=B", False, id="equals-sign"),
    pytest.param("A\n", False, id="trailing-newline"),
]


@pytest.mark.parametrize(("name", "valid"), ENV_NAMES)
def test_env_names(name: str, valid: bool) -> None:
    body = with_trainer(env=[{"name": name, "value": "1"}])
    expected = set() if valid else {f"{TRAINER}.env[0].name"}
    assert both_refusals(body) == (expected, expected)


@pytest.mark.parametrize("name", RESERVED_ENV_NAMES)
@pytest.mark.parametrize("role", ["rollout", "trainer"])
def test_env_names_the_operator_sets_are_refused(role: str, name: str) -> None:
    body = job()
    body["spec"]["roles"][role]["env"] = [{"name": "MINE", "value": "1"}, {"name": name}]
    expected = {f"spec.roles.{role}.env[1].name"}
    assert both_refusals(body) == (expected, expected)


def test_a_reserved_name_refusal_lists_every_reserved_name() -> None:
    (message,) = model_messages(with_trainer(env=[{"name": "PET_NNODES", "value": "9"}]))
    assert message == RESERVED_ENV_MESSAGE
    assert all(name in message for name in RESERVED_ENV_NAMES)


ROLES = ["rollout", "trainer", "reference", "verifier"]


class TestTheCrdCarriesEachRule:
    @pytest.mark.parametrize(
        "path", ["spec.image", *(f"spec.roles.{role}.image" for role in ROLES)]
    )
    def test_image_rule(self, path: str) -> None:
        assert {"rule": f"self.matches('{IMAGE_PATTERN}')", "message": IMAGE_MESSAGE} in rules_at(
            path
        )
        assert node_at(path)["maxLength"] == 512

    @pytest.mark.parametrize("role", ROLES)
    def test_node_selector_rules(self, role: str) -> None:
        selector = node_at(f"spec.roles.{role}.nodeSelector")
        (rule,) = selector[CEL_RULES]
        assert rule["rule"].startswith("self.all(key, key.matches('^")
        assert "key.indexOf('/') <= 253" in rule["rule"]
        assert selector["maxProperties"] == 32
        assert selector["additionalProperties"]["maxLength"] == 63
        assert "pattern" in selector["additionalProperties"]

    @pytest.mark.parametrize("role", ROLES)
    def test_toleration_rules_name_their_fields(self, role: str) -> None:
        tolerations = node_at(f"spec.roles.{role}.tolerations")
        assert tolerations["maxItems"] == 32
        assert [r["fieldPath"] for r in tolerations["items"][CEL_RULES]] == [
            ".operator",
            ".value",
            ".effect",
        ]
        assert node_at(f"spec.roles.{role}.tolerations.[].operator")["enum"] == [
            "Exists",
            "Equal",
        ]
        assert node_at(f"spec.roles.{role}.tolerations.[].effect")["enum"] == [
            "NoSchedule",
            "PreferNoSchedule",
            "NoExecute",
            "",
        ]

    @pytest.mark.parametrize("role", ROLES)
    def test_env_name_rules(self, role: str) -> None:
        name_rules = rules_at(f"spec.roles.{role}.env.[].name")
        assert [r["message"] for r in name_rules][1] == RESERVED_ENV_MESSAGE
        reserved_rule = name_rules[1]["rule"]
        assert all(f"'{name}'" in reserved_rule for name in RESERVED_ENV_NAMES)
