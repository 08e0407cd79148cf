"""The status as the operator writes it (dump_status, status_patch): no empty lists or objects at
any depth, floats rounded, and neither changes what a status reads back as, removes less, or
makes a status write flap."""

from __future__ import annotations

import datetime as dt
import typing
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from rljob.api.diagnosis import Bottleneck, PolicySuspension
from rljob.api.status import (
    ActionTarget,
    CheckpointStatus,
    Condition,
    EngineHealth,
    HealthStatus,
    InFlightAction,
    Progress,
    RestartRecord,
    RestartsStatus,
    RLJobStatus,
    RolesStatus,
    RoleStatus,
    SuspectNode,
)
from rljob.reconcile.engine_health import with_engine_health
from rljob.reconcile.plan import dump_status, status_patch
from rljob.reconcile.progress import PROGRESS_REFRESH, ProgressReading, with_progress
from rljob.vocabulary.enums import RoleName
from tests.unit.reconcile.status_examples import engine, restarted, running, suspended
from tests.unit.reconcile.world import T0

NODE = SuspectNode(name="gpu-node-7", reason="NCCLTimeout", marked_at=T0)
SUMMARY = EngineHealth(pod="p", role=RoleName.ROLLOUT, detector="kvDrift", updated_at=T0)


def read_back(status: RLJobStatus) -> RLJobStatus:
    """The status a later pass reads: what the operator wrote, parsed."""
    return RLJobStatus.model_validate(dump_status(status))


def read_back_with_empties(status: RLJobStatus) -> RLJobStatus:
    """The status as it read back before empty lists and objects were left out."""
    return RLJobStatus.model_validate(status.model_dump(mode="json", exclude_none=True))


EXAMPLES = [
    pytest.param(running, id="healthy-running-job"),
    pytest.param(restarted, id="after-restarts-with-a-suspect-node"),
    pytest.param(suspended, id="suspended-by-the-policy"),
    pytest.param(RLJobStatus, id="new-job"),
]


@pytest.mark.parametrize("build", EXAMPLES)
def test_a_status_reads_back_as_it_did_with_its_empty_keys(
    build: Callable[[], RLJobStatus],
) -> None:
    status = build()

    assert read_back(status) == read_back_with_empties(status)
    assert dump_status(read_back(status)) == dump_status(status)


def test_a_rich_status_round_trips_unchanged() -> None:
    status = read_back(restarted())  # its floats as status keeps them

    assert read_back(status) == status
    assert status_patch(status, read_back(status)) is None


EMPTIED = [
    pytest.param({"suspect_nodes": []}, "suspectNodes", id="top-level-list"),
    pytest.param(
        {"roles": RolesStatus(rollout=RoleStatus(desired=1))}, "roles.rollout.engines", id="roster"
    ),
    pytest.param({"restarts": RestartsStatus(total=0)}, "restarts.byReason", id="dict"),
    pytest.param({"health": HealthStatus(engines=[])}, "health", id="object-emptied-by-it"),
    pytest.param({"checkpoint": CheckpointStatus()}, "checkpoint", id="object-of-nothing"),
    pytest.param(
        {"in_flight": InFlightAction(id="a", kind="RestartRole", started_at=T0)},
        "inFlight.pods",
        id="nested-list",
    ),
]


def lookup(dumped: dict[str, Any], path: str) -> Any:
    """The value at a dotted path, or None where the path ends early."""
    value: Any = dumped
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


@pytest.mark.parametrize(("fields", "path"), EMPTIED)
def test_empty_collections_are_left_out(fields: dict[str, Any], path: str) -> None:
    status = RLJobStatus(attempt=1, **fields)

    assert lookup(dump_status(status), path) is None
    assert lookup(status.model_dump(mode="json", by_alias=True), path) is not None


BOTTLENECK = Bottleneck(role="Rollout", since=T0, updated_at=T0, window_seconds=600)
RECORD = RestartRecord(time=T0, role=RoleName.TRAINER, reason="OOMKilled", action="RestartPod")
ACTION = InFlightAction(id="a", kind="RestartRole", started_at=T0)
CONDITION = Condition(
    type="Ready", status="True", reason="Ready", message="", last_transition_time=T0
)
SUSPENSION = PolicySuspension(reason="OOMKilled", message="", suspended_at=T0)

EMPTY_TEXT = [
    pytest.param({"bottleneck": BOTTLENECK}, "bottleneck", {"evidence", "advice"}, id="verdict"),
    pytest.param(
        {"restarts": RestartsStatus(recent=[RECORD])}, "restarts.recent", {"message"}, id="record"
    ),
    pytest.param({"in_flight": ACTION}, "inFlight", {"step"}, id="action-step"),
]


@pytest.mark.parametrize(("fields", "path", "keys"), EMPTY_TEXT)
def test_optional_text_left_empty_is_left_out(
    fields: dict[str, Any], path: str, keys: set[str]
) -> None:
    status = RLJobStatus(attempt=1, **fields)

    written = lookup(dump_status(status), path)

    assert keys.isdisjoint(written[0] if isinstance(written, list) else written)
    assert read_back(status) == status


def models_in(model: type[BaseModel]) -> set[type[BaseModel]]:
    """The model and every model its fields hold, at any depth."""
    found, todo = {model}, [model]
    while todo:
        for field in todo.pop().model_fields.values():
            for held in _types_in(field.annotation):
                if issubclass(held, BaseModel) and held not in found:
                    found.add(held)
                    todo.append(held)
    return found


def _types_in(annotation: Any) -> list[type]:
    if isinstance(annotation, type):
        return [annotation]
    return [held for arg in typing.get_args(annotation) for held in _types_in(arg)]


def test_every_status_text_that_defaults_to_empty_is_left_out_when_empty() -> None:
    """A new one declared with Field(default="") instead of optional_text() would be written
    as an empty string."""
    written_empty = [
        f"{model.__name__}.{name}"
        for model in models_in(RLJobStatus)
        for name, field in model.model_fields.items()
        if field.default == "" and field.exclude_if is None
    ]

    assert written_empty == []


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        pytest.param({"conditions": [CONDITION]}, "conditions", id="condition-message"),
        pytest.param({"suspension": SUSPENSION}, "suspension", id="suspension-message"),
    ],
)
def test_required_text_is_written_even_empty(fields: dict[str, Any], path: str) -> None:
    written = lookup(dump_status(RLJobStatus(attempt=1, **fields)), path)

    assert (written[0] if isinstance(written, list) else written)["message"] == ""


def test_an_emptied_object_reads_back_as_none_which_its_readers_take_alike() -> None:
    """status.health with no engines is left out; every reader treats none as no summaries."""
    status = read_back(RLJobStatus(health=HealthStatus(engines=[])))

    assert status.health is None
    assert with_engine_health(status, [], T0) is status


REMOVED = [
    pytest.param(
        {"suspect_nodes": [NODE]}, {"suspect_nodes": []}, ["suspectNodes"], id="list-emptied"
    ),
    pytest.param(
        {"roles": RolesStatus(rollout=RoleStatus(engines=[engine(0)]))},
        {"roles": RolesStatus(rollout=RoleStatus())},
        ["roles", "rollout", "engines"],
        id="roster-emptied",
    ),
    pytest.param(
        {"restarts": RestartsStatus(total=1, by_reason={"OOMKilled": 1})},
        {"restarts": RestartsStatus(total=1)},
        ["restarts", "byReason"],
        id="dict-emptied",
    ),
    pytest.param(
        {"health": HealthStatus(engines=[SUMMARY])},
        {"health": HealthStatus(engines=[])},
        ["health"],
        id="object-emptied",
    ),
]


@pytest.mark.parametrize(("before", "after", "path"), REMOVED)
def test_a_collection_that_empties_is_nulled_by_the_patch(
    before: dict[str, Any], after: dict[str, Any], path: list[str]
) -> None:
    patch = status_patch(RLJobStatus(attempt=1, **before), RLJobStatus(attempt=1, **after))

    assert patch is not None
    *parents, key = path
    for parent in parents:
        patch = patch[parent]
    assert key in patch and patch[key] is None


def test_empty_collections_an_older_operator_stored_are_nulled_by_the_next_write() -> None:
    stored = RLJobStatus.model_validate(
        {"attempt": 1, "suspectNodes": [], "renamed": [], "restarts": {"total": 0, "recent": []}}
    )

    assert status_patch(stored, stored) is None  # no write for that alone
    patch = status_patch(stored, stored.model_copy(update={"attempt": 2}))

    assert patch is not None
    assert (patch["suspectNodes"], patch["renamed"], patch["restarts"]["recent"]) == (None,) * 3


ROUNDED = [
    pytest.param(
        Progress(tokens_per_second=18234.567891234, updated_at=T0),
        {"tokensPerSecond": 18234.6, "updatedAt": "2026-03-01T12:00:00Z"},
        id="tokens-per-second-1-decimal",
    ),
    pytest.param(
        EngineHealth(
            pod="p",
            role=RoleName.ROLLOUT,
            detector="kvOperatingPoint",
            baseline_tokens_per_second=2.04999,
            updated_at=T0,
            values={"tokenSeconds": 0.000123456789, "capacityTokens": 467579.65558206546},
        ),
        {
            "baselineTokensPerSecond": 2.05,
            "values": {"tokenSeconds": 0.0001235, "capacityTokens": 467580.0},
        },
        id="detector-state-4-significant-digits",
    ),
]


@pytest.mark.parametrize(("model", "expected"), ROUNDED)
def test_floats_are_written_rounded(
    model: Progress | EngineHealth, expected: dict[str, Any]
) -> None:
    dumped = model.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert {key: dumped[key] for key in expected} == expected


def fresh_summary(now: dt.datetime) -> EngineHealth:
    """A detector's summary as computed: full precision, a tiny value next to a large one."""
    return EngineHealth(
        pod="grpo-demo-rollout-0",
        role=RoleName.ROLLOUT,
        detector="kvDrift",
        baseline_tokens_per_second=2.0449999,
        warmed_up_at=T0,
        updated_at=now,
        values={"prefixHitRate": 0.70123456, "preemptionsPerSecond": 0.0000166666},
    )


def test_detector_state_read_back_rounded_is_no_change_against_the_same_fresh_summary() -> None:
    """engine_health compares a fresh, unrounded summary with the rounded one read back: the
    same summary must not be a change, or status would be written on every refresh."""
    written = with_engine_health(RLJobStatus(attempt=1), [fresh_summary(T0)], T0)
    stored = read_back(written)

    later = T0 + PROGRESS_REFRESH
    again = with_engine_health(stored, [fresh_summary(later)], later)

    assert again is stored
    assert status_patch(stored, again) is None


def test_progress_read_back_rounded_is_no_change_against_the_same_reading() -> None:
    reading = ProgressReading(
        step=10, tokens_per_second=18234.6, baseline_tokens_per_second=17999.1
    )
    stored = read_back(with_progress(RLJobStatus(attempt=1), reading, T0))

    again = with_progress(stored, reading, T0 + PROGRESS_REFRESH)

    assert again is stored


def test_an_unrounded_status_read_back_asks_for_no_write() -> None:
    status = running()  # floats as computed

    assert status_patch(read_back(status), status) is None


def test_an_action_without_pods_reads_back_equal() -> None:
    """inFlight.pods is only a RestartRoleInTurn's: left out for every other action."""
    action = InFlightAction(
        id="a", kind="RestartRole", target=ActionTarget(role=RoleName.VERIFIER), started_at=T0
    )

    assert "pods" not in dump_status(RLJobStatus(in_flight=action))["inFlight"]
    assert read_back(RLJobStatus(in_flight=action)).in_flight == action
