"""`kubectl rljob`: one-screen views of an RLJob, a manual restart and a resume. A kubectl plugin
runs with kubectl on PATH and the user's kubeconfig, so it reads and writes through kubectl itself.

    kubectl rljob status NAME [-n NS]             phase, roles, engines, progress, goodput, restarts
    kubectl rljob diagnose NAME [-n NS] [-o json] what bounds the step, and what to change
    kubectl rljob restart NAME --role R [-n NS]   ask the operator to restart a role once
    kubectl rljob resume NAME [-n NS] [--force]   end a failure-policy suspension once
    kubectl rljob checkpoints NAME [-n NS]        latest, resumed-from and recent versions

The render_* functions are pure (the body of `kubectl get rljob NAME -o json` in, text out)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import UTC, datetime

from rljob.kubectl.diagnose_view import diagnosis_document, render_diagnose
from rljob.kubectl.requests import (
    annotate_command,
    new_nonce,
    render_restart,
    render_resume,
    restart_request,
    resume_refusal,
)
from rljob.kubectl.text import Body, format_age, job_name, namespace_flag, table, when
from rljob.vocabulary.enums import RoleName
from rljob.vocabulary.labels import RESTART_REQUEST_ANNOTATION, RESUME_REQUEST_ANNOTATION

RECENT_RESTARTS = 5
ROSTER_ROWS = 16  # engines listed one per row; the rest counted by state
STATUS_MESSAGE_WIDTH = 100
_KUBECTL_TIMEOUT = 30


# ------------------------------------------------------------------------------ status


def _in_flight_lines(status: Body, now: datetime | None) -> list[str]:
    action = status.get("inFlight")
    if not action:
        return []
    target = (action.get("target") or {}).get("role", "")
    since = when(action.get("startedAt"), now)
    return [
        f"in flight: {action.get('kind')} {target} reason={action.get('reason', '-')} "
        f"step={action.get('step') or 'started'} since {since}"
    ]


def _diagnosis_lines(job: Body, now: datetime | None) -> list[str]:
    """One line for the bottleneck and one for a policy suspension, each naming its command."""
    status, where = job.get("status") or {}, namespace_flag(job["metadata"].get("namespace"))
    lines = []
    if bottleneck := status.get("bottleneck"):
        lines.append(
            f"bottleneck: {bottleneck.get('role')} since {when(bottleneck.get('since'), now)} "
            f"(kubectl rljob diagnose {job['metadata']['name']}{where})"
        )
    if suspension := status.get("suspension"):
        lines.append(
            f"suspended by policy: {suspension.get('reason')} since "
            f"{when(suspension.get('suspendedAt'), now)}: {_shorten(suspension.get('message'))} "
            f"(kubectl rljob resume {job['metadata']['name']}{where})"
        )
    return lines


def _shorten(text: object) -> str:
    # The full evidence is in `kubectl rljob diagnose`; status keeps to one line.
    return textwrap.shorten(str(text or ""), STATUS_MESSAGE_WIDTH, placeholder="...")


def _role_lines(status: Body) -> list[str]:
    roles = status.get("roles") or {}
    rows: list[list[object]] = [["ROLE", "READY", "RESTARTS"]]
    for role in RoleName:
        counts = roles.get(role.value)
        if counts is not None:
            ready = f"{counts.get('ready', 0)}/{counts.get('desired', 0)}"
            rows.append([role.value, ready, counts.get("restarts", 0)])
    return ["", *table(rows)] if len(rows) > 1 else []


def _engine_lines(status: Body) -> list[str]:
    """The rollout roster (status.roles.rollout.engines): what a driver sees; past
    ROSTER_ROWS members, the rest counted by state."""
    engines = ((status.get("roles") or {}).get(RoleName.ROLLOUT.value) or {}).get("engines")
    if not engines:
        return []
    rows: list[list[object]] = [["ENGINE", "STATE", "GENERATION", "REQUIRED", "RESTARTS"]]
    for member in engines[:ROSTER_ROWS]:
        generation, required = member.get("generation"), member.get("requiredGeneration")
        rows.append(
            [
                member.get("pod", ""),
                member.get("state", ""),
                "-" if generation is None else generation,
                "-" if required is None else required,
                member.get("restarts", 0),
            ]
        )
    rest = Counter(str(member.get("state", "")) for member in engines[ROSTER_ROWS:])
    more = ", ".join(f"{count} {state}" for state, count in sorted(rest.items()))
    return ["", *table(rows), *([f"... and {sum(rest.values())} more: {more}"] if rest else [])]


def _progress_lines(status: Body, now: datetime | None) -> list[str]:
    progress = status.get("progress") or {}
    if not progress:
        return []
    lines = ["", "PROGRESS"]
    if progress.get("step") is not None:
        lines.append(f"  step {progress['step']} at {when(progress.get('lastStepTime'), now)}")
    tokens = progress.get("tokensPerSecond")
    baseline = progress.get("baselineTokensPerSecond")
    if tokens is not None:
        text = f"  rollout {tokens:.0f} tokens/s"
        if baseline:
            text += f" (baseline {baseline:.0f}, {(tokens - baseline) / baseline:+.0%})"
        lines.append(text)
    if progress.get("updatedAt"):
        lines.append(f"  refreshed {when(progress['updatedAt'], now)}")
    return lines


def _goodput_lines(status: Body, now: datetime | None) -> list[str]:
    goodput = status.get("goodput") or {}
    total = goodput.get("total") or {}
    if not total:
        return []
    ratio = goodput.get("ratio")
    head = f"GOODPUT {ratio:.1%}" if ratio is not None else "GOODPUT -"
    lines = ["", f"{head} of wall-clock trained (suspensions aside)"]
    lost = {k: v for k, v in (total.get("lostSeconds") or {}).items() if v}
    suspended = {k: v for k, v in (total.get("suspendedSeconds") or {}).items() if v}
    lines.append(f"  trained {format_age(total.get('productiveSeconds', 0))}")
    if lost:
        causes = ", ".join(f"{k} {format_age(v)}" for k, v in sorted(lost.items(), key=_larger))
        lines.append(f"  lost {causes}")
    if total.get("recomputedSteps"):
        lines.append(f"  steps recomputed {total['recomputedSteps']}")
    if suspended:
        lines.append(
            "  suspended " + ", ".join(f"by {k} {format_age(v)}" for k, v in suspended.items())
        )
    lines += [f"  note: {note}" for note in goodput.get("notes") or []]
    if goodput.get("updatedAt"):
        lines.append(f"  computed {when(goodput['updatedAt'], now)}")
    return lines


def _larger(item: tuple[str, int]) -> int:
    return -item[1]


def _condition_lines(status: Body) -> list[str]:
    conditions = status.get("conditions") or []
    if not conditions:
        return []
    return [
        "",
        "CONDITIONS",
        *(
            f"  {c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
            for c in conditions
        ),
    ]


def _restart_lines(status: Body, now: datetime | None) -> list[str]:
    restarts = status.get("restarts") or {}
    lines = ["", f"RESTARTS total={restarts.get('total', 0)} counted={restarts.get('counted', 0)}"]
    by_reason = restarts.get("byReason") or {}
    if by_reason:
        lines.append("  by reason: " + ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())))
    for entry in (restarts.get("recent") or [])[-RECENT_RESTARTS:]:
        what = f"{entry.get('role')} {entry.get('action')} {entry.get('reason')}"
        pod = f" pod {entry['pod']}" if entry.get("pod") else ""
        counted = "" if entry.get("counted", True) else " (not counted)"
        at = when(entry.get("time"), now)
        lines.append(f"  {at} {what}{pod}{counted}: {entry.get('message', '')}")
    return lines


def _checkpoint_lines(status: Body, now: datetime | None) -> list[str]:
    checkpoint = status.get("checkpoint") or {}
    latest, resumed = checkpoint.get("latest"), checkpoint.get("resumedFrom")
    lines = [""] if latest or resumed else []
    if latest:
        lines.append(
            f"CHECKPOINT latest {latest.get('version')} step {latest.get('step')} "
            f"saved {when(latest.get('savedAt'), now)}"
        )
    if resumed:
        lines.append(
            f"  attempt resumed from {resumed.get('version')} (step {resumed.get('step')})"
        )
    return lines


def render_status(job: Body, now: datetime | None = None) -> str:
    """The text `kubectl rljob status` prints; `now` adds ages to timestamps."""
    status = job.get("status") or {}
    phase, attempt = status.get("phase", "Pending"), status.get("attempt", "-")
    return "\n".join(
        [
            f"RLJob {job_name(job)}: {phase} (attempt {attempt})",
            *_in_flight_lines(status, now),
            *_diagnosis_lines(job, now),
            *_role_lines(status),
            *_engine_lines(status),
            *_progress_lines(status, now),
            *_goodput_lines(status, now),
            *_condition_lines(status),
            *_restart_lines(status, now),
            *_checkpoint_lines(status, now),
        ]
    )


# ------------------------------------------------------------------------------ checkpoints


def checkpoint_prefix(job: Body) -> str | None:
    """Where the job's versions live: <spec.checkpoint.uri>/<namespace>/<name>."""
    uri = ((job.get("spec") or {}).get("checkpoint") or {}).get("uri")
    if not uri:
        return None
    meta = job["metadata"]
    return f"{uri.rstrip('/')}/{meta.get('namespace', 'default')}/{meta['name']}"


def render_checkpoints(job: Body, now: datetime | None = None) -> str:
    """The text `kubectl rljob checkpoints` prints: the checkpoint status and where to look."""
    prefix = checkpoint_prefix(job)
    if prefix is None:
        return (
            f"RLJob {job_name(job)} has no spec.checkpoint: a restarted trainer starts over.\n"
            "spec.checkpoint can only be set when the job is created."
        )
    checkpoint = (job.get("status") or {}).get("checkpoint") or {}
    lines = [f"RLJob {job_name(job)} checkpoints under {prefix}/"]

    def describe(ref: Body | None) -> str:
        if not ref:
            return "-"
        return (
            f"{ref.get('version')} step {ref.get('step')} attempt {ref.get('attempt', '-')}, "
            f"saved {when(ref.get('savedAt'), now)}"
        )

    lines.append(f"latest:       {describe(checkpoint.get('latest'))}")
    lines.append(f"resumed from: {describe(checkpoint.get('resumedFrom'))}")
    capabilities = checkpoint.get("storeCapabilities") or {}
    if capabilities.get("conditionalWrites") is not None:
        lines.append(f"store: conditional writes {capabilities['conditionalWrites']}")

    history = checkpoint.get("history") or []
    lines.append("")
    if history:
        rows: list[list[object]] = [["VERSION", "STEP", "ATTEMPT", "SAVED", "VALIDATED"]]
        rows += [
            [
                ref.get("version"),
                ref.get("step"),
                ref.get("attempt"),
                when(ref.get("savedAt"), now),
                when(ref.get("validatedAt"), now),
            ]
            for ref in history
        ]
        lines += table(rows)
    else:
        lines.append("no eligible versions recorded yet")
    lines += [
        "",
        "Every version in the store, and whether it is complete:",
        f"  rljob checkpoints ls {prefix}",
        f"  rljob checkpoints validate {prefix}",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ kubectl I/O


def _get(name: str, namespace: str | None) -> Body:
    cmd = ["kubectl", "get", "rljob", name, "-o", "json"]
    if namespace:
        cmd += ["-n", namespace]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=_KUBECTL_TIMEOUT)
    body: Body = json.loads(out.stdout)
    return body


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl rljob", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser(
        "status", help="phase, roles, progress, conditions, restarts, checkpoint"
    )
    diagnose = commands.add_parser(
        "diagnose", help="what bounds the trainer's step, the concurrency knee, what to change"
    )
    diagnose.add_argument(
        "-o", "--output", choices=["text", "json"], default="text", help="json: for scripts"
    )
    restart = commands.add_parser(
        "restart", help="restart one role (trainer: a new attempt from the newest checkpoint)"
    )
    restart.add_argument(
        "--role", required=True, choices=[role.value for role in RoleName], help="role to restart"
    )
    resume = commands.add_parser("resume", help="end a suspension by the failure policy, once")
    resume.add_argument(
        "--force", action="store_true", help="write the request even if not policy-suspended"
    )
    checkpoints = commands.add_parser(
        "checkpoints", help="latest, resumed-from and recent checkpoint versions"
    )
    for sub in (status, diagnose, restart, resume, checkpoints):
        sub.add_argument("name", help="RLJob name")
        sub.add_argument("-n", "--namespace", help="namespace (default: kubeconfig's)")
    return parser


def _annotate(name: str, namespace: str | None, value: str, annotation: str) -> None:
    subprocess.run(
        annotate_command(name, namespace, value, annotation),
        check=True,
        capture_output=True,
        text=True,
        timeout=_KUBECTL_TIMEOUT,
    )


def _restart(args: argparse.Namespace, now: datetime) -> int:
    nonce = new_nonce(now)
    value = restart_request(args.role, nonce)
    _annotate(args.name, args.namespace, value, RESTART_REQUEST_ANNOTATION)
    print(render_restart(args.name, args.namespace, args.role, nonce))
    return 0


def _resume(args: argparse.Namespace, now: datetime) -> int:
    job = _get(args.name, args.namespace)
    refusal = resume_refusal(job)
    if refusal is not None and not args.force:
        sys.stderr.write(refusal + "\n")
        return 1
    nonce = new_nonce(now)
    _annotate(args.name, args.namespace, nonce, RESUME_REQUEST_ANNOTATION)
    print(render_resume(job, nonce, now))
    return 0


def _view(args: argparse.Namespace, now: datetime) -> int:
    job = _get(args.name, args.namespace)
    if args.command == "diagnose":
        if args.output == "json":
            print(json.dumps(diagnosis_document(job), indent=2))
        else:
            print(render_diagnose(job, now))
    elif args.command == "checkpoints":
        print(render_checkpoints(job, now))
    else:
        print(render_status(job, now))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run = {"restart": _restart, "resume": _resume}.get(args.command, _view)
    try:
        code = run(args, datetime.now(UTC))
        sys.stdout.flush()  # here, where a closed pipe can be caught, not at exit
        return code
    except subprocess.CalledProcessError as exc:
        sys.stderr.write(exc.stderr or "")
        return exc.returncode
    except FileNotFoundError:
        sys.stderr.write("kubectl rljob: kubectl is not on PATH\n")
        return 127
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader went away (`kubectl rljob status x | head`): stop quietly, as cat does. Python
    would flush stdout again at exit and print a traceback, so stdout goes to /dev/null."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe


if __name__ == "__main__":
    sys.exit(main())
