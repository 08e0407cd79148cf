"""Oversized and adversarial strings (termination messages, condition and pod reasons, scheduler
and metrics-source messages: all written by workloads or through the API) never break a status
update or an Event: what reaches them is one printable line (no control, format or surrogate
characters, so no terminal escapes in `kubectl describe` and valid UTF-8 JSON), bounded, and
the objects validate against the status models and stay well under the API's size limits."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from rljob.api import Condition, ConditionStatus, RLJobStatus
from rljob.api.spec import FailurePolicy
from rljob.api.status import (
    MAX_CONDITIONS,
    MAX_RECENT_RESTARTS,
    MESSAGE_MAX_LENGTH,
    REASON_PATTERN,
    RestartsStatus,
)
from rljob.health import (
    ContainerTermination,
    CrashRepeatTracker,
    PodCondition,
    PodObservation,
    classify_pod,
)
from rljob.reconcile.conditions import (
    MANAGED_TYPES,
    ConditionState,
    merge_conditions,
    one_line,
    valid_reason,
)
from rljob.reconcile.events import EventSpec, normal, warning
from rljob.reconcile.lifecycle import TRAINER_FAILED, failing_rank
from rljob.reconcile.observed import ObservedChild, ObservedPod
from rljob.reconcile.policy import (
    Failure,
    choose_action,
    record_restart,
)
from rljob.vocabulary.enums import FailureReason, RoleName
from tests.unit.property.strategies import FEW, SETTINGS, hostile_text, printable

NOW = datetime(2026, 1, 1, tzinfo=UTC)
# etcd refuses values over 1.5 MiB; a status should stay far below, whatever it quotes.
STATUS_BUDGET_BYTES = 512 * 1024
maybe_text = st.one_of(st.none(), hostile_text)
# Names the API validates (pods, containers, nodes): DNS labels and subdomains.
dns_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?", fullmatch=True)
reasons = st.one_of(
    st.sampled_from(["OOMKilled", "Error", "Completed", "ErrImagePull", "CrashLoopBackOff"]),
    st.sampled_from(["PreemptionByScheduler", "DeletionByTaintManager", "Evicted", "NodeLost"]),
    hostile_text,
)


def assert_one_clean_line(text: str, limit: int = MESSAGE_MAX_LENGTH) -> None:
    assert len(text) <= limit
    assert printable(text), ascii(text[:200])
    assert text == text.strip() and "  " not in text
    text.encode("utf-8")  # no lone surrogate: the API server gets valid UTF-8


terminations = st.builds(
    ContainerTermination,
    exit_code=st.one_of(st.none(), st.integers(-(2**31), 2**31)),
    reason=st.one_of(st.none(), reasons),
    message=maybe_text,
    container=st.one_of(st.none(), dns_names, hostile_text),
)
pods = st.builds(
    PodObservation,
    name=dns_names,
    restart_policy=st.sampled_from(["Always", "OnFailure", "Never"]),
    reason=st.one_of(st.none(), reasons),
    message=maybe_text,
    conditions=st.lists(
        st.builds(
            PodCondition,
            type=st.sampled_from(["DisruptionTarget", "Ready"]),
            status=st.sampled_from(["True", "False"]),
            reason=st.one_of(st.none(), reasons),
            message=maybe_text,
        ),
        max_size=2,
    ).map(tuple),
    node=st.one_of(st.none(), dns_names, hostile_text),
    node_ready=st.sampled_from([None, "True", "Unknown"]),
    terminated=st.lists(terminations, max_size=2).map(tuple),
    waiting_reasons=st.lists(st.tuples(reasons, maybe_text), max_size=2).map(tuple),
)


@SETTINGS
@given(pods)
def test_a_pod_failure_is_explained_in_one_clean_line(pod: PodObservation) -> None:
    classified = classify_pod(pod)

    if classified is not None:
        assert_one_clean_line(classified.message)


@FEW
@given(st.lists(st.tuples(dns_names, terminations), min_size=1, max_size=6))
def test_crash_loop_findings_quote_clean_lines(
    restarts: list[tuple[str, ContainerTermination]],
) -> None:
    tracker = CrashRepeatTracker(repeats=2, window=600)
    for count, (container, last) in enumerate(restarts):
        evaluation = tracker.observe("rollout-0", container, count, last, float(count))

        assert_one_clean_line(evaluation.message)


POLICY = FailurePolicy.model_validate({"maxRestarts": 100, "window": "1h"})


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(FailureReason)), st.sampled_from(list(RoleName)), hostile_text
        ),
        min_size=1,
        max_size=MAX_RECENT_RESTARTS + 5,
    ),
    dns_names,
)
def test_restart_decisions_and_their_ledger_stay_valid(
    failures: list[tuple[FailureReason, RoleName, str]], pod: str
) -> None:
    ledger = RestartsStatus()
    for index, (reason, role, message) in enumerate(failures):
        now = NOW + timedelta(minutes=index)
        decision = choose_action(Failure(reason, role, pod, 1, message), POLICY, ledger, now)
        assert_one_clean_line(decision.message)
        ledger = record_restart(ledger, decision, now, POLICY)

    RestartsStatus.model_validate_json(ledger.model_dump_json(by_alias=True))


condition_types = st.one_of(
    st.sampled_from(MANAGED_TYPES), st.sampled_from(["CheckpointReady", "HealthSignals"])
)


@SETTINGS
@given(
    st.lists(
        st.tuples(condition_types, st.booleans(), reasons, hostile_text),
        min_size=1,
        max_size=MAX_CONDITIONS,
        unique_by=lambda state: state[0],
    )
)
def test_conditions_from_hostile_reasons_and_messages_validate(
    states: list[tuple[str, bool, str, str]],
) -> None:
    condition_states = [
        ConditionState.of(kind, is_true, valid_reason(reason, "Observed"), message)
        for kind, is_true, reason, message in states
    ]
    conditions = merge_conditions([], condition_states, NOW, 3)

    status = RLJobStatus.model_validate_json(
        RLJobStatus(conditions=conditions).model_dump_json(by_alias=True)
    )
    for condition in status.conditions:
        assert_one_clean_line(condition.message)
        assert re.fullmatch(REASON_PATTERN, condition.reason)


@SETTINGS
@given(st.sampled_from([normal, warning]), hostile_text)
def test_events_carry_one_clean_bounded_line(
    make: Callable[[str, str], EventSpec], message: str
) -> None:
    event = make("Unschedulable", message)

    assert_one_clean_line(event.message)


def _failed_rank(reason: str, message: str) -> ObservedPod:
    return ObservedPod(
        name="grpo-trainer-1-0",
        uid="u",
        role="trainer",
        attempt=1,
        node="node-1",
        phase="Failed",
        ready=False,
        restart_count=0,
        unschedulable_message="",
        exit_code=1,
        reason=reason,
        message=message,
        completion_index=0,
        deleting=False,
        created_at=None,
    )


@SETTINGS
@given(reasons, hostile_text, hostile_text)
def test_a_failed_trainer_rank_makes_a_valid_failed_condition(
    reason: str, message: str, job_message: str
) -> None:
    job = ObservedChild(
        kind="Job",
        name="grpo-trainer-1",
        uid="u",
        role="trainer",
        spec_hash="h",
        attempt=1,
        failed=True,
        failed_message=job_message,
    )
    for failure in (failing_rank([_failed_rank(reason, message)], job), failing_rank([], job)):
        condition = Condition(
            type="Failed",
            status=ConditionStatus.TRUE,
            reason=failure.reason,
            message=failure.message,
            last_transition_time=NOW,
        )
        assert_one_clean_line(condition.message)
        assert condition.reason in (reason, TRAINER_FAILED)


@FEW
@given(st.lists(hostile_text, min_size=1, max_size=4))
def test_a_status_full_of_hostile_text_stays_within_the_size_budget(texts: list[str]) -> None:
    """Every bounded list at its bound, every message at its limit: still far below etcd's."""
    joined = "".join(texts) or "x"
    longest = (joined * (3 * MESSAGE_MAX_LENGTH // len(joined) + 1))[: 3 * MESSAGE_MAX_LENGTH]
    ledger = RestartsStatus()
    for index in range(MAX_RECENT_RESTARTS + 3):
        decision = choose_action(
            Failure(FailureReason.OOM_KILLED, RoleName.ROLLOUT, f"rollout-{index}", 137, longest),
            POLICY,
            ledger,
            NOW,
        )
        ledger = record_restart(ledger, decision, NOW, POLICY)
    conditions = [
        Condition(
            type=f"Custom{index}",
            status=ConditionStatus.FALSE,
            reason="Observed",
            message=one_line(longest),
            last_transition_time=NOW,
        )
        for index in range(MAX_CONDITIONS)
    ]
    status = RLJobStatus(conditions=conditions, restarts=ledger)

    wire = json.dumps(status.model_dump(mode="json", by_alias=True)).encode()  # ASCII-escaped
    assert len(wire) <= STATUS_BUDGET_BYTES
    RLJobStatus.model_validate_json(wire)
