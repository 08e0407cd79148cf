"""The API server (structural schema and CEL, the CRD `rljob crd` prints) and the pydantic model
(parse_rljob) agree on which RLJobs to accept, and no accepted spec crashes the pure reconcile.

RLJobs come from hypothesis over a declared domain:
- strings are ASCII (code points 0-127, control characters included);
- a field with a pattern gets strings generated from that pattern (every pattern of the API is
  valid and means the same in RE2 and Python: ASCII classes, no \\d, \\w or \\s, no lookaround),
  the same with a hostile suffix (a newline, a space, an upper-case letter), strings at and over
  its length limit, and arbitrary ASCII;
- integers are within int64 (up to its bounds), biased to each field's bounds and one past them;
- quantities are canonical ("500m", "16Gi", "2k", integers) or malformed; durations follow Go's
  grammar, overflow int64 nanoseconds or miss it ("1d", "-1s", ".5s", "0");
- free-form objects (podTemplate, valueFrom, volume sources) are small JSON trees of ASCII
  strings, int64 integers and booleans, container entries named by strings;
- no nulls and no floats in integer fields: DIFFERENCES lists why, each with a test.

Each example is one server-side dry-run create (nothing is stored), so 300 examples take well
under a minute once the control plane runs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rljob.api import (
    PLURAL,
    RESERVED_ENV_NAMES,
    AddressingStyle,
    Engine,
    FailureAction,
    FailureReason,
    InvalidRLJobError,
    RLJob,
    RLJobStatus,
    RoleName,
    parse_rljob,
)
from rljob.api.kube_names import (
    ENV_NAME_PATTERN,
    IMAGE_MAX_LENGTH,
    IMAGE_PATTERN,
    LABEL_VALUE_MAX_LENGTH,
    LABEL_VALUE_PATTERN,
    QUALIFIED_NAME_MAX_LENGTH,
    QUALIFIED_NAME_PATTERN,
)
from rljob.api.kube_types import DNS1123_SUBDOMAIN, INT64_MAX, INT64_MIN
from rljob.api.resource import DNS1035_LABEL_PATTERN, NAME_MAX_LENGTH
from rljob.api.spec import (
    CHECKPOINT_VERSION_PATTERN,
    HTTP_URL_PATTERN,
    PROMETHEUS_LABEL_PATTERN,
    PROMETHEUS_NAME_PATTERN,
    RESOURCE_NAME_PATTERN,
    S3_URI_PATTERN,
)
from rljob.dev.kubeapi import ApiError
from rljob.reconcile.observed import Observed
from rljob.reconcile.plan import ReconcileExtras, reconcile, status_patch
from rljob.reconcile.requests import RESTART_REQUEST_ANNOTATION
from tests.integration.conftest import Cluster

pytestmark = pytest.mark.integration

EXAMPLES = 300
NOW = datetime(2026, 1, 1, tzinfo=UTC)
Body = dict[str, Any]
Strategy = st.SearchStrategy[Any]

# ------------------------------------------------------------------ the domain

ASCII = st.characters(max_codepoint=127)
HOSTILE_SUFFIXES = ("\n", " ", "A", "-", ".", "\x00", "/")


def ascii_text(max_size: int = 12) -> st.SearchStrategy[str]:
    return st.text(ASCII, max_size=max_size)


def mostly(valid: Strategy, invalid: Strategy, odds: int = 30) -> Strategy:
    """`valid` `odds` times out of odds + 1, else `invalid` (shrinking towards valid): most
    examples reach the accept path, and every field still gets its hostile values."""
    return st.sampled_from([False] * odds + [True]).flatmap(
        lambda hostile: invalid if hostile else valid
    )


def patterned(
    pattern: str | None, max_length: int, *, pad: str = "a", prefix: str = ""
) -> st.SearchStrategy[str]:
    """Strings of a pattern-constrained field: from the pattern, at and past its length limit,
    with a hostile suffix, or any ASCII."""
    valid = (
        st.from_regex(pattern, fullmatch=True, alphabet=ASCII).filter(
            lambda text: len(text) <= max_length
        )
        if pattern
        else ascii_text()
    )
    at_limit = prefix + pad * (max_length - len(prefix))
    invalid = st.one_of(
        st.just(at_limit + pad),
        st.tuples(valid, st.sampled_from(HOSTILE_SUFFIXES)).map("".join),
        ascii_text(),
    )
    return mostly(st.one_of(valid, st.just(at_limit)), invalid)


def integers(low: int, high: int, *, typical: int | None = None) -> Strategy:
    """Integers of a field bounded to [low, high]: mostly small valid ones, its bounds, one past
    them, the int64 bounds, and the wrong JSON types."""
    top = min(high, (typical if typical is not None else low + 8))
    invalid = st.one_of(
        st.sampled_from([low - 1, high + 1, INT64_MIN, INT64_MAX]),
        st.sampled_from(["1", True]),
    )
    return mostly(st.one_of(st.integers(low, top), st.sampled_from([low, high])), invalid)


def enum_values(values: list[str]) -> Strategy:
    return mostly(st.sampled_from(values), st.sampled_from(["", values[0].upper(), "x", 1]))


BOOLEANS = mostly(st.booleans(), st.sampled_from(["true", 1]))
DURATION_COMPONENT = st.from_regex(
    r"[0-9]{1,4}(\.[0-9]{1,9})?(ns|us|ms|s|m|h)", fullmatch=True, alphabet=ASCII
)
DURATIONS = mostly(
    st.lists(DURATION_COMPONENT, min_size=1, max_size=3).map("".join),
    st.one_of(
        st.sampled_from(
            ["1d", "-1s", ".5s", "1.s", "0", "", "1h30", "1 s", "1H", "99999999999h", "1" * 33]
        ),
        st.just("2562047h47m16.854775808s"),
        ascii_text(6),
    ),
)
OBJECT_NAMES = patterned(DNS1123_SUBDOMAIN, 253)
QUANTITIES = mostly(
    st.one_of(
        st.sampled_from(["500m", "16Gi", "2k", "1", "0.5", "1e3", "64Mi", "100n"]),
        st.integers(-4, 1 << 40),
    ),
    st.one_of(
        st.sampled_from(["1.5.5", "abc", "1Gi\n", "1 Gi", "1KiB", "-", ""]),
        st.sampled_from([INT64_MAX, INT64_MIN, 0.5]),
        ascii_text(6),
    ),
)
JSON_LEAVES = st.one_of(ascii_text(8), st.integers(INT64_MIN, INT64_MAX), st.booleans())
FREE_FORM = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(ascii_text(6), children, max_size=3)
    ),
    max_leaves=8,
)
CONTAINERS = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["main", "sidecar", "x"])},
        optional={"image": ascii_text(8), "args": st.lists(ascii_text(4), max_size=2)},
    ),
    max_size=2,
)
# Shaped as a pod template where the reconcile reads it (see MALFORMED_POD_TEMPLATES).
POD_TEMPLATES = st.one_of(
    st.dictionaries(ascii_text(6).filter(lambda key: key not in ("metadata", "spec")), FREE_FORM),
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.fixed_dictionaries(
                {}, optional={"labels": st.dictionaries(ascii_text(6), ascii_text(6), max_size=2)}
            ),
            "spec": st.fixed_dictionaries(
                {},
                optional={
                    "containers": CONTAINERS,
                    "initContainers": CONTAINERS,
                    "hostNetwork": st.booleans(),
                    "nodeName": ascii_text(8),
                },
            ),
        },
    ),
)


def some(required: dict[str, Strategy], optional: dict[str, Strategy]) -> Strategy:
    return st.fixed_dictionaries(required, optional=optional)


def keyed_lists(items: Strategy, key: str) -> Strategy:
    """Lists of a list-map: mostly unique by `key`, sometimes with a duplicate."""
    return mostly(
        st.lists(items, max_size=2, unique_by=lambda item: item[key]),
        st.lists(items, min_size=2, max_size=3),
        odds=10,
    )


def short_lists(items: Strategy, max_items: int) -> Strategy:
    """Lists of a bounded field: mostly short, sometimes one over the bound."""
    return mostly(
        st.lists(items, max_size=2), st.lists(items, min_size=max_items + 1, max_size=max_items + 1)
    )


ENV = some(
    {
        "name": mostly(
            st.sampled_from(["A", "B", "PATH"]),
            st.one_of(patterned(ENV_NAME_PATTERN, 256), st.sampled_from(RESERVED_ENV_NAMES)),
        )
    },
    {"value": patterned(None, 32768), "valueFrom": st.dictionaries(ascii_text(6), FREE_FORM)},
)
LABEL_KEYS = patterned(QUALIFIED_NAME_PATTERN, QUALIFIED_NAME_MAX_LENGTH)
LABEL_VALUES = patterned(LABEL_VALUE_PATTERN, LABEL_VALUE_MAX_LENGTH)
TOLERATION = some(
    {},
    {
        "key": LABEL_KEYS,
        "operator": enum_values(["Exists", "Equal"]),
        "value": LABEL_VALUES,
        "effect": enum_values(["NoSchedule", "PreferNoSchedule", "NoExecute", ""]),
        "tolerationSeconds": mostly(
            st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MAX + 1, "1"])
        ),
    },
)
VOLUME = some(
    {"name": mostly(st.sampled_from(["data", "cache"]), OBJECT_NAMES)},
    {"emptyDir": st.just({}), "extra": FREE_FORM},
)
MOUNT = some(
    {
        "name": mostly(st.sampled_from(["data", "cache"]), OBJECT_NAMES),
        "mountPath": mostly(st.sampled_from(["/data", "/cache"]), patterned(None, 4096)),
    },
    {"readOnly": st.booleans()},
)
RESOURCE_MAP = st.dictionaries(
    st.sampled_from(["cpu", "memory", "ephemeral-storage", "example.com/x"]), QUANTITIES, max_size=3
)


def role_fields() -> dict[str, Strategy]:
    """The fields every role shares, all optional."""
    return {
        "image": patterned(IMAGE_PATTERN, IMAGE_MAX_LENGTH, pad="r"),
        "command": short_lists(patterned(None, 16384), 64),
        "args": st.lists(ascii_text(), max_size=3),
        "env": keyed_lists(ENV, "name"),
        "resources": some({}, {"limits": RESOURCE_MAP, "requests": RESOURCE_MAP}),
        "gpus": integers(0, 64),
        "gpuResourceName": patterned(RESOURCE_NAME_PATTERN, 253),
        "nodeSelector": st.dictionaries(LABEL_KEYS, LABEL_VALUES, max_size=2),
        "tolerations": st.lists(TOLERATION, max_size=2),
        "priorityClassName": OBJECT_NAMES,
        "schedulerName": OBJECT_NAMES,
        "serviceAccountName": OBJECT_NAMES,
        "imagePullSecrets": keyed_lists(some({"name": OBJECT_NAMES}, {}), "name"),
        "volumes": keyed_lists(VOLUME, "name"),
        "volumeMounts": keyed_lists(MOUNT, "mountPath"),
        "terminationGracePeriodSeconds": integers(0, 86400, typical=120),
        "metrics": some(
            {"port": integers(1, 65535, typical=9000)},
            {"path": patterned(r"^/", 256, prefix="/")},
        ),
        "podTemplate": POD_TEMPLATES,
    }


def serving_fields() -> dict[str, Strategy]:
    return {
        **role_fields(),
        "replicas": integers(1, 1024, typical=4),
        "maxUnavailable": integers(1, 1024, typical=4),
    }


METRIC_NAMES = some(
    {},
    {
        name: patterned(PROMETHEUS_NAME_PATTERN, 200)
        for name in (
            "generationTokensTotal",
            "requestsRunning",
            "requestsWaiting",
            "kvCacheUsage",
            "prefixCacheHitsTotal",
            "prefixCacheQueriesTotal",
            "preemptionsTotal",
            "sleepState",
        )
    },
)
ROLLOUT = some(
    {},
    {
        **serving_fields(),
        "engine": enum_values([e.value for e in Engine]),
        "metricNames": METRIC_NAMES,
    },
)
TRAINER = some(
    {}, {**role_fields(), "nodes": integers(1, 1024, typical=4), "schedulingTimeout": DURATIONS}
)
SERVING = some({}, serving_fields())
S3_URIS = patterned(S3_URI_PATTERN, 1024, prefix="s3://bucket/")
CHECKPOINT = some(
    {"uri": S3_URIS},
    {
        "endpoint": patterned(HTTP_URL_PATTERN, 1024, prefix="http://"),
        "addressingStyle": enum_values([a.value for a in AddressingStyle]),
        "region": mostly(st.text(ASCII, min_size=1, max_size=12), st.sampled_from(["", "r" * 65])),
        "caBundleSecret": OBJECT_NAMES,
        "credentialsSecret": OBJECT_NAMES,
        "keep": integers(1, 1000),
        "incompleteGrace": DURATIONS,
        "resume": mostly(
            st.one_of(
                st.sampled_from(["Latest", "None"]),
                st.from_regex(CHECKPOINT_VERSION_PATTERN, fullmatch=True, alphabet=ASCII),
            ),
            st.sampled_from(["latest", "None\n", "v1-a1", ""]),
        ),
    },
)
PROMETHEUS = some(
    {"url": patterned(HTTP_URL_PATTERN, 1024, prefix="http://")},
    {
        "bearerTokenSecret": some({"name": OBJECT_NAMES}, {"key": patterned(None, 253)}),
        "headers": mostly(
            st.dictionaries(ascii_text(8), patterned(None, 1024), max_size=2),
            st.dictionaries(ascii_text(8), ascii_text(2), min_size=17, max_size=17),
        ),
        "podLabel": patterned(PROMETHEUS_LABEL_PATTERN, 128),
        "namespaceLabel": patterned(PROMETHEUS_LABEL_PATTERN, 128),
    },
)
HEALTH_SOURCE = mostly(
    st.one_of(st.fixed_dictionaries({"prometheus": PROMETHEUS}), st.just({"direct": {}})),
    st.sampled_from([{}, {"prometheus": {"url": "http://p"}, "direct": {}}]),
)
HEALTH = some(
    {},
    {
        "source": HEALTH_SOURCE,
        "interval": DURATIONS,
        "kvDrift": some(
            {},
            {
                "threshold": mostly(
                    st.floats(1e-9, 1.0) | st.just(1),
                    st.sampled_from([0, 0.0, -0.1, 1.0000001, 2, "0.2"]),
                ),
                "window": DURATIONS,
                "warmup": DURATIONS,
                "cooldown": DURATIONS,
            },
        ),
        "engineStall": some({}, {"timeout": DURATIONS}),
        "trainerStall": some({}, {"timeout": DURATIONS, "startupGrace": DURATIONS}),
        "verifierLatency": some({}, {"p99": DURATIONS, "window": DURATIONS}),
    },
)
REASONS = [r.value for r in FailureReason]
RULE = some(
    {"action": enum_values([a.value for a in FailureAction])},
    {
        "roles": st.lists(enum_values([r.value for r in RoleName]), max_size=3),
        "onReasons": st.lists(enum_values(REASONS), max_size=3),
        "onExitCodes": st.lists(integers(0, 255, typical=255), max_size=3),
        "countsTowardsMax": BOOLEANS,
    },
)
FAILURE_POLICY = some(
    {},
    {
        "maxRestarts": integers(0, 100, typical=100),
        "window": DURATIONS,
        "backoff": some({}, {"initial": DURATIONS, "max": DURATIONS}),
        "noProgressRestarts": integers(1, 100),
        "teardownTimeout": DURATIONS,
        "rules": short_lists(RULE, 32),
    },
)
SPEC = some(
    {
        "roles": some(
            {"rollout": ROLLOUT, "trainer": TRAINER}, {"reference": SERVING, "verifier": SERVING}
        )
    },
    {
        "image": mostly(st.sampled_from(["registry.example.com/rl:1", "img"]), st.just("")),
        "suspend": BOOLEANS,
        "checkpoint": CHECKPOINT,
        "health": HEALTH,
        "failurePolicy": FAILURE_POLICY,
        "ttlSecondsAfterFinished": integers(0, INT64_MAX, typical=86400),
    },
)
NAMES = mostly(
    st.from_regex(DNS1035_LABEL_PATTERN, fullmatch=True, alphabet=ASCII).filter(
        lambda name: len(name) <= NAME_MAX_LENGTH + 2
    ),
    patterned(DNS1035_LABEL_PATTERN, NAME_MAX_LENGTH, pad="b"),
)
ANNOTATIONS = st.dictionaries(
    st.just(RESTART_REQUEST_ANNOTATION),
    st.one_of(st.sampled_from(["trainer/a1", "rollout/x", "verifier/"]), ascii_text(12)),
)


@st.composite
def rljobs(draw: st.DrawFn) -> Body:
    """An RLJob body; the spec gets `image` most of the time (the image rule is a cross-field
    rule the examples should mostly pass)."""
    spec = draw(SPEC)
    if "image" not in spec and draw(st.sampled_from([True, True, True, False])):
        spec["image"] = "registry.example.com/rl:1"
    return {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": draw(NAMES), "annotations": draw(ANNOTATIONS)},
        "spec": spec,
    }


# ------------------------------------------------------------------ the two validators


def _collection(namespace: str) -> str:
    return f"/apis/rljob.io/v1alpha1/namespaces/{namespace}/{PLURAL}"


@dataclass(frozen=True)
class Verdict:
    accepted: bool
    detail: str
    stored: Body | None = None


def server_verdict(
    cluster: Cluster, namespace: str, body: Body, validation: str = "Strict"
) -> Verdict:
    """A server-side dry-run create: schema, CEL and admission run, nothing is stored."""
    path = f"{_collection(namespace)}?dryRun=All&fieldValidation={validation}"
    try:
        stored = cluster.api.create(path, body)
    except ApiError as error:
        assert error.status in (400, 422), error.body
        return Verdict(False, str(error.body.get("message", error.body))[:600])
    return Verdict(True, "accepted", stored)


def model_verdict(body: Body) -> Verdict:
    # What the operator sees went through JSON: parse the same bytes the server got.
    try:
        parse_rljob(json.loads(json.dumps(body)))
    except InvalidRLJobError as error:
        return Verdict(False, str(error)[:600])
    return Verdict(True, "accepted")


def reconcile_stored(stored: Body) -> None:
    """The stored (defaulted) object parses, and a first reconcile with nothing observed plans
    a valid status and JSON-serialisable children."""
    job: RLJob = parse_rljob(stored)
    plan = reconcile(job, Observed(), NOW, ReconcileExtras())
    RLJobStatus.model_validate(plan.status.model_dump(mode="json", by_alias=True))
    json.dumps([child.body for child in plan.apply])
    json.dumps(status_patch(job.status, plan.status))


# ------------------------------------------------------------------ agreement


def _job(**spec: Any) -> Body:
    return {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "agree"},
        "spec": {"image": "img", "roles": {"rollout": {}, "trainer": {}}, **spec},
    }


def test_server_and_model_agree_on_generated_rljobs(
    cluster: Cluster, crd: list[str], namespace: str
) -> None:
    tally: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(rljobs())
    # Found by hand, kept as regressions: Python's `$` matches before a trailing newline
    # (RE2's does not), durations past int64 nanoseconds, integers past int64, backoff bounds
    # equal as floats but not as CEL durations.
    @example(_job(checkpoint={"uri": "s3://bucket/x\n"}))
    @example({**_job(), "metadata": {"name": "agree\n"}})
    @example(_job(roles={"rollout": {"resources": {"limits": {"cpu": "1Gi\n"}}}, "trainer": {}}))
    @example(_job(health={"kvDrift": {"window": "99999999999h"}}))
    @example(_job(ttlSecondsAfterFinished=INT64_MAX + 1))
    @example(_job(failurePolicy={"backoff": {"initial": "3000h1ns", "max": "3000h"}}))
    def agree(body: Body) -> None:
        server, model = server_verdict(cluster, namespace, body), model_verdict(body)
        tally["accepted" if server.accepted else "rejected"] += 1
        assert server.accepted == model.accepted, (
            f"server: {server.detail}\nmodel: {model.detail}\nbody: {json.dumps(body)}"
        )
        if server.stored is not None:
            reconcile_stored(server.stored)

    agree()
    # The domain reaches both verdicts often enough for the agreement to mean something.
    assert tally["accepted"] >= EXAMPLES // 10, tally
    assert tally["rejected"] >= EXAMPLES // 10, tally


# ------------------------------------------------------------------ shapes refused by both


def _trainer(**fields: Any) -> Body:
    return _job(roles={"rollout": {}, "trainer": fields})


TRAINER_PATH = "spec.roles.trainer"
# Kubernetes shapes a child would refuse, and durations that contradict each other: both
# validators refuse them on the RLJob, naming the same field.
REFUSED_BY_BOTH = [
    pytest.param(_job(image="registry.example.com/RL:1"), "spec.image", id="image-upper-case"),
    pytest.param(_trainer(image="rl:1.4 "), f"{TRAINER_PATH}.image", id="image-trailing-space"),
    pytest.param(_trainer(image="rl@sha256:abc"), f"{TRAINER_PATH}.image", id="image-short-digest"),
    pytest.param(
        _trainer(nodeSelector={"a" * 254 + "/x": "v"}),
        f"{TRAINER_PATH}.nodeSelector",
        id="node-selector-prefix-over-253",
    ),
    pytest.param(
        _trainer(nodeSelector={"pool": "gpu pool"}),
        f"{TRAINER_PATH}.nodeSelector",
        id="node-selector-value-with-space",
    ),
    pytest.param(
        _trainer(tolerations=[{"key": "pool", "operator": "In"}]),
        f"{TRAINER_PATH}.tolerations[0].operator",
        id="toleration-operator-unknown",
    ),
    pytest.param(
        _trainer(tolerations=[{"value": "gpu"}]),
        f"{TRAINER_PATH}.tolerations[0].operator",
        id="toleration-empty-key-needs-exists",
    ),
    pytest.param(
        _trainer(tolerations=[{"key": "pool", "operator": "Exists", "value": "gpu"}]),
        f"{TRAINER_PATH}.tolerations[0].value",
        id="toleration-exists-with-value",
    ),
    pytest.param(
        _trainer(tolerations=[{"key": "pool", "effect": "NoSchedule", "tolerationSeconds": 9}]),
        f"{TRAINER_PATH}.tolerations[0].effect",
        id="toleration-seconds-without-no-execute",
    ),
    pytest.param(
        _trainer(env=[{"name": "PET_NNODES", "value": "9"}]),
        f"{TRAINER_PATH}.env[0].name",
        id="env-name-the-operator-sets",
    ),
    pytest.param(
        _trainer(env=[{"name": "1X"}]), f"{TRAINER_PATH}.env[0].name", id="env-name-digit"
    ),
    pytest.param(
        _job(health={"interval": "1m", "kvDrift": {"window": "59.999999999s"}}),
        "spec.health.kvDrift.window",
        id="kv-drift-window-under-interval",
    ),
    pytest.param(
        _job(health={"interval": "10m"}),
        "spec.health.engineStall.timeout",
        id="interval-over-default-stall-timeout",
    ),
]


@pytest.mark.parametrize(("body", "field"), REFUSED_BY_BOTH)
def test_both_refuse_the_shape_naming_the_field(
    cluster: Cluster, crd: list[str], namespace: str, body: Body, field: str
) -> None:
    server, model = server_verdict(cluster, namespace, body), model_verdict(body)
    assert not server.accepted, f"server accepted {json.dumps(body)}"
    assert not model.accepted, f"model accepted {json.dumps(body)}"
    assert field in server.detail, server.detail
    assert field in model.detail, model.detail


# ------------------------------------------------------------------ irreducible differences


@dataclass(frozen=True)
class Difference:
    """A body the two validators judge differently by design, and why that is harmless."""

    body: Body
    server_accepts: bool
    model_accepts: bool
    reason: str
    validation: str = "Strict"


DIFFERENCES = [
    pytest.param(
        Difference(
            _job(roles={"rollout": {"gpus": None}, "trainer": {}}),
            server_accepts=True,
            model_accepts=False,
            reason="the API server prunes a null of a non-nullable field before defaulting; the "
            "strict model refuses None for a field that is not optional. The operator parses "
            "only stored objects, where the null is gone and the default is set.",
        ),
        id="null-for-a-defaulted-field",
    ),
    pytest.param(
        Difference(
            _job(roles={"rollout": {"gpus": 2.0}, "trainer": {}}),
            server_accepts=True,
            model_accepts=False,
            reason="the API server's JSON decoding reads a whole-number float as an integer and "
            "stores 2; the strict model refuses floats for integers. (A field a CEL rule reads, "
            "such as replicas, is refused by the server too: CEL sees the float.)",
        ),
        id="whole-float-for-an-integer",
    ),
    pytest.param(
        Difference(
            _job(unknownField=1),
            server_accepts=True,
            model_accepts=False,
            validation="Ignore",
            reason="without fieldValidation=Strict (kubectl's default) the API server drops "
            "unknown fields; the model forbids them. The stored object has no unknown field.",
        ),
        id="unknown-field-without-strict-validation",
    ),
]


@pytest.mark.parametrize("difference", DIFFERENCES)
def test_irreducible_difference_is_as_documented_and_harmless(
    cluster: Cluster, crd: list[str], namespace: str, difference: Difference
) -> None:
    server = server_verdict(cluster, namespace, difference.body, difference.validation)
    model = model_verdict(difference.body)

    assert (server.accepted, model.accepted) == (
        difference.server_accepts,
        difference.model_accepts,
    ), f"no longer a difference ({difference.reason}): server {server.detail}; model {model.detail}"
    if server.stored is not None:
        reconcile_stored(server.stored)


# ------------------------------------------------------------------ malformed pod templates

# podTemplate is free-form to the API server, which stores any object; the parts the reconcile
# merges (metadata, labels, containers by name) are checked by the model, which refuses them by
# field, so the operator marks the job InvalidSpec instead of crashing its reconcile.
MALFORMED_POD_TEMPLATES = [
    pytest.param({"spec": {"containers": [{"name": ["main"]}]}}, id="container-name-a-list"),
    pytest.param({"metadata": "x"}, id="metadata-a-string"),
    pytest.param({"metadata": {"labels": 5}}, id="labels-a-number"),
]


@pytest.mark.parametrize("template", MALFORMED_POD_TEMPLATES)
def test_a_malformed_pod_template_is_stored_by_the_server_and_refused_by_name(
    cluster: Cluster, crd: list[str], namespace: str, template: Body
) -> None:
    body = _job(roles={"rollout": {"podTemplate": template}, "trainer": {}})
    server = server_verdict(cluster, namespace, body)
    assert server.stored is not None, server.detail
    model = model_verdict(body)
    assert not model.accepted
    assert "spec.roles.rollout.podTemplate" in model.detail
