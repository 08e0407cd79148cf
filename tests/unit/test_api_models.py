"""The pydantic models of the RLJob API: they accept the examples, reject every invalid manifest
at the field the API server names, and parse durations as Go does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from rljob.api import (
    Condition,
    FailureReason,
    InvalidRLJobError,
    RLJob,
    RLJobSpec,
    RLJobStatus,
    field_path,
    parse_duration,
    parse_rljob,
    validate_update,
)
from tests.manifests import (
    EXAMPLES,
    INVALID,
    documents,
    example_rljob,
    expected_field,
    invalid_manifests,
)

REPO = Path(__file__).resolve().parents[2]


def rejected_fields(body: dict[str, Any]) -> set[str]:
    with pytest.raises(InvalidRLJobError) as rejection:
        parse_rljob(body)
    return {violation.field for violation in rejection.value.violations}


def minimal_body(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "grpo", "namespace": "rl"},
        "spec": {
            "image": "registry.example.com/rl:1",
            "roles": {"rollout": {"replicas": 2}, "trainer": {"nodes": 2}},
            **spec,
        },
    }


def spec_of(**spec: Any) -> RLJobSpec:
    return RLJobSpec.model_validate(minimal_body(**spec)["spec"])


class TestManifests:
    def test_there_are_enough_invalid_manifests(self) -> None:
        assert len(list(INVALID.glob("*.yaml"))) >= 22

    @pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
    def test_every_example_is_valid(self, path: Path) -> None:
        body = example_rljob(path)
        job = parse_rljob(body)
        assert validate_update(job.spec, job.spec) == []

    @pytest.mark.parametrize("path", invalid_manifests(updates=False))
    def test_models_reject_the_manifest_exactly_at_the_expected_field(self, path: Path) -> None:
        (body,) = documents(path)
        assert rejected_fields(body) == {expected_field(path)}

    @pytest.mark.parametrize("path", invalid_manifests(updates=True))
    def test_the_update_is_rejected_exactly_at_the_expected_field(self, path: Path) -> None:
        old, new = (parse_rljob(body) for body in documents(path))
        violations = validate_update(old.spec, new.spec)
        assert {violation.field for violation in violations} == {expected_field(path)}


class TestUpdates:
    @pytest.mark.parametrize(
        ("old", "new"),
        [
            pytest.param(
                {"suspend": True},
                {"suspend": True, "roles": {"rollout": {}, "trainer": {"nodes": 4}}},
                id="trainer nodes change while suspended",
            ),
            pytest.param(
                {"suspend": False},
                {"suspend": True, "roles": {"rollout": {}, "trainer": {"nodes": 4}}},
                id="trainer nodes change in the update that suspends",
            ),
            pytest.param(
                {"suspend": True},
                {"suspend": False, "roles": {"rollout": {}, "trainer": {"nodes": 4}}},
                id="trainer nodes change in the update that resumes",
            ),
            pytest.param(
                {"checkpoint": {"uri": "s3://bkt/p", "keep": 5}},
                {"checkpoint": {"uri": "s3://bkt/p", "keep": 9}},
                id="checkpoint settings other than uri change",
            ),
            pytest.param(
                {},
                {"roles": {"rollout": {"replicas": 8}, "trainer": {"nodes": 2}}},
                id="rollout replicas change",
            ),
        ],
    )
    def test_allowed_updates_have_no_violations(
        self, old: dict[str, Any], new: dict[str, Any]
    ) -> None:
        assert validate_update(spec_of(**old), spec_of(**new)) == []

    def test_adding_a_checkpoint_after_creation_is_rejected(self) -> None:
        violations = validate_update(spec_of(), spec_of(checkpoint={"uri": "s3://bkt/p"}))
        assert [violation.field for violation in violations] == ["spec.checkpoint"]


class TestDefaultsAndWireForm:
    def test_minimal_spec_gets_documented_defaults(self) -> None:
        spec = spec_of()
        assert spec.roles.rollout is not None
        assert spec.roles.rollout.engine == "vllm"
        assert spec.roles.rollout.max_unavailable == 1
        assert spec.roles.trainer.gpu_resource_name == "nvidia.com/gpu"
        assert spec.roles.trainer.scheduling_timeout == "15m"
        assert spec.health.interval == "30s"
        assert spec.health.kv_drift.threshold == 0.2
        assert spec.failure_policy.max_restarts == 10
        assert spec.failure_policy.backoff.max == "30m"
        assert spec.checkpoint is None

    def test_dump_is_camel_case_and_round_trips(self) -> None:
        (body,) = documents(REPO / "examples" / "rljob-demo.yaml")
        spec = parse_rljob(body).spec
        wire = spec.model_dump(mode="json", exclude_none=True)
        assert "failurePolicy" in wire
        assert "maxUnavailable" in wire["roles"]["rollout"]
        assert RLJobSpec.model_validate(wire) == spec

    def test_fields_are_also_accepted_by_python_name(self) -> None:
        spec = RLJobSpec.model_validate(
            {"image": "x", "roles": {"rollout": {"max_unavailable": 1}, "trainer": {}}}
        )
        assert spec.roles.rollout is not None
        assert spec.roles.rollout.max_unavailable == 1

    def test_numbers_are_not_coerced_from_strings(self) -> None:
        assert rejected_fields(minimal_body(ttlSecondsAfterFinished="60")) == {
            "spec.ttlSecondsAfterFinished"
        }

    def test_pod_template_is_free_form(self) -> None:
        template = {"spec": {"hostNetwork": True, "anything": [1, {"x": "y"}]}}
        body = minimal_body()
        body["spec"]["roles"]["trainer"]["podTemplate"] = template
        assert parse_rljob(body).spec.roles.trainer.pod_template == template

    def test_volumes_pass_unknown_fields_through(self) -> None:
        body = minimal_body()
        body["spec"]["roles"]["trainer"]["volumes"] = [{"name": "data", "emptyDir": {}}]
        volume = parse_rljob(body).spec.roles.trainer.volumes[0]
        assert volume.model_dump() == {"name": "data", "emptyDir": {}}

    def test_custom_engine_with_metric_names_is_valid(self) -> None:
        names = {
            "generationTokensTotal": "my_tokens_total",
            "requestsRunning": "my_running",
            "requestsWaiting": "my_waiting",
        }
        spec = spec_of(roles={"rollout": {"engine": "custom", "metricNames": names}, "trainer": {}})
        assert spec.roles.rollout is not None and spec.roles.rollout.metric_names is not None

    def test_resume_accepts_a_version(self) -> None:
        spec = spec_of(checkpoint={"uri": "s3://bkt/p", "resume": "v000000001200-a000003"})
        assert spec.checkpoint is not None
        assert spec.checkpoint.resume == "v000000001200-a000003"

    def test_metadata_name_of_exactly_40_characters_is_valid(self) -> None:
        body = minimal_body()
        body["metadata"]["name"] = "a" * 40
        assert parse_rljob(body).metadata.name == "a" * 40

    def test_kopf_style_body_with_empty_status_and_extra_metadata_parses(self) -> None:
        body = minimal_body()
        body["status"] = None
        body["metadata"]["managedFields"] = [{"manager": "kubectl"}]
        assert parse_rljob(body).status == RLJobStatus()


def status_body() -> dict[str, Any]:
    return {
        "phase": "Running",
        "observedGeneration": 3,
        "attempt": 2,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "AllRolesReady",
                "message": "8/8 engines, 2/2 trainer pods",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
                "observedGeneration": 3,
            }
        ],
        "roles": {"rollout": {"desired": 8, "ready": 8, "restarts": 3}},
        "checkpoint": {
            "latest": {
                "version": "v000000001200-a000002",
                "step": 1200,
                "uri": "s3://bkt/p/rl/grpo/v000000001200-a000002",
                "savedAt": "2026-01-02T03:00:00Z",
            }
        },
        "restarts": {
            "total": 3,
            "counted": 1,
            "countedAt": ["2026-01-02T01:00:00Z"],
            "byReason": {"KVCacheDrift": 2, "Preempted": 1},
            "recent": [
                {
                    "time": "2026-01-02T01:00:00Z",
                    "role": "rollout",
                    "pod": "grpo-rollout-abc",
                    "reason": "KVCacheDrift",
                    "action": "RestartPod",
                    "message": "throughput -31% vs baseline and peers for 30m",
                }
            ],
        },
        "inFlight": {
            "id": "a-17",
            "kind": "RestartTrainerGang",
            "target": {"role": "trainer", "name": "grpo-trainer-a2", "uid": "u-1"},
            "step": "OldJobDeleted",
            "startedAt": "2026-01-02T03:05:00Z",
        },
        "suspectNodes": [
            {"name": "gpu-7", "reason": "NCCLTimeout", "markedAt": "2026-01-02T03:05:00Z"}
        ],
        "someFieldFromANewerOperator": {"ignored": True},
    }


class TestStatus:
    def test_status_round_trips_through_the_wire_form(self) -> None:
        status = RLJobStatus.model_validate(status_body())
        wire = status.model_dump(mode="json", exclude_none=True)
        assert wire["conditions"][0]["lastTransitionTime"] == "2026-01-02T03:04:05Z"
        assert "someFieldFromANewerOperator" not in wire
        assert RLJobStatus.model_validate(wire) == status

    def test_long_messages_are_cut_rather_than_rejected(self) -> None:
        condition = Condition.model_validate(
            {
                "type": "Degraded",
                "status": "True",
                "reason": "TrainerFailed",
                "message": "x" * 5000,
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            }
        )
        assert len(condition.message) == 1024
        assert condition.message.endswith("...")

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            pytest.param(
                lambda s: s["conditions"].append(dict(s["conditions"][0])),
                "conditions[1]",
                id="two conditions of one type",
            ),
            pytest.param(
                lambda s: s["restarts"].update(countedAt=["2026-01-02T01:00:00Z"] * 102),
                "restarts.countedAt",
                id="countedAt longer than maxRestarts allows",
            ),
            pytest.param(lambda s: s.update(phase="Exploded"), "phase", id="unknown phase"),
        ],
    )
    def test_status_bounds_are_enforced(self, change: Any, field: str) -> None:
        body = status_body()
        change(body)
        with pytest.raises(ValidationError) as rejection:
            RLJobStatus.model_validate(body)
        assert {field_path(e["loc"]) for e in rejection.value.errors()} == {field}

    def test_every_failure_reason_fits_by_reason(self) -> None:
        body = status_body()
        body["restarts"]["byReason"] = {reason.value: 1 for reason in FailureReason}
        assert RLJobStatus.model_validate(body).restarts is not None


class TestFieldPath:
    @pytest.mark.parametrize(
        ("loc", "path"),
        [
            pytest.param(("spec", "roles", "rollout"), "spec.roles.rollout", id="names"),
            pytest.param(
                ("spec", "failurePolicy", "rules", 0, "onExitCodes", 1),
                "spec.failurePolicy.rules[0].onExitCodes[1]",
                id="list indexes",
            ),
            pytest.param((), "", id="root"),
        ],
    )
    def test_locations_become_kubernetes_paths(self, loc: tuple[Any, ...], path: str) -> None:
        assert field_path(loc) == path


class TestDurations:
    @pytest.mark.parametrize(
        ("text", "seconds"),
        [
            ("30s", 30.0),
            ("1h30m", 5400.0),
            ("500ms", 0.5),
            ("1.5h", 5400.0),
            ("2h45m30.5s", 9930.5),
            ("100us", 0.0001),
            ("100µs", 0.0001),
            ("1500ns", 0.0000015),
            ("0", 0.0),
            (".5s", 0.5),
            ("1.s", 1.0),
            ("-1m", -60.0),
            ("+1m", 60.0),
            ("2562047h", 9223369200.0),
        ],
    )
    def test_go_durations_parse(self, text: str, seconds: float) -> None:
        assert parse_duration(text) == pytest.approx(seconds)

    @pytest.mark.parametrize(
        "text",
        ["", "1", "s", ".s", "1d", "1w", "30 seconds", " 1s", "1h-2m", "1e3s", "--1s", "2562048h"],
    )
    def test_non_go_durations_are_rejected(self, text: str) -> None:
        with pytest.raises(ValueError, match="invalid duration"):
            parse_duration(text)

    @pytest.mark.parametrize(
        ("value", "accepted"),
        [
            ("45s", True),
            ("1h30m", True),
            ("0.25s", True),
            ("2562048h", False),  # matches the pattern, overflows Go's int64 nanoseconds
            ("0", False),  # Go accepts a bare 0; the schema asks for a unit
            ("1d", False),
        ],
    )
    def test_duration_fields_take_the_schema_subset(self, value: str, accepted: bool) -> None:
        body = minimal_body(failurePolicy={"window": value})
        if accepted:
            assert parse_rljob(body).spec.failure_policy.window == value
        else:
            assert rejected_fields(body) == {"spec.failurePolicy.window"}


def test_rljob_parses_examples_into_the_envelope() -> None:
    (body,) = documents(REPO / "examples" / "rljob-demo.yaml")
    job = parse_rljob(body)
    assert isinstance(job, RLJob)
    assert job.spec.roles.verifier is not None
    assert job.spec.roles.verifier.gpus == 0
