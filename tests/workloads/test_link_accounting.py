"""Link statistics count every byte, also of tensor-parallel collectives folded into compute.

A folded run (``fold_exclusive_tp``, the default) times exclusive TP collectives by their
closed form instead of simulating them as flows; its per-link bytes, busy and saturated
seconds and bytes per traffic class must equal the unfolded run's, where the same
collectives ran as flows — and the iteration itself must not change.
"""

from __future__ import annotations

import numpy as np
import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.report.bottlenecks import link_summary
from distsim_gpu.scenarios.scenario import load_scenario
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute.roofline import RooflineCosts
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

RTOL = 1e-9


def assert_same_link_stats(folded, flows):
    """Every link: bytes, busy and saturated seconds, bytes per tag, to 1e-9 relative."""
    assert folded.flows < flows.flows, "nothing was folded: the comparison proves nothing"
    assert folded.iteration_time_s == pytest.approx(flows.iteration_time_s, rel=RTOL)
    net_a, net_b = folded.simulation.network, flows.simulation.network
    ids, _capacity, *stats_a = net_a.link_stat_arrays()
    ids_b, _, *stats_b = net_b.link_stat_arrays()
    assert ids == ids_b
    # Busy seconds are differences of absolute times: allow the clock's rounding.
    clock = 1e-12 * flows.iteration_time_s
    for name, a, b in zip(("bytes", "busy_s", "saturated_s"), stats_a, stats_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=clock if name != "bytes" else 0,
                                   err_msg=name)
    tp_links = 0
    for link in ids:
        tags_a, tags_b = net_a.link_bytes_by_tag(link), net_b.link_bytes_by_tag(link)
        assert tags_a == pytest.approx(tags_b, rel=RTOL)
        tp_links += "tp" in tags_a
    assert tp_links > 0


@pytest.fixture(scope="module")
def dgx2():
    return build_cluster({"preset": "dgx-a100", "nodes": 2})


@pytest.mark.parametrize(("tp", "pp", "dp", "sequence_parallel", "recompute"), [
    (2, 2, 4, False, "none"), (2, 1, 8, True, "full"),
    (4, 2, 2, False, "none"), (4, 2, 2, True, "none"), (4, 2, 2, False, "full"),
    (8, 2, 1, False, "selective"), (8, 2, 1, True, "none"), (8, 1, 2, True, "full")])
def test_folded_tp_counts_on_links_as_the_flows_it_stands_for(
        tp, pp, dp, sequence_parallel, recompute, uniform, dgx2):
    parallel = ParallelConfig(tp=tp, pp=pp, dp=dp, sequence_parallel=sequence_parallel,
                              bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=4 * dp, recompute=recompute)
    folded = uniform.run(dgx2, parallel, training, comm=CommParams())
    flows = uniform.run(dgx2, parallel, training, comm=CommParams(), fold_exclusive_tp=False)
    assert_same_link_stats(folded, flows)


@pytest.mark.parametrize("tp", [8, 4])
@pytest.mark.parametrize("overlap", [False, True])
def test_folded_tp_beside_a_context_parallel_ring_counts_alike(tp, overlap, uniform, dgx2):
    """cp 2 on two nodes: at tp 8 the ring's sends cross the nodes on the NICs; at tp 4
    both halves of a ring share a node, its sends on their own TP groups' NVLink ports
    (never during their TP collectives: ``folding.exclusive_tp``).  The TP collectives
    (and userbuffers' pairs) fold either way."""
    parallel = ParallelConfig(tp=tp, cp=2, dp=8 // tp, sequence_parallel=True,
                              tp_comm_overlap=overlap, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=4 * parallel.dp)
    gpu = uniform.gpu
    folded, flows = (simulate_iteration(IterationSpec(
        dgx2, uniform.model, parallel, training, RooflineCosts(gpu), gpu, comm=CommParams(),
        fold_exclusive_tp=fold)) for fold in (True, False))
    assert_same_link_stats(folded, flows)


@pytest.mark.parametrize("cp", [1, 2])
def test_a_straggler_exposes_as_much_of_its_folded_pairs_as_of_their_flows(cp, uniform, dgx2):
    """Userbuffers' pairs on a straggling GPU: its slower GEMM chunks hide less of each
    collective, folded (``Fused.slowed``) as run chunk by chunk as flows.  Folded, the
    pairs had kept the exposure of an unslowed GEMM (5.7 % off at cp 1)."""
    parallel = ParallelConfig(tp=4, cp=cp, dp=4 // cp, sequence_parallel=True,
                              tp_comm_overlap=True, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    gpu = uniform.gpu
    folded, flows = (simulate_iteration(IterationSpec(
        dgx2, uniform.model, parallel, training, RooflineCosts(gpu), gpu, comm=CommParams(),
        stragglers={"n0.gpu1": 1.5}, fold_exclusive_tp=fold)) for fold in (True, False))
    assert_same_link_stats(folded, flows)


@pytest.mark.parametrize(("algorithm", "protocol", "fidelity"), [
    ("ring", "simple", "step"), ("ring", "ll", "step"), ("tree", "ll128", "coflow"),
    ("tree", "simple", "step"), ("auto", "auto", "step")])
def test_every_algorithm_and_fidelity_counts_alike(algorithm, protocol, fidelity, uniform,
                                                   dgx2):
    parallel = ParallelConfig(tp=4, pp=2, dp=2, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    comm = CommParams(algorithm=algorithm, protocol=protocol, fidelity=fidelity)
    folded = uniform.run(dgx2, parallel, training, comm=comm)
    flows = uniform.run(dgx2, parallel, training, comm=comm, fold_exclusive_tp=False)
    assert_same_link_stats(folded, flows)


@pytest.mark.parametrize("fidelity", ["coflow", "step"])
def test_nvlink_sharp_all_reduces_count_alike(fidelity, uniform):
    """NVLS on H100 nodes: the NVSwitch reduces, so each NVLink port carries less than a
    ring's bytes — counted the same folded or not."""
    topo = build_cluster({"preset": "dgx-h100", "nodes": 1})
    comm = CommParams(algorithm="nvls", fidelity=fidelity)
    size = uniform.model.seq_len * uniform.model.hidden * 2
    chosen = Communicator(Simulation(0), topo, comm).choose("all_reduce", topo.gpus, size)
    assert chosen.algorithm == "nvls"
    parallel = ParallelConfig(tp=8)
    training = TrainingConfig(micro_batch=1, global_batch=4, recompute="full")
    folded = uniform.run(topo, parallel, training, comm=comm)
    flows = uniform.run(topo, parallel, training, comm=comm, fold_exclusive_tp=False)
    assert_same_link_stats(folded, flows)


def test_a_straggler_shifts_folded_collectives_but_not_what_they_carry(uniform, dgx2):
    parallel = ParallelConfig(tp=4, pp=2, dp=2, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    slow = {"n0.gpu1": 1.5}
    folded = uniform.run(dgx2, parallel, training, comm=CommParams(), stragglers=slow)
    flows = uniform.run(dgx2, parallel, training, comm=CommParams(), stragglers=slow,
                        fold_exclusive_tp=False)
    assert_same_link_stats(folded, flows)


def test_quickstart_like_scenario_reports_the_same_busiest_links(tmp_path, tiny,
                                                                 write_scenario):
    data = tiny(parallelism={"tp": 4, "pp": 2, "dp": 2, "schedule": "1f1b"})
    data["cluster"] = {"preset": "dgx-a100", "nodes": 2, "fabric": "fat-tree"}
    path = write_scenario(tmp_path / "small.yaml", data)
    scenario = load_scenario(path)

    def run(fold: bool):
        return simulate_iteration(IterationSpec(
            topology=scenario.topology, model=scenario.model, parallel=scenario.parallel,
            training=scenario.training, costs=scenario.costs, gpu=scenario.gpu,
            comm=scenario.comm, seed=scenario.seed, fold_exclusive_tp=fold))

    folded, flows = run(True), run(False)
    assert_same_link_stats(folded, flows)
    top_a, top_b = link_summary(folded), link_summary(flows)
    for key in ("top_links_by_utilisation", "top_links_by_saturation"):
        assert [row["link"] for row in top_a[key]] == [row["link"] for row in top_b[key]]
        for row_a, row_b in zip(top_a[key], top_b[key], strict=True):
            assert row_a["utilisation"] == pytest.approx(row_b["utilisation"], rel=RTOL)
    # NVLink carries the tensor-parallel traffic: it tops the list, mostly as tp.
    busiest = top_a["top_links_by_utilisation"][0]
    assert busiest["kind"] == "nvlink"
    assert max(busiest["bytes_by_traffic"], key=busiest["bytes_by_traffic"].get) == "tp"


def test_folded_all_reduces_move_megatrons_bytes_in_the_ring_closed_form_time(uniform):
    """Megatron: 4 all-reduces of b·s·h 16-bit values per layer and micro-batch (2 forward,
    2 backward); a ring all-reduce moves 2(t-1)/t·S over each GPU's link in
    2(t-1)/t·S/B seconds on ideal collectives, saturating it."""
    tp, m, bandwidth = 8, 2, 100e9
    topo = build_cluster({"preset": "switch", "gpus": tp, "link_bandwidth": bandwidth,
                          "link_latency": 0})
    training = TrainingConfig(micro_batch=2, global_batch=m * 2, recompute="none")
    comm = CommParams(protocol="simple", algorithm="ring").ideal()
    result = uniform.run(topo, ParallelConfig(tp=tp), training, comm=comm)
    assert result.flows == 0  # every TP collective was folded
    b, s, h = 2, uniform.model.seq_len, uniform.model.hidden
    calls = 4 * m * uniform.model.layers
    per_call = 2 * (tp - 1) / tp * b * s * h * 2
    stats = result.simulation.network.link_stats()
    for link in topo.links():
        assert stats[link.id].bytes == pytest.approx(calls * per_call, rel=RTOL)
        assert stats[link.id].busy_s == pytest.approx(calls * per_call / bandwidth, rel=RTOL)
        assert stats[link.id].saturated_s == pytest.approx(stats[link.id].busy_s, rel=RTOL)
        assert stats[link.id].bytes_by_tag == pytest.approx({"tp": calls * per_call})


def test_tp_bytes_are_conserved_over_the_plans_link_weights(uniform, dgx2):
    """Σ over links of tp bytes = Σ over TP collectives of wire bytes × Σ link weights."""
    tp, pp, dp, mb, layers = 4, 2, 2, 4, uniform.model.layers
    parallel = ParallelConfig(tp=tp, pp=pp, dp=dp, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=mb * dp, recompute="none")
    result = uniform.run(dgx2, parallel, training, comm=CommParams())
    net = result.simulation.network
    carried = sum(net.link_bytes_by_tag(link).get("tp", 0.0) for link in net.link_ids)
    comm = Communicator(Simulation(0), dgx2, CommParams())
    size = 1 * uniform.model.seq_len * uniform.model.hidden * 2  # b·s·h, 16-bit
    expected = 0.0
    for group in range(pp * dp):  # order tp-dp-pp: each group's GPUs are consecutive
        gpus = list(dgx2.gpus[group * tp:(group + 1) * tp])
        wire, weights = comm.choose("all_reduce", gpus, size).coflow(size)
        expected += mb * (layers // pp) * 4 * wire * sum(weights.values())
    assert carried == pytest.approx(expected, rel=RTOL)


def test_trace_draws_folded_collectives_on_their_link_tracks(uniform, dgx2):
    parallel = ParallelConfig(tp=4, pp=2, dp=2, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=8)

    def track(fold: bool) -> list[tuple[float, float]]:
        result = uniform.run(dgx2, parallel, training, comm=CommParams(), trace=True,
                             fold_exclusive_tp=fold)
        return [(c.time_s, c.value) for c in result.simulation.tracer.counters
                if c.process == "links" and c.name == "n0.gpu0->n0.nvswitch"]

    folded, flows = track(True), track(False)
    assert len(folded) == len(flows) > 2
    for (t_a, v_a), (t_b, v_b) in zip(folded, flows, strict=True):
        assert t_a == pytest.approx(t_b, rel=RTOL) and v_a == pytest.approx(v_b, rel=RTOL)
