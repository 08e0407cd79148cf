"""The Dockerfiles under images/: multi-stage, every base image pinned by digest, a numeric
non-root USER in the final stage, the project's wheel built in a builder stage and installed in
the final one, and COPY sources that exist. CI builds no images; this checks what it can."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "images"
DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
ENTRYPOINTS = {
    "operator": ["rljob", "run"],
    "sim": ["python", "-m", "rljob.dev.sim"],
}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def arguments(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuations joined."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    if current:
        logical.append(current)
    parsed = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        parsed.append((keyword.upper(), args.strip()))
    return parsed


def stages(text: str) -> list[Stage]:
    found: list[Stage] = []
    for keyword, args in instructions(text):
        if keyword == "FROM":
            words = [w for w in args.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(base=words[0], name=name))
        else:
            assert found, f"{keyword} before the first FROM"
            found[-1].instructions.append((keyword, args))
    return found


def dockerfiles() -> list[Path]:
    return sorted(IMAGES.glob("*/Dockerfile"))


def test_both_images_have_a_dockerfile() -> None:
    assert [path.parent.name for path in dockerfiles()] == sorted(ENTRYPOINTS)


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.parent.name)
def test_multi_stage_and_every_base_pinned_by_digest(path: Path) -> None:
    built = stages(path.read_text())
    assert len(built) >= 2, "multi-stage: a builder stage and a final stage"
    names = {stage.name for stage in built if stage.name}
    for stage in built:
        if stage.base in names:
            continue  # FROM an earlier stage
        assert DIGEST.match(stage.base), f"{stage.base} is not pinned by @sha256 digest"
        assert "${" not in stage.base, "no build-arg in FROM: the pin must be readable here"


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.parent.name)
def test_final_stage_runs_as_a_numeric_non_root_user(path: Path) -> None:
    final = stages(path.read_text())[-1]
    users = final.arguments("USER")
    assert users, "the final stage sets USER"
    user = users[-1]
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user} must be numeric (uid[:gid])"
    uid, _, gid = user.partition(":")
    assert int(uid) != 0 and (not gid or int(gid) != 0)
    # The chart's runAsUser is the same uid.
    assert int(uid) == 65532


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.parent.name)
def test_builder_builds_the_wheel_and_final_installs_it(path: Path) -> None:
    built = stages(path.read_text())
    builder, final = built[0], built[-1]
    assert builder.name, "the builder stage is named"
    build = " ".join(builder.arguments("RUN"))
    assert "uv build --wheel" in build or "pip wheel" in build
    assert "uv export --frozen" in build, "dependencies pinned from uv.lock"
    install = " ".join(final.arguments("RUN"))
    assert f"from={builder.name}" in install or any(
        f"--from={builder.name}" in args for args in final.arguments("COPY")
    ), "the final stage takes the wheel from the builder"
    assert "python -m venv" in install
    assert re.search(r"pip install (--no-deps )?\S*rljob_operator-\S*\.whl", install)
    assert "--require-hashes" in install


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.parent.name)
def test_entrypoint_is_exec_form(path: Path) -> None:
    final = stages(path.read_text())[-1]
    (entrypoint,) = final.arguments("ENTRYPOINT")
    assert json.loads(entrypoint) == ENTRYPOINTS[path.parent.name]


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: p.parent.name)
def test_copy_sources_exist_and_are_in_the_build_context(path: Path) -> None:
    ignore = (path.parent / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    for stage in stages(path.read_text()):
        for args in stage.arguments("COPY"):
            words = [w for w in shlex.split(args) if not w.startswith("--")]
            if any(a.startswith("--from") for a in shlex.split(args)):
                continue
            for source in words[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: no such path in the repository"
                assert any(source.rstrip("/").startswith(a) for a in allowed), (
                    f"COPY {source} is excluded by {path.name}.dockerignore"
                )


def test_parser_handles_continuations_and_comments() -> None:
    text = "# c\nFROM a@sha256:" + "0" * 64 + " AS b\nRUN x \\\n  # inner\n  && y\nUSER 1\n"
    (stage,) = stages(text)
    assert stage.name == "b"
    assert stage.instructions == [("RUN", "x  && y"), ("USER", "1")]
