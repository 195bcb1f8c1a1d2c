"""A training iteration against closed forms: pipeline bubbles, data-parallel time,
tensor-parallel traffic, memory, determinism, and the strategy errors."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.memory import memory_per_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig, layer_partition

# Iterations come from the ``uniform`` fixture (tests/conftest.py): layers cost t_fwd_s
# forward and t_bwd_s backward, nothing else costs time; transfers over its fast_switch
# take ~1e-10 s at most (the tied-embedding gradients): a relative tolerance of 1e-6 on
# millisecond compute leaves them out of the closed forms.
REL = 1e-6


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("pp", "m"), [(2, 1), (2, 4), (4, 4), (4, 16), (8, 8)])
def test_pipeline_bubble_fraction_is_p_minus_1_over_m_plus_p_minus_1(schedule, pp, m, uniform):
    result = uniform.run(uniform.fast_switch(pp), ParallelConfig(pp=pp, schedule=schedule),
                         TrainingConfig(micro_batch=1, global_batch=m))
    per_stage = uniform.model.layers // pp * (uniform.t_fwd_s + uniform.t_bwd_s)
    assert result.iteration_time_s == pytest.approx((m + pp - 1) * per_stage, rel=REL)
    for gpu in result.per_gpu:
        assert gpu.bubble_s / result.iteration_time_s == pytest.approx(
            (pp - 1) / (m + pp - 1), rel=REL)
        assert gpu.compute_s == pytest.approx(m * per_stage, rel=1e-12)
        assert gpu.idle_s == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(("pp", "v", "m"), [(2, 2, 4), (4, 2, 8), (2, 4, 2), (4, 2, 4)])
def test_interleaved_bubble_shrinks_by_the_number_of_chunks(pp, v, m, uniform):
    result = uniform.run(uniform.fast_switch(pp),
                         ParallelConfig(pp=pp, schedule="interleaved", interleave=v),
                         TrainingConfig(micro_batch=1, global_batch=m))
    ideal = m * uniform.model.layers // pp * (uniform.t_fwd_s + uniform.t_bwd_s)
    # Narayanan et al. 2021 §2.2.2: bubble time (p-1)/v of one stage's work per micro-batch.
    assert result.iteration_time_s == pytest.approx(ideal * (1 + (pp - 1) / (v * m)),
                                                    rel=REL)
    for gpu in result.per_gpu:
        assert gpu.bubble_s == pytest.approx(result.iteration_time_s - ideal, rel=1e-4)


def test_pure_data_parallel_without_overlap_is_compute_plus_all_reduce(uniform):
    dp, m = 8, 3
    topo = build_cluster({"preset": "switch", "gpus": dp, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    params = CommParams(protocol="simple", algorithm="ring")
    # One bucket for every gradient: the all-reduce starts after the whole backward.
    parallel = ParallelConfig(dp=dp, bucket_params=10**12)
    result = uniform.run(topo, parallel, TrainingConfig(micro_batch=1, global_batch=dp * m),
                         comm=params)
    grad_bytes = sum(uniform.model.layer_params(i) for i in range(uniform.model.layers)) * 4
    # The tied word embedding, the learned position embedding and the final norm.
    model = uniform.model
    grad_bytes += (model.vocab + model.seq_len) * model.hidden * 4
    grad_bytes += model.final_norm_params() * 4
    comm = Communicator(Simulation(), topo, params)
    all_reduce = comm.estimate_s("all_reduce", list(topo.gpus), grad_bytes)
    compute = m * uniform.model.layers * (uniform.t_fwd_s + uniform.t_bwd_s)
    assert result.iteration_time_s == pytest.approx(compute + all_reduce, rel=1e-9)
    gpu = result.per_gpu[0]
    assert gpu.exposed_communication_s == pytest.approx(all_reduce, rel=1e-9)
    assert gpu.communication_s == pytest.approx(all_reduce, rel=1e-9)


def test_small_buckets_overlap_the_all_reduce_with_backward(uniform):
    dp, m = 8, 2
    topo = build_cluster({"preset": "switch", "gpus": dp, "link_bandwidth": "50 GB/s",
                          "link_latency": "1 us"})
    params = CommParams(protocol="simple", algorithm="ring")
    training = TrainingConfig(micro_batch=1, global_batch=dp * m)
    one_bucket = uniform.run(topo, ParallelConfig(dp=dp, bucket_params=10**12), training,
                             comm=params)
    per_layer = uniform.run(topo, ParallelConfig(dp=dp, bucket_params=1), training, comm=params)
    assert per_layer.iteration_time_s < one_bucket.iteration_time_s
    gpu = per_layer.per_gpu[0]
    assert gpu.exposed_communication_s < gpu.communication_s


def test_tensor_parallel_traffic_per_layer_is_megatrons(uniform):
    tp, m = 8, 2
    topo = build_cluster({"preset": "switch", "gpus": tp, "link_bandwidth": "100 GB/s",
                          "link_latency": "1 us"})
    training = TrainingConfig(micro_batch=2, global_batch=m * 2, recompute="none")
    params = CommParams(protocol="simple", algorithm="ring")
    result = uniform.run(topo, ParallelConfig(tp=tp), training, comm=params,
                         fold_exclusive_tp=False)
    b, s, h = 2, uniform.model.seq_len, uniform.model.hidden
    # Megatron: 2 all-reduces of b·s·h 16-bit values forward, 2 backward, per layer;
    # a ring all-reduce moves 2(t-1)/t of it over each GPU's link.
    per_layer = 4 * 2 * (tp - 1) / tp * b * s * h * 2
    uplink = next(link for link in topo.links() if link.src == topo.gpus[0])
    moved = result.simulation.network.link_bytes(uplink.id)
    assert moved == pytest.approx(m * uniform.model.layers * per_layer, rel=1e-9)


def test_full_recompute_adds_the_forward_all_reduces_again(uniform):
    tp = 4
    topo = build_cluster({"preset": "switch", "gpus": tp, "link_bandwidth": "100 GB/s",
                          "link_latency": "1 us"})
    params = CommParams(protocol="simple", algorithm="ring")
    without = uniform.run(topo, ParallelConfig(tp=tp), TrainingConfig(recompute="none"),
                          comm=params, fold_exclusive_tp=False)
    full = uniform.run(topo, ParallelConfig(tp=tp), TrainingConfig(recompute="full"),
                       comm=params, fold_exclusive_tp=False)
    uplink = next(link for link in topo.links() if link.src == topo.gpus[0])
    ratio = (full.simulation.network.link_bytes(uplink.id)
             / without.simulation.network.link_bytes(uplink.id))
    assert ratio == pytest.approx(6 / 4)


@pytest.mark.parametrize(("tp", "pp", "dp", "sequence_parallel"), [
    (8, 2, 1, False), (8, 2, 1, True),
    # TP 4 leaves two TP groups per node whose DP ring crosses their NVSwitch links.
    (4, 2, 2, False), (2, 2, 4, True)])
def test_closed_form_tp_equals_simulated_flows(tp, pp, dp, sequence_parallel, uniform):
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    parallel = ParallelConfig(tp=tp, pp=pp, dp=dp, sequence_parallel=sequence_parallel,
                              bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=4 * dp)
    folded = uniform.run(topo, parallel, training, comm=CommParams())
    flows = uniform.run(topo, parallel, training, comm=CommParams(), fold_exclusive_tp=False)
    assert folded.iteration_time_s == pytest.approx(flows.iteration_time_s, rel=1e-9)
    assert folded.flows < flows.flows


def test_same_seed_same_result_and_accounting_adds_up(uniform):
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2})
    parallel = ParallelConfig(tp=2, pp=2, dp=4, schedule="1f1b", zero=1, bucket_params=10**7)
    training = TrainingConfig(micro_batch=1, global_batch=16)
    a = uniform.run(topo, parallel, training, comm=CommParams(), seed=3)
    b = uniform.run(topo, parallel, training, comm=CommParams(), seed=3)
    assert a.iteration_time_s == b.iteration_time_s
    assert a.per_gpu == b.per_gpu
    for gpu in a.per_gpu:
        total = (gpu.compute_s + gpu.host_s + gpu.exposed_communication_s + gpu.bubble_s
                 + gpu.idle_s)
        assert total == pytest.approx(a.iteration_time_s, rel=1e-9)
        assert gpu.exposed_communication_s <= gpu.communication_s + 1e-12


def test_a_straggler_slows_its_whole_tensor_parallel_group(uniform):
    topo = uniform.fast_switch(4)
    training = TrainingConfig(micro_batch=1, global_batch=2)
    base = uniform.run(topo, ParallelConfig(tp=2, dp=2), training)
    slow = uniform.run(topo, ParallelConfig(tp=2, dp=2), training,
                       stragglers={topo.gpus[1]: 1.5})
    straggler, peer = slow.per_gpu[1], slow.per_gpu[0]
    assert straggler.compute_s == pytest.approx(1.5 * base.per_gpu[1].compute_s)
    # Its TP peer computes at its own pace and waits out the rest in their collectives:
    # held up all the same.
    assert peer.compute_s == pytest.approx(base.per_gpu[0].compute_s)
    assert peer.compute_s + peer.exposed_communication_s == pytest.approx(
        straggler.compute_s + straggler.exposed_communication_s)
    assert slow.per_gpu[2].compute_s == pytest.approx(base.per_gpu[2].compute_s)
    assert slow.iteration_time_s > base.iteration_time_s


def test_memory_is_the_published_formula_per_stage(uniform):
    topo = uniform.fast_switch(4)
    parallel = ParallelConfig(tp=2, pp=2)
    training = TrainingConfig(micro_batch=2, global_batch=4, recompute="selective")
    result = uniform.run(topo, parallel, training)
    for gpu in result.per_gpu:
        expected = memory_per_gpu(uniform.model, ParallelConfig(tp=2, pp=2, schedule="1f1b"),
                                  TrainingConfig(micro_batch=2, recompute="selective"),
                                  num_microbatches=2, stage=gpu.stage, flash_attention=True)
        assert gpu.memory == expected


def test_out_of_memory_names_the_gpu_and_the_breakdown(uniform):
    big = model_from_mapping({"preset": "gpt3-175b"})
    topo = uniform.fast_switch(8)
    with pytest.raises(ConfigError, match=r"out of memory: n0\.gpu0 .*weights"):
        uniform.run(topo, ParallelConfig(tp=8), TrainingConfig(), model=big)
    assert uniform.run(topo, ParallelConfig(tp=8), TrainingConfig(), model=replace(big, layers=8),
                       allow_oom=True).iteration_time_s > 0


@pytest.mark.parametrize(("parallel", "training", "message"), [
    (ParallelConfig(tp=2, pp=2, dp=3), TrainingConfig(), "tp·pp·dp = 2·2·3 = 12"),
    (ParallelConfig(tp=3, dp=1), TrainingConfig(), "do not split over tp = 3"),
    (ParallelConfig(pp=3), TrainingConfig(), "8 layers do not split"),
    (ParallelConfig(dp=4), TrainingConfig(global_batch=6), "not a multiple of"),
    (ParallelConfig(pp=2, schedule="interleaved", interleave=2), TrainingConfig(global_batch=3),
     "multiple of pp"),
    (ParallelConfig(dp=2, ep=2), TrainingConfig(global_batch=2), "needs a MoE model"),
])
def test_bad_strategies_are_clear_errors(parallel, training, message, uniform):
    # The first case asks for 12 GPUs on a cluster of 8; the others fit their cluster.
    topo = uniform.fast_switch(8 if parallel.num_gpus == 12 else parallel.num_gpus)
    with pytest.raises(ConfigError, match=message):
        uniform.run(topo, parallel, training)


def test_embedding_partition_balances_bloom_over_twelve_stages():
    chunks = layer_partition(70, 12, "embedding")
    sizes = [stop - first for first, stop in chunks]
    # 70 layers + embedding + output = 72 units: 6 a stage, the ends lose one to them.
    assert sizes == [5] + [6] * 10 + [5]
    assert chunks[0][0] == 0 and chunks[-1][1] == 70
    assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))


def test_uneven_layers_need_the_embedding_partition(uniform):
    model = replace(uniform.model, layers=10)
    topo = uniform.fast_switch(4)
    with pytest.raises(ConfigError, match="10 layers do not split"):
        uniform.run(topo, ParallelConfig(pp=4), TrainingConfig(global_batch=4), model=model)
    result = uniform.run(topo, ParallelConfig(pp=4, partition="embedding"),
                         TrainingConfig(global_batch=4), model=model)
    computes = sorted({round(g.compute_s, 12) for g in result.per_gpu})
    assert computes == [pytest.approx(4 * 2 * (uniform.t_fwd_s + uniform.t_bwd_s)),
                        pytest.approx(4 * 3 * (uniform.t_fwd_s + uniform.t_bwd_s))]
