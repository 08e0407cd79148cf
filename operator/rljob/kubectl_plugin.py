"""`kubectl rljob`: a one-screen view of an RLJob. A kubectl plugin runs with kubectl on PATH
and the user's kubeconfig, so it reads through kubectl itself."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any


def _get(name: str, namespace: str | None) -> dict[str, Any]:
    cmd = ["kubectl", "get", "rljob", name, "-o", "json"]
    if namespace:
        cmd += ["-n", namespace]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)
    body: dict[str, Any] = json.loads(out.stdout)
    return body


def render_status(job: dict[str, Any]) -> str:
    """The text `kubectl rljob status` prints."""
    status = job.get("status") or {}
    meta = job["metadata"]
    lines = [
        f"RLJob {meta.get('namespace', '')}/{meta['name']}: {status.get('phase', 'Pending')}"
        f" (attempt {status.get('attempt', '-')})",
        "",
        "ROLE        READY",
    ]
    for role, counts in sorted((status.get("roles") or {}).items()):
        lines.append(f"{role:<11} {counts.get('ready', 0)}/{counts.get('desired', 0)}")
    lines += ["", "CONDITIONS"]
    for cond in status.get("conditions") or []:
        lines.append(
            f"  {cond['type']}={cond['status']} {cond.get('reason', '')}: {cond.get('message', '')}"
        )
    restarts = status.get("restarts") or {}
    lines += ["", f"RESTARTS total={restarts.get('total', 0)} counted={restarts.get('counted', 0)}"]
    for entry in (restarts.get("recent") or [])[-5:]:
        what = f"{entry.get('role')} {entry.get('reason')}"
        lines.append(f"  {entry.get('time')} {what}: {entry.get('message', '')}")
    latest = (status.get("checkpoint") or {}).get("latest")
    if latest:
        saved = f"step {latest.get('step')} saved {latest.get('savedAt')}"
        lines += ["", f"CHECKPOINT {latest.get('version')} {saved}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kubectl rljob")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="phase, roles, conditions, restarts, checkpoint")
    status.add_argument("name")
    status.add_argument("-n", "--namespace")
    args = parser.parse_args(argv)
    try:
        print(render_status(_get(args.name, args.namespace)))
    except subprocess.CalledProcessError as exc:
        sys.stderr.write(exc.stderr)
        return exc.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
