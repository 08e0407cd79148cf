"""The five distributions built from operator/rljob (pyproject.toml and operator/*/pyproject.toml):
each wheel holds only its own folders of the `rljob` namespace, declares the dependencies it is
meant to have, and the SDK and the kubectl plugin install and run without the rest: the plugin
with the vocabulary's wheel alone, offline, and no third-party package. The bed (rljob.dev) is in
no wheel but its own."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import pytest

from tests.unit import wheels

# What each wheel may hold under rljob/: its folders and modules, and nothing else.
OWNED = {
    "rljob-operator": {
        "adapters", "api", "checkpoints", "cli.py", "crashpoints.py", "handlers.py", "health",
        "kueue_handlers.py", "observability.py", "reconcile", "run.py", "runtime", "version.py",
    },
    "rljob-sdk": {"checkpoint_protocol", "sdk", "signatures.py"},
    "rljob-vocabulary": {"vocabulary"},
    "rljob-kubectl": {"kubectl"},
    "rljob-bed": {"dev"},
}  # fmt: skip
# The install requirements (extras aside): the SDK's are boto3 and nothing else, the plugin's the
# vocabulary, which needs nothing.
REQUIRES = {
    "rljob-operator": {
        "boto3", "kopf", "kubernetes", "prometheus-client", "pydantic", "pyyaml", "rljob-sdk",
        "rljob-vocabulary", "structlog",
    },
    "rljob-sdk": {"boto3"},
    "rljob-vocabulary": set(),
    "rljob-kubectl": {"rljob-vocabulary"},
    "rljob-bed": {"cryptography", "psutil", "rljob-operator", "rljob-sdk"},
}  # fmt: skip


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder every wheel of the project is built into."""
    return tmp_path_factory.mktemp("dist")


@pytest.fixture(scope="module")
def built(dist: Path) -> dict[str, Path]:
    return {name: wheels.build_wheel(name, dist) for name in wheels.PROJECTS}


@pytest.mark.parametrize("distribution", sorted(OWNED))
def test_each_wheel_holds_only_its_own_part_of_rljob(
    built: dict[str, Path], distribution: str
) -> None:
    files = [name for name in wheels.names(built[distribution]) if not name.startswith("rljob_")]
    tops = {name.removeprefix("rljob/").split("/")[0] for name in files}
    assert all(name.startswith("rljob/") for name in files)
    assert tops == OWNED[distribution]
    # `rljob` is a namespace the four share: no wheel owns its __init__.
    assert "rljob/__init__.py" not in files


def test_the_bed_wheel_embeds_the_charts_rbac_rules(built: dict[str, Path]) -> None:
    # The dev launcher applies them outside a checkout too (rljob.dev.bed).
    rules = wheels.REPO / "charts" / "rljob-operator" / "files" / "rbac-rules.yaml"
    with zipfile.ZipFile(built["rljob-bed"]) as archive:
        assert archive.read("rljob/dev/rbac-rules.yaml") == rules.read_bytes()


def test_the_bed_adds_rljob_dev_through_an_entry_point(built: dict[str, Path]) -> None:
    # rljob.cli loads the rljob.commands group: no product module imports the bed by name.
    entry_points = wheels.metadata(built["rljob-bed"], "entry_points.txt")
    assert "[rljob.commands]\ndev = rljob.dev.command:add_command" in entry_points


@pytest.mark.parametrize("distribution", sorted(REQUIRES))
def test_each_wheel_requires_what_it_should(built: dict[str, Path], distribution: str) -> None:
    assert wheels.requirements(built[distribution]) == REQUIRES[distribution]


@pytest.fixture(scope="module")
def sdk_alone(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the SDK wheel and what it requires (boto3), nothing else of the project."""
    python = wheels.new_venv(tmp_path_factory.mktemp("sdk-venv"))
    wheels.install(python, built["rljob-sdk"])
    return python


def _probe(python: Path, code: str, cwd: Path) -> str:
    return wheels.run([python, "-c", code], cwd=cwd, env=wheels.isolated_env())


def test_the_sdk_venv_has_boto3_and_no_operator_dependency(sdk_alone: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.util as u; "
        "print(*[m for m in ('boto3', 'pydantic', 'kopf', 'kubernetes', 'prometheus_client', "
        "'yaml', 'rljob.api', 'rljob.dev') if u.find_spec(m)])"
    )
    assert _probe(sdk_alone, code, tmp_path).split() == ["boto3"]


def test_sdk_modules_import_with_the_sdk_alone(sdk_alone: Path, tmp_path: Path) -> None:
    code = """
import importlib, pkgutil, rljob.sdk
for module in pkgutil.walk_packages(rljob.sdk.__path__, "rljob.sdk."):
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as exc:
        print(module.name, exc.name)
"""
    failing = dict(line.split() for line in _probe(sdk_alone, code, tmp_path).splitlines())
    # The vLLM plugin is loaded by vLLM's own loader, in an engine image that has vLLM
    # (tests/upstream/vllm/test_vllm_plugin.py imports it there).
    assert failing == {"rljob.sdk.vllm_plugin": "vllm"}


def test_a_checkpoint_round_trips_with_the_sdk_alone(sdk_alone: Path, tmp_path: Path) -> None:
    # The writer's and reader's modules import, and a manifest goes to JSON and back, on the
    # standard library and boto3 only (nothing pulls pydantic or the operator in).
    code = """
import sys
from datetime import UTC, datetime
from rljob.sdk.checkpoint import CheckpointReader, CheckpointWriter
from rljob.checkpoint_protocol.models import Manifest, ShardEntry
shard = ShardEntry(key="model/rank0.pt", size=1, sha256="0" * 64)
manifest = Manifest(
    job="j", namespace="n", attempt=1, step=2, created_at=datetime.now(UTC), shards=[shard]
)
assert Manifest.parse(manifest.to_json()) == manifest
print(sorted(m for m in ("pydantic", "rljob.api", "rljob.checkpoints") if m in sys.modules))
"""
    assert _probe(sdk_alone, code, tmp_path).strip() == "[]"


def test_the_sdk_entrypoint_runs_a_trainer_with_the_sdk_alone(
    sdk_alone: Path, tmp_path: Path
) -> None:
    log = tmp_path / "termination-log"
    trainer = "import sys; print('RuntimeError: CUDA out of memory', file=sys.stderr); sys.exit(3)"
    env = {**wheels.isolated_env(), "RLJOB_TERMINATION_LOG": str(log)}
    command: list[str | Path] = [sdk_alone, "-m", "rljob.sdk.entrypoint", "--", sdk_alone]
    result = wheels.call([*command, "-c", trainer], tmp_path, env)
    assert result.returncode == 3  # the trainer's own exit code
    assert "RuntimeError: CUDA out of memory" in log.read_text()


@pytest.fixture(scope="module")
def plugin_alone(
    built: dict[str, Path], dist: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A venv with `pip install rljob-kubectl` from the project's wheels alone (no index, no cache):
    every wheel is there, the operator's too, so a requirement on it would show."""
    python = wheels.new_venv(tmp_path_factory.mktemp("plugin-venv"))
    wheels.install_local(python, dist, "rljob-kubectl")
    return python


# A stored `kubectl get rljob -o json` of a running job with its diagnosis (tests read it; the
# operator's models check it below).
STORED_JOB = Path(__file__).parent / "fixtures" / "rljob-diagnosed.json"
# Each view of the plugin, as a call on the stored document.
VIEWS = {
    "status": "from rljob.kubectl.plugin import render_status as render",
    "diagnose": "from rljob.kubectl.diagnose_view import render_diagnose as render",
    "checkpoints": "from rljob.kubectl.plugin import render_checkpoints as render",
}
RENDER = """
import json, sys
{imports}
print(render(json.load(open(sys.argv[1]))))
"""


def _without_kubectl(python: Path) -> dict[str, str]:
    """The environment with only the venv's scripts on PATH: no kubectl to call."""
    return {**wheels.isolated_env(), "PATH": str(python.parent)}


def test_the_plugin_installs_with_the_vocabulary_alone(plugin_alone: Path) -> None:
    assert wheels.installed(plugin_alone) == {"rljob-kubectl", "rljob-vocabulary"}


def test_the_plugin_runs_without_the_operator(plugin_alone: Path, tmp_path: Path) -> None:
    plugin = plugin_alone.parent / "kubectl-rljob"
    out = wheels.run([plugin, "--help"], cwd=tmp_path, env=_without_kubectl(plugin_alone))
    for command in ("status", "restart", "checkpoints", "diagnose", "resume"):
        assert command in out


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_the_installed_plugin_renders_a_stored_job_as_the_checkout_does(
    plugin_alone: Path, tmp_path: Path, view: str
) -> None:
    code = RENDER.format(imports=VIEWS[view])
    command: list[str | Path] = [plugin_alone, "-c", code, STORED_JOB]
    installed = wheels.run(command, cwd=tmp_path, env=_without_kubectl(plugin_alone))
    here = wheels.run([sys.executable, "-c", code, STORED_JOB], cwd=wheels.REPO)
    assert installed == here
    assert installed.startswith("RLJob team-a/grpo-demo")


def test_the_installed_plugin_says_kubectl_is_missing(plugin_alone: Path, tmp_path: Path) -> None:
    plugin = plugin_alone.parent / "kubectl-rljob"
    result = wheels.call([plugin, "status", "grpo-demo"], tmp_path, _without_kubectl(plugin_alone))
    assert (result.returncode, result.stderr) == (127, "kubectl rljob: kubectl is not on PATH\n")


def test_the_stored_job_is_what_the_operator_writes() -> None:
    from rljob.api import parse_rljob

    document = json.loads(STORED_JOB.read_text())
    job = parse_rljob(document)
    assert job.model_dump(mode="json", by_alias=True, exclude_none=True) == document


@pytest.fixture(scope="module")
def operator_alone(built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the operator's wheel and what it requires, no bed."""
    python = wheels.new_venv(tmp_path_factory.mktemp("operator-venv"))
    names = ("rljob-operator", "rljob-sdk", "rljob-vocabulary")
    wheels.install(python, *(built[name] for name in names))
    return python


def test_rljob_dev_says_the_bed_is_missing(operator_alone: Path, tmp_path: Path) -> None:
    rljob = operator_alone.parent / "rljob"
    result = wheels.call([rljob, "dev", "status"], tmp_path, wheels.isolated_env())
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "rljob dev needs the bed: pip install rljob-bed (or, in a checkout, tools/bootstrap.sh)",
    )


def test_the_checkout_venv_has_all_five_installed() -> None:
    from importlib.metadata import version

    from rljob.version import __version__

    assert {name: version(name) for name in wheels.PROJECTS} == dict.fromkeys(
        wheels.PROJECTS, __version__
    )
    assert Path(sys.executable).parent.joinpath("kubectl-rljob").exists()
