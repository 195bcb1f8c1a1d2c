"""The sample outputs in README.md and docs/ come from the code, so they cannot drift.

A sample is a fenced block between two HTML comments that name its command:

    <!-- sample: distsim run scenarios/examples/quickstart.yaml -->
    ```
    $ distsim run scenarios/examples/quickstart.yaml
    …what the command prints (stdout, then stderr)…
    ```
    <!-- /sample -->

This test runs each command from the repository root and checks that the block holds
exactly its output; only the host time a run took (``in 0.0327 s host time``) may differ.
After an intended change of the output, rewrite every sample with

    DISTSIM_REGENERATE_DOCS=1 python -m pytest tests/test_docs_samples.py
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest
from distsim_gpu.scenarios.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = re.compile(r"<!-- sample: (?P<command>[^\n]*?) -->\n```\n(?P<body>.*?)```\n"
                    r"<!-- /sample -->", re.DOTALL)
# The only part of an output that changes between identical runs.
_HOST_TIME = re.compile(r"in \d[\d.e+-]* s host time")


def documents() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]


def run_sample(command: str) -> str:
    """``$ command`` and what it prints, as the docs show it."""
    argv = shlex.split(command)
    assert argv[0] == "distsim", f"a sample runs distsim, not {argv[0]!r}"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main(argv[1:])
    return f"$ {command}\n{out.getvalue()}{err.getvalue()}"


def _normalised(text: str) -> str:
    return _HOST_TIME.sub("in … s host time", text)


def samples() -> list[tuple[Path, str]]:
    return [(path, m["command"]) for path in documents()
            for m in SAMPLE.finditer(path.read_text(encoding="utf-8"))]


def test_the_readme_has_samples():
    commands = [command for path, command in samples() if path.name == "README.md"]
    assert "distsim run scenarios/examples/quickstart.yaml" in commands


@pytest.mark.parametrize(("path", "command"), samples(),
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_a_sample_is_what_its_command_prints(monkeypatch, path, command):
    monkeypatch.chdir(REPO_ROOT)
    got = run_sample(command)
    text = path.read_text(encoding="utf-8")
    match = next(m for m in SAMPLE.finditer(text) if m["command"] == command)
    if os.environ.get("DISTSIM_REGENERATE_DOCS"):
        text = text[:match.start("body")] + got + text[match.end("body"):]
        path.write_text(text, encoding="utf-8")
        match = next(m for m in SAMPLE.finditer(text) if m["command"] == command)
    assert _normalised(match["body"]) == _normalised(got), (
        f"{path.name}: the sample of `{command}` is stale; rewrite it with "
        "DISTSIM_REGENERATE_DOCS=1 python -m pytest tests/test_docs_samples.py")
