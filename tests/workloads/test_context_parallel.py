"""Context parallelism (``parallelism.cp``): placement between tp and dp, the ring's bytes
and steps against their closed forms, the memory per GPU, clear errors, and folded runs
equal to full ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.context_parallel import core_attention_time_s, ring_step_blocks
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import cp_kv_block_bytes, memory_of_strategy, memory_per_gpu
from distsim_gpu.workloads.cost.traffic import cp_message_bytes, optimizer_params, tp_message_bytes
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Wait
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.iteration.timeline import CRITICAL_KINDS
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_strategy,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workloads.layouts import shape_model

# Llama-like: grouped-query attention, 8 key/value heads of 128.
GQA = model_from_mapping({"name": "gqa", "layers": 4, "hidden": 4096, "heads": 32,
                          "kv_heads": 8, "seq_len": 8192, "vocab": 32000, "ffn_hidden": 14336,
                          "gated_mlp": True, "norm": "rmsnorm", "position": "rotary"})


def _check(parallel: ParallelConfig, *, num_gpus: int, seq_len: int = 8192, **model) -> int:
    shape = shape_model(**{"layers": 4, "heads": 32, "kv_heads": 8, "experts": 1, **model})
    return check_strategy(shape, parallel, TrainingConfig(micro_batch=1, global_batch=8),
                          num_gpus=num_gpus, source="s.yaml", seq_len=seq_len)


def test_cp_ranks_sit_between_tp_and_dp() -> None:
    """Megatron-Core's order tp-cp-ep-dp-pp: tp fastest, then cp, then dp, pp outermost."""
    place = Placement(ParallelConfig(tp=2, cp=2, dp=2, pp=2))
    assert place.axes == ("tp", "cp", "dp", "pp")
    assert place.rank(tp=1, dp=0, pp=0, cp=1) == 3
    assert place.rank(tp=0, dp=1, pp=0, cp=0) == 4
    assert place.rank(tp=0, dp=0, pp=1, cp=0) == 8
    assert place.cp_group(0, 0, 0) == (0, 2)
    assert place.tp_group(1, 0) == (2, 3)  # replica 1: cp rank 1 of dp rank 0
    assert place.dp_group(0, 0) == (0, 2, 4, 6)  # gradients over dp·cp ranks
    for rank in range(16):
        c = place.coordinates(rank)
        assert place.rank(c.tp, c.dp, c.pp, c.cp) == rank
    assert Placement(ParallelConfig(tp=2, cp=2, dp=2, order="tp-dp-cp-pp")).cp_group(
        0, 0, 0) == (0, 4)


def test_without_cp_placement_is_unchanged() -> None:
    place = Placement(ParallelConfig(tp=4, dp=2, pp=2))
    assert place.axes == ("tp", "cp", "dp", "pp")
    assert place.tp_group(1, 1) == (12, 13, 14, 15)
    assert place.dp_group(0, 0) == (0, 4)


@pytest.mark.parametrize(("parallel", "num_gpus", "seq_len", "text"), [
    (ParallelConfig(tp=2, cp=2, dp=2), 16,  8192,
     "s.yaml: parallelism: tp·cp·pp·dp = 2·2·1·2 = 8 but the cluster has 16 GPUs"),
    (ParallelConfig(cp=3, dp=1), 3, 8192,
     "s.yaml: parallelism.cp: sequence length 8192 does not split into 2·cp = 6 equal "
     "chunks"),
    (ParallelConfig(cp=0), 1, 8192, "s.yaml: parallelism.cp: must be a whole number"),
])
def test_bad_context_parallelism_is_a_clear_error(parallel, num_gpus, seq_len, text) -> None:
    with pytest.raises(ConfigError) as info:
        _check(parallel, num_gpus=num_gpus, seq_len=seq_len)
    assert str(info.value).startswith(text)


def test_expert_parallelism_folds_over_dp_and_cp() -> None:
    """Megatron-Core's expert grid: ep over dp·cp (here all of it on cp), refused where
    expert_tp·ep does not divide a stage's tp·cp·dp GPUs."""
    assert _check(ParallelConfig(cp=2, dp=1, ep=2), num_gpus=2, experts=2) == 8
    assert _check(ParallelConfig(cp=2, dp=2, ep=4), num_gpus=4, experts=4) == 4
    with pytest.raises(ConfigError, match=r"parallelism\.ep: expert_tp·ep = 1·8 = 8 does "
                                          r"not divide the 4 GPUs of a pipeline stage"):
        _check(ParallelConfig(cp=2, dp=2, ep=8), num_gpus=4, experts=8)


def test_cp_splits_the_gpus_not_the_batch() -> None:
    assert _check(ParallelConfig(tp=2, cp=2, dp=2), num_gpus=8) == 4  # 8 / (mb 1 · dp 2)


@settings(max_examples=40, deadline=None)
@given(cp=st.sampled_from([1, 2, 4, 8]), tp=st.sampled_from([1, 2, 4, 8, 16]),
       micro_batch=st.integers(1, 4), chunks=st.integers(1, 64))
def test_a_ring_step_carries_k_and_v_of_the_ranks_tokens(cp, tp, micro_batch, chunks) -> None:
    """2·(s/cp)·b·d_kv·heads_kv/tp·bytes; key/value heads replicated when fewer than tp."""
    s = 2 * cp * chunks * 64
    training = TrainingConfig(micro_batch=micro_batch, global_batch=micro_batch, seq_len=s)
    parallel = ParallelConfig(tp=tp, cp=cp)
    kv_heads_local = max(1, 8 // tp)
    expected = 2 * (s / cp) * micro_batch * 128 * kv_heads_local * 2
    assert cp_message_bytes(GQA, parallel, training) == pytest.approx(expected)


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_ring_steps(cp) -> None:
    """Forward: cp − 1 sends of one block; backward: cp sends, 2·(cp − 1) blocks (K/V and
    dK/dV of every block but the rank's own)."""
    forward, backward = ring_step_blocks("fwd", cp), ring_step_blocks("bwd", cp)
    assert len(forward) == cp and sum(forward) == cp - 1 and forward[-1] == 0
    assert len(backward) == cp and sum(backward) == 2 * (cp - 1) and all(backward)
    assert ring_step_blocks("recompute", cp) == forward
    assert ring_step_blocks("fwd", 1) == ()


def _layer_ops(parallel: ParallelConfig, training: TrainingConfig, costs, pass_: str):
    builder = StreamBuilder(GQA, parallel, training, costs, microbatches=1)
    ops = builder._forward(0, False) if pass_ == "F" else builder._backward(0, 0, True, False)
    return builder, [op for op in ops if getattr(op, "label", "").startswith("L1 ")
                     or (isinstance(op, Wait) and (op.handle or "").startswith("cp:L1 "))]


@pytest.mark.parametrize("cp", [2, 4])
def test_a_layer_runs_its_attention_as_cp_blocks_beside_the_ring(cp) -> None:
    """Forward: cp − 1 asynchronous ring sends of one K/V block, each waited for after one
    block of core attention; the compute is the layer at s/cp tokens plus cp − 1 blocks."""
    costs = RooflineCosts(model_gpu())
    parallel = ParallelConfig(tp=8, cp=cp)
    training = TrainingConfig(micro_batch=1, global_batch=1)
    _, ops = _layer_ops(parallel, training, costs, "F")
    ring = [op for op in ops if isinstance(op, Collective) and op.group == "cp"]
    block = cp_message_bytes(GQA, parallel, training)
    assert [op.size_bytes for op in ring] == [block] * (cp - 1)
    assert all(not op.blocking for op in ring)
    assert sum(isinstance(op, Wait) for op in ops) == cp - 1
    s_local = 8192 // cp
    shard = {"micro_batch": 1, "seq_len": s_local, "tp": 8, "layer_index": 1}
    core = core_attention_time_s(costs, "fwd", GQA, LayerShard(**shard))
    compute = sum(op.duration_s for op in ops if isinstance(op, Compute))
    assert compute == pytest.approx(costs.layer_time_s("fwd", GQA,
                                                       LayerShard(**shard)) + (cp - 1) * core)
    # The tensor-parallel all-reduces carry the rank's s/cp tokens.
    tp_calls = [op for op in ops if isinstance(op, Collective) and op.group == "tp"]
    assert {op.size_bytes for op in tp_calls} == {
        tp_message_bytes(GQA, replace(training, seq_len=s_local))}
    _, backward = _layer_ops(parallel, training, costs, "B")
    sizes = [op.size_bytes for op in backward
             if isinstance(op, Collective) and op.group == "cp"]
    assert len(sizes) == cp and sum(sizes) == pytest.approx(2 * (cp - 1) * block)


def model_gpu():
    from distsim_gpu.workloads.specs.gpus import get_gpu
    return get_gpu("h100-sxm")


def test_core_attention_needs_flash_and_a_roofline() -> None:
    with pytest.raises(ConfigError, match=r"compute\.attention"):
        core_attention_time_s(RooflineCosts(model_gpu(), attention="unfused"), "fwd", GQA,
                              LayerShard(micro_batch=1, seq_len=1024, tp=1))
    with pytest.raises(ConfigError, match=r"compute\.costs"):
        core_attention_time_s(object(), "fwd", GQA, LayerShard(micro_batch=1, seq_len=1024, tp=1))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_memory_is_the_ranks_tokens_plus_the_ring_buffers(recompute) -> None:
    """Activations at s/cp tokens plus four K/V blocks (double-buffered K/V and dK/dV);
    the model state is sharded over dp·cp."""
    common = {"flash_attention": True, "num_microbatches": 8, "stage": 1}
    with_cp = memory_per_gpu(GQA, ParallelConfig(tp=8, pp=2, cp=4, dp=2), TrainingConfig(
        micro_batch=1, recompute=recompute, seq_len=32768), **common)
    plain = memory_per_gpu(GQA, ParallelConfig(tp=8, pp=2, cp=1, dp=2), TrainingConfig(
        micro_batch=1, recompute=recompute, seq_len=8192), **common)
    ring = 4 * cp_kv_block_bytes(GQA, micro_batch=1, seq_len=32768, tp=8, cp=4)
    assert ring == 4 * 2 * 8192 * 1 * 128 * 2  # one kv head per tp rank, bf16
    assert with_cp.activations_bytes == pytest.approx(plain.activations_bytes + ring)
    assert with_cp.weights_bytes == plain.weights_bytes
    parallel = ParallelConfig(tp=8, pp=2, dp=2, cp=4, zero=1)
    training = TrainingConfig(micro_batch=1, global_batch=16, seq_len=32768,
                              recompute=recompute)
    sharded = memory_of_strategy(GQA, parallel, training, seq_len=32768, microbatches=8,
                                 stage=1, flash_attention=True)
    unsharded = memory_of_strategy(GQA, replace(parallel, zero=0), training, seq_len=32768,
                                   microbatches=8, stage=1, flash_attention=True)
    assert sharded.optimizer_bytes == pytest.approx(unsharded.optimizer_bytes / 8)
    assert optimizer_params(GQA, parallel, 1) == pytest.approx(
        optimizer_params(GQA, replace(parallel, zero=0), 1) / 8)


def test_a_sequence_that_does_not_split_is_refused() -> None:
    """memory_per_gpu takes a checked strategy; the check refuses the sequence."""
    with pytest.raises(ConfigError, match="cp: sequence length 1004 does not split"):
        check_strategy(GQA, ParallelConfig(cp=4), TrainingConfig(global_batch=1, seq_len=1004),
                       num_gpus=4)


def _cluster(nodes: int = 4):
    return build_cluster({"preset": "dgx-a100", "nodes": nodes,
                          "fabric": {"kind": "rail-optimized", "routing": "dmodk"}})


def test_folded_cp_rings_equal_the_full_simulation(uniform) -> None:
    """cp rings of replicas are units of folding: folded and full runs agree."""
    from distsim_gpu.collectives import CommParams
    model = model_from_mapping({"name": "small", "layers": 4, "hidden": 1024, "heads": 16,
                                "seq_len": 4096, "vocab": 32000})
    costs = RooflineCosts(uniform.gpu)
    parallel = ParallelConfig(tp=4, cp=4, dp=2, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=4)
    runs = [uniform.run(_cluster(), parallel, training, model=model, costs=costs,
                        comm=CommParams(), fold_replicas=fold) for fold in (True, False)]
    folded, full = runs
    assert folded.folding == "folded 2 context-parallel rings of 4 into 1"
    assert folded.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    for mine, theirs in zip(folded.per_gpu, full.per_gpu, strict=True):
        assert mine.exposed_communication_s == pytest.approx(
            theirs.exposed_communication_s, rel=1e-9, abs=1e-15)
    ids, _cap, bytes_a, *_ = folded.simulation.network.link_stat_arrays()
    ids_b, _cap_b, bytes_b, *_ = full.simulation.network.link_stat_arrays()
    assert ids == ids_b and list(bytes_a) == pytest.approx(list(bytes_b), rel=1e-9)


def test_cp_on_a_fast_network_is_compute_bound(uniform) -> None:
    """With ideal links the ring hides under the attention blocks: the iteration is the
    compute of one rank (layers at s/cp tokens plus cp − 1 blocks each)."""
    model = model_from_mapping({"name": "small", "layers": 2, "hidden": 1024, "heads": 16,
                                "seq_len": 32768, "vocab": 32000})
    costs = RooflineCosts(uniform.gpu)
    parallel = ParallelConfig(tp=1, cp=8)
    training = TrainingConfig(micro_batch=1, global_batch=1)
    result = uniform.run(build_cluster({"preset": "dgx-a100", "nodes": 1}), parallel,
                         training, model=model, costs=costs)
    gpu = result.per_gpu[0]
    # A 16 MiB K/V block moves in ~0.1 ms over NVLink, under a ~0.2 ms attention block.
    assert "cp comm" not in {entry.kind for entry in result.critical_path}
    assert gpu.communication_s > 0
    shard = {"micro_batch": 1, "seq_len": 4096, "tp": 1}
    layers = sum(costs.layer_time_s(p, model, LayerShard(**shard))
                 + 7 * core_attention_time_s(costs, p, model, LayerShard(**shard)) for p in ("fwd",
                                                                                             "bwd"))
    edges = sum(costs.embedding_time_s(p, model, **shard) + costs.loss_time_s(p, model, **shard)
                for p in ("fwd", "bwd"))
    assert gpu.compute_s == pytest.approx(2 * layers + edges
                                          + costs.optimizer_step_time_s(
                                              optimizer_params(model, parallel, 0)))


def test_the_search_enumerates_cp_when_asked(tiny) -> None:
    from distsim_gpu.scenarios.scenario import scenario_from_mapping
    from distsim_gpu.scenarios.study.search import enumerate_strategies
    scenario = scenario_from_mapping(tiny())
    assert {s.parallel.cp for s in enumerate_strategies(scenario)} == {1}
    found = enumerate_strategies(scenario, space={"cp": [1, 2], "micro_batch": [1]})
    with_cp = [s.parallel for s in found if s.parallel.cp == 2]
    assert with_cp and all(p.tp * p.cp * p.pp * p.dp == 8 and p.ep == 1 for p in with_cp)
    with_cp_label = next(s for s in found if s.parallel.cp == 2).label()
    assert "cp2" in with_cp_label


def test_the_search_folds_experts_over_cp_and_dp(tiny) -> None:
    """Megatron-Core folds the expert groups over cp·dp: with cp 2 the search tries every
    ep dividing the experts and cp·dp — ep 2 where dp is 1 — and each candidate checks."""
    from distsim_gpu.scenarios.scenario import scenario_from_mapping
    from distsim_gpu.scenarios.study.search import enumerate_strategies
    from distsim_gpu.workloads.strategy.parallel import check_strategy
    data = tiny()
    data["model"].update({"experts": 4, "top_k": 2})
    scenario = scenario_from_mapping(data)
    found = [s.parallel for s in enumerate_strategies(
        scenario, space={"cp": [2], "micro_batch": [1], "zero": [0], "recompute": ["none"],
                         "schedule": ["1f1b"], "sequence_parallel": [False],
                         "order": ["tp-dp-pp"]})]
    assert found and all(p.cp == 2 for p in found)
    assert {(p.ep, p.dp) for p in found if p.tp * p.pp == 4} == {(1, 1), (2, 1)}
    for p in found:
        assert (p.cp * p.dp) % p.ep == 0 and 4 % p.ep == 0
    assert any(p.ep > p.dp for p in found)  # refused before EP ran with CP
    check_strategy(scenario.model, next(p for p in found if p.ep > p.dp),
                   scenario.training, num_gpus=scenario.num_gpus)


def test_the_lower_bound_stays_below_a_cp_iteration(tiny) -> None:
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
    from distsim_gpu.scenarios.study.search import iteration_bounds
    data = tiny(parallelism={"tp": 2, "cp": 2, "pp": 2, "dp": 1},
                training={"global_batch": 4})
    scenario = scenario_from_mapping(data)
    bound = iteration_bounds(scenario)
    simulated = run_scenario(scenario).iteration_time_s
    assert 0 < bound.lower_bound_s <= simulated


def test_a_slow_ring_is_exposed_by_what_the_blocks_do_not_hide(uniform) -> None:
    """On a slow link each ring step's transfer outlasts its attention block: the main
    stream waits (transfer − block) per step — one step forward, two backward (K/V, then
    dK/dV), its exposed communication — and the critical path holds each step's whole
    transfer as cp comm, not the blocks, which ran beside it with slack."""
    from distsim_gpu.collectives import CommParams, Communicator
    from distsim_gpu.simcore.simulation import Simulation
    model = model_from_mapping({"name": "one", "layers": 1, "hidden": 1024, "heads": 16,
                                "seq_len": 2048, "vocab": 32000})
    costs = RooflineCosts(uniform.gpu)
    topology = build_cluster({"preset": "switch", "gpus": 2, "link_bandwidth": 2e9,
                              "link_latency": 0})
    parallel, training = ParallelConfig(cp=2), TrainingConfig(micro_batch=1, global_batch=1)
    comm = CommParams(protocol="simple").ideal()
    result = uniform.run(topology, parallel, training, model=model, costs=costs, comm=comm)
    block = cp_message_bytes(model, parallel, training)
    ring = Communicator(Simulation(0), topology, comm)
    plan = ring.pairs_plan([("n0.gpu0", "n0.gpu1"), ("n0.gpu1", "n0.gpu0")], block)
    transfer_s = ring.time_s(plan, block)
    shard = {"micro_batch": 1, "seq_len": 1024, "tp": 1}
    hidden_f = core_attention_time_s(costs, "fwd", model, LayerShard(**shard))
    hidden_b = core_attention_time_s(costs, "bwd", model, LayerShard(**shard))
    assert transfer_s > hidden_b > hidden_f  # the ring is the slow part here
    unhidden = (transfer_s - hidden_f) + 2 * (transfer_s - hidden_b)
    waits = [entry.duration_s for entry in result.critical_path if entry.kind == "cp comm"]
    assert len(waits) == 3
    assert sum(waits) == pytest.approx(3 * transfer_s, rel=1e-9)
    assert result.per_gpu[0].exposed_communication_s >= unhidden


def test_one_cp_ring_spanning_every_replica_is_not_folded(uniform) -> None:
    """The folding unit is the ring (workloads.strategy.dimensions): with one ring there is
    nothing to fold, and the run says why; its ring steps are waited for as cp comm."""
    from distsim_gpu.collectives import CommParams
    model = model_from_mapping({"name": "small", "layers": 2, "hidden": 1024, "heads": 16,
                                "seq_len": 4096, "vocab": 32000})
    parallel = ParallelConfig(tp=4, cp=4, dp=1, bucket_params=2_000_000)
    training = TrainingConfig(micro_batch=1, global_batch=2)
    result = uniform.run(_cluster(nodes=2), parallel, training, model=model,
                         costs=RooflineCosts(uniform.gpu), comm=CommParams())
    assert result.folding == ("full: one data-parallel replica ring (context parallelism "
                              "spans them all)")
    assert {entry.kind for entry in result.critical_path} <= set(CRITICAL_KINDS)
