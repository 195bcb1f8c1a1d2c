"""The layer rule of DESIGN.md as a test: every import points down, and none closes a loop.

Every module of the six packages is parsed (not imported) and EVERY import is collected:
at module level, inside functions, and under ``if TYPE_CHECKING:``.

Rules:

(a) Packages are ordered simcore < measured < topology < collectives < workloads <
    scenarios; a module imports only its own package or those below it (so measured
    imports only simcore, and simcore nothing of ours).
(b) Inside scenarios: the core (``__init__``, scenario, report/*, disruptions) <
    study, fit < cli (with ``__main__``, which only calls the CLI).  study and fit are
    siblings: neither imports the other (sweeps and searches need no calibration; a fit
    runs scenarios through the core, not through a study).
(b') Inside workloads, its subpackages by concept: specs < strategy < cost < iteration < job,
    traces.  job and traces are siblings: neither imports the other (several jobs need no
    measured traces; a replay is one job).  The package ``__init__`` (the public names) may
    import any of them; no module may live at the root of ``workloads`` but ``__init__``.
(c) No import cycle between modules, deferred imports included: a loop hidden behind an
    import inside a function is still a loop (DESIGN.md).  Importing ``a.b.c`` also runs
    the ``__init__`` of ``a`` and ``a.b`` where the importer is not inside them, so those
    count as imported too.
(d) Imports are absolute and name ``distsim_gpu.*``: never a bare top-level ``simcore``,
    ``topology`` ... (another distribution may own that name) and never a relative import.

Decision on ``if TYPE_CHECKING:`` imports: they count for every rule, cycles included.  They
never run, so they cannot break an import; but the graph checked here is the design's
dependency graph, and a module that names another's type depends on it: a type from a higher
layer is the same design bug as a call into it, and two modules that name each other's types
are one concept split in two (or a record that belongs below both).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "distsim_gpu"
#: The six packages, lowest layer first.
LAYERS = ("simcore", "measured", "topology", "collectives", "workloads", "scenarios")
#: Tiers inside scenarios by the name under ``distsim_gpu.scenarios``; the rest is core (0).
SCENARIO_TIERS = {"report": 0, "study": 1, "fit": 1, "cli": 2, "__main__": 2}
#: Pairs of scenario subpackages of one tier that may not import each other.
SIBLINGS_APART = {("study", "fit"), ("fit", "study")}
#: Tiers inside workloads by the subpackage under ``distsim_gpu.workloads``.
WORKLOAD_TIERS = {"specs": 0, "strategy": 1, "cost": 2, "iteration": 3, "job": 4, "traces": 4}
#: Pairs of workloads subpackages of one tier that may not import each other.
WORKLOAD_SIBLINGS_APART = {("job", "traces"), ("traces", "job")}


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement's edge: who imports what, where, and when it runs."""

    importer: str
    target: str
    path: Path
    lineno: int
    deferred: bool  # inside a function: runs at the first call, not at import
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs

    def where(self) -> str:
        when = " (type only)" if self.type_only else " (deferred)" if self.deferred else ""
        return f"{self.path.relative_to(REPO_ROOT)}:{self.lineno}{when}"


def _module_files() -> dict[str, Path]:
    """``distsim_gpu.<package>[.<sub>...]`` -> file, for every module of the six packages."""
    modules: dict[str, Path] = {}
    for package in LAYERS:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((ROOT_PACKAGE, *parts))] = path
    return modules


MODULES = _module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST, deferred: bool = False, type_only: bool = False
                  ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement under ``node``, with whether it is deferred / type only."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, deferred, type_only
        return
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for stmt in node.body:
            yield from _import_nodes(stmt, deferred, True)
        for stmt in node.orelse:
            yield from _import_nodes(stmt, deferred, type_only)
        return
    inner = deferred or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    for child in ast.iter_child_nodes(node):
        yield from _import_nodes(child, inner, type_only)


def _imported_names(node: ast.Import | ast.ImportFrom, importer: str) -> list[str]:
    """The dotted names an import statement loads, relative ones made absolute."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = importer if MODULES[importer].name == "__init__.py" else (
            importer.rpartition(".")[0])
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    # ``from pkg import name``: name is a submodule where one exists, else an attribute;
    # either way the statement names ``pkg`` itself, whose ``__init__`` runs first — even
    # for a module inside ``pkg`` (cli.main importing ``from cli import run`` while
    # cli/__init__ imports cli.main is a loop, if one Python tolerates).
    names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
             for alias in node.names]
    return list(dict.fromkeys([base, *names]))


def _own_module(name: str) -> str | None:
    """The longest module of ours that ``name`` starts with, or None if it is not ours."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _collect() -> tuple[list[Import], list[str]]:
    """All imports between our modules, and the bare or relative imports (rule d)."""
    imports: list[Import] = []
    bad_names: list[str] = []
    for importer, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, deferred, type_only in _import_nodes(tree):
            names = _imported_names(node, importer)
            where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
            if isinstance(node, ast.ImportFrom) and node.level:
                bad_names.append(f"{where}: relative import; write from {names[0]} import ...")
            for name in names:
                if name.split(".")[0] in LAYERS:
                    bad_names.append(f"{where}: bare top-level name {name!r}; import "
                                     f"{ROOT_PACKAGE}.{name} instead")
                target = _own_module(name)
                if target is not None and target != importer:
                    imports.append(Import(importer, target, path, node.lineno, deferred,
                                          type_only))
    return imports, bad_names


IMPORTS, BAD_NAMES = _collect()


def _layer(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


def _scenario_part(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def _tier(module: str) -> int:
    return SCENARIO_TIERS.get(_scenario_part(module), 0)


def test_every_package_is_found():
    for package in LAYERS:
        assert f"{ROOT_PACKAGE}.{package}" in MODULES, package
    assert len(IMPORTS) > 100  # the parser sees the code base, not an empty tree


def test_packages_import_only_themselves_and_lower_layers():
    upward = sorted({f"{i.importer} -> {i.target}  [{i.where()}]" for i in IMPORTS
                     if _layer(i.target) > _layer(i.importer)})
    assert not upward, ("imports that point up the layers " + " < ".join(LAYERS) + ":\n  "
                        + "\n  ".join(upward))


def test_scenarios_core_below_study_and_fit_below_cli():
    inside = [i for i in IMPORTS if _layer(i.importer) == _layer(i.target) == len(LAYERS) - 1]
    assert inside  # the rule has something to check
    wrong = sorted({f"{i.importer} -> {i.target}  [{i.where()}]" for i in inside
                    if _tier(i.target) > _tier(i.importer)
                    or (_scenario_part(i.importer), _scenario_part(i.target)) in SIBLINGS_APART})
    assert not wrong, ("inside scenarios: core (scenario, report, plots, bottlenecks) < "
                       "study, fit (apart) < cli; these break it:\n  " + "\n  ".join(wrong))


def _workload_part(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def _workload_violations(imports: list[Import]) -> list[str]:
    """Imports between workloads subpackages that break rule (b')."""
    inside = [i for i in imports if _layer(i.importer) == _layer(i.target) == 4
              and _workload_part(i.importer) != "__init__"]
    return sorted({f"{i.importer} -> {i.target}  [{i.where()}]" for i in inside
                   if _workload_part(i.target) == "__init__"
                   or WORKLOAD_TIERS[_workload_part(i.target)]
                   > WORKLOAD_TIERS[_workload_part(i.importer)]
                   or (_workload_part(i.importer), _workload_part(i.target))
                   in WORKLOAD_SIBLINGS_APART})


def test_workloads_subpackages_import_only_their_own_tier_and_below():
    assert any(_layer(i.importer) == _layer(i.target) == 4 for i in IMPORTS)
    wrong = _workload_violations(IMPORTS)
    assert not wrong, ("inside workloads: specs < strategy < cost < iteration < job, traces "
                       "(apart), and none imports the package's __init__; these break it:\n  "
                       + "\n  ".join(wrong))


@pytest.mark.parametrize(("importer", "target"), [
    ("specs.models", "strategy.parallel"), ("cost.memory", "iteration.ops"),
    ("job.jobs", "traces.replay"), ("traces.replay", "job.jobs"), ("cost.bounds", "")])
def test_the_workloads_tier_rule_catches_what_it_is_for(importer, target):
    package = f"{ROOT_PACKAGE}.workloads"
    edge = Import(f"{package}.{importer}", f"{package}.{target}".rstrip("."),
                  Path(__file__), 1, deferred=True, type_only=False)
    assert _workload_violations([edge])


def test_workloads_has_no_module_at_its_root_but_its_init():
    loose = sorted(m for m in MODULES if _layer(m) == 4 and len(m.split(".")) == 3
                   and m.split(".")[2] not in WORKLOAD_TIERS)
    assert not loose, f"modules at the root of workloads/ (put each in its subpackage): {loose}"
    assert set(WORKLOAD_TIERS) == {m.split(".")[2] for m in MODULES
                                   if _layer(m) == 4 and len(m.split(".")) == 3}


def _module_graph(imports: list[Import]) -> nx.DiGraph:
    """Module -> module for every import (deferred and type-only ones too), with the
    packages each one initialises."""
    graph = nx.DiGraph()
    graph.add_nodes_from(MODULES)
    for i in imports:
        parts = i.target.split(".")
        # Importing a.b.c runs a/__init__ and a.b/__init__ first, unless the importer is
        # inside them (then they are already being imported); a.b.c itself is always an edge,
        # even a package's own __init__ named by one of its modules.
        for end in range(2, len(parts) + 1):
            target = ".".join(parts[:end])
            inside = i.importer.startswith(target + ".") and end < len(parts)
            if target in MODULES and not inside and target != i.importer:
                graph.add_edge(i.importer, target, imports=graph.get_edge_data(
                    i.importer, target, {"imports": []})["imports"] + [i])
    return graph


def _describe(graph: nx.DiGraph, cycle: list[str]) -> str:
    steps = []
    for a, b in zip(cycle, [*cycle[1:], cycle[0]]):
        where = ", ".join(dict.fromkeys(i.where() for i in graph.edges[a, b]["imports"]))
        steps.append(f"    {a} -> {b}  [{where}]")
    return "\n".join(steps)


def test_no_import_cycles_even_through_deferred_or_type_only_imports():
    graph = _module_graph(IMPORTS)
    cycles = sorted(nx.simple_cycles(graph), key=lambda c: (len(c), c))
    shown = "\n  cycle:\n".join(_describe(graph, c) for c in cycles[:10])
    assert not cycles, (f"{len(cycles)} import cycle(s) (deferred and type-only imports "
                        f"count), shortest first:\n  cycle:\n{shown}")


def test_the_cycle_rule_sees_a_loop_behind_a_deferred_import_and_a_package_init():
    here = Path(__file__)
    report, plots = "distsim_gpu.scenarios.report.record", "distsim_gpu.scenarios.report.plots"
    loop = [Import(report, plots, here, 1, deferred=True, type_only=False),
            Import(plots, report, here, 2, deferred=False, type_only=True)]
    assert [set(c) for c in nx.simple_cycles(_module_graph(loop))] == [{report, plots}]
    # cli/__init__ imports cli.main; fit importing cli.main runs cli/__init__ first.
    through_init = [Import("distsim_gpu.scenarios.cli", "distsim_gpu.scenarios.cli.main",
                           here, 1, deferred=False, type_only=False),
                    Import("distsim_gpu.scenarios.cli.main", "distsim_gpu.scenarios.fit",
                           here, 2, deferred=False, type_only=False),
                    Import("distsim_gpu.scenarios.fit", "distsim_gpu.scenarios.cli.main",
                           here, 3, deferred=True, type_only=False)]
    cycles = {frozenset(c) for c in nx.simple_cycles(_module_graph(through_init))}
    assert frozenset({"distsim_gpu.scenarios.fit", "distsim_gpu.scenarios.cli",
                      "distsim_gpu.scenarios.cli.main"}) in cycles


def test_the_cycle_rule_sees_a_module_that_names_its_own_package_in_a_from_import():
    # cli/__init__ imports cli.main, and cli.main writes ``from cli import run``.
    here = Path(__file__)
    init, main = "distsim_gpu.scenarios.cli", "distsim_gpu.scenarios.cli.main"
    source = ast.parse("from distsim_gpu.scenarios.cli import run")
    assert init in _imported_names(source.body[0], main)
    loop = [Import(init, main, here, 1, deferred=False, type_only=False),
            Import(main, init, here, 2, deferred=False, type_only=False)]
    assert [set(c) for c in nx.simple_cycles(_module_graph(loop))] == [{init, main}]


def test_imports_are_absolute_and_name_the_one_package():
    assert not BAD_NAMES, "\n".join(BAD_NAMES)


@pytest.mark.parametrize("source", [
    "import simcore\n", "from topology import build_cluster\n", "from . import model\n",
])
def test_the_name_rule_catches_what_it_is_for(source):
    # A check that cannot fail is a defect: feed it the imports it exists to catch.
    (node,) = ast.parse(source).body
    names = _imported_names(node, "distsim_gpu.topology.cluster")
    assert any(n.split(".")[0] in LAYERS for n in names) or node.level > 0


def test_a_deferred_import_counts_and_a_type_only_one_is_marked():
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    import a\n"
                     "def f():\n    import b\n"
                     "class C:\n    import c\n")
    found = {node.names[0].name: (deferred, type_only)
             for node, deferred, type_only in _import_nodes(tree)
             if isinstance(node, ast.Import)}
    assert found == {"a": (False, True), "b": (True, False), "c": (False, False)}
