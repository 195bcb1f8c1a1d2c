"""Symmetry folding of data-parallel replicas is exact, or it does not run.

A folded run (``fold_replicas``, the default) simulates one data-parallel replica (one
expert-parallel block with EP) and enters its flows with their images'; the full run
simulates every replica.  Wherever folding applies, the iteration time, every GPU's
breakdown, the critical path's kinds and times and every link's bytes and busy seconds
must equal the full run's to 1e-9 relative, with fewer events.  Where stragglers, hashing
(ECMP), a trace or replicas that share links break the symmetry, the full simulation
runs and ``IterationResult.folding`` says why.
"""

from __future__ import annotations

import numpy as np
import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.scenarios.report import build_report
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.models import model_from_mapping
from distsim_gpu.workloads.parallel import ParallelConfig, TrainingConfig

RTOL = 1e-9
TIME_FIELDS = ("compute_s", "communication_s", "exposed_communication_s", "bubble_s",
               "idle_s")


def cluster(kind: str, routing: str, nodes: int = 4, **fabric) -> object:
    """DGX-A100 nodes, two NICs per leaf so that replicas' traffic crosses spines."""
    return build_cluster({"preset": "dgx-a100", "nodes": nodes,
                          "fabric": {"kind": kind, "routing": routing, "nics_per_leaf": 2,
                                     **fabric}})


def assert_same_iteration(folded, full) -> None:
    """Folded and full runs agree on everything a report shows, and on every link."""
    assert folded.folding.startswith("folded"), folded.folding
    assert full.folding == "full: folding off"
    assert folded.events < full.events, "nothing was folded: the comparison proves nothing"
    t = full.iteration_time_s
    assert folded.iteration_time_s == pytest.approx(t, rel=RTOL)
    assert len(folded.per_gpu) == len(full.per_gpu)
    for mine, theirs in zip(folded.per_gpu, full.per_gpu, strict=True):
        assert (mine.gpu, mine.stage, mine.replica, mine.tp_rank) == (
            theirs.gpu, theirs.stage, theirs.replica, theirs.tp_rank)
        for name in TIME_FIELDS:
            assert getattr(mine, name) == pytest.approx(getattr(theirs, name), rel=RTOL,
                                                        abs=1e-12 * t), (mine.gpu, name)
    assert [p.kind for p in folded.critical_path] == [p.kind for p in full.critical_path]
    for mine, theirs in zip(folded.critical_path, full.critical_path, strict=True):
        assert mine.duration_s == pytest.approx(theirs.duration_s, rel=RTOL, abs=1e-12 * t)
    ids, _cap, *stats_a = folded.simulation.network.link_stat_arrays()
    ids_b, _cap_b, *stats_b = full.simulation.network.link_stat_arrays()
    assert ids == ids_b
    for name, a, b in zip(("bytes", "busy_s", "saturated_s"), stats_a, stats_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=0 if name == "bytes" else 1e-12 * t,
                                   err_msg=name)


def both(uniform, topology, parallel, training, **extra):
    folded = uniform.run(topology, parallel, training, comm=CommParams(), **extra)
    full = uniform.run(topology, parallel, training, comm=CommParams(), fold_replicas=False,
                       **extra)
    return folded, full


STRATEGIES = {
    "tp8-pp2-dp2": ParallelConfig(tp=8, pp=2, dp=2),
    "tp4-pp2-dp4-sp": ParallelConfig(tp=4, pp=2, dp=4, sequence_parallel=True),
    "tp2-pp4-dp4-interleaved": ParallelConfig(tp=2, pp=4, dp=4, schedule="interleaved",
                                              interleave=2),
    "tp4-pp1-dp8-zero1": ParallelConfig(tp=4, dp=8, zero=1, bucket_params=2_000_000),
    "tp1-pp2-dp16-zero2": ParallelConfig(pp=2, dp=16, zero=2),
    "tp2-dp16-fsdp": ParallelConfig(tp=2, dp=16, fsdp=True),
    "tp1-dp32": ParallelConfig(dp=32, bucket_params=3_000_000),
    "tp8-pp1-dp4-pp-outer": ParallelConfig(tp=8, dp=4, order="tp-pp-dp"),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@pytest.mark.parametrize(("kind", "routing"), [
    ("fat-tree", "dmodk"), ("rail-optimized", "dmodk"), ("rail-optimized", "adaptive")])
def test_folded_replicas_equal_the_full_simulation(uniform, name, kind, routing):
    parallel = STRATEGIES[name]
    training = TrainingConfig(micro_batch=1, global_batch=4 * parallel.dp)
    assert_same_iteration(*both(uniform, cluster(kind, routing), parallel, training))


@pytest.mark.parametrize("routing", ["dmodk", "adaptive"])
def test_folding_counts_contention_of_replicas_on_an_oversubscribed_tree(uniform, routing):
    """Two nodes per leaf at 4:1: the data-parallel rings of every replica share uplinks."""
    topology = cluster("fat-tree", routing, oversubscription=4)
    parallel = ParallelConfig(tp=8, pp=2, dp=2, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    assert_same_iteration(*both(uniform, topology, parallel, training))


@pytest.mark.parametrize("fidelity", ["coflow", "step"])
def test_folding_is_exact_at_either_fidelity(uniform, fidelity):
    """Coflow: a folded TP call is one coflow over every image; step: each image's flows."""
    topology = cluster("rail-optimized", "adaptive")
    parallel = ParallelConfig(tp=4, pp=2, dp=4, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=16)
    comm = CommParams(fidelity=fidelity)
    folded = uniform.run(topology, parallel, training, comm=comm)
    full = uniform.run(topology, parallel, training, comm=comm, fold_replicas=False)
    assert_same_iteration(folded, full)
    assert folded.flows < full.flows


def test_folded_expert_parallel_blocks_equal_the_full_simulation(uniform):
    moe = model_from_mapping({"name": "small-moe", "layers": 4, "hidden": 1024, "heads": 16,
                              "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2})
    topology = cluster("rail-optimized", "dmodk")
    parallel = ParallelConfig(tp=4, pp=1, dp=8, ep=2)
    training = TrainingConfig(micro_batch=1, global_batch=16)
    folded, full = both(uniform, topology, parallel, training, model=moe)
    assert folded.folding == "folded 4 expert-parallel blocks of 2 into 1"
    assert_same_iteration(folded, full)


def test_ecmp_hashing_falls_back_to_the_full_simulation(uniform):
    topology = cluster("fat-tree", "ecmp")
    result = uniform.run(topology, ParallelConfig(tp=8, pp=2, dp=2),
                         TrainingConfig(micro_batch=1, global_batch=8), comm=CommParams())
    assert result.folding == "full: ecmp routing may route replicas unalike"


def test_a_straggler_falls_back_and_slows_its_replica_only(uniform):
    topology = cluster("rail-optimized", "dmodk")
    parallel = ParallelConfig(tp=8, pp=2, dp=2)
    training = TrainingConfig(micro_batch=1, global_batch=8)
    result = uniform.run(topology, parallel, training, comm=CommParams(),
                         stragglers={"n3.gpu1": 1.5})
    assert result.folding == "full: stragglers on n3.gpu1"
    slow = [g for g in result.per_gpu if g.gpu.startswith("n3.")]
    fast = [g for g in result.per_gpu if g.gpu.startswith("n1.")]
    assert slow[0].compute_s == pytest.approx(1.5 * fast[0].compute_s, rel=1e-9)


def test_replicas_seeing_different_links_fall_back_to_the_full_simulation(uniform):
    """One NIC per node behind two PCIe switches, each pipeline stage a node: the
    replicas on the NIC's switch reach it by other links than the others."""
    topology = build_cluster({"preset": "pcie-8gpu", "nodes": 2,
                              "nic": {"count": 1, "bandwidth": "100 Gbps"},
                              "fabric": {"kind": "fat-tree", "routing": "dmodk"}})
    parallel = ParallelConfig(pp=2, dp=8)
    result = uniform.run(topology, parallel, TrainingConfig(micro_batch=1, global_batch=16),
                         comm=CommParams())
    assert result.folding == "full: stage 0 replica 4's p2p links differ from replica 0's"


def test_a_trace_runs_every_replica(uniform):
    result = uniform.run(cluster("fat-tree", "dmodk", nodes=2), ParallelConfig(tp=8, dp=2),
                         TrainingConfig(micro_batch=1, global_batch=4), comm=CommParams(),
                         trace=True)
    assert result.folding.startswith("full: a trace")
    assert any("replica 1" in span.process for span in result.simulation.tracer.spans)


def test_the_report_says_which_simulation_ran(uniform):
    result = uniform.run(cluster("fat-tree", "dmodk", nodes=2), ParallelConfig(tp=8, dp=2),
                         TrainingConfig(micro_batch=1, global_batch=4), comm=CommParams())
    report = build_report(name="x", source=None, result=result, global_batch=4, seq_len=512,
                          peak_flops_per_s=312e12, gpu_memory_bytes=80e9, config={},
                          wall_time_s=0.1, pp=1)
    assert report.folding == "folded 2 data-parallel replicas into 1"
    assert report.to_json_dict()["folding"] == report.folding
