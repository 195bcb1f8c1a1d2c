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


@pytest.mark.parametrize("k", [1.2, 2.0])
def test_a_tensor_peer_of_a_straggler_computes_at_its_own_pace_and_waits_the_rest(uniform, k):
    """The group runs at k; its healthy member computes 1/k of that and waits the rest in
    the group's collectives, so the per-GPU table tells the straggler from its peers (it
    had given both the straggler's compute)."""
    topo = build_cluster({"preset": "switch", "gpus": 2, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})

    def run(factors):
        spec = IterationSpec(topo, uniform.model, ParallelConfig(tp=2),
                             TrainingConfig(micro_batch=1, global_batch=2), uniform.costs,
                             uniform.gpu, comm=CommParams(protocol="simple").ideal(),
                             stragglers=factors)
        return {g.gpu: g for g in simulate_iteration(spec).per_gpu}

    slow, healthy = run({"n0.gpu0": k}), run({})
    peer, straggler = slow["n0.gpu1"], slow["n0.gpu0"]
    assert straggler.compute_s == pytest.approx(k * healthy["n0.gpu0"].compute_s, rel=1e-9)
    assert peer.compute_s == pytest.approx(healthy["n0.gpu1"].compute_s, rel=1e-9)
    waited = straggler.compute_s - peer.compute_s
    assert peer.exposed_communication_s == pytest.approx(
        straggler.exposed_communication_s + waited, rel=1e-12)
    # Each wait ends where the group's next collective starts: nothing else in flight.
    assert peer.communication_s == pytest.approx(straggler.communication_s + waited,
                                                 rel=1e-9)
    # Both account for the same iteration.
    assert peer.compute_s + peer.exposed_communication_s == pytest.approx(
        straggler.compute_s + straggler.exposed_communication_s, rel=1e-12)


def tp4_spec(uniform, factors, *, dp=1, trace=False, fold=True, topo=None):
    """tp 4 (× dp), on one switch unless ``topo``, every collective at its ideal cost."""
    topo = topo or build_cluster({"preset": "switch", "gpus": 4 * dp,
                                  "link_bandwidth": "50 GB/s", "link_latency": "1 us"})
    return IterationSpec(topo, uniform.model, ParallelConfig(tp=4, dp=dp),
                         TrainingConfig(micro_batch=1, global_batch=2 * dp), uniform.costs,
                         uniform.gpu, comm=CommParams(protocol="simple").ideal(),
                         stragglers=factors, trace=trace, fold_replicas=fold)


def test_a_tp4_stragglers_peers_each_compute_a_third_less_and_wait_it_out(uniform):
    """One GPU of four at 1.5x: its row holds the group's compute (1.5x a healthy run's),
    each peer 1/1.5 of that and as much more exposed communication as it lost; the rows
    still add up to the iteration, which is the one the group's pace sets (the split is
    attribution only: untraced, traced and the old accounting's are one number)."""
    slow = simulate_iteration(tp4_spec(uniform, {"n0.gpu2": 1.5}))
    traced = simulate_iteration(tp4_spec(uniform, {"n0.gpu2": 1.5}, trace=True))
    healthy = simulate_iteration(tp4_spec(uniform, {}))
    assert traced.iteration_time_s == slow.iteration_time_s > healthy.iteration_time_s
    rows = {g.gpu: g for g in slow.per_gpu}
    straggler, base = rows.pop("n0.gpu2"), healthy.per_gpu[0]
    group_compute = straggler.compute_s
    assert group_compute == pytest.approx(1.5 * base.compute_s, rel=1e-9)
    assert len(rows) == 3
    for peer in rows.values():
        assert peer.compute_s == pytest.approx(group_compute / 1.5, rel=1e-12)
        waited = group_compute - group_compute / 1.5
        assert peer.exposed_communication_s == pytest.approx(
            straggler.exposed_communication_s + waited, rel=1e-12)
        assert peer.communication_s == pytest.approx(straggler.communication_s + waited,
                                                     rel=1e-9)
    for row in slow.per_gpu:  # every row still adds up to the iteration
        assert row.compute_s + row.exposed_communication_s + row.bubble_s + row.idle_s \
            == pytest.approx(slow.iteration_time_s, rel=1e-12)
    # The old accounting gave every member the group's compute; the iteration is the
    # pace's: the straggler's compute plus the group's exposed communication, as before.
    assert slow.iteration_time_s == pytest.approx(
        group_compute + straggler.exposed_communication_s + straggler.idle_s, rel=1e-12)


def test_each_gpus_trace_sums_to_its_row(uniform):
    """The trace as written (one process per rank group, each member's share in its
    metadata) and per GPU (``distsim run --out``): each GPU's compute and communication
    read back equal its row, the peers' waits included."""
    from distsim_gpu.measured.distsim_trace import parse_distsim_trace
    from distsim_gpu.measured.summary import summarise
    from distsim_gpu.scenarios.report.perfetto import per_gpu_chrome_trace
    from distsim_gpu.scenarios.report.timelines import timelines_of

    result = simulate_iteration(tp4_spec(uniform, {"n0.gpu2": 1.5}, trace=True))
    tracer = result.simulation.tracer
    rows = {g.rank: g for g in result.per_gpu}
    per_gpu, note = per_gpu_chrome_trace(tracer, timelines_of(result), result.per_gpu)
    assert note == ""
    waits = [e for e in per_gpu["traceEvents"] if e["ph"] == "X"
             and e["name"] == "wait for n0.gpu2"]
    computes = sum(1 for s in tracer.spans if s.thread == "compute" and s.end_s > s.start_s)
    assert len(waits) == 3 * computes  # after each compute span, on each peer
    for document in (tracer.to_chrome_trace(), per_gpu):
        traces = parse_distsim_trace(document, "trace.json").rank_traces()
        steps = summarise(traces)
        assert [s.rank for s in steps] == [0, 1, 2, 3]
        for step in steps:
            row = rows[step.rank]
            assert step.compute_s == pytest.approx(row.compute_s, rel=1e-9)
            assert step.communication_s == pytest.approx(row.communication_s, rel=1e-9)
        # A wait is no kernel: the peers launched as many collectives as the straggler.
        assert len({tuple(sorted(t.nccl_counts().items())) for t in traces}) == 1


def test_folded_and_full_runs_split_a_straggler_group_alike(uniform):
    """dp 4 on two DGX-A100s: the straggler's replica runs on its own, the three others
    folded into one, one of them with a GPU faster than its peers (an image: it splits
    the simulated group's compute spans).  Folded or not: the same iteration and rows."""
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": {
        "kind": "rail-optimized", "routing": "dmodk", "nics_per_leaf": 2}})
    factors = {"n0.gpu2": 1.5, "n1.gpu1": 0.8}  # replicas 0 and 2
    folded = simulate_iteration(tp4_spec(uniform, factors, dp=4, topo=topo))
    full = simulate_iteration(tp4_spec(uniform, factors, dp=4, fold=False, topo=topo))
    # Replica 1 simulated for 1, 2 and 3: n1.gpu1's group is an image.
    assert folded.folding.startswith("folded 3 data-parallel replicas without a straggler")
    # The faster GPU sets no group's pace: it is no straggler of the sentence.
    assert folded.folding.endswith("(stragglers on n0.gpu2) simulated on its own")
    assert full.folding == "full: folding off"
    assert folded.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    for a, b in zip(folded.per_gpu, full.per_gpu, strict=True):
        assert a.gpu == b.gpu
        for field in ("compute_s", "communication_s", "exposed_communication_s", "idle_s"):
            assert getattr(a, field) == pytest.approx(getattr(b, field), rel=1e-9, abs=1e-15)
    rows = {g.gpu: g for g in folded.per_gpu}
    assert rows["n1.gpu1"].compute_s == pytest.approx(0.8 * rows["n1.gpu0"].compute_s,
                                                      rel=1e-12)
    assert rows["n0.gpu0"].compute_s == pytest.approx(rows["n0.gpu2"].compute_s / 1.5,
                                                      rel=1e-12)
