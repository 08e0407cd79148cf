"""The user docs stay true: the metrics table lists exactly the operator's metrics, the annotated
RLJob parses with the API models, the SDK calls it shows exist, and relative links resolve."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
import yaml

from rljob.api import ConditionType, parse_rljob
from tests.unit.monitoring import exposed_names, operator_metrics

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else len(text)]


def _fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def test_metrics_table_lists_every_operator_metric() -> None:
    table = _section((DOCS / "metrics.md").read_text(), "Operator metrics")
    documented = {}
    for line in table.splitlines():
        match = re.match(r"^\| `([a-z_:]+)` \| (\w+) \| ([^|]*) \|", line)
        if match:
            labels = tuple(re.findall(r"`(\w+)`", match[3]))
            documented[match[1]] = (match[2], labels)
    expected = {}
    for family, metric in operator_metrics().items():
        kind = metric.kind
        exposed = family + "_total" if kind == "counter" else family
        assert exposed in exposed_names(family, kind) or kind == "histogram"
        expected[exposed] = (kind, metric.labels)
    assert documented == expected


def test_annotated_rljob_is_valid() -> None:
    text = (DOCS / "writing-an-rljob.md").read_text()
    manifests = [yaml.safe_load(block) for block in _fenced(text, "yaml")]
    rljobs = [m for m in manifests if isinstance(m, dict) and m.get("kind") == "RLJob"]
    assert len(rljobs) == 1
    job = parse_rljob(rljobs[0])
    assert job.spec.roles.rollout is not None and job.spec.roles.rollout.engine.value == "vllm"
    trainer = job.spec.roles.trainer
    assert trainer.command == ["python", "-m", "rljob.sdk.entrypoint", "--"]
    assert trainer.args is not None and trainer.args[0] == "torchrun"


def test_trainer_example_uses_real_sdk_names() -> None:
    text = (DOCS / "writing-an-rljob.md").read_text()
    (code,) = _fenced(text, "python")
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rljob"):
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
    from rljob.sdk import CheckpointWriter
    from rljob.sdk.checkpoint import PendingVersion, ResumePoint
    from rljob.sdk.progress import ProgressExporter

    for owner, name in [
        (CheckpointWriter, "from_env"),
        (CheckpointWriter, "version"),
        (PendingVersion, "write_file"),
        (PendingVersion, "write_bytes"),
        (PendingVersion, "add_entries"),
        (PendingVersion, "entries"),
        (ResumePoint, "reader"),
        (ProgressExporter, "phase"),
        (ProgressExporter, "step"),
        (ProgressExporter, "checkpoint"),
    ]:
        assert hasattr(owner, name), f"{owner.__name__}.{name}"
        assert f".{name}" in code, f"the example does not show {name}"


def test_install_documents_server_side_crd_upgrades() -> None:
    text = (DOCS / "install.md").read_text()
    assert "kubectl apply --server-side -f charts/rljob-operator/crds/" in text
    assert "--validate=strict" in text


def _anchors(path: Path) -> set[str]:
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("doc", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    for target in re.findall(r"\]\(([^)#:\s]*)(#[^)\s]*)?\)", doc.read_text()):
        path, anchor = target
        linked = (doc.parent / path) if path else doc
        assert linked.exists(), f"{doc.name} links to missing {path}"
        if anchor and linked.suffix == ".md":
            assert anchor[1:] in _anchors(linked), f"{doc.name} links to missing {path}{anchor}"


def test_the_architecture_lists_every_condition_type_the_operator_sets() -> None:
    """ConditionType is the catalog; docs/architecture.md section 10 is what users read."""
    text = (REPO / "docs" / "architecture.md").read_text()
    seen = text[text.index("## 10. What the user sees") : text.index("## 11.")]
    listed = seen[seen.index("- Conditions:") : seen.index("- Events:")]
    assert set(re.findall(r"`([A-Za-z]+)`", listed)) == {t.value for t in ConditionType}
