"""`kubectl rljob diagnose`, `kubectl rljob resume` and the status lines for the bottleneck and a
policy suspension, run through main() with kubectl replaced by a fake that serves one RLJob body
and records what would be written."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest

from rljob.api.diagnosis import ResumeRequest
from rljob.kubectl import plugin, requests
from rljob.vocabulary.labels import RESUME_REQUEST_ANNOTATION
from tests.unit.test_diagnose_view import DOCUMENT_KEYS, NOW, SUSPENSION, bottleneck, job

NONCE = r"\d{8}T\d{6}Z-[0-9a-f]{6}"


class FakeKubectl:
    """subprocess.run for kubectl: `get` answers with the body, `annotate` is recorded."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body
        self.annotations: list[list[str]] = []

    def __call__(self, command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        assert command[0] == "kubectl", command
        if command[1] == "get":
            return subprocess.CompletedProcess(command, 0, json.dumps(self.body), "")
        assert command[1] == "annotate", command
        self.annotations.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")


@pytest.fixture
def kubectl(monkeypatch: pytest.MonkeyPatch) -> FakeKubectl:
    fake = FakeKubectl(job())
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


SUSPENDED = job(phase="Suspended", suspension=SUSPENSION)
SPEC_SUSPENDED = job(phase="Suspended")
SPEC_SUSPENDED["spec"] = {"suspend": True}


@pytest.mark.parametrize(
    ("body", "argv", "code", "writes", "said"),
    [
        pytest.param(
            SUSPENDED,
            [],
            0,
            True,
            "Requested a resume of RLJob team-a/grpo-demo (request ",
            id="policy-suspended-resumes",
        ),
        pytest.param(
            job(phase="Running"),
            [],
            1,
            False,
            "is not suspended by its failure policy (status.suspension is empty)",
            id="running-refuses",
        ),
        pytest.param(
            SPEC_SUSPENDED,
            [],
            1,
            False,
            "It is suspended by its spec: kubectl patch rlj grpo-demo -n team-a --type merge -p "
            """'{"spec":{"suspend":false}}'""",
            id="spec-suspended-refuses-and-names-the-patch",
        ),
        pytest.param(
            job(phase="Running"),
            ["--force"],
            0,
            True,
            "not suspended by policy: the operator records the request and changes nothing",
            id="force-writes-anyway",
        ),
    ],
)
def test_resume(
    kubectl: FakeKubectl,
    capsys: pytest.CaptureFixture[str],
    body: dict[str, Any],
    argv: list[str],
    code: int,
    writes: bool,
    said: str,
) -> None:
    kubectl.body = body
    assert plugin.main(["resume", "grpo-demo", "-n", "team-a", *argv]) == code
    out, err = capsys.readouterr()
    assert said in (out if code == 0 else err)
    if not writes:
        assert kubectl.annotations == [] and out == ""
        assert "kubectl rljob resume grpo-demo -n team-a --force" in err
        return
    (command,) = kubectl.annotations
    assert command[:4] == ["kubectl", "annotate", "rljob", "grpo-demo"]
    assert command[5:] == ["--overwrite", "-n", "team-a"]
    annotation, nonce = command[4].split("=", 1)
    assert annotation == RESUME_REQUEST_ANNOTATION and re.fullmatch(NONCE, nonce)
    # The operator records the nonce as status.lastResumeRequest.id: it must fit.
    ResumeRequest(id=nonce, handled_at=NOW, resumed=True)
    assert f"(request {nonce}, {RESUME_REQUEST_ANNOTATION})" in out
    assert "kubectl rljob status grpo-demo -n team-a" in out


def test_resume_message_names_the_suspension() -> None:
    text = requests.render_resume(SUSPENDED, "20260501T120000Z-3f9a1c", NOW)
    assert "suspended by policy for RewardHackingSuspected since 2026-05-01T11:30:00Z" in text
    assert "(30m ago)" in text


def test_each_resume_writes_a_fresh_nonce(kubectl: FakeKubectl) -> None:
    kubectl.body = SUSPENDED
    assert plugin.main(["resume", "grpo-demo"]) == 0
    assert plugin.main(["resume", "grpo-demo"]) == 0
    first, second = (command[4] for command in kubectl.annotations)
    assert first != second
    assert "-n" not in kubectl.annotations[0]


@pytest.mark.parametrize(
    ("body", "snippets"),
    [
        pytest.param(
            job(phase="Running", bottleneck=bottleneck()),
            ["BOTTLENECK RolloutConcurrency since", "ROLLOUT CURVE", "ENGINES (busiest first)"],
            id="diagnosed",
        ),
        pytest.param(job(), ["no diagnosis: the job is Pending"], id="absent"),
    ],
)
def test_diagnose_prints_the_view(
    kubectl: FakeKubectl,
    capsys: pytest.CaptureFixture[str],
    body: dict[str, Any],
    snippets: list[str],
) -> None:
    kubectl.body = body
    assert plugin.main(["diagnose", "grpo-demo", "-n", "team-a"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("RLJob team-a/grpo-demo: ")
    for snippet in snippets:
        assert snippet in out, snippet
    assert kubectl.annotations == []


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(job(phase="Running", bottleneck=bottleneck()), id="diagnosed"),
        pytest.param(SUSPENDED, id="suspended"),
    ],
)
def test_diagnose_json_is_the_documented_document(
    kubectl: FakeKubectl, capsys: pytest.CaptureFixture[str], body: dict[str, Any]
) -> None:
    kubectl.body = body
    assert plugin.main(["diagnose", "grpo-demo", "-n", "team-a", "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == DOCUMENT_KEYS
    assert document["bottleneck"] == (body["status"].get("bottleneck") or None)
    assert document["suspension"] == (body["status"].get("suspension") or None)


def test_diagnose_rejects_unknown_output() -> None:
    with pytest.raises(SystemExit):
        plugin.main(["diagnose", "grpo-demo", "-o", "yaml"])


def test_kubectl_errors_pass_through(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def not_found(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.CalledProcessError(1, command, "", 'rljobs "nope" not found\n')

    monkeypatch.setattr(subprocess, "run", not_found)
    assert plugin.main(["resume", "nope"]) == 1
    assert 'rljobs "nope" not found' in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "present", "absent"),
    [
        pytest.param(
            {"phase": "Running", "bottleneck": bottleneck()},
            [
                "bottleneck: RolloutConcurrency since 2026-05-01T10:00:00Z (2h ago) "
                "(kubectl rljob diagnose grpo-demo -n team-a)"
            ],
            ["suspended by policy"],
            id="bottleneck",
        ),
        pytest.param(
            {"phase": "Suspended", "suspension": SUSPENSION},
            [
                "suspended by policy: RewardHackingSuspected since 2026-05-01T11:30:00Z (30m ago): "
                "training reward +0.09/h",
                "(kubectl rljob resume grpo-demo -n team-a)",
            ],
            ["bottleneck:"],
            id="suspension",
        ),
        pytest.param({"phase": "Running"}, [], ["bottleneck:", "suspended by"], id="neither"),
    ],
)
def test_status_lines_for_bottleneck_and_suspension(
    status: dict[str, Any], present: list[str], absent: list[str]
) -> None:
    lines = plugin.render_status(job(**status), NOW).splitlines()
    text = "\n".join(lines)
    for snippet in present:
        assert snippet in text, snippet
    for snippet in absent:
        assert snippet not in text, snippet
    if present:  # right under the headline, before the roles
        assert lines[1].startswith(("bottleneck: ", "suspended by policy: "))


def test_status_keeps_a_long_suspension_message_to_one_short_line() -> None:
    long = SUSPENSION | {"message": "reward up " * 100}
    text = plugin.render_status(job(phase="Suspended", suspension=long), NOW)
    line = next(line for line in text.splitlines() if line.startswith("suspended by policy"))
    assert line.endswith("reward... (kubectl rljob resume grpo-demo -n team-a)") and len(line) < 250


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        plugin.main(["--help"])
    out = capsys.readouterr().out
    for command in ("status", "diagnose", "restart", "resume", "checkpoints"):
        assert command in out
