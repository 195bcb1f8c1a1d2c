"""The layer passes a cost model builds once (``RooflineCosts._layers``) and the TP-overlap
GEMM pairs a stream builder prices once (``OverlappedOps._paired_gemms``): every answer
is the one computed afresh, for keys that differ in one thing only (a layer's index, which
makes it dense or MoE; a model field; the chunks), in any order of asking."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.workloads.cost.compute import RooflineCosts, layer_work
from distsim_gpu.workloads.cost.compute import roofline as roofline_module
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.tp_overlap import paired_gemms_s
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

GPU = get_gpu("h100-sxm")
# Layer 0 dense, layer 1 MoE: two shards that differ only in their layer index are
# different layers.
MIXED = model_from_mapping({"name": "mixed", "layers": 2, "hidden": 2048, "heads": 16,
                            "kv_heads": 4, "seq_len": 2048, "vocab": 32000,
                            "ffn_hidden": 4096, "experts": 4, "top_k": 2,
                            "first_dense_layers": 1})
PASSES = ("fwd", "bwd", "recompute")


def _shard(layer: int, **fields) -> LayerShard:
    return LayerShard(1, 2048, tp=2, sequence_parallel=True, layer_index=layer, **fields)


def _fresh(costs: RooflineCosts, pass_: str, model, shard: LayerShard):
    """The work built afresh, as the cost model did before it kept any."""
    return layer_work(pass_, model, shard, precision=costs.precision, causal=costs.causal,
                      stack=costs.resolved_stack)


def test_each_layer_pass_is_the_one_built_afresh_in_any_order():
    costs = RooflineCosts(GPU)
    keys = [(p, _shard(layer, recompute=mode)) for p in PASSES for layer in (0, 1)
            for mode in ("full", "selective")]
    for round_ in range(2):  # the second round answers from the memo
        for pass_, shard in (keys if round_ == 0 else keys[::-1]):
            fresh = _fresh(costs, pass_, MIXED, shard)
            assert costs.layer_work(pass_, MIXED, shard) == fresh
            assert costs.layer_time_s(pass_, MIXED, shard) == costs.work_time_s(fresh)
    # Index 0 and 1 differ (dense against MoE), so a key without the index would be wrong.
    assert costs.layer_work("fwd", MIXED, _shard(0)) != costs.layer_work("fwd", MIXED, _shard(1))
    assert costs.layer_time_s("fwd", MIXED, _shard(0)) != costs.layer_time_s(
        "fwd", MIXED, _shard(1))


def test_a_model_that_differs_in_one_field_is_not_answered_from_anothers_entry():
    costs = RooflineCosts(GPU)
    wider = replace(MIXED, hidden=4096, heads=32, kv_heads=8)
    twin = replace(MIXED)  # equal, another object: its own entry, the same answer
    first = costs.layer_time_s("fwd", MIXED, _shard(0))
    assert costs.layer_time_s("fwd", wider, _shard(0)) == costs.work_time_s(
        _fresh(costs, "fwd", wider, _shard(0))) != first
    assert costs.layer_time_s("fwd", twin, _shard(0)) == first
    assert costs.layer_work("fwd", twin, _shard(0)) == costs.layer_work("fwd", MIXED, _shard(0))


def test_the_memo_is_no_part_of_the_cost_models_value():
    used, unused = RooflineCosts(GPU), RooflineCosts(GPU)
    used.layer_time_s("bwd", MIXED, _shard(1))
    assert used == unused and hash(used) == hash(unused) and repr(used) == repr(unused)
    assert "_layers" not in repr(used)
    # A changed copy starts with its own memo: its own work, not the original's.
    full = replace(used, causal=False)
    assert full.layer_work("bwd", MIXED, _shard(1)) == _fresh(full, "bwd", MIXED, _shard(1))
    assert full.layer_time_s("bwd", MIXED, _shard(1)) != used.layer_time_s(
        "bwd", MIXED, _shard(1))


def test_a_full_memo_starts_over_and_still_answers_right(monkeypatch):
    monkeypatch.setattr(roofline_module, "LAYER_MEMO_LIMIT", 2)
    costs = RooflineCosts(GPU)
    for pass_ in PASSES * 2:
        for layer in (0, 1):
            assert costs.layer_work(pass_, MIXED, _shard(layer)) == _fresh(
                costs, pass_, MIXED, _shard(layer))
            assert len(costs._layers) <= 2


@pytest.mark.parametrize("pass_", ["fwd", "bwd", "recompute"])
def test_a_builders_gemm_pairs_are_paired_gemms_s_for_each_layer_and_chunking(pass_):
    costs = RooflineCosts(GPU)
    par = ParallelConfig(tp=2, sequence_parallel=True, tp_comm_overlap=True, ep=2, dp=2)
    builder = StreamBuilder(MIXED, par, TrainingConfig(micro_batch=1, global_batch=2),
                            costs, microbatches=1)
    keys = [(_shard(layer, ep=2), chunks) for layer in (0, 1) for chunks in ((1, 1), (2, 4))]
    for round_ in range(2):
        for shard, chunks in (keys if round_ == 0 else keys[::-1]):
            expected = paired_gemms_s(RooflineCosts(GPU), pass_, MIXED, shard, chunks)
            assert builder._paired_gemms(pass_, shard, chunks) == expected
    # The dense layer's MLP pairs GEMMs the MoE layer's does not have; chunking changes them.
    dense, moe = (builder._paired_gemms(pass_, _shard(i, ep=2), (1, 1)) for i in (0, 1))
    assert dense["mlp"] != moe["mlp"]
    assert builder._paired_gemms(pass_, _shard(0, ep=2), (2, 4)) != dense
