"""The tables a study's script prints are in its page as the script prints them now.

A study whose figures come from a script (``docs/studies/*.py``, or ``validation/*`` for
docs/validation.md) holds its table between two HTML comments that name the command:

    <!-- table: python docs/studies/per_layer_strategies.py --budgets 5 6 -->
    | budget | best uniform | … |
    …
    <!-- /table -->

This test runs each command from the repository root and checks that the block is exactly
what it prints, so the page cannot drift from the code.  After an intended change, rewrite
the tables with

    DISTSIM_REGENERATE_DOCS=1 python -m pytest tests/test_docs_tables.py

and read the page's prose again: it quotes these figures.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
TABLE = re.compile(r"<!-- table: (?P<command>[^\n]*?) -->\n(?P<body>.*?)<!-- /table -->",
                   re.DOTALL)
# A full run of the slowest table here takes about 20 s on 2 cores.
TIMEOUT_S = 300


def tables() -> list[tuple[Path, str]]:
    return [(path, m["command"]) for path in sorted((REPO_ROOT / "docs").rglob("*.md"))
            for m in TABLE.finditer(path.read_text(encoding="utf-8"))]


def printed(command: str) -> str:
    """What ``python docs/studies/SCRIPT ARGS`` (or ``validation/SCRIPT``) prints."""
    argv = shlex.split(command)
    assert argv[0] == "python" and argv[1].startswith(("docs/studies/", "validation/")), command
    done = subprocess.run([sys.executable, *argv[1:]], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False)
    assert done.returncode == 0, f"`{command}` failed: {done.stderr[-2000:]}"
    return done.stdout.strip() + "\n"


def _reads_shared_data(script: Path) -> bool:
    """Whether the script's code (not its docstrings) names ``shared``: a default path to
    the measurements."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return any(isinstance(node, ast.Constant) and isinstance(node.value, str)
               and "shared" in node.value and id(node) not in docstrings
               for node in ast.walk(tree))


def test_the_studies_have_tables() -> None:
    assert len(tables()) >= 3


@pytest.mark.parametrize(("path", "command"), tables(),
                         ids=lambda v: v.name if isinstance(v, Path) else v[-60:])
def test_a_table_over_the_measurements_names_them(path: Path, command: str) -> None:
    """A script that reads ``shared/data`` must be given it as ``../shared/data/…`` in
    the page's command: that is how the table test knows to skip it on a machine (CI's
    fresh clone) where the measurements are absent, instead of failing."""
    script = REPO_ROOT / shlex.split(command)[1]
    if _reads_shared_data(script):
        assert "../shared/data" in command, (
            f"{path.name}: `{command}` reads the measurements by default; name them "
            "(--data ../shared/data/…) so that the table test skips it where they are absent")


@pytest.mark.parametrize(("path", "command"), tables(),
                         ids=lambda v: v.name if isinstance(v, Path) else v[-60:])
def test_a_table_is_what_its_script_prints(path: Path, command: str) -> None:
    if "../shared/data" in command and not SHARED_DATA.is_dir():
        pytest.skip("the measurements in ../shared/data are not on this machine")
    got = printed(command)
    text = path.read_text(encoding="utf-8")
    match = next(m for m in TABLE.finditer(text) if m["command"] == command)
    if os.environ.get("DISTSIM_REGENERATE_DOCS"):
        text = text[:match.start("body")] + got + text[match.end("body"):]
        path.write_text(text, encoding="utf-8")
        match = next(m for m in TABLE.finditer(text) if m["command"] == command)
    assert match["body"] == got, (
        f"{path.name}: the table of `{command}` is stale; rewrite it with "
        "DISTSIM_REGENERATE_DOCS=1 python -m pytest tests/test_docs_tables.py, then "
        "read the page's prose again")


def test_a_saved_result_without_a_rank_correlation_prints_n_a() -> None:
    """`validate runs --json` writes null for a group of under 3 rows; the scripts that
    print the page's tables from saved results say n/a there, not a traceback."""
    from tests.conftest import load_script

    vtrain = load_script("validation/vtrain/doc_table.py", "vtrain_doc_table")
    training = load_script("validation/training_tables.py", "training_tables")
    result = {"rows": [{"group": "7", "measured_s": 1.0, "predicted_s": 1.1},
                       {"group": "7", "measured_s": 2.0, "predicted_s": 2.0}],
              "uncalibrated": {"spearman": {"7": None}}}
    assert vtrain.table(result)[2] == "| 7B | 2 | 5.0 % | 10.0 % | n/a |"
    summary = {"spearman": {"7": None, "13": 0.95}, "mean_abs_error_pct": 4.0,
               "max_abs_error_pct": 20.0}
    assert training._spearman(summary, "B") == "n/a / 0.95 (7B / 13B)"
    assert training._targets(summary).endswith("Spearman ≥ 0.9: 13B")
