"""`kubectl rljob`: the pure rendering functions and the restart request it writes."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from rljob.api import RLJobStatus
from rljob.kubectl import plugin, requests
from rljob.kubectl.text import format_age
from rljob.reconcile.requests import RESTART_REQUEST_ANNOTATION, pending_restart

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def ref(step: int, attempt: int, saved: str) -> dict[str, Any]:
    version = f"v{step:012d}-a{attempt:06d}"
    return {
        "version": version,
        "step": step,
        "attempt": attempt,
        "uri": f"s3://ckpt/runs/team-a/grpo-demo/{version}",
        "savedAt": saved,
        "validatedAt": "2026-05-01T11:58:00Z",
    }


def job(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "rljob.io/v1alpha1",
        "kind": "RLJob",
        "metadata": {"name": "grpo-demo", "namespace": "team-a"},
        "spec": {"checkpoint": {"uri": "s3://ckpt/runs"}},
        "status": status,
    }


RUNNING = job(
    phase="Running",
    attempt=3,
    roles={
        "trainer": {"desired": 2, "ready": 2, "restarts": 2},
        "rollout": {"desired": 4, "ready": 3, "restarts": 1},
    },
    progress={
        "step": 1250,
        "lastStepTime": "2026-05-01T11:59:30Z",
        "tokensPerSecond": 5400.0,
        "baselineTokensPerSecond": 6000.0,
        "updatedAt": "2026-05-01T11:57:00Z",
    },
    conditions=[
        {"type": "Ready", "status": "True", "reason": "AllRolesReady", "message": "4/4 roles"}
    ],
    restarts={
        "total": 3,
        "counted": 2,
        "byReason": {"NCCLTimeout": 2, "Preempted": 1},
        "recent": [
            {
                "time": "2026-05-01T09:00:00Z",
                "role": "trainer",
                "reason": "NCCLTimeout",
                "action": "RestartTrainerGang",
                "message": "rank 3 watchdog timeout",
            },
            {
                "time": "2026-05-01T11:00:00Z",
                "role": "rollout",
                "pod": "grpo-demo-rollout-abc",
                "reason": "Preempted",
                "action": "RestartPod",
                "counted": False,
                "message": "DisruptionTarget",
            },
        ],
    },
    checkpoint={
        "latest": ref(1200, 3, "2026-05-01T11:45:00Z"),
        "resumedFrom": ref(1000, 2, "2026-05-01T08:50:00Z"),
        "history": [ref(1200, 3, "2026-05-01T11:45:00Z"), ref(1000, 2, "2026-05-01T08:50:00Z")],
        "storeCapabilities": {"conditionalWrites": True},
    },
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (119, "119s"), (120, "2m"), (3600, "1h"), (3720, "1h2m"), (49 * 3600, "2d1h")],
)
def test_format_age(seconds: int, text: str) -> None:
    assert format_age(seconds) == text


def test_status_shows_one_screen() -> None:
    text = plugin.render_status(RUNNING, NOW)
    assert text.splitlines()[0] == "RLJob team-a/grpo-demo: Running (attempt 3)"
    # Roles in the fixed role order, with readiness and restarts.
    assert re.search(r"^rollout\s+3/4\s+1$", text, re.MULTILINE)
    assert re.search(r"^trainer\s+2/2\s+2$", text, re.MULTILINE)
    assert text.index("rollout ") < text.index("trainer ")
    assert "step 1250 at 2026-05-01T11:59:30Z (30s ago)" in text
    assert "rollout 5400 tokens/s (baseline 6000, -10%)" in text
    assert "Ready=True AllRolesReady: 4/4 roles" in text
    assert "RESTARTS total=3 counted=2" in text
    assert "by reason: NCCLTimeout=2, Preempted=1" in text
    assert "trainer RestartTrainerGang NCCLTimeout: rank 3 watchdog timeout" in text
    assert "pod grpo-demo-rollout-abc (not counted): DisruptionTarget" in text
    assert "CHECKPOINT latest v000000001200-a000003 step 1200 saved" in text
    assert "(15m ago)" in text
    assert "resumed from v000000001000-a000002 (step 1000)" in text


def test_status_shows_the_engine_roster() -> None:
    engines = [
        {"pod": "grpo-demo-rollout-a", "address": "10.0.0.1", "state": "serving",
         "generation": 12, "requiredGeneration": 11, "restarts": 0},
        {"pod": "grpo-demo-rollout-b", "address": "10.0.0.2", "state": "joining", "restarts": 1},
    ]  # fmt: skip
    roles = {"rollout": {"desired": 2, "ready": 1, "restarts": 1, "engines": engines}}
    text = plugin.render_status(job(phase="Running", roles=roles))
    assert re.search(r"^ENGINE\s+STATE\s+GENERATION\s+REQUIRED\s+RESTARTS$", text, re.MULTILINE)
    assert re.search(r"^grpo-demo-rollout-a\s+serving\s+12\s+11\s+0$", text, re.MULTILINE)
    assert re.search(r"^grpo-demo-rollout-b\s+joining\s+-\s+-\s+1$", text, re.MULTILINE)
    assert "ENGINE" not in plugin.render_status(RUNNING), "no roster, no table"


def test_a_large_roster_is_cut_and_the_rest_counted_by_state() -> None:
    states = ["serving"] * (plugin.ROSTER_ROWS + 3) + ["draining", "joining"]
    engines = [{"pod": f"e{i}", "state": s, "restarts": 0} for i, s in enumerate(states)]
    roles = {"rollout": {"desired": len(engines), "ready": 0, "engines": engines}}
    text = plugin.render_status(job(phase="Running", roles=roles))
    listed = re.findall(r"^e\d+\s", text, re.MULTILINE)
    assert len(listed) == plugin.ROSTER_ROWS
    assert "... and 5 more: 1 draining, 1 joining, 3 serving" in text


def test_status_of_a_new_job() -> None:
    text = plugin.render_status(job())
    assert text.splitlines()[0] == "RLJob team-a/grpo-demo: Pending (attempt -)"
    assert "RESTARTS total=0 counted=0" in text
    assert "CHECKPOINT" not in text


def test_status_shows_the_action_in_flight() -> None:
    body = job(
        phase="Restarting",
        inFlight={
            "id": "a1",
            "kind": "RestartTrainerGang",
            "target": {"role": "trainer"},
            "reason": "TrainerStalled",
            "step": "old-job-deleted",
            "startedAt": "2026-05-01T11:59:00Z",
        },
    )
    text = plugin.render_status(body, NOW)
    assert (
        "in flight: RestartTrainerGang trainer reason=TrainerStalled step=old-job-deleted" in text
    )


def test_checkpoints_lists_latest_resumed_history_and_the_cli_hint() -> None:
    text = plugin.render_checkpoints(RUNNING, NOW)
    lines = text.splitlines()
    assert lines[0] == "RLJob team-a/grpo-demo checkpoints under s3://ckpt/runs/team-a/grpo-demo/"
    assert lines[1].startswith("latest:       v000000001200-a000003 step 1200 attempt 3")
    assert lines[2].startswith("resumed from: v000000001000-a000002 step 1000 attempt 2")
    header = next(line for line in lines if line.startswith("VERSION"))
    assert header.split() == ["VERSION", "STEP", "ATTEMPT", "SAVED", "VALIDATED"]
    rows = [line for line in lines if line.startswith("v0000")]
    assert [row.split()[0] for row in rows] == ["v000000001200-a000003", "v000000001000-a000002"]
    assert "  rljob checkpoints ls s3://ckpt/runs/team-a/grpo-demo" in lines
    assert "  rljob checkpoints validate s3://ckpt/runs/team-a/grpo-demo" in lines


def test_checkpoints_without_history_or_without_checkpointing() -> None:
    assert "no eligible versions recorded yet" in plugin.render_checkpoints(job())
    body = job()
    del body["spec"]["checkpoint"]
    assert "has no spec.checkpoint" in plugin.render_checkpoints(body)


def test_restart_request_is_honoured_once_by_the_operator() -> None:
    nonce = requests.new_nonce(NOW, "3f9a1c")
    assert nonce == "20260501T120000Z-3f9a1c"
    value = requests.restart_request("trainer", nonce)
    order = pending_restart({RESTART_REQUEST_ANNOTATION: value}, RLJobStatus())
    assert order is not None and order.role.value == "trainer" and order.nonce == nonce
    # Fresh nonces differ, so a second `kubectl rljob restart` is a new request.
    assert requests.new_nonce(NOW) != requests.new_nonce(NOW)
    with pytest.raises(ValueError):
        requests.restart_request("driver", nonce)


def test_annotate_command() -> None:
    value = "rollout/20260501T120000Z-3f9a1c"
    assert requests.annotate_command("grpo-demo", "team-a", value) == [
        "kubectl", "annotate", "rljob", "grpo-demo",
        f"{RESTART_REQUEST_ANNOTATION}={value}", "--overwrite", "-n", "team-a",
    ]  # fmt: skip
    assert requests.annotate_command("grpo-demo", None, value)[-1] == "--overwrite"


def test_restart_runs_kubectl_annotate(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    calls: list[list[str]] = []

    def fake_run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert plugin.main(["restart", "grpo-demo", "--role", "trainer", "-n", "team-a"]) == 0
    (command,) = calls
    assert command[:4] == ["kubectl", "annotate", "rljob", "grpo-demo"]
    assert re.fullmatch(
        rf"{RESTART_REQUEST_ANNOTATION}=trainer/\d{{8}}T\d{{6}}Z-[0-9a-f]{{6}}", command[4]
    )
    out = capsys.readouterr().out
    assert "resumes from the newest valid checkpoint" in out
    assert "kubectl rljob status grpo-demo -n team-a" in out


def test_restart_rejects_unknown_roles() -> None:
    with pytest.raises(SystemExit):
        plugin.main(["restart", "grpo-demo", "--role", "driver"])


# The plugin's view of a job, printed into a pipe its reader closes after one line.
CLOSED_PIPE = """
import sys
from rljob.kubectl import plugin
plugin._get = lambda name, namespace: {}
plugin.render_status = lambda job, now: "line\\n" * int(sys.argv[1])
sys.exit(plugin.main(["status", "x"]))
"""


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(3, id="short:-flushed-at-the-end"),
        pytest.param(200_000, id="long:-the-pipe-closes-mid-write"),
    ],
)
def test_a_closed_pipe_ends_the_plugin_quietly(lines: int) -> None:
    piped = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "$0" {lines} | head -n 1', CLOSED_PIPE],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.stdout == "line\n"
    assert piped.stderr == ""


def test_status_shows_goodput_with_its_losses_largest_first_and_its_notes() -> None:
    goodput = {
        "ratio": 0.9612,
        "total": {
            "productiveSeconds": 86400,
            "lostSeconds": {"detection": 240, "teardown": 60, "recomputation": 1800},
            "suspendedSeconds": {"user": 0, "queue": 7200},
            "recomputedSteps": 12,
        },
        "notes": ["detection of a failure with no failed container runs from the last step"],
        "updatedAt": "2026-05-01T11:57:00Z",
    }

    text = plugin.render_status(job(phase="Running", goodput=goodput), NOW)

    assert "GOODPUT 96.1% of wall-clock trained (suspensions aside)" in text
    assert "  trained 24h\n  lost recomputation 30m, detection 4m, teardown 60s" in text
    assert "  steps recomputed 12\n  suspended by queue 2h" in text
    assert "  note: detection of a failure with no failed container" in text


def test_status_without_goodput_has_no_goodput_section() -> None:
    assert "GOODPUT" not in plugin.render_status(RUNNING, NOW)
