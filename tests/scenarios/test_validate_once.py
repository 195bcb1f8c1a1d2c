"""A run's strategy is validated once, at the boundary, and trusted below it.

The boundaries are where a strategy first exists as typed objects: a scenario (file,
``--set``, one job of several), a search candidate and a layer-group search candidate.  The
iteration simulator checks only a spec written by hand (``IterationSpec.microbatches``
None), so a scenario's run checks its strategy exactly once.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest
from distsim_gpu.scenarios.disruptions import spec_of
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.iteration.simulator import simulate_iteration
from distsim_gpu.workloads.strategy import parallel as parallel_module

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("simcore", "measured", "topology", "collectives", "workloads", "scenarios")
#: The modules that call check_strategy, and why each is a boundary.
BOUNDARIES = {
    "scenarios/scenario.py",  # a scenario (file, --set, each job of several)
    "scenarios/study/search_prune.py",  # a search candidate, before it is simulated
    "scenarios/study/search_space.py",  # a candidate applied to the scenario it came from
    "scenarios/study/layer_search.py",  # a layer-group search candidate
    "workloads/iteration/simulator.py",  # only a spec written by hand (microbatches None)
}


@pytest.fixture
def checks(monkeypatch) -> list[int]:
    """How many strategy checks run (each check_strategy call checks the degrees first)."""
    calls: list[int] = []
    original = parallel_module._check_degrees

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(parallel_module, "_check_degrees", counting)
    return calls


def test_a_scenario_run_checks_its_strategy_once(tiny, checks):
    scenario = scenario_from_mapping(tiny())
    assert len(checks) == 1
    run_scenario(scenario)
    assert len(checks) == 1


def test_a_spec_written_by_hand_is_checked_by_the_simulator(tiny, checks):
    spec = replace(spec_of(scenario_from_mapping(tiny())), microbatches=None)
    checks.clear()
    simulate_iteration(spec)
    assert len(checks) == 1
    wrong = replace(spec, parallel=replace(spec.parallel, dp=spec.parallel.dp * 2))
    with pytest.raises(ConfigError, match="GPUs"):
        simulate_iteration(wrong)


def test_the_spec_of_a_scenario_carries_its_checked_micro_batches(tiny):
    scenario = scenario_from_mapping(tiny())
    assert spec_of(scenario).microbatches == scenario.microbatches >= 1


def _callers(name: str) -> set[str]:
    found = set()
    for package in PACKAGES:
        for path in (REPO_ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                        and node.func.id == name):
                    found.add(path.relative_to(REPO_ROOT).as_posix())
    return found


def test_only_the_boundaries_call_the_strategy_check():
    assert _callers("check_strategy") == BOUNDARIES


def test_a_strategy_changed_without_its_check_is_checked_when_it_runs(tiny, checks):
    scenario = scenario_from_mapping(tiny())
    doubled = scenario.with_run(parallel=replace(scenario.parallel,
                                                 dp=scenario.parallel.dp * 2))
    assert doubled.microbatches is None
    with pytest.raises(ConfigError, match="GPUs"):
        run_scenario(doubled)
    # Other fields of the run keep the check it had.
    assert scenario.with_run(seed=3).microbatches == scenario.microbatches
