"""bench/GOODPUT.md: the goodput benchmark's page, from what a run measured (pure)."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.goodput import trace as tracelib
from bench.goodput.arms import (
    FAILURE_ARMS,
    JOBSET_MAX_RESTARTS,
    SPARE_GPU_NODES,
    Arm,
    restart_everything_yaml,
)
from bench.goodput.measure import (
    POD,
    REPORT,
    ROLE,
    WHOLE_JOB,
    ArmRecord,
    ArmResult,
    FailureResult,
    RoleFacts,
    analyse,
    gpu_hours,
    healthy_step_seconds,
    mean,
    real_ett,
    real_lost_per_failure,
)
from bench.goodput.trace import Durations, FailureClass, FailureEvent, Role, expected_counts
from bench.goodput.world import NODE_REPAIR_S, World, describe_plan
from rljob.api.failure_policy import MAX_RESTARTS_LIMIT

if TYPE_CHECKING:
    from bench.goodput.run import Settings

REPO = Path(__file__).resolve().parents[2]
TARGET = 0.97


@dataclass(frozen=True)
class Results:
    healthy_step_s: float
    calibration: ArmResult
    arms: dict[Arm, ArmResult]

    def every(self) -> list[tuple[Arm, ArmResult]]:
        """The calibration run, then the failure arms."""
        return [(Arm.CALIBRATION, self.calibration), *self.arms.items()]


def results(world: World, records: Mapping[Arm, ArmRecord]) -> Results:
    """The calibration's healthy step time, and every arm measured against it."""
    d, size = world.durations, world.size
    roles = {
        Role.ROLLOUT: RoleFacts(size.rollout_engines, d.model_load_s),
        Role.TRAINER: RoleFacts(size.trainer_nodes, d.checkpoint_load_s),
        Role.VERIFIER: RoleFacts(size.verifiers),
    }
    healthy = healthy_step_seconds(records[Arm.CALIBRATION].samples)
    return Results(
        healthy,
        analyse(records[Arm.CALIBRATION], healthy, roles),
        {arm: analyse(records[arm], healthy, roles) for arm in FAILURE_ARMS if arm in records},
    )


@dataclass(frozen=True)
class Report:
    settings: Settings
    world: World
    trace: list[FailureEvent]
    results: Results
    seconds: float
    commit: str = ""  # what ran (checkout_commit at the run); empty: the checkout's now


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def checkout_commit() -> str:
    """The checkout's commit, and whether tracked files differ from it."""
    sha = _git("rev-parse", "--short", "HEAD")
    if sha is None:
        return "an unknown commit"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return f"commit {sha}" + (" with uncommitted changes" if dirty else "")


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f} %"


def _s(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _actions(result: ArmResult, kind: str, role: str | None = None) -> int:
    return sum(1 for a in result.actions if a.kind == kind and (role is None or a.role == role))


def _status_ratio(result: ArmResult) -> str:
    goodput = result.status_goodput or {}
    ratio = goodput.get("ratio")
    return "—" if ratio is None else f"{100 * float(str(ratio)):.1f} %"


def _trace_table() -> list[str]:
    doc = tracelib.__doc__ or ""
    return [line for line in doc.splitlines() if line.startswith("|")]


def render(report: Report) -> str:
    s, world = report.settings, report.world
    lines = [
        "# Goodput: the operator against restarting everything and a JobSet",
        "",
        f"`python -m bench goodput{' --smoke' if s.smoke else ''}` (issue 33, items 2 and 3): "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {report.commit or checkout_commit()}, "
        f"{platform.machine()} with {_cpus()} CPUs shared with other work, "
        f"{report.seconds / 60:.1f} min of wall-clock in all.",
        "",
        *_summary(report),
        "",
        *_setup(report),
        "",
        *_mapping(world),
        "",
        *_arms_config(world),
        "",
        *_by_class(report),
        "",
        *_per_failure(report),
        "",
        *_accounting(report),
        "",
        *_extrapolation(report),
        "",
        *_notes(report),
        "",
    ]
    return "\n".join(lines)


def _cpus() -> int:
    return os.cpu_count() or 0


def _summary(report: Report) -> list[str]:
    res = report.results
    rows = [
        "## Effective training time",
        "",
        "Unique steps reached x the healthy step time / wall-clock from the job's creation "
        "(ground truth: the simulator's trainer). The calibration run is the same job with no "
        "failure: its figure is the ceiling startup leaves.",
        "",
        "| arm | effective training time | steps | wall-clock s | gang / whole-job restarts | "
        "pod restarts | role restarts | reports | status.goodput.ratio (operator's own) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, result in res.every():
        restarts = sum(_actions(result, kind) for kind in WHOLE_JOB)
        rows.append(
            f"| {arm.value} | {_pct(result.ett)} | {result.steps} | {result.wall_s:.0f} | "
            f"{restarts} | {_actions(result, POD)} | {_actions(result, ROLE)} | "
            f"{_actions(result, REPORT)} | {_status_ratio(result)} |"
        )
    operator = res.arms.get(Arm.OPERATOR_DEFAULTS)
    if operator is not None:
        verdict = "meets" if operator.ett >= TARGET else "misses"
        rows += [
            "",
            f"Target (issue 33): the operator at least {TARGET:.0%} on the trace. Measured: "
            f"{_pct(operator.ett)}, which {verdict} it; the calibration run (no failure) reached "
            f"{_pct(res.calibration.ett)}.",
        ]
    return rows


def _setup(report: Report) -> list[str]:
    s, world, res = report.settings, report.world, report.results
    d = world.durations
    size = world.size
    if s.smoke:
        trace = (
            f"the smoke trace: one failure of each class at the middle of the n-th of "
            f"{len(FailureClass)} equal slots of {s.run_s / len(FailureClass):.0f} s "
            f"(`failure_trace(one_per_class=True)`, seed {s.seed})"
        )
    else:
        trace = (
            f"Poisson arrivals over {s.hours:g} scaled hours (= {s.hours * s.factor:g} real "
            f"hours), seed {s.seed}, the cited rates multiplied by {s.stress_hardware:g} for the "
            f"hardware classes (gpu_hardware, nccl_timeout, node_lost, hung_rank) and by "
            f"{s.stress_assumed:g} for the assumed ones (engine_oom, engine_drift, slow_verifier)"
        )
    return [
        "## Setup",
        "",
        f"- Time scale: 1/{s.factor:g} of real time, `Durations.scaled({s.factor:g})`; the "
        f"health interval {d.health_interval_s:.2f} s "
        + ("(clamped to the API's 1 s floor)" if d.health_interval_s < 1 else "")
        + f"; run {s.run_s:.0f} s.",
        f"- Trace: {trace}; {len(report.trace)} failures.",
        f"- Job: trainer {size.trainer_nodes} nodes x {size.gpus_per_trainer_node} GPUs, "
        f"{size.rollout_engines} rollout engines x {size.gpus_per_engine} GPUs, {size.verifiers} "
        f"verifiers: {world.gpus} GPUs (nominal: kwok nodes). Each arm on a pool of its own: "
        f"{size.trainer_nodes + size.rollout_engines + SPARE_GPU_NODES} nodes of 8 GPUs (one "
        "pod a node, spares for replacements) and a CPU node for the verifiers.",
        f"- Step: {d.step_s:.2f} s scaled (verl fully async 7B, 189.26 s): "
        f"{world.rollout_share:.0%} waiting for rollouts (coupled: tokens over the engines' "
        f"throughput plus the verifiers' mean delay), the rest training; a checkpoint every "
        f"{world.checkpoint_every} steps blocking {d.checkpoint_save_s:.3f} s; a rank loads "
        f"{d.checkpoint_load_s:.2f} s before its first step, an engine {d.model_load_s:.2f} s "
        "before it supplies rollouts.",
        f"- Healthy step time measured in the calibration run: {res.healthy_step_s:.3f} s "
        f"(expected {d.step_s + d.checkpoint_save_s / world.checkpoint_every:.3f} s).",
        f"- NCCL watchdog {d.nccl_timeout_s:.1f} s; drift reaches the detector's 20 % "
        f"{d.drift_onset_to_threshold_s:.0f} s after onset; a lost node returns after "
        f"{NODE_REPAIR_S:.0f} s.",
        "",
        "The trace's sources (bench/goodput/trace.py):",
        "",
        *_trace_table(),
        "",
        "| class | expected in this run at the cited rates | stress | in this trace |",
        "|---|---|---|---|",
        *[
            f"| {c.value} | {n:.3f} | {s.stress(c):g} | "
            f"{sum(1 for e in report.trace if e.failure_class is c)} |"
            for c, n in expected_counts(size, d, s.hours).items()
        ],
    ]


def _mapping(world: World) -> list[str]:
    rows = [
        "## Each failure class as one world event, the same in every arm",
        "",
        "Trainer failures freeze every rank first (the others block in their next collective, as "
        "NCCL's would). A rank fails through kwok's fault annotations (exit code, reason, message "
        "the operator's classifier reads; `fail-after` for a watchdog), a node through its stopped "
        "heartbeat (Ready Unknown after the bed's 20 s grace), the rest through the simulator's "
        "control API. Whoever acts first wins: a pod an arm already replaced is not failed.",
        "",
        "| class | role | world event |",
        "|---|---|---|",
    ]
    for c in FailureClass:
        for role in c.roles:
            rows.append(f"| {c.value} | {role.value} | {describe_plan(c, role, world)} |")
    return rows


def _arms_config(world: World) -> list[str]:
    timing = world.failure_policy_timing()
    health = world.health_spec("<prometheus>")
    return [
        "## The arms",
        "",
        "All four (calibration, operator-defaults, restart-everything, jobset) start together on "
        "one bed (kube-apiserver, controller-manager, scheduler, kwok, the simulator, versitygw "
        "for checkpoints, Prometheus scraping every second), each in its namespace and node pool; "
        "the same trace is injected into the three failure arms at the same instants.",
        "",
        "- **operator-defaults**: an RLJob with the built-in failure policy; its detection "
        "windows and restart times are the operator's defaults scaled like the world: "
        f"health {_inline(health, skip='source')}; failurePolicy {_inline(timing)} (maxRestarts "
        "10, noProgressRestarts 3 as by default; the window is 24 h / factor / "
        f"{world.window_stress:g}, the engine and verifier classes' stress, so that the budget "
        "and the escalation count as many restarts a window as at the cited rates). Checkpoints "
        "through the operator (resume Latest).",
        "- **restart-everything**: the same RLJob with these `failurePolicy.rules` (before the "
        "built-ins): whatever fails, and why, the whole job restarts as one journaled action "
        "(RestartJob: the trainer gang from its newest checkpoint, every serving role rolled by "
        f"its Deployment), with maxRestarts and noProgressRestarts {MAX_RESTARTS_LIMIT} (the "
        "API's limit) so that, like the JobSet, it restarts rather than fails the job:",
        "",
        "```",
        restart_everything_yaml(),
        "```",
        "",
        f"- **jobset**: a JobSet (v0.12.0): replicatedJobs trainer (1 Job, "
        f"{world.size.trainer_nodes} indexed pods), rollout ({world.size.rollout_engines} Jobs of "
        f"one pod), verifier ({world.size.verifiers} Jobs of one pod); restartPolicy Never, "
        f"backoffLimit 0; `failurePolicy.maxRestarts: {JOBSET_MAX_RESTARTS}` (its documented "
        "policy: any failed Job recreates every Job). No operator, no health detection; the "
        "trainer resumes from the newest checkpoint in its own store location (the simulator's "
        "`resume_from_store`, as verl's resume_mode auto). Pods carry the labels, ports and "
        "profiles the simulator serves an RLJob's by.",
    ]


def _inline(values: Mapping[str, Any], skip: str = "") -> str:
    parts = []
    for key, value in values.items():
        if key == skip:
            continue
        if isinstance(value, Mapping):
            parts.append(f"{key} {{{_inline(value)}}}")
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _class_rows(report: Report, arm: Arm, result: ArmResult) -> list[str]:
    rows = []
    gpus = report.world.gpus
    for c in FailureClass:
        fs = [f for f in result.failures if f.event.failure_class is c and not f.skipped]
        if not fs:
            continue
        lost = sum(f.lost_s for f in fs)
        repaired = sum(1 for f in fs if f.without_gang)
        rows.append(
            f"| {arm.value} | {c.value} | {len(fs)} | {lost:.1f} | {gpu_hours(lost, gpus):.3f} | "
            f"{_s(mean(f.detect_s for f in fs))} | {_s(mean(f.recover_s for f in fs))} | "
            f"{sum(f.recomputed for f in fs)} | {repaired} of {len(fs)} |"
        )
    return rows


def _by_class(report: Report) -> list[str]:
    rows = [
        "## Per failure class",
        "",
        f"Lost seconds: each failure's slot less its progress x the healthy step; GPU-hours lost "
        f"= lost seconds x {report.world.gpus} GPUs / 3600 (scaled time). Detect: injection to "
        "the arm's first repair of what was hit (restart ledger, JobSet status); recover: to the "
        "trainer past the step it had reached and the hit pod replaced and loaded (— : not "
        "repaired by the end of the run). Means over the class's failures.",
        "",
        "| arm | class | failures | lost s | GPU-h lost | detect s | recover s | steps "
        "recomputed | repaired without a gang restart |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, result in report.results.arms.items():
        rows += _class_rows(report, arm, result)
    startup = ", ".join(
        f"{a.value} {r.startup_lost_s:.1f} s" for a, r in report.results.arms.items()
    )
    rows += ["", f"Before the first failure (startup, the same job everywhere): {startup}."]
    return rows


def _per_failure(report: Report) -> list[str]:
    rows = [
        "## Every failure",
        "",
        "| t s | class | role | arm | pod | first action | detect s | reported s | recover s | "
        "recomputed | lost s | fixed s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_time: list[tuple[float, Arm, FailureResult]] = [
        (f.injected_at, arm, f) for arm, r in report.results.arms.items() for f in r.failures
    ]
    for t, arm, f in sorted(by_time, key=lambda x: (x[0], list(Arm).index(x[1]))):
        if f.skipped:
            rows.append(
                f"| {t:.0f} | {f.event.failure_class} | {f.event.role} | {arm.value} | — | "
                f"skipped: {f.skipped} | | | | | | |"
            )
            continue
        rows.append(
            f"| {t:.0f} | {f.event.failure_class} | {f.event.role} | {arm.value} | {f.pod} | "
            f"{f.action or 'none'} | {_s(f.detect_s)} | {_s(f.reported_s)} | {_s(f.recover_s)} | "
            f"{f.recomputed} | {f.lost_s:.1f} | {f.fixed_s:.1f} |"
        )
    return rows


def _accounting(report: Report) -> list[str]:
    rows = [
        "## Measured against the operator's own accounting",
        "",
        "status.goodput (reconcile/goodput.py) beside the ground truth. The operator counts an "
        "attempt's time from its marks (Job created, ranks Ready, steps read) and engine repairs "
        "not at all (a slower rollout is slower steps, not lost time); its status rides the "
        "5-minute progress refresh, so it may lag the end of the run. Its startup figure runs to "
        "`firstStepAt`, the health round that first read a step past the one the attempt "
        "resumed at, and its recomputation to `caughtUpAt`, the round that first read the step "
        "the attempt before had reached (`_first_read`, from the last 8 distinct steps the "
        "runtime keeps): a step is timed one health interval late at most.",
        "",
        "| arm | measured effective | status ratio | measured lost s | status lost s (detection, "
        "teardown, scheduling, startup, recomputation) | recomputed steps (measured / status) | "
        "updatedAt | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for arm, result in report.results.every():
        if arm.is_jobset:
            continue
        goodput: Mapping[str, Any] = result.status_goodput or {}
        total = goodput.get("total") or {}
        lost = total.get("lostSeconds") or {}
        causes = ("detection", "teardown", "scheduling", "startup", "recomputation")
        status_lost = sum(int(lost.get(c, 0)) for c in causes)
        measured_lost = result.wall_s - result.steps * report.results.healthy_step_s
        recomputed = sum(f.recomputed for f in result.failures)
        notes = "; ".join(str(n) for n in goodput.get("notes") or []) or "—"
        rows.append(
            f"| {arm.value} | {_pct(result.ett)} | {_status_ratio(result)} | {measured_lost:.0f} | "
            f"{status_lost} ({', '.join(str(lost.get(c, 0)) for c in causes)}) | {recomputed} / "
            f"{total.get('recomputedSteps', 0)} | {goodput.get('updatedAt', '—')} | {notes} |"
        )
    return rows


def _extrapolation(report: Report) -> list[str]:
    s, world = report.settings, report.world
    real = Durations()
    per_hour = expected_counts(world.size, real, 1.0)
    rows = [
        "## Extrapolated to real time (factor 1)",
        "",
        f"Real seconds lost per failure = (measured - fixed) x {s.factor:g} + fixed "
        "(`trace.extrapolate`); fixed: the cluster's own part, from the arm's action to the "
        "replacement attached (deletes, creates, scheduling, kwok), which a real cluster does in "
        "about the same seconds. Effective training time at the trace's cited rates on this job "
        "= 1 - sum over classes of (failures an hour x real seconds lost each) / 3600; a class "
        "with no failure measured counts nothing.",
        "",
        "| class | failures an hour (cited rates, this job) | "
        + " | ".join(f"{a.value} s lost each" for a in report.results.arms)
        + " |",
        "|---|---|" + "---|" * len(report.results.arms),
    ]
    extrapolated = {
        arm: real_lost_per_failure(result, s.factor) for arm, result in report.results.arms.items()
    }
    for c in FailureClass:
        cells = [_s(extrapolated[a].get(c), 0) for a in report.results.arms]
        rows.append(f"| {c.value} | {per_hour[c]:.5f} | " + " | ".join(cells) + " |")
    rows.append(
        "| effective training time | | "
        + " | ".join(_pct(real_ett(extrapolated[a], per_hour)) for a in report.results.arms)
        + " |"
    )
    rows += [
        "",
        "A failure whose effect outlives its slot (a drift no arm repairs, a slow verifier only "
        "reported) is counted for its slot only, here and above: its real cost grows with the "
        "time until something else restarts the pod.",
    ]
    return rows


def _notes(report: Report) -> list[str]:
    rows = [
        "## What this does not show",
        "",
        "- The bed's fixed latencies do not scale: the node lifecycle controller's 20 s grace "
        "(50 s upstream: 1.7 s at factor 30), 10 s unreachable tolerations, the simulator's 0.5 s "
        "poll and 1 s tick, Prometheus' 1 s scrape, the operator's control loop. They weigh "
        "more at the bench's scale than at real time (see the fixed column).",
        "- kwok marks a pod Ready at once: a role restarted in turn replaces its engines back "
        "to back, their model loads overlapping, where readiness probes would make them follow "
        "one another (the same engine-seconds lost, spread differently).",
        "- nccl_timeout and hung_rank are the same world event here (every rank frozen, the "
        "watchdog failing one after the NCCL timeout): the trainer-stall detector's window "
        "(30 min) is longer than the watchdog's (10 min) at any scale, so the watchdog wins.",
        "- GPUs are nominal (kwok); GPU-hours are lost seconds x the job's 64 GPUs.",
    ]
    for arm, result in report.results.every():
        for note in result.notes:
            rows.append(f"- {arm.value}: {note}")
    return rows


def summary_lines(report: Report) -> Sequence[str]:
    """One line per arm (the smoke's log and the test's message)."""
    res = report.results
    return [
        f"{arm.value}: effective {_pct(r.ett)}, {r.steps} steps, "
        f"{sum(_actions(r, kind) for kind in WHOLE_JOB)} gang/whole-job restarts, "
        f"{_actions(r, POD)} pod and {_actions(r, ROLE)} role restarts"
        for arm, r in res.every()
    ]


__all__ = ["Report", "Results", "render", "results", "summary_lines"]
