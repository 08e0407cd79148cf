"""`kubectl rljob diagnose`: what bounds a job's trainer step, on one screen. The operator writes
its diagnosis into status.bottleneck (rljob.api.diagnosis); this renders it: a trainer gang short
of ready pods, the role with what it means and, in a `but:` line, what the screen's own figures
say against it (rljob.kubectl.diagnose_verdict), its evidence and advice, the step time by phase,
the rollout engines' throughput against requests in flight with the knee (K) and the
recommendation (R), each engine's load, the verifiers, and a failure-policy suspension with how
to resume it.

`-o json` prints `diagnosis_document(job)`, a stable document for scripts. Its keys:

    kind                   "RLJobDiagnosis"
    name, namespace        the RLJob
    phase                  status.phase ("Pending" when the operator has not written one)
    bottleneck             status.bottleneck as the operator wrote it (camelCase), or null
    bottleneckUnavailable  why bottleneck is null (not running, no metrics source, not computed
                           yet); null when it is there
    suspension             status.suspension (reason, message, rule, suspendedAt), or null
    pendingResumeRequest   the rljob.io/resume-request nonce not handled yet, or null
    lastResumeRequest      status.lastResumeRequest (id, handledAt, resumed), or null
    trainerBelowGang       {ready, nodes}: fewer trainer pods ready (status.roles.trainer.ready)
                           than the gang has (spec.roles.trainer.nodes) while the operator runs
                           it; null when the gang is whole, stopped or not recorded

Every render_* function is pure: the body of `kubectl get rljob NAME -o json` in, text out."""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from rljob.kubectl.diagnose_verdict import ROLE_MEANINGS, ScreenFigures, caveat
from rljob.kubectl.text import Body, format_age, job_name, namespace_flag, table, when
from rljob.vocabulary.defaults import DEFAULT_TRAINER_NODES
from rljob.vocabulary.enums import BottleneckRole, JobPhase
from rljob.vocabulary.knee import Confidence, Knee, format_count, plot
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION

DOCUMENT_KIND = "RLJobDiagnosis"
SIGNALS_CONDITION = "HealthSignalsAvailable"
BAR_WIDTH = 30
PLOT_WIDTH = 56
PLOT_HEIGHT = 8
TEXT_WIDTH = 100
MAX_ENGINE_ROWS = 8
# A part of the gang said in words; any other as a percentage.
GANG_PARTS = {Fraction(1, 2): "half", Fraction(1, 3): "a third of", Fraction(1, 4): "a quarter of"}


# ------------------------------------------------------------------------------ helpers


def _real(value: object) -> float | None:
    """A number from status, or None for anything else (a missing or garbled field)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _number(value: object, digits: int = 1) -> str:
    if (number := _real(value)) is None:
        return "-"
    return f"{number:.0f}" if abs(number) >= 100 else f"{number:.{digits}f}"


def _count(value: object) -> str:
    """Requests in flight: whole numbers from ten up, two significant digits below."""
    number = _real(value)
    return "-" if number is None else format_count(number)


def _percent(value: object) -> str:
    return "-" if (number := _real(value)) is None else f"{number:.0%}"


def _paragraph(label: str, text: object) -> list[str]:
    if not text:
        return []
    return _wrapped(f"{label}: {text}")


def _wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, TEXT_WIDTH, initial_indent="  ", subsequent_indent="    ")


def _condition(status: Body, kind: str) -> Body | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


# ------------------------------------------------------------------------------ absent


def unavailable_reason(job: Body) -> str | None:
    """Why status.bottleneck is empty, from the phase and the conditions; None when it is there."""
    status = job.get("status") or {}
    if status.get("bottleneck"):
        return None
    phase = status.get("phase") or JobPhase.PENDING.value
    if phase != JobPhase.RUNNING.value:
        return f"the job is {phase}: the operator diagnoses a running trainer"
    signals = _condition(status, SIGNALS_CONDITION)
    if signals is not None and signals.get("status") == "False":
        return (
            f"no health metrics to diagnose from ({signals.get('reason', '')}: "
            f"{signals.get('message', '')})"
        )
    health = (job.get("spec") or {}).get("health") or {}
    window = (health.get("bottleneck") or {}).get("window")
    over = f", over spec.health.bottleneck.window ({window})" if window else ""
    return f"not computed yet: the operator writes it with progress, at most every 5 minutes{over}"


# ------------------------------------------------------------------------------ trainer gang


@dataclass(frozen=True, slots=True)
class TrainerGang:
    """A trainer gang short of ready pods."""

    ready: int
    nodes: int


def trainer_below_gang(job: Body) -> TrainerGang | None:
    """The trainer's ready pods when fewer than its gang while the operator runs it; else None."""
    configured = ((job.get("spec") or {}).get("roles") or {}).get("trainer")
    counts = ((job.get("status") or {}).get("roles") or {}).get("trainer")
    if not isinstance(configured, dict) or not isinstance(counts, dict):
        return None
    nodes = _real(configured.get("nodes", DEFAULT_TRAINER_NODES))
    ready = _real(counts.get("ready")) or 0.0
    # Desired 0: the operator stopped the gang (suspended, finished), so none is missing.
    if not _real(counts.get("desired")) or nodes is None or ready >= nodes:
        return None
    return TrainerGang(ready=int(ready), nodes=int(nodes))


def _gang_lines(job: Body, diagnosed: bool) -> list[str]:
    gang = trainer_below_gang(job)
    if gang is None:
        return []
    pods = "pod" if gang.nodes == 1 else "pods"
    line = f"  trainer: {gang.ready} of {gang.nodes} {pods} ready"
    if diagnosed and gang.ready == 0:
        line += "; no trainer pod runs now: the step times below are from before"
    elif diagnosed:
        line += f"; step times reflect {_gang_part(gang)} the gang"
    return [line]


def _gang_part(gang: TrainerGang) -> str:
    part = Fraction(gang.ready, gang.nodes)
    return GANG_PARTS.get(part, f"{float(part):.0%} of")


# ------------------------------------------------------------------------------ sections


def _headline(bottleneck: Body, now: datetime | None) -> list[str]:
    role = str(bottleneck.get("role", BottleneckRole.UNKNOWN.value))
    meaning = ROLE_MEANINGS.get(role)
    window = _real(bottleneck.get("windowSeconds"))
    span = f"over the last {format_age(window)}" if window is not None else ""
    return [
        f"BOTTLENECK {role} since {when(bottleneck.get('since'), now)}",
        *(_wrapped(meaning) if meaning else []),
        *_paragraph("but", caveat(role, screen_figures(bottleneck))),
        f"  computed {when(bottleneck.get('updatedAt'), now)} {span}".rstrip(),
        *_paragraph("evidence", bottleneck.get("evidence")),
        *_paragraph("advice", bottleneck.get("advice")),
        *_recommendation(bottleneck),
    ]


def screen_figures(bottleneck: Body) -> ScreenFigures:
    """The numbers the screen prints, for weighing them against the verdict."""
    phases = bottleneck.get("phases") or []
    engines = bottleneck.get("engines") or []
    curve = bottleneck.get("curve") or {}
    verifier = bottleneck.get("verifier") or {}
    shares = {str(p.get("phase")): _real(p.get("share")) for p in phases}
    saturation = [_real(engine.get("saturated")) for engine in engines]
    kv_usage = [_real(engine.get("kvUsage")) for engine in engines]
    return ScreenFigures(
        phase_shares={phase: share for phase, share in shares.items() if share is not None},
        engine_saturation=[share for share in saturation if share is not None],
        kv_usage=[kv for kv in kv_usage if kv is not None],
        in_flight=_real(curve.get("current")),
        knee=_real(curve.get("knee")),
        run_at=_real(curve.get("recommended")),
        verifier_queue=_real(verifier.get("queueDepth")),
        verifier_p99=_real(verifier.get("p99Seconds")),
    )


def _recommendation(bottleneck: Body) -> list[str]:
    concurrency = _real(bottleneck.get("recommendedConcurrency"))
    if concurrency is None:
        return []
    return [f"  run the rollout driver at {concurrency:.0f} requests in flight"]


def _bar(share: float) -> str:
    filled = round(max(0.0, min(share, 1.0)) * BAR_WIDTH)
    return "#" * filled + "." * (BAR_WIDTH - filled)


def _phase_lines(bottleneck: Body) -> list[str]:
    phases = bottleneck.get("phases") or []
    step = _real(bottleneck.get("stepSeconds"))
    head = "STEP TIME" + (f" {_number(step)} s per step" if step is not None else "")
    if not phases:
        return ["", head, "  no trainer phase seconds in the window (the SDK's phase counters)"]
    rows: list[list[object]] = [["PHASE", "SHARE", "S/STEP"]]
    for phase in sorted(phases, key=lambda p: -(_real(p.get("share")) or 0.0)):
        share = _real(phase.get("share")) or 0.0
        rows.append(
            [
                phase.get("phase"),
                f"{_bar(share)} {share:>4.0%}",
                _number(phase.get("secondsPerStep")),
            ]
        )
    return ["", head, *table(rows, indent="  ")]


def _knee(curve: Body, recommended: float | None) -> Knee:
    """The status' curve as rljob.vocabulary.knee's verdict, for its plot."""
    points = curve.get("points") or []
    peak = _real(curve.get("peak"))
    peak_throughput = next(
        (_real(p.get("throughput")) for p in points if _real(p.get("concurrency")) == peak), None
    )
    confidence = Confidence(
        len(points),
        _real(curve.get("coverage")) or 0.0,
        _real(curve.get("observedFrom")) or 0.0,
        _real(curve.get("observedTo")) or 0.0,
    )
    advice = _real(curve.get("recommended"))
    return Knee(
        knee=_real(curve.get("knee")),
        peak_concurrency=peak,
        peak_throughput=peak_throughput,
        degrading_from=_real(curve.get("degradingFrom")),
        recommended=advice if advice is not None else recommended,
        confidence=confidence,
        beyond=bool(curve.get("beyond")),
        message=str(curve.get("message") or ""),
    )


def _curve_facts(curve: Body, knee: Knee) -> list[str]:
    facts = [f"now {_count(curve.get('current'))} in flight"]
    if knee.knee is not None:
        facts.append(f"knee (K) {_count(knee.knee)}")
    if knee.peak_concurrency is not None:
        facts.append(f"peak {_count(knee.peak_concurrency)}")
    if knee.degrading_from is not None:
        facts.append(f"degrading from {_count(knee.degrading_from)}")
    if knee.recommended is not None:
        facts.append(f"run at (R) {_count(knee.recommended)}")
    observed = (curve.get("observedFrom"), curve.get("observedTo"))
    span = f"{_count(observed[0])}-{_count(observed[1])}" if None not in observed else "nothing"
    confidence = (
        f"confidence: {knee.confidence.bins} bins covering {_percent(knee.confidence.coverage)} "
        f"of {span} in flight observed"
    )
    lines = ["  " + "; ".join(facts), "  " + confidence]
    if knee.beyond:
        lines.append(
            f"  the knee lies beyond {_count(observed[1])}: throughput still climbed there"
        )
    return lines


def _curve_lines(bottleneck: Body) -> list[str]:
    curve = bottleneck.get("curve")
    if not curve:
        return ["", "ROLLOUT CURVE", "  no throughput-versus-concurrency curve yet"]
    knee = _knee(curve, _real(bottleneck.get("recommendedConcurrency")))
    points = [
        (float(p["concurrency"]), float(p["throughput"]))
        for p in curve.get("points") or []
        if isinstance(p.get("concurrency"), int | float)
        and isinstance(p.get("throughput"), int | float)
    ]
    role = curve.get("role", "rollout")
    head = f"ROLLOUT CURVE ({role} engines pooled: tokens/s by requests in flight)"
    return [
        "",
        head,
        *(f"  {line}".rstrip() for line in plot(points, knee, PLOT_WIDTH, PLOT_HEIGHT)),
        *_curve_facts(curve, knee),
        *_paragraph("verdict", curve.get("message")),
    ]


def _engine_lines(bottleneck: Body) -> list[str]:
    engines = bottleneck.get("engines") or []
    if not engines:
        return []
    rows: list[list[object]] = [["POD", "RUNNING", "WAITING", "KV", "TOKENS/S", "SATURATED"]]
    rows += [
        [
            engine.get("pod"),
            _number(engine.get("running")),
            _number(engine.get("waiting")),
            _percent(engine.get("kvUsage")),
            _number(engine.get("tokensPerSecond")),
            _percent(engine.get("saturated")),
        ]
        for engine in engines[:MAX_ENGINE_ROWS]
    ]
    more = len(engines) - MAX_ENGINE_ROWS
    tail = [f"  ... and {more} more (kubectl rljob diagnose -o json)"] if more > 0 else []
    return ["", "ENGINES (busiest first)", *table(rows, indent="  "), *tail]


def _verifier_lines(bottleneck: Body) -> list[str]:
    verifier = bottleneck.get("verifier")
    if not verifier:
        return []
    seconds = [
        f"{_number(verifier.get(k), 2)}s" if verifier.get(k) is not None else "-"
        for k in ("p50Seconds", "p99Seconds")
    ]
    return [
        "",
        f"VERIFIER latency p50 {seconds[0]} p99 {seconds[1]}, "
        f"queue {_number(verifier.get('queueDepth'))}, "
        f"errors {_number(verifier.get('errorsPerSecond'), 2)}/s",
    ]


def pending_resume(job: Body) -> str | None:
    """The rljob.io/resume-request nonce the operator has not handled yet."""
    annotations = job["metadata"].get("annotations") or {}
    nonce = annotations.get(RESUME_REQUEST_ANNOTATION)
    handled = ((job.get("status") or {}).get("lastResumeRequest") or {}).get("id")
    return str(nonce) if nonce and nonce != handled else None


def suspension_lines(job: Body, now: datetime | None) -> list[str]:
    """A failure-policy suspension: its reason, evidence and how to end it; [] when none."""
    suspension = (job.get("status") or {}).get("suspension")
    if not suspension:
        return []
    rule = f" (rule {suspension['rule']})" if suspension.get("rule") else ""
    name = job["metadata"]["name"]
    pending, flag = pending_resume(job), namespace_flag(job["metadata"].get("namespace"))
    resume = (
        f"  resume requested ({pending}), waiting for the operator"
        if pending
        else f"  resume, once the cause is dealt with: kubectl rljob resume {name}{flag}"
    )
    return [
        "",
        f"SUSPENDED BY POLICY {suspension.get('reason')}{rule} "
        f"since {when(suspension.get('suspendedAt'), now)}",
        *_paragraph("evidence", suspension.get("message")),
        "  its pods are stopped; status and checkpoints are kept",
        resume,
    ]


# ------------------------------------------------------------------------------ views


def render_diagnose(job: Body, now: datetime | None = None) -> str:
    """The text `kubectl rljob diagnose` prints; `now` adds ages to timestamps."""
    status = job.get("status") or {}
    phase = status.get("phase") or JobPhase.PENDING.value
    bottleneck = status.get("bottleneck")
    lines = [f"RLJob {job_name(job)}: {phase}", *_gang_lines(job, bool(bottleneck)), ""]
    if bottleneck:
        lines += [
            *_headline(bottleneck, now),
            *_phase_lines(bottleneck),
            *_curve_lines(bottleneck),
            *_engine_lines(bottleneck),
            *_verifier_lines(bottleneck),
        ]
    else:
        lines.append(f"no diagnosis: {unavailable_reason(job)}")
    return "\n".join([*lines, *suspension_lines(job, now)])


def diagnosis_document(job: Body) -> dict[str, Any]:
    """The `-o json` document (keys in the module docstring)."""
    status = job.get("status") or {}
    return {
        "kind": DOCUMENT_KIND,
        "name": job["metadata"]["name"],
        "namespace": job["metadata"].get("namespace"),
        "phase": status.get("phase") or JobPhase.PENDING.value,
        "bottleneck": status.get("bottleneck") or None,
        "bottleneckUnavailable": unavailable_reason(job),
        "suspension": status.get("suspension") or None,
        "pendingResumeRequest": pending_resume(job),
        "lastResumeRequest": status.get("lastResumeRequest") or None,
        "trainerBelowGang": asdict(gang) if (gang := trainer_below_gang(job)) else None,
    }
