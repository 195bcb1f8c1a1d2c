"""No function or method of the packages runs over 100 lines (DESIGN.md: over 100 is a smell),
and no module over 700 (two concepts in one file).

Length is ``end_lineno - lineno + 1`` of the ``def`` (decorators not counted, docstring and
comments counted): what a reader has to hold in view.  A nested function counts on its own
and inside the function that holds it.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("simcore", "measured", "topology", "collectives", "workloads", "scenarios")
MAX_LINES = 100
MAX_MODULE_LINES = 700


def _long_functions(source: str, max_lines: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(qualified name, first line, length) of every function longer than ``max_lines``."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}."
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > max_lines:
                        found.append((name[:-1], child.lineno, length))
            visit(child, name)

    visit(ast.parse(source), "")
    return found


def test_no_function_is_longer_than_100_lines():
    offenders = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            for name, line, length in _long_functions(path.read_text(encoding="utf-8")):
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{line} {name}: {length} lines")
    assert not offenders, (f"functions over {MAX_LINES} lines (split them):\n  "
                           + "\n  ".join(offenders))


def test_the_length_rule_measures_methods_and_nested_functions():
    body = "\n".join(f"        x{i} = {i}" for i in range(99))
    source = f"class C:\n    def m(self):\n{body}\n        def inner():\n            pass\n"
    assert _long_functions(source) == [("C.m", 2, 102)]
    assert _long_functions(source, max_lines=1) == [("C.m", 2, 102), ("C.m.inner", 102, 2)]


def test_no_module_is_longer_than_700_lines():
    offenders = [f"{path.relative_to(REPO_ROOT)}: {n} lines"
                 for package in PACKAGES for path in sorted((REPO_ROOT / package).rglob("*.py"))
                 if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not offenders, (f"modules over {MAX_MODULE_LINES} lines (one concept a module: "
                           "split along a seam):\n  " + "\n  ".join(offenders))
