"""docs/extending.md's recipes run: every ```python block of it is a complete program that
registers a toy (a writer, a fabric, a dimension), uses it, checks what it did and removes
it again.  A recipe the code no longer supports fails here, not in a newcomer's hands."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOC = REPO_ROOT / "docs" / "extending.md"
BLOCK = re.compile(r"^## (?P<title>[^\n]+)$|^```python\n(?P<code>.*?)^```$",
                   re.MULTILINE | re.DOTALL)


def recipes() -> list[tuple[str, str]]:
    """(section title, code) of every Python block, in the page's order."""
    found, title = [], ""
    for match in BLOCK.finditer(DOC.read_text(encoding="utf-8")):
        if match["title"]:
            title = match["title"]
        else:
            found.append((title, match["code"]))
    return found


def test_the_page_has_the_three_recipes():
    titles = {title for title, _ in recipes()}
    assert {"Add an output format", "Add a fabric", "Add a parallelism dimension"} <= titles


@pytest.mark.parametrize(("title", "code"), recipes(), ids=lambda v: v[:40])
def test_a_recipe_runs_as_written(monkeypatch, title, code):
    monkeypatch.chdir(REPO_ROOT)  # recipes name example files from the repository root
    # A module of its own, as the recipe would be in a user's package (dataclasses look
    # their module up in sys.modules).
    module = types.ModuleType("extending_recipe")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, f"{DOC.name}: {title}", "exec"), module.__dict__)
