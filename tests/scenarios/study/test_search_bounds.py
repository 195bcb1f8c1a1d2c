"""The search's use of the iteration bound (``workloads.cost.bounds``, tested on its own in
tests/workloads/test_bounds.py): a scenario's strategy and the search's candidates reach
the bound as the parallel and training configuration the simulator runs, so the bound stays
below the simulated iteration."""

from __future__ import annotations

import dataclasses

import pytest
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.scenarios.study.search import (
    enumerate_strategies,
    iteration_bounds,
    with_strategy,
)
from distsim_gpu.scenarios.study.search_prune import check_candidate
from distsim_gpu.workloads.cost.bounds import IterationBounds

DENSE = {"name": "tiny-bound", "layers": 4, "hidden": 512, "heads": 8, "seq_len": 256,
         "vocab": 1000}
SLOW = {"preset": "switch", "gpus": 8, "link_bandwidth": "2 GB/s"}
SPACE = {"schedule": ["1f1b", "gpipe", "interleaved"], "interleave": [2], "zero": [0, 1, 3],
         "recompute": ["none", "full"], "micro_batch": [1, 2]}


def _workloads_bound(scenario, parallel=None):
    bounds = IterationBounds(scenario.topology, scenario.model, scenario.costs,
                             comm=scenario.comm, stragglers=scenario.stragglers)
    return bounds.bound(parallel or scenario.parallel, scenario.training,
                        scenario.microbatches)


@pytest.mark.parametrize("example", ["quickstart", "mixtral-8x7b-ep-64-h100",
                                     "llama2-70b-fsdp-64-h100"])
def test_a_scenarios_own_strategy_has_the_bound_of_its_configuration(examples_dir, example):
    scenario = load_scenario(examples_dir / f"{example}.yaml")
    lower, estimate = iteration_bounds(scenario)
    assert 0 < lower <= estimate
    # The search knows FSDP as ZeRO-3 (it shards the same and gathers layer by layer):
    # the same bound as the scenario's own configuration.
    assert (lower, estimate) == _workloads_bound(scenario)
    if scenario.parallel.fsdp:
        plain_fsdp = dataclasses.replace(scenario.parallel, zero=0)
        assert (lower, estimate) == _workloads_bound(scenario, plain_fsdp)


def test_the_bound_of_searched_candidates_is_below_their_simulated_time():
    scenario = scenario_from_mapping({
        "name": "bound", "cluster": dict(SLOW), "model": dict(DENSE),
        "parallelism": {"tp": 1, "pp": 1, "dp": 8},
        "training": {"micro_batch": 1, "global_batch": 16, "recompute": "none"},
        "compute": {"gpu": "a100-80gb"}, "simulation": {"fidelity": "coflow"}})
    valid = [s for s in enumerate_strategies(scenario, space=SPACE)
             if check_candidate(scenario, s)[0] is not None]
    sample = valid[::max(1, len(valid) // 12)]  # (the schedules at pp 1 are one candidate)
    assert len(sample) >= 12
    for strategy in sample:
        candidate = with_strategy(scenario, strategy)
        lower, estimate = iteration_bounds(candidate)
        assert 0 < lower <= run_scenario(candidate).iteration_time_s, strategy.label()
        assert estimate >= lower
