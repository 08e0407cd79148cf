"""`kubectl rljob`: one-screen views of an RLJob and a manual restart. A kubectl plugin runs with
kubectl on PATH and the user's kubeconfig, so it reads and writes through kubectl itself.

    kubectl rljob status NAME [-n NS]             phase, roles, progress, restarts, checkpoint
    kubectl rljob restart NAME --role R [-n NS]   ask the operator to restart a role once
    kubectl rljob checkpoints NAME [-n NS]        latest, resumed-from and recent versions

The render_* functions are pure (the body of `kubectl get rljob NAME -o json` in, text out)."""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
from datetime import UTC, datetime

from rljob.api.enums import RoleName
from rljob.api.labels import RESTART_REQUEST_ANNOTATION
from rljob.kubectl_text import Body, job_name, table, when

RECENT_RESTARTS = 5
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


def _role_lines(status: Body) -> list[str]:
    roles = status.get("roles") or {}
    rows: list[list[object]] = [["ROLE", "READY", "RESTARTS"]]
    for role in RoleName:
        counts = roles.get(role.value)
        if counts is not None:
            ready = f"{counts.get('ready', 0)}/{counts.get('desired', 0)}"
            rows.append([role.value, ready, counts.get("restarts", 0)])
    return ["", *table(rows)] if len(rows) > 1 else []


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
            *_role_lines(status),
            *_progress_lines(status, now),
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


# ------------------------------------------------------------------------------ restart


def new_nonce(now: datetime, token: str | None = None) -> str:
    """A fresh request id: UTC time plus random hex, e.g. 20260501T100000Z-3f9a1c."""
    return f"{now.astimezone(UTC):%Y%m%dT%H%M%SZ}-{token or secrets.token_hex(3)}"


def restart_request(role: str, nonce: str) -> str:
    """The rljob.io/restart-request value the operator honours once per nonce."""
    return f"{RoleName(role).value}/{nonce}"


def annotate_command(name: str, namespace: str | None, value: str) -> list[str]:
    command = ["kubectl", "annotate", "rljob", name, f"{RESTART_REQUEST_ANNOTATION}={value}"]
    command.append("--overwrite")
    if namespace:
        command += ["-n", namespace]
    return command


def render_restart(name: str, namespace: str | None, role: str, nonce: str) -> str:
    where = f" -n {namespace}" if namespace else ""
    gang = (
        " The trainer restarts as a new attempt that resumes from the newest valid checkpoint."
        if role == RoleName.TRAINER.value
        else ""
    )
    return (
        f"Requested a restart of role {role} of RLJob {name} (request {nonce}).{gang}\n"
        f"Follow it: kubectl rljob status {name}{where}"
    )


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
    restart = commands.add_parser(
        "restart", help="restart one role (trainer: a new attempt from the newest checkpoint)"
    )
    restart.add_argument(
        "--role", required=True, choices=[role.value for role in RoleName], help="role to restart"
    )
    checkpoints = commands.add_parser(
        "checkpoints", help="latest, resumed-from and recent checkpoint versions"
    )
    for sub in (status, restart, checkpoints):
        sub.add_argument("name", help="RLJob name")
        sub.add_argument("-n", "--namespace", help="namespace (default: kubeconfig's)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    now = datetime.now(UTC)
    try:
        if args.command == "restart":
            nonce = new_nonce(now)
            value = restart_request(args.role, nonce)
            subprocess.run(
                annotate_command(args.name, args.namespace, value),
                check=True,
                capture_output=True,
                text=True,
                timeout=_KUBECTL_TIMEOUT,
            )
            print(render_restart(args.name, args.namespace, args.role, nonce))
        elif args.command == "checkpoints":
            print(render_checkpoints(_get(args.name, args.namespace), now))
        else:
            print(render_status(_get(args.name, args.namespace), now))
    except subprocess.CalledProcessError as exc:
        sys.stderr.write(exc.stderr or "")
        return exc.returncode
    except FileNotFoundError:
        sys.stderr.write("kubectl rljob: kubectl is not on PATH\n")
        return 127
    return 0


if __name__ == "__main__":
    sys.exit(main())
