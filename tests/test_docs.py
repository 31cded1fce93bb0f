"""The documentation as a reader meets it: every Python block of README.md
and docs/*.md runs as pasted, in a fresh interpreter in an empty folder;
links between the files resolve; the tests a doc names exist.

A block fenced ```` ```python real_models ```` (or ``fuzz``) is slow and runs
under that marker only; every other ```` ```python ```` block runs by default.
Blocks in other languages (shell commands, text) are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.S | re.M)
SLOW_MARKERS = ("real_models", "fuzz")


def python_blocks() -> list:
    """One pytest param per Python block: its file and line as the id, its
    marker where its fence names one."""
    params = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            words = match["info"].split()
            unknown = [w for w in words if w not in SLOW_MARKERS]
            assert not unknown, f"{path.name}:{line}: unknown fence word {unknown[0]!r}"
            marks = [getattr(pytest.mark, word) for word in words]
            params.append(pytest.param(match["code"], id=f"{path.relative_to(ROOT)}:{line}",
                                       marks=marks))
    return params


BLOCKS = python_blocks()


def test_the_readme_and_docs_have_python_blocks():
    files = {param.id.split(":")[0] for param in BLOCKS}
    assert {"README.md", "docs/design.md", "docs/costs.md", "docs/models.md"} <= files
    assert any(mark.name == "real_models" for param in BLOCKS for mark in param.marks)


@pytest.mark.parametrize("code", BLOCKS)
def test_a_python_block_runs_as_pasted(code, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_readme_is_short_and_holds_no_commit_hash():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    hashes = [word for word in re.findall(r"\b[0-9a-f]{7,40}\b", text)
              if re.search(r"[a-f]", word) and re.search(r"[0-9]", word)]
    assert hashes == []


def test_ci_runs_exactly_the_readmes_install_and_test_commands():
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    readme = {line.strip() for line in (ROOT / "README.md").read_text().splitlines()}
    assert len(commands) == 2 and all(command in readme for command in commands)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    text = re.sub(r"```.*?```|`[^`\n]*`", "", path.read_text(), flags=re.S)  # code is not links
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if linked.name in ("pytorch.md", "tuning.md") and not linked.exists():
            continue  # written on other branches; checked once they are here
        assert linked.exists(), f"{path.name}: {target}"
        if anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), re.M)
            assert anchor in {_anchor(h) for h in headings}, f"{path.name}: {target}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_a_doc_names_exists(path):
    for file, name in re.findall(r"`(tests/test_\w+\.py)(?:::(\w+))?`", path.read_text()):
        assert (ROOT / file).exists(), file
        if name:
            assert re.search(rf"^def {name}\(", (ROOT / file).read_text(), re.M), \
                f"{file}::{name}"
