"""Library code never sees argparse: only ``scenarios/cli`` parses arguments, and nothing
below it imports the CLI (no loop hidden behind an import inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("simcore", "measured", "topology", "collectives", "workloads", "scenarios")
CLI = ROOT / "scenarios" / "cli"


def library_modules() -> list[Path]:
    found = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    return [p for p in found if CLI not in p.parents]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports anywhere, function bodies included."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_library_is_there():
    modules = library_modules()
    assert len(modules) > 40
    assert ROOT / "scenarios" / "study" / "sweep.py" in modules
    assert not any(CLI in p.parents for p in modules)


@pytest.mark.parametrize("path", library_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_library_module_imports_argparse_or_the_cli(path):
    imports = imported_modules(path)
    assert not {m for m in imports if m == "argparse" or m.startswith("argparse.")}
    if path.name != "__main__.py":  # ``python -m distsim_gpu.scenarios`` runs the CLI
        assert not {m for m in imports if m.startswith("distsim_gpu.scenarios.cli")}


def test_the_check_sees_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import argparse\n"
                      "    from distsim_gpu.scenarios.cli.main import main\n")
    assert {"argparse", "distsim_gpu.scenarios.cli.main"} <= imported_modules(module)
