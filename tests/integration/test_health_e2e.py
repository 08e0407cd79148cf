"""Health detection end to end: simulated engines and trainers scraped by a real Prometheus,
the operator's health scheduler querying it, and the failure policy acting (second-scale
windows in the spec)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from rljob.dev.prometheus import PrometheusServer
from rljob.dev.scrape import metric_values
from rljob.dev.sim import Simulator
from tests.helpers import quiet_for, wait_for
from tests.integration.conftest import Cluster, Operator
from tests.integration.rljobs import (
    DRIFT_WARMUP,
    DRIFT_WINDOW,
    FAST_BACKOFF,
    JOBS,
    apply_rljob,
    children,
    condition,
    events,
    example,
    fail_rank0,
    get_rljob,
    pod_uids,
    second_scale_health,
    wait_condition,
)
from tests.integration.worker import WORKER

# xdist_group: one worker, in order: the last test reads what the module's scenarios left in
# its Prometheus.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("health_e2e")]

NAME = "grpo-minimal"
WINDOW, WARMUP = DRIFT_WINDOW, DRIFT_WARMUP
DROP = 0.30
NAIVE_AVERAGE_SECONDS = 60.0  # RLJobRolloutThroughputDrift's 1h average at second scale


def _health_job(prometheus_url: str, engines: int = 4) -> dict[str, Any]:
    return example(
        roles={"rollout": {"replicas": engines, "gpus": 1}, "trainer": {"nodes": 1, "gpus": 8}},
        health=second_scale_health(
            {"prometheus": {"url": prometheus_url}},
            engineStall={"timeout": "15s"},
            trainerStall={"timeout": "10s", "startupGrace": "5s"},
            # The default 15 min takes 7.5 min of phase data before rljob_job_step_phase_seconds
            # is exported (attribution.min_coverage); these scenarios run for about a minute.
            bottleneck={"window": "20s"},
        ),
        failurePolicy=FAST_BACKOFF,
    )


def _evaluations(operator: Operator, outcome: str) -> float:
    return sum(
        metric_values(
            operator.metrics_url, "rljob_detector_evaluations_total", f'outcome="{outcome}"'
        )
    )


def _drift_value(operator: Operator, namespace: str) -> float | None:
    matchers = ('detector="kv_drift"', f'namespace="{namespace}"')
    found = metric_values(operator.metrics_url, "rljob_detector_value", *matchers)
    return found[0] if found else None


def _counted_in_prometheus(
    prometheus: PrometheusServer, operator: Operator, namespace: str, reason: str
) -> None:
    """The restart reaches the bed's Prometheus as the shipped rules and dashboard read it; if
    not, says whether the operator exports it and whether Prometheus scrapes the operator."""
    counted = f'rljob_restarts_total{{namespace="{namespace}",reason="{reason}"}}'
    try:
        wait_for(lambda: prometheus.query(counted), 30, f"{counted} in the bed's Prometheus")
    except AssertionError as exc:
        exported = metric_values(operator.metrics_url, "rljob_restarts_total", f'reason="{reason}"')
        scraped = [t for t in prometheus.targets() if t["labels"].get("job") == "rljob-operator"]
        exc.add_note(f"the operator exports {exported}; its scrape target: {scraped}")
        raise


def _running(cluster: Cluster, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    apply_rljob(cluster, namespace, body)
    return wait_condition(cluster, namespace, NAME, "Ready", timeout=90)


# When this module's first scenario began on this worker. pytest sets a module fixture up again
# when another module's test ran in between (ci23: xdist interleaved one), and the last test
# must read from the first scenario on, not from that second setup.
_SCENARIOS_BEGAN: list[float] = []


@pytest.fixture(scope="module", autouse=True)
def scraped_operator(operator_session: Operator, prometheus: PrometheusServer) -> float:
    """The bed's Prometheus scrapes the operator too (the shipped rules run on both): returns
    when this module's scenarios began, for the queries that run after them."""
    operator_session.scraped_by(prometheus)
    if not _SCENARIOS_BEGAN:
        _SCENARIOS_BEGAN.append(time.time())
    return _SCENARIOS_BEGAN[0]


def test_one_drifting_engine_is_restarted_alone(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    _running(cluster, namespace, _health_job(prometheus.url))
    engines = pod_uids(cluster, namespace, NAME, "rollout")
    (trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    victim = sorted(engines)[0]
    # Inject only once every engine has its post-warm-up baseline (the detector reports a value).
    wait_for(lambda: _drift_value(operator, namespace) is not None, WARMUP + 60, "drift baselines")
    baseline = simulator.client().workloads(namespace=namespace, pod=victim)[0]["state"][
        "expected_tokens_per_second"
    ]
    simulator.client().inject("drift", namespace=namespace, pod=victim, drop=DROP)

    wait_for(
        lambda: victim not in pod_uids(cluster, namespace, NAME, "rollout"),
        3 * WINDOW + 30,
        f"{victim} to be restarted",
    )
    message = "\n".join(e["message"] for e in events(cluster, namespace, "PodRestarted"))
    numbers = re.search(r"(\d+) tok/s vs baseline (\d+)", message)
    assert numbers is not None, message
    measured, measured_baseline = float(numbers[1]), float(numbers[2])
    assert abs(measured_baseline - baseline) <= 0.1 * baseline
    assert abs(measured - baseline * (1 - DROP)) <= 0.1 * baseline * (1 - DROP)

    survivors = {name: uid for name, uid in engines.items() if name != victim}
    quiet_for(2 * WINDOW)
    now = pod_uids(cluster, namespace, NAME, "rollout")
    assert {name: now.get(name) for name in survivors} == survivors
    (same_trainer,) = children(cluster, namespace, JOBS, NAME, "trainer")
    assert same_trainer["metadata"]["uid"] == trainer["metadata"]["uid"]
    restarts = get_rljob(cluster, namespace, NAME)["status"]["restarts"]
    assert restarts["byReason"] == {"KVCacheDrift": 1}
    _counted_in_prometheus(prometheus, operator, namespace, "KVCacheDrift")


@pytest.mark.parametrize("fault", ["load", "sleep"])
def test_engines_slowing_together_unsaturated_or_asleep_are_not_restarted(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
    fault: str,
) -> None:
    _running(cluster, namespace, _health_job(prometheus.url))
    engines = pod_uids(cluster, namespace, NAME, "rollout")
    params = {"waiting": 0, "fraction": 0.5} if fault == "load" else {"on": True}
    simulator.client().inject(fault, namespace=namespace, job=NAME, role="rollout", **params)
    before = _evaluations(operator, "healthy") + _evaluations(operator, "insufficient_data")
    quiet_for(3 * WINDOW)
    after = _evaluations(operator, "healthy") + _evaluations(operator, "insufficient_data")
    assert after > before
    assert pod_uids(cluster, namespace, NAME, "rollout") == engines
    assert get_rljob(cluster, namespace, NAME)["status"]["restarts"]["total"] == 0


def test_a_hung_trainer_is_gang_restarted_after_the_timeout(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    _running(cluster, namespace, _health_job(prometheus.url))
    # Hang it while training: a trainer waiting for rollouts is exempt from the stall rule.
    client = simulator.client()

    def training() -> bool:
        (trainer,) = client.workloads(namespace=namespace, role="trainer")
        # Past a few steps, so the hung attempt has trained (status.goodput below).
        return bool(trainer["state"].get("phase") == "training" and trainer["state"]["step"] >= 3)

    wait_for(training, 60, "the trainer to be training past step 3", interval=0.1)
    client.inject("hang", namespace=namespace, job=NAME, role="trainer")
    wait_for(
        lambda: any(
            j["metadata"]["name"].endswith("-a2") for j in children(cluster, namespace, JOBS, NAME)
        ),
        90,
        "a gang restart (attempt 2) after the heartbeat went stale",
    )
    job = get_rljob(cluster, namespace, NAME)
    assert job["status"]["restarts"]["byReason"] == {"TrainerStalled": 1}
    _counted_in_prometheus(prometheus, operator, namespace, "TrainerStalled")
    _hang_in_goodput(job, operator, namespace)


def _hang_in_goodput(job: dict[str, Any], operator: Operator, namespace: str) -> None:
    """The hung attempt is folded into status.goodput: its marks stamped, its detection run
    from its last step read (a hang leaves no failed container), and said to be inferred."""
    hung, goodput = job["status"]["attempts"][0], job["status"]["goodput"]
    assert {"runningAt", "firstStepAt", "healthyAt", "reachedStep"} <= set(hung), hung
    assert "failedAt" not in hung
    assert goodput["closedThrough"] == 1
    closed = goodput["closed"]
    assert closed["productiveSeconds"] >= 1 and closed["lostSeconds"]["detection"] >= 1, (
        hung,
        closed,
    )
    assert any("no failed container" in note for note in goodput["notes"])
    ratios = metric_values(
        operator.metrics_url, "rljob_job_goodput_ratio", f'namespace="{namespace}"'
    )
    assert len(ratios) == 1 and 0 < ratios[0] < 1


def test_with_prometheus_down_nothing_restarts_from_metrics_but_nccl_is_still_handled(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    _running(cluster, namespace, _health_job("http://127.0.0.1:9"))
    job = wait_condition(
        cluster, namespace, NAME, "HealthSignalsAvailable", status="False", timeout=60
    )
    assert "127.0.0.1:9" in condition(job, "HealthSignalsAvailable")["message"]
    wait_for(
        lambda: _evaluations(operator, "insufficient_data") > 0, 30, "insufficient-data evaluations"
    )
    assert get_rljob(cluster, namespace, NAME)["status"]["restarts"]["total"] == 0

    fail_rank0(cluster, namespace, NAME)
    wait_for(
        lambda: (
            get_rljob(cluster, namespace, NAME)["status"]["restarts"].get("byReason")
            == {"NCCLTimeout": 1}
        ),
        60,
        "the NCCL failure to be handled without metrics",
    )


def test_the_naive_drift_alert_fires_on_a_drift_the_operator_only_reports(
    cluster: Cluster,
    operator: Operator,
    namespace: str,
    simulator: Simulator,
    prometheus: PrometheusServer,
) -> None:
    """RLJobRolloutThroughputDrift (the shipped rule at second scale: 5m -> 5s, 1h -> 60s,
    for 30m -> 30s) fires for an engine that keeps drifting because the policy only reports."""
    body = _health_job(prometheus.url)
    report = {"roles": ["rollout"], "onReasons": ["KVCacheDrift"], "action": "Report"}
    body["spec"]["failurePolicy"]["rules"] = [report]
    _running(cluster, namespace, body)
    started = time.monotonic()
    victim = sorted(pod_uids(cluster, namespace, NAME, "rollout"))[0]
    wait_for(lambda: _drift_value(operator, namespace) is not None, WARMUP + 60, "drift baselines")
    # The rule compares with its own average over 1h (60 s here): give it that much history.
    quiet_for(max(0.0, NAIVE_AVERAGE_SECONDS + 10 - (time.monotonic() - started)))
    # A fragmenting cache keeps losing throughput: the naive rule's average takes in the drop
    # itself, so a step to 0.5 x would match for only 45 s of its 30 s `for`; this ramp (to
    # 0.2 x over 60 s) matches for about 80 s.
    simulator.client().inject("drift", namespace=namespace, pod=victim, drop=0.8, over_seconds=60)

    def firing() -> bool:
        return any(
            a["labels"].get("alertname") == "RLJobRolloutThroughputDrift"
            and a["labels"].get("pod") == victim
            and a["state"] == "firing"
            for a in prometheus.alerts()
        )

    wait_for(firing, 120, f"RLJobRolloutThroughputDrift firing for {victim}")
    assert victim in pod_uids(cluster, namespace, NAME, "rollout")  # reported, not restarted
    # Found every health round since, said once: a standing finding repeats every 10 minutes.
    reports = [e["message"] for e in events(cluster, namespace, "KVCacheDrift")]
    assert len(reports) == 1, reports
    assert victim in reports[0] and "report" in reports[0]


# Series these scenarios do not produce, each covered elsewhere. (The bed's trainers report the
# RL canaries and phase seconds by default: rljob.dev.sim.models.canaries and phases.)
NOT_EXERCISED_HERE = {
    "rljob_checkpoint_saved_timestamp_seconds": "no checkpoint store here "
    "(test_operator_checkpoints.py covers it)",
    "rljob_verifier_queue_depth": "these scenarios run no verifier",
}
# Series that exist only once something went wrong (a failed API or store call, a rejected
# spec, garbage from a source); the e2e scenarios above do not break those on purpose.
FAILURE_ONLY_SERIES = {
    "rljob_api_errors_total": "an API call failed",
    "rljob_checkpoint_store_errors_total": "a checkpoint store call failed",
    "rljob_spec_rejections_total": "the operator refused a spec the server stored",
    "rljob_reconcile_errors_total": "a reconcile pass failed",
    "rljob_health_rejected_total": "a metrics source returned garbage",
    "rljob_verifier_request_duration_seconds_bucket": "these scenarios run no verifier",
}


def test_every_alert_and_dashboard_query_runs_on_the_scenarios_data(
    prometheus: PrometheusServer, scraped_operator: float
) -> None:
    """Runs last in this module: every shipped alert expression (at second scale) and every
    dashboard query executes in the bed's Prometheus over the scenarios' time span, and every
    series each one reads returned data there at least once."""
    from tests.unit.monitoring import dashboard, dashboard_queries, metric_names
    from tests.unit.monitoring import scaled_rule_groups as scaled

    queries = [
        (rule["alert"], rule["expr"])
        for group in scaled(1 / 60)
        for rule in group["rules"]
        if "alert" in rule
    ] + dashboard_queries(dashboard())
    start = scraped_operator
    missing: dict[str, set[str]] = {}
    for name, expr in queries:
        prometheus.query_range(expr, start, step=5)  # raises on any PromQL or type error
        empty = {
            series
            for series in metric_names(expr)
            - FAILURE_ONLY_SERIES.keys()
            - NOT_EXERCISED_HERE.keys()
            if not prometheus.query_range(f"count({series})", start, step=5)
        }
        if empty:
            missing[name] = empty
    anything = prometheus.query_range('count({__name__=~"rljob_.*"})', start, step=5)
    assert missing == {}, (
        f"{missing}; worker {WORKER}, scenarios began {time.time() - start:.0f} s ago, "
        f"any rljob_ series since then: {bool(anything)}"
    )
