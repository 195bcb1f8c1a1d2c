"""Stragglers as distributions: seeded draws, a factor k on one GPU of pure DP, and the
cost by dimension adding up."""

from __future__ import annotations

import math

import numpy as np
import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.job.stragglers import (
    StragglerModel,
    straggler_cost,
    straggler_model_from_mapping,
)
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import given, settings
from hypothesis import strategies as st

GPUS = [f"n{n}.gpu{g}" for n in range(64) for g in range(8)]


def node_of(gpu: str) -> int:
    return int(gpu.split(".")[0][1:])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32), sigma=st.floats(0.01, 0.5), rate=st.floats(0, 1))
def test_same_seed_same_factors(seed, sigma, rate):
    model = StragglerModel(jitter_sigma=sigma, slow_node_rate=rate, slow_node_factor=1.5)
    assert model.draw(GPUS, node_of, seed) == model.draw(GPUS, node_of, seed)


def test_jitter_is_lognormal_with_median_one():
    factors = StragglerModel(jitter_sigma=0.05).draw(GPUS * 8, node_of, 7)
    logs = np.log(list(factors.values()))
    assert abs(logs.mean()) < 3 * 0.05 / math.sqrt(logs.size)  # 3 standard errors
    assert logs.std() == pytest.approx(0.05, rel=0.05)
    assert StragglerModel(jitter_sigma=0.05).draw(GPUS, node_of, 8) != StragglerModel(
        jitter_sigma=0.05).draw(GPUS, node_of, 7)


def test_slow_nodes_slow_every_gpu_of_the_node():
    every = StragglerModel(slow_node_rate=1.0, slow_node_factor=1.3).draw(GPUS, node_of, 0)
    assert every == dict.fromkeys(GPUS, 1.3)
    assert StragglerModel(slow_node_rate=0.0, slow_node_factor=1.3).draw(GPUS, node_of, 0) == {}
    some = StragglerModel(slow_node_rate=0.25, slow_node_factor=2.0).draw(GPUS, node_of, 3)
    slow_nodes = {node_of(g) for g in some}
    assert all(some.get(f"n{n}.gpu{g}") == 2.0 for n in slow_nodes for g in range(8))
    assert 4 <= len(slow_nodes) <= 32  # 16 expected of 64


def test_fixed_factors_multiply_the_drawn_ones():
    model = StragglerModel(fixed={"n0.gpu0": 1.2}, slow_node_rate=1.0, slow_node_factor=1.5)
    assert model.draw(GPUS[:8], node_of, 0)["n0.gpu0"] == pytest.approx(1.8)


def test_mapping_and_its_errors():
    model = straggler_model_from_mapping(
        {"n0.gpu1": 1.1, "jitter": {"distribution": "lognormal", "sigma": 0.05},
         "slow_nodes": {"rate": 0.01, "factor": 1.3}}, GPUS)
    assert model == StragglerModel({"n0.gpu1": 1.1}, 0.05, "lognormal", 0.01, 1.3)
    assert straggler_model_from_mapping(model.to_dict(), GPUS) == model
    for raw, key in [({"jitter": {"distribution": "normal", "sigma": 0.1}},
                      "stragglers.jitter.distribution"),
                     ({"jitter": {"sigma": -1}}, "stragglers.jitter.sigma"),
                     ({"slow_nodes": {"rate": 2, "factor": 1.3}}, "stragglers.slow_nodes.rate"),
                     ({"slow_nodes": {"rate": 0.1, "factor": 0}},
                      "stragglers.slow_nodes.factor"),
                     # A slow node runs no faster than nominal (a negative cost otherwise).
                     ({"slow_nodes": {"rate": 0.1, "factor": 0.5}},
                      "stragglers.slow_nodes.factor"),
                     ({"slow_nodes": {"rate": 0.1, "speed": 2}}, "stragglers.slow_nodes.speed"),
                     ({"n0.gpu0": "fast"}, "stragglers.n0.gpu0")]:
        with pytest.raises(ConfigError) as info:
            straggler_model_from_mapping(raw, GPUS)
        assert info.value.key == key


def pure_dp(uniform, factors, dp=4):
    topo = build_cluster({"preset": "switch", "gpus": dp, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    return IterationSpec(topo, uniform.model, ParallelConfig(dp=dp),
                         TrainingConfig(micro_batch=1, global_batch=dp * 2),
                         uniform.costs, uniform.gpu,
                         comm=CommParams(protocol="simple", algorithm="ring").ideal(),
                         stragglers=factors)


@pytest.mark.parametrize("k", [1.2, 2.0, 3.5])
def test_factor_k_on_one_gpu_of_pure_dp_slows_its_compute_share_by_k(uniform, k):
    result = simulate_iteration(pure_dp(uniform, {"n0.gpu1": k}))
    by_gpu = {g.gpu: g for g in result.per_gpu}
    assert by_gpu["n0.gpu1"].compute_s == pytest.approx(k * by_gpu["n0.gpu0"].compute_s, rel=1e-12)
    healthy = simulate_iteration(pure_dp(uniform, {}))
    assert by_gpu["n0.gpu0"].compute_s == pytest.approx(healthy.per_gpu[0].compute_s, rel=1e-12)
    # The others wait for it at the gradient reduction: the iteration grows by at least
    # the straggler's extra compute on the last micro-batch's backward.
    assert result.iteration_time_s > healthy.iteration_time_s


def test_cost_by_dimension_adds_up_and_lands_on_the_dp_barrier(uniform):
    spec = pure_dp(uniform, {"n0.gpu1": 2.0})
    result = simulate_iteration(spec)
    cost = straggler_cost(spec, result, simulate_iteration)
    assert cost.tp_lockstep_s + cost.dp_barrier_s + cost.pipeline_s + \
        cost.average_slowdown_s == pytest.approx(cost.total_s, rel=1e-12)
    assert cost.tp_lockstep_s == pytest.approx(0.0, abs=1e-12)  # tp = 1
    assert cost.pipeline_s == pytest.approx(0.0, abs=1e-12)  # pp = 1
    assert cost.dp_barrier_s > 0 and cost.average_slowdown_s > 0
    assert cost.slow_gpus == 1 and cost.slowest_factor == 2.0


def test_cost_lands_on_tp_lockstep_inside_a_tensor_parallel_group(uniform):
    topo = build_cluster({"preset": "switch", "gpus": 2, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    spec = IterationSpec(topo, uniform.model, ParallelConfig(tp=2),
                         TrainingConfig(micro_batch=1, global_batch=2), uniform.costs,
                         uniform.gpu, comm=CommParams(protocol="simple").ideal(),
                         stragglers={"n0.gpu0": 2.0})
    cost = straggler_cost(spec, simulate_iteration(spec), simulate_iteration)
    # The group runs at its slowest member (2x) instead of the average (1.5x): half of
    # the compute-bound cost is lockstep, half the average slowdown.
    assert cost.tp_lockstep_s == pytest.approx(cost.average_slowdown_s, rel=1e-6)
    assert cost.dp_barrier_s == pytest.approx(0.0, abs=1e-12)
