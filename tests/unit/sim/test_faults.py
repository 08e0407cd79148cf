"""Fault rules: validation, selectors, newest-wins resolution, restart semantics, pruning."""

from __future__ import annotations

from typing import Any

import pytest

from rljob.dev.sim.faults import (
    NO_FAULTS,
    Active,
    FaultError,
    RuleBook,
    parse_injection,
    parse_selector,
)

NS = "team-a"


def inject(book: RuleBook, body: dict[str, Any], now: float, bound: set[str]) -> str:
    rule, _ = book.add(parse_injection({"namespace": NS, **body}), now, bound)
    return rule.id


def resolve(
    book: RuleBook, instance: str, pod: str, role: str = "rollout", started: float = 0.0
) -> Active:
    return book.resolve(
        instance=instance, namespace=NS, pod=pod, job="job1", role=role, started=started
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"kind": "drift", "pod": "p"}, "drop is required"),
        ({"kind": "drift", "pod": "p", "drop": 1.5}, "between"),
        ({"kind": "drift", "pod": "p", "drop": "0.3"}, "must be a number"),
        ({"kind": "drift", "pod": "p", "drop": 0.3, "speed": 2}, "takes"),
        ({"kind": "melt", "pod": "p"}, "kind must be one of"),
        ({"kind": "stall"}, "name a pod, or a job"),
        ({"kind": "stall", "pod": "p", "job": "j"}, "not both"),
        ({"kind": "stall", "job": "j", "role": "driver"}, "role must be one of"),
        ({"kind": "latency", "job": "j", "role": "rollout", "p99_seconds": 2}, "does not take"),
        ({"kind": "sleep", "pod": "p", "on": "yes"}, "true or false"),
        ({"kind": "sleep", "pod": "p", "level": 3}, "between"),
        ({"kind": "load", "pod": "p", "waiting": 1.5}, "whole number"),
        ({"kind": "stall", "pod": "p", "survive_restart": 1}, "true or false"),
        ({"kind": "pause", "pod": "p", "on": 1}, "true or false"),
        ({"kind": "pause", "job": "j", "role": "trainer"}, "does not take"),
    ],
)
def test_bad_injections_are_refused_with_a_reason(body: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message):
        parse_injection({"namespace": NS, **body})


def test_namespace_is_required() -> None:
    with pytest.raises(FaultError, match="namespace is required"):
        parse_selector({"pod": "p"})


def test_selectors_match_a_pod_or_a_jobs_role() -> None:
    pod = parse_selector({"namespace": NS, "pod": "p1"})
    role = parse_selector({"namespace": NS, "job": "job1", "role": "rollout"})
    job = parse_selector({"namespace": NS, "job": "job1"})
    assert pod.matches(NS, "p1", "job1", "rollout")
    assert not pod.matches("other", "p1", "job1", "rollout")
    assert role.matches(NS, "p2", "job1", "rollout")
    assert not role.matches(NS, "p2", "job1", "trainer")
    assert job.matches(NS, "p2", "job1", "trainer")
    assert not job.matches(NS, "p2", "job2", "trainer")


def test_drift_resolves_to_its_start_and_health() -> None:
    book = RuleBook()
    inject(book, {"kind": "drift", "pod": "p1", "drop": 0.3, "over_seconds": 60}, 100.0, {"u1#0"})
    active = resolve(book, "u1#0", "p1")
    assert active.drifts == ((100.0, 0.3, 60.0),)
    assert active.health(130) == pytest.approx(0.85)
    assert resolve(book, "u2#0", "p2") is NO_FAULTS


def test_the_newest_rule_per_kind_wins() -> None:
    book = RuleBook()
    inject(book, {"kind": "sleep", "job": "job1", "role": "rollout"}, 10.0, {"u1#0", "u2#0"})
    inject(book, {"kind": "sleep", "pod": "p2", "on": False}, 20.0, {"u2#0"})
    assert resolve(book, "u1#0", "p1").sleep_level(30) == 1
    assert resolve(book, "u2#0", "p2").sleep_level(30) == 0
    inject(book, {"kind": "sleep", "job": "job1", "role": "rollout", "level": 2}, 40.0, set())
    assert resolve(book, "u2#0", "p2").sleep_level(50) == 2
    assert len(book) == 2  # the same selector and kind replaced the first rule


def test_faults_apply_only_to_roles_that_take_them() -> None:
    book = RuleBook()
    inject(book, {"kind": "stall", "job": "job1"}, 0.0, {"u1#0", "t1#0"})
    inject(book, {"kind": "latency", "job": "job1", "p99_seconds": 3}, 0.0, {"v1#0"})
    assert resolve(book, "u1#0", "p1").stalled(1)
    assert resolve(book, "t1#0", "t1", role="trainer").hung(1)
    verifier = resolve(book, "v1#0", "v1", role="verifier")
    assert verifier.p99_seconds == 3 and not verifier.stalled(1)


def test_a_drift_does_not_survive_a_restart_unless_asked() -> None:
    book = RuleBook()
    inject(book, {"kind": "drift", "pod": "p1", "drop": 0.3}, 10.0, {"u1#0"})
    assert resolve(book, "u1#1", "p1", started=50.0).health(60) == 1.0
    inject(
        book,
        {"kind": "drift", "pod": "p1", "drop": 0.3, "survive_restart": True},
        70.0,
        {"u1#1"},
    )
    restarted = resolve(book, "u1#2", "p1", started=100.0)
    assert restarted.drifts == ((100.0, 0.3, 0.0),)  # from the new process's start


def test_sleep_and_load_survive_restarts_by_default() -> None:
    book = RuleBook()
    inject(book, {"kind": "sleep", "job": "job1", "role": "rollout"}, 10.0, {"u1#0"})
    inject(book, {"kind": "load", "job": "job1", "waiting": 0, "fraction": 0.3}, 10.0, {"u1#0"})
    inject(book, {"kind": "pause", "job": "job1"}, 10.0, {"u1#0"})
    fresh = resolve(book, "u9#0", "p9", started=50.0)
    assert fresh.sleep == (50.0, 1)
    assert fresh.paused(50.0) and not fresh.paused(49.0)
    assert fresh.load_at(60) == (0, 0.3)


def test_prune_drops_gone_instances_and_rules_that_apply_to_nothing() -> None:
    book = RuleBook()
    drift = inject(book, {"kind": "drift", "pod": "p1", "drop": 0.2}, 0.0, {"u1#0"})
    sleep = inject(book, {"kind": "sleep", "job": "job1"}, 0.0, {"u1#0", "u2#0"})
    stall = inject(book, {"kind": "stall", "job": "job1", "role": "rollout"}, 0.0, {"u1#0", "u2#0"})
    assert book.prune({"u2#0"}) == [drift]
    assert {r.id for r in book.rules()} == {sleep, stall}
    assert book.prune(set()) == [stall]
    assert [r.id for r in book.rules()] == [sleep]


def test_clear_by_id_selector_namespace_kind_or_all() -> None:
    book = RuleBook()
    a = inject(book, {"kind": "drift", "pod": "p1", "drop": 0.2}, 0.0, {"u1#0"})
    b = inject(book, {"kind": "stall", "pod": "p1"}, 0.0, {"u1#0"})
    c = inject(book, {"kind": "sleep", "job": "job1"}, 0.0, {"u1#0"})
    assert [r.id for r in book.clear(rule_id=a)] == [a]
    selector = parse_selector({"namespace": NS, "pod": "p1"})
    assert [r.id for r in book.clear(selector=selector, kind="sleep")] == []
    assert [r.id for r in book.clear(selector=selector)] == [b]
    assert [r.id for r in book.clear(namespace="elsewhere")] == []
    assert [r.id for r in book.clear()] == [c]
    with pytest.raises(FaultError):
        book.clear(kind="melt")


def test_the_rule_count_is_bounded() -> None:
    book = RuleBook(max_rules=3)
    for index in range(3):
        inject(book, {"kind": "stall", "pod": f"p{index}"}, 0.0, {f"u{index}#0"})
    inject(book, {"kind": "stall", "pod": "p0"}, 1.0, {"u0#0"})  # a replacement fits
    with pytest.raises(FaultError, match="at most 3"):
        inject(book, {"kind": "stall", "pod": "p9"}, 1.0, {"u9#0"})


def test_rules_describe_themselves() -> None:
    book = RuleBook()
    inject(
        book, {"kind": "latency", "job": "job1", "role": "verifier", "p99_seconds": 4}, 5.0, {"v#0"}
    )
    (rule,) = book.rules()
    assert rule.as_json() == {
        "id": rule.id,
        "selector": {"namespace": NS, "job": "job1", "role": "verifier"},
        "kind": "latency",
        "p99_seconds": 4.0,
        "survive_restart": False,
        "created": 5.0,
        "instances": ["v#0"],
    }
