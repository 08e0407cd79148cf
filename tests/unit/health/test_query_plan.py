"""A job's query plan: built once for its targets and profiles, not every round, and built
again when either changes."""

from __future__ import annotations

from rljob.api.roles import EngineMetricNames
from rljob.health.job_diagnosis import DIAGNOSIS_ROLE
from rljob.health.monitor import ROLLOUT, TRAINER_ROLE, pods_by_role
from rljob.health.profiles import VLLM, Signal
from rljob.health.profiles.signals import (
    ENGINE_POLICY_GENERATION,
    MEMORY_WORKING_SET,
    PROCESS_TREE_RSS,
)
from tests.unit.health.test_monitor import PROM, Pod, make_job, monitor_of

TRAINER_POD = Pod("j-trainer-0", TRAINER_ROLE, attempt=1)
ENGINES = [Pod("j-rollout-0", ROLLOUT), Pod("j-rollout-1", ROLLOUT)]


def test_the_same_targets_reuse_the_plan_and_new_pods_build_a_new_one() -> None:
    job = make_job("j")
    monitor = monitor_of(job, [*ENGINES, TRAINER_POD])
    plan = monitor.query_plan(monitor.targets())
    assert monitor.query_plan(monitor.targets()) is plan
    moved = [Pod("j-rollout-0", ROLLOUT), Pod("j-rollout-2", ROLLOUT), TRAINER_POD]
    monitor.update(job, pods_by_role(moved), 1.0, PROM)
    replanned = monitor.query_plan(monitor.targets())
    assert replanned is not plan
    tokens = VLLM.signals()["generation_tokens"]
    assert monitor.queries(monitor.targets())[tokens] == {"j-rollout-0", "j-rollout-2"}


def test_a_changed_engine_profile_builds_a_new_plan() -> None:
    job = make_job("j")
    monitor = monitor_of(job, [*ENGINES, TRAINER_POD])
    plan = monitor.query_plan(monitor.targets())
    names = {"generationTokensTotal": "my_tokens_total"}
    assert job.spec.roles.rollout is not None
    rollout = job.spec.roles.rollout.model_copy(update={"metric_names": EngineMetricNames(**names)})
    roles = job.spec.roles.model_copy(update={"rollout": rollout})
    renamed = job.model_copy(update={"spec": job.spec.model_copy(update={"roles": roles})})
    monitor.update(renamed, pods_by_role([*ENGINES, TRAINER_POD]), 1.0, PROM)
    replanned = monitor.query_plan(monitor.targets())
    assert replanned is not plan
    assert "my_tokens_total" in {s.metric for _, signals in replanned.asked for s in signals}


def test_required_signals_leave_out_the_diagnosis_and_the_optional_engine_signals() -> None:
    monitor = monitor_of(make_job("j"), [*ENGINES, TRAINER_POD])
    plan = monitor.query_plan(monitor.targets())
    diagnosis = set(monitor.role_queries(monitor.targets())[DIAGNOSIS_ROLE])
    assert diagnosis <= set(plan.optional)
    assert ENGINE_POLICY_GENERATION in {s.name for s in plan.optional}
    # Host memory: one more Prometheus query per round and source, never required (an engine
    # without it is insufficient data for memory_growth only); a rollout engine has no SDK page.
    optional = {s.name for s in plan.optional}
    assert MEMORY_WORKING_SET in optional and PROCESS_TREE_RSS not in optional
    assert not set(plan.required) & set(plan.optional)
    everything = {s for _, signals in plan.asked for s in signals}
    assert set(plan.required) | set(plan.optional) == everything


def test_a_signals_hash_is_its_fields_hash_taken_once() -> None:
    signal = Signal("tokens", "m_total", (("model", "x"),))
    assert hash(signal) == hash(Signal("tokens", "m_total", (("model", "x"),)))
    assert {signal: 1}[Signal("tokens", "m_total", (("model", "x"),))] == 1
    assert signal != Signal("tokens", "m_total")
