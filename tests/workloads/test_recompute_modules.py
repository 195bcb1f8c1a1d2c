"""Megatron-Core's fine-grained selective recomputation (``training.recompute_modules``):
the list as configured, what each submodule stops keeping (closed forms per activation
term), which operators the recompute pass runs, which of the layer's calls each pass runs again,
its collectives, and an iteration."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import RooflineCosts, layer_work
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import activation_bytes_per_layer, memory_per_gpu
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import get_model, model_from_mapping
from distsim_gpu.workloads.specs.recompute import SAVED_COLLECTIVES
from distsim_gpu.workloads.specs.recompute_modules import (
    RECOMPUTE_MODULES,
    PassCommunication,
    pass_communication,
    recompute_modules_from,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    training_from_mapping,
)
from hypothesis import given, settings
from hypothesis import strategies as st

DSV3 = get_model("deepseek-v3")  # MLA, 3 dense layers, then MoE top-8 of 256 + 1 shared
LLAMA = get_model("llama3-8b")
H100 = get_gpu("h100-sxm")
S, TP = 4096, 2
DENSE, MOE = 0, 3
E = Q = 2  # bf16 activations and linear inputs


def _bytes(model, layer: int, modules: tuple[str, ...], *, recompute: str = "selective",
           tp: int = TP, flash: bool = True) -> float:
    shard = LayerShard(1, S, tp=tp, sequence_parallel=True, layer_index=layer,
                       recompute=recompute, recompute_modules=modules)
    return activation_bytes_per_layer(model, shard, flash_attention=flash)


def _saved_by(model, layer: int, module: str, **kw) -> float:
    """What adding ``module`` to core attention's recomputation stops keeping."""
    return (_bytes(model, layer, ("core_attn",), **kw)
            - _bytes(model, layer, ("core_attn", module), **kw))


# ---------------------------------------------------------------- the list as configured

def test_a_list_reads_in_one_order_and_the_default_is_core_attention():
    assert TrainingConfig().recompute_modules == ("core_attn",)
    assert recompute_modules_from(["MOE_ACT", "layernorm", "mla_up_proj"]) == (
        "layernorm", "mla_up_proj", "moe_act")
    training = training_from_mapping({"recompute": "selective",
                                      "recompute_modules": ["moe_act", "core_attn"]})
    assert training.recompute_modules == ("core_attn", "moe_act")
    assert training.to_dict()["recompute_modules"] == ["core_attn", "moe_act"]
    assert "recompute_modules" not in TrainingConfig().to_dict()  # resolved configs as before


@pytest.mark.parametrize(("value", "match"), [
    ("moe_act", "expected a list"),
    (["moe_ac"], r"unknown submodule 'moe_ac'.*moe_act"),
    (["layernorm", "layernorm"], "layernorm named twice"),
])
def test_a_bad_list_names_the_key_and_what_is_valid(value, match):
    with pytest.raises(ConfigError, match=match) as err:
        training_from_mapping({"recompute_modules": value}, source="run.yaml")
    assert err.value.key == "training.recompute_modules" and "run.yaml" in str(err.value)


def test_other_modes_ignore_the_list_so_one_sweeps_over_them():
    parallel = ParallelConfig(ep=8, dp=8, pp=1)
    for recompute in ("none", "selective", "op", "full"):
        training = TrainingConfig(micro_batch=1, global_batch=8, recompute=recompute,
                                  recompute_modules=("moe_act",))
        check_strategy(DSV3, parallel, training, num_gpus=8, seq_len=4096)
    for mode in ("none", "full"):
        assert _bytes(DSV3, MOE, ("moe_act",), recompute=mode) == _bytes(
            DSV3, MOE, ("core_attn",), recompute=mode)


@pytest.mark.parametrize(("model", "modules", "tp", "match"), [
    (LLAMA, ("mla_up_proj",), 1, "no multi-head latent attention"),
    (LLAMA, ("moe_act",), 1, "no MoE layer"),
    (LLAMA, ("layernorm",), 1, "fused into the linear"),
    (get_model("qwen3-235b-a22b"), ("mlp",), 1, "every layer"),
    (get_model("qwen3-235b-a22b"), ("shared_experts",), 1, "no shared"),
    (LLAMA, ("moe",), 1, "no MoE layer"),
])
def test_a_module_that_cannot_apply_is_refused(model, modules, tp, match):
    ep = 1 if model.experts <= 1 else 8 // tp
    parallel = ParallelConfig(tp=tp, ep=ep, dp=8 // tp, sequence_parallel=tp > 1)
    training = TrainingConfig(micro_batch=1, global_batch=8, recompute="selective",
                              recompute_modules=modules)
    with pytest.raises(ConfigError, match=match) as err:
        check_strategy(model, parallel, training, num_gpus=8, seq_len=4096)
    assert err.value.key == "training.recompute_modules"


# ------------------------------------------------------------------- memory, term by term

def test_without_core_attention_selective_keeps_what_no_recomputation_does():
    for layer in (DENSE, MOE):
        for flash in (True, False):
            assert _bytes(DSV3, layer, (), flash=flash) == _bytes(
                DSV3, layer, (), recompute="none", flash=flash)
    # Core attention frees the s² tensors (softmax output, dropout mask and output:
    # (2e + 1)·a·s² bytes, Korthikanti et al. 2022 §5), or flash attention's fp32
    # log-sum-exp per head and token.
    assert _saved_by_core(LLAMA, flash=False) == pytest.approx(
        (2 * E + 1) * LLAMA.heads * S * S / TP)
    assert _saved_by_core(LLAMA, flash=True) == pytest.approx(4 * LLAMA.heads * S / TP)


def _saved_by_core(model, *, flash: bool) -> float:
    return _bytes(model, 0, (), flash=flash) - _bytes(model, 0, ("core_attn",), flash=flash)


def test_each_module_stops_keeping_its_tensors_by_closed_form():
    mla, h, heads = DSV3.mla, DSV3.hidden, DSV3.heads
    sbh_spread = S * h / TP  # sequence parallel: element-wise tensors split over tp
    # layernorm: MLA's input norm (both layers) and a MoE layer's pre-MLP norm outputs.
    assert _saved_by(DSV3, DENSE, "layernorm") == pytest.approx(Q * sbh_spread)
    assert _saved_by(DSV3, MOE, "layernorm") == pytest.approx(2 * Q * sbh_spread)
    # mla_up_proj: Q, K, V (split over tp) and the two normed latents (whole).
    up = S * heads * E * (2 * DSV3.qk_head_dim + DSV3.v_head_dim) / TP \
        + S * Q * (mla.q_lora_rank + mla.kv_lora_rank)
    assert _saved_by(DSV3, DENSE, "mla_up_proj") == pytest.approx(up)
    # moe_act: each routed copy's FC2 input, f wide, split over tp.
    assert _saved_by(DSV3, MOE, "moe_act") == pytest.approx(
        DSV3.top_k * S * DSV3.ffn_hidden * Q / TP)
    # shared_experts: the shared expert's activation (gated: 2f) and FC2 inputs.
    assert _saved_by(DSV3, MOE, "shared_experts") == pytest.approx(
        DSV3.shared_experts * S * DSV3.ffn_hidden * (2 * E + Q) / TP)
    # mlp: a dense layer's FC1 input (the norm's output) and its activation and FC2 inputs.
    f = DSV3.dense_ffn_hidden
    assert _saved_by(DSV3, DENSE, "mlp") == pytest.approx(
        Q * sbh_spread + S * f * (2 * E + Q) / TP)
    # moe: the whole MoE layer but its input — each routed copy's dispatched tokens (h),
    # SwiGLU input (2f) and FC2 input (f), the shared expert's as above (split over tp),
    # and the router's fp32 logits (element-wise: split over tp by sequence parallelism).
    f = DSV3.ffn_hidden
    assert _saved_by(DSV3, MOE, "moe") == pytest.approx(
        DSV3.top_k * S * (Q * h + 2 * E * f + Q * f) / TP
        + DSV3.shared_experts * S * f * (2 * E + Q) / TP + 4.0 * S * DSV3.experts / TP)
    # mlp: a dense layer's FC1 input (the norm's output) and its activation and FC2 inputs.
    f = DSV3.dense_ffn_hidden
    assert _saved_by(DSV3, DENSE, "mlp") == pytest.approx(
        Q * sbh_spread + S * f * (2 * E + Q) / TP)
    # Modules that have nothing in a layer leave it alone.
    for module in ("moe_act", "shared_experts", "moe"):
        assert _saved_by(DSV3, DENSE, module) == 0
    assert _saved_by(DSV3, MOE, "mlp") == 0


def test_the_whole_moe_layer_covers_its_parts():
    """``moe`` frees what ``moe_act`` and ``shared_experts`` do and more; with them it
    frees no more than alone."""
    alone = _saved_by(DSV3, MOE, "moe")
    assert alone > _saved_by(DSV3, MOE, "moe_act") + _saved_by(DSV3, MOE, "shared_experts")
    assert _bytes(DSV3, MOE, ("core_attn", "moe_act", "moe", "shared_experts")) == \
        _bytes(DSV3, MOE, ("core_attn", "moe"))


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from([m for m in RECOMPUTE_MODULES[1:] if m != "moe"])),
       st.sampled_from([DENSE, MOE]), st.sampled_from([1, 2, 4]))
def test_what_modules_stop_keeping_adds_up(extra, layer, tp):
    """The submodules' tensors are disjoint (``moe`` holds its parts): together they free
    the sum of each alone."""
    modules = tuple(m for m in RECOMPUTE_MODULES if m == "core_attn" or m in extra)
    together = _bytes(DSV3, layer, ("core_attn",), tp=tp) - _bytes(DSV3, layer, modules,
                                                                    tp=tp)
    alone = sum(_saved_by(DSV3, layer, m, tp=tp) for m in extra)
    assert together == pytest.approx(alone)
    assert _bytes(DSV3, layer, modules, tp=tp) > _bytes(DSV3, layer, (), recompute="full",
                                                         tp=tp)


def test_a_stage_holds_the_recomputed_tensors_of_one_layer_once_more():
    parallel = ParallelConfig(tp=1, pp=4, ep=8, dp=8, partition="embedding")
    per_layer = {}
    for modules in (("core_attn",), ("core_attn", "moe_act")):
        training = TrainingConfig(micro_batch=1, global_batch=64, recompute="selective",
                                  recompute_modules=modules, seq_len=S)
        per_layer[modules] = memory_per_gpu(DSV3, parallel, training, stage=1,
                                            num_microbatches=8, flash_attention=True)
    saved_per_layer = DSV3.top_k * S * DSV3.ffn_hidden * Q
    layers_on_stage1 = 16  # 61 layers over 4 stages: 16, 15, 15, 15
    freed = per_layer[("core_attn",)].activations_bytes - per_layer[
        ("core_attn", "moe_act")].activations_bytes
    in_flight = 4 - 1  # 1F1B, stage 1 of 4
    assert freed == pytest.approx(saved_per_layer * (layers_on_stage1 * in_flight - 1))


# ------------------------------------------------------------------ the recompute pass

def test_the_recompute_pass_runs_each_modules_operators():
    def names(layer: int, modules: tuple[str, ...]) -> set[str]:
        shard = LayerShard(1, S, tp=1, layer_index=layer, recompute="selective",
                           recompute_modules=modules)
        return set(layer_work("recompute", DSV3, shard).names())

    assert names(MOE, ("core_attn",)) == {"attention"}
    assert names(MOE, ("layernorm",)) == {"input_norm", "post_attn_norm"}
    assert names(DENSE, ("layernorm",)) == {"input_norm"}
    assert names(MOE, ("mla_up_proj",)) == {"q_norm", "q_up", "kv_norm", "kv_up",
                                            "attn_rope"}
    assert names(MOE, ("moe_act",)) == {"expert_act"}
    assert names(MOE, ("shared_experts",)) == {"shared_fc1", "shared_act", "shared_fc2"}
    assert names(MOE, ("moe",)) == {"router", "moe_dispatch", "expert_fc1", "expert_act",
                                    "expert_fc2", "moe_combine", "shared_fc1",
                                    "shared_act", "shared_fc2"}
    assert names(DENSE, ("mlp",)) == {"mlp_fc1", "mlp_act", "mlp_fc2"}
    assert names(DENSE, ()) == set()


def test_an_fp8_input_cast_is_recomputed_with_its_gemm():
    shard = LayerShard(1, S, tp=1, layer_index=DENSE, recompute="selective",
                       recompute_modules=("mlp",))
    work = layer_work("recompute", DSV3, shard, precision="fp8")
    fwd = layer_work("fwd", DSV3, shard, precision="fp8")
    expected = [k.name for k in fwd.kernels
                if k.name.removeprefix("cast_") in ("mlp_fc1", "mlp_act", "mlp_fc2")]
    # FC1's cast is fused into the norm before it under delayed scaling; FC2's is its own.
    assert list(work.names()) == expected == ["mlp_fc1", "mlp_act", "cast_mlp_fc2",
                                              "mlp_fc2"]


def test_the_recompute_pass_costs_the_sum_of_its_operators():
    costs = RooflineCosts(H100)
    shard = LayerShard(1, S, tp=1, layer_index=MOE, recompute="selective",
                       recompute_modules=("layernorm", "moe_act"))
    forward = costs.operator_times_s(layer_work("fwd", DSV3, shard))
    expected = sum(forward[n] for n in ("input_norm", "post_attn_norm", "expert_act"))
    assert costs.layer_time_s("recompute", DSV3, shard) == pytest.approx(expected)


def _recompute_ops(modules: tuple[str, ...], layer_model, tp: int) -> list:
    training = TrainingConfig(micro_batch=1, global_batch=1, recompute="selective",
                              recompute_modules=modules)
    builder = StreamBuilder(layer_model, ParallelConfig(tp=tp, sequence_parallel=True),
                            training, RooflineCosts(H100), microbatches=1)
    ops: list = []
    builder._layer_pass(ops, "recompute", 0, False)
    return ops


def test_recomputing_a_dense_mlp_runs_its_tensor_parallel_collectives_again():
    tiny = model_from_mapping({"name": "tiny", "layers": 2, "hidden": 1024, "heads": 16,
                               "seq_len": 1024, "vocab": 32000})
    core = _recompute_ops(("core_attn",), tiny, 4)
    mlp = _recompute_ops(("core_attn", "mlp"), tiny, 4)
    assert not [op for op in core if isinstance(op, Collective)]
    kinds = [op.op for op in mlp if isinstance(op, Collective)]
    assert kinds == ["all_gather", "reduce_scatter"]  # the MLP block's, as in its forward
    # Core attention's share of the pass is the attention block's; the MLP's the rest.
    blocks = {op.label.rsplit(" ", 1)[-1]: op.duration_s for op in mlp
              if isinstance(op, Compute)}
    assert blocks["attention"] > 0 and blocks["mlp"] > 0
    assert [op.duration_s for op in core if isinstance(op, Compute)][-1] == 0


TINY_MOE = {"name": "tiny-moe", "layers": 2, "hidden": 1024, "heads": 16, "seq_len": 1024,
            "vocab": 32000, "experts": 8, "top_k": 2, "gated_mlp": True, "ffn_hidden": 512,
            "shared_experts": 1}


def _moe_recompute_ops(modules: tuple[str, ...], *, tp: int, ep: int) -> list:
    training = TrainingConfig(micro_batch=1, global_batch=1, recompute="selective",
                              recompute_modules=modules)
    builder = StreamBuilder(model_from_mapping(TINY_MOE),
                            ParallelConfig(tp=tp, ep=ep, sequence_parallel=tp > 1), training,
                            RooflineCosts(H100), microbatches=1)
    ops: list = []
    builder._layer_pass(ops, "recompute", 0, False)
    return ops


def _collectives(ops: list) -> list[tuple[str, str, float]]:
    return [(op.op, op.label.split(" ", 2)[-1], op.size_bytes) for op in ops
            if isinstance(op, Collective)]


def test_recomputing_the_moe_layer_dispatches_and_combines_again():
    """``moe`` re-runs the layer from its input: the recompute pass dispatches and
    combines as the forward does, with the MLP block's TP collectives (the routed tokens'
    over the expert-tensor group and the shared expert's); ``moe_act`` alone runs none."""
    training = TrainingConfig(micro_batch=1, global_batch=1)
    builder = StreamBuilder(model_from_mapping(TINY_MOE),
                            ParallelConfig(tp=2, ep=4, sequence_parallel=True), training,
                            RooflineCosts(H100), microbatches=1)
    forward: list = []
    builder._layer_pass(forward, "fwd", 0, False)
    mlp_side = [c for c in _collectives(forward) if not c[1].startswith("attention")]
    rerun = _collectives(_moe_recompute_ops(("core_attn", "moe"), tp=2, ep=4))
    assert [(op, size) for op, _, size in rerun] == [(op, size) for op, _, size in mlp_side]
    assert [op for op, _, _ in rerun] == ["alltoall", "alltoall", "all_gather",
                                          "reduce_scatter"]
    assert not _collectives(_moe_recompute_ops(("core_attn", "moe_act"), tp=2, ep=4))
    # Without expert parallelism the layer's MLP collectives alone run again.
    assert [op for op, _, _ in _collectives(_moe_recompute_ops(("moe",), tp=2, ep=1))] == [
        "all_gather", "reduce_scatter"]
    # The recompute pass's router runs in the attention block, before the dispatch.
    ops = _moe_recompute_ops(("moe",), tp=1, ep=4)
    kinds = [type(op).__name__ for op in ops]
    assert kinds == ["Compute", "Collective", "Compute", "Collective"]
    assert ops[0].duration_s > 0


def test_recomputed_shared_experts_gather_again_over_the_tensor_group():
    """``shared_experts`` at tp > 1 re-runs the shared expert's gather and scatter — a
    dense MLP's, on the whole TP group — and no all-to-all; at tp 1 nothing."""
    rerun = _collectives(_moe_recompute_ops(("shared_experts",), tp=4, ep=2))
    dense = _collectives(_recompute_ops(("mlp",), model_from_mapping(
        {k: v for k, v in TINY_MOE.items() if k not in ("experts", "top_k",
                                                        "shared_experts")}), 4))
    assert [(op, size) for op, _, size in rerun] == [(op, size) for op, _, size in dense]
    assert all("shared experts" in what for _, what, _ in rerun)
    assert not _collectives(_moe_recompute_ops(("shared_experts",), tp=1, ep=2))


def test_pairs_refuse_a_recompute_that_communicates():
    parallel = ParallelConfig(tp=1, ep=4, dp=8, fb_overlap=True)
    for modules in (("moe",), ("core_attn", "moe")):
        training = TrainingConfig(micro_batch=1, global_batch=16, recompute="selective",
                                  recompute_modules=modules)
        with pytest.raises(ConfigError, match=r"recompute_modules .*moe") as err:
            check_strategy(model_from_mapping(TINY_MOE), parallel, training, num_gpus=8)
        assert err.value.key == "parallelism.fb_overlap"
    training = TrainingConfig(micro_batch=1, global_batch=16, recompute="selective",
                              recompute_modules=("shared_experts",))
    check_strategy(model_from_mapping(TINY_MOE), parallel, training, num_gpus=8)  # tp 1


def test_a_scenario_with_recompute_modules_runs_and_costs_between_selective_and_full(tiny):
    from distsim_gpu.scenarios.report import format_summary
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping

    model = model_from_mapping({"name": "tiny-moe", "layers": 4, "hidden": 256, "heads": 8,
                                "ffn_hidden": 512, "experts": 4, "top_k": 2,
                                "gated_mlp": True, "seq_len": 256, "vocab": 1024})
    seconds, summaries = {}, {}
    for name, training in {
            "selective": {"recompute": "selective"},
            "modules": {"recompute": "selective",
                        "recompute_modules": ["core_attn", "layernorm", "moe_act"]},
            "full": {"recompute": "full"}}.items():
        data = tiny(training={**training, "micro_batch": 2}, model=model.to_dict(),
                    parallelism={"ep": 2})
        report = run_scenario(scenario_from_mapping(data, source=f"{name}.yaml"))
        seconds[name] = report.iteration_time_s
        summaries[name] = format_summary(report)
    assert seconds["selective"] < seconds["modules"] < seconds["full"]
    assert "recompute selective (core_attn, layernorm, moe_act);" in summaries["modules"]
    assert "recompute selective; " in summaries["selective"]


def test_a_cost_tables_selective_rows_are_core_attentions_only():
    from distsim_gpu.workloads.cost.compute import CostRow, TableCosts, TableHeader

    header = TableHeader(software="unit", date="2026-12-05", source="unit test",
                         gpu="h100-sxm")
    rows = [CostRow("h100-sxm", "transformer_layer", p, 1, 4096, 4096, 1, seconds)
            for p, seconds in (("fwd", 0.01), ("bwd", 0.02), ("recompute_selective", 0.002))]
    costs = TableCosts(header, rows, source="costs.yaml")
    shard = LayerShard(1, 4096, recompute="selective")
    assert costs.layer_time_s("recompute", LLAMA, shard) == 0.002
    with pytest.raises(ConfigError, match="core attention's recomputation") as err:
        costs.layer_time_s("recompute", LLAMA, LayerShard(
            1, 4096, recompute="selective", recompute_modules=("core_attn", "layernorm")))
    assert err.value.key == "training.recompute_modules" and "roofline" in str(err.value)


# ------------------------------------------- SwiGLU inputs in FP8 (activation_func_fp8_input_store)

def test_an_fp8_swiglu_input_store_keeps_one_byte_an_element_in_every_mlp():
    def stored(layer: int, one_byte: bool, modules=("core_attn",)) -> float:
        shard = LayerShard(1, S, tp=TP, sequence_parallel=True, layer_index=layer,
                           recompute="selective", recompute_modules=modules)
        return activation_bytes_per_layer(DSV3, shard, flash_attention=True,
                                          activation_input_bytes=1.0 if one_byte else None)

    # A SwiGLU's input is 2f wide: one byte an element saved of two.
    dense = S * 2 * DSV3.dense_ffn_hidden * (E - 1) / TP
    assert stored(DENSE, False) - stored(DENSE, True) == pytest.approx(dense)
    routed = DSV3.top_k * S * 2 * DSV3.ffn_hidden * (E - 1) / TP
    shared = DSV3.shared_experts * S * 2 * DSV3.ffn_hidden * (E - 1) / TP
    assert stored(MOE, False) - stored(MOE, True) == pytest.approx(routed + shared)
    # With the SwiGLU's output recomputed its input is still kept, now in FP8.
    both = ("core_attn", "moe_act")
    assert stored(MOE, False, both) - stored(MOE, True, both) == pytest.approx(routed + shared)


def test_the_fp8_swiglu_store_reaches_a_stage_and_needs_a_gated_mlp():
    parallel = ParallelConfig(tp=1, pp=4, ep=8, dp=8, partition="embedding")
    training = TrainingConfig(micro_batch=1, global_batch=64, seq_len=S)
    plain = memory_per_gpu(DSV3, parallel, training, stage=1, num_microbatches=8)
    fp8 = memory_per_gpu(DSV3, parallel, TrainingConfig(
        micro_batch=1, global_batch=64, seq_len=S, activation_func_fp8_input_store=True),
        stage=1, num_microbatches=8)
    # Stage 1 holds layers 15-30, all MoE, 3 micro-batches in flight (1F1B, stage 1 of
    # 4); each saves a byte an element of its routed and shared SwiGLU inputs (tp 1).
    per_layer = S * 2 * DSV3.ffn_hidden * (E - 1) * (DSV3.top_k + DSV3.shared_experts)
    assert plain.activations_bytes - fp8.activations_bytes == pytest.approx(
        16 * 3 * per_layer)
    assert fp8.weights_bytes == plain.weights_bytes
    gelu = model_from_mapping({"name": "gelu", "layers": 2, "hidden": 1024, "heads": 16,
                               "seq_len": 1024, "vocab": 32000})
    with pytest.raises(ConfigError, match="not gated") as err:
        check_strategy(gelu, ParallelConfig(dp=8), training_from_mapping(
            {"global_batch": 8, "activation_func_fp8_input_store": True}), num_gpus=8)
    assert err.value.key == "training.activation_func_fp8_input_store"
    assert "activation_func_fp8_input_store" not in TrainingConfig().to_dict()


@pytest.mark.parametrize("modules", [[], ["core_attn", "moe_act"], ["layernorm", "mlp"], ["moe"]])
def test_the_lower_bound_counts_the_modules_recompute(tiny, modules):
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
    from distsim_gpu.scenarios.study.search import iteration_bounds

    model = model_from_mapping({"name": "tiny-moe", "layers": 4, "hidden": 256, "heads": 8,
                                "ffn_hidden": 512, "experts": 4, "top_k": 2, "moe_every": 2,
                                "gated_mlp": True, "seq_len": 256, "vocab": 1024})
    data = tiny(model=model.to_dict(), parallelism={"ep": 2, "sequence_parallel": True},
                training={"recompute": "selective", "recompute_modules": modules})
    scenario = scenario_from_mapping(data)
    assert 0 < iteration_bounds(scenario).lower_bound_s <= run_scenario(
        scenario).iteration_time_s


def test_the_bounds_count_a_recomputed_moe_layers_calls(tiny):
    """``moe``'s recompute runs the all-to-alls and the MLP block's TP calls again: the
    estimate follows what that adds to the simulated step (without counting them it
    caught a third of it), and the lower bound stays below it."""
    from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
    from distsim_gpu.scenarios.study.search import iteration_bounds

    def run(modules: list[str]):
        scenario = scenario_from_mapping(tiny(
            model=dict(TINY_MOE, layers=4), parallelism={"ep": 2, "sequence_parallel": True},
            training={"recompute": "selective", "recompute_modules": modules}))
        return iteration_bounds(scenario), run_scenario(scenario).iteration_time_s

    (act, act_s), (moe, moe_s) = run(["moe_act"]), run(["moe"])
    assert moe.estimate_s - act.estimate_s >= 0.6 * (moe_s - act_s) > 0
    assert act.lower_bound_s <= act_s and moe.lower_bound_s <= moe_s
    assert moe.lower_bound_s - act.lower_bound_s > 0.5 * (moe_s - act_s)


def test_a_recomputed_moe_layer_under_halves_exchanges_by_halves():
    """With ``moe_overlap`` every exchange of the run is a half micro-batch's: the
    recompute of a ``moe`` layer dispatches and combines as two halves each, one after
    the other, the same bytes in all."""
    training = TrainingConfig(micro_batch=1, global_batch=1, recompute="selective",
                              recompute_modules=("moe",))
    builder = StreamBuilder(model_from_mapping(TINY_MOE),
                            ParallelConfig(tp=1, ep=4, moe_overlap=True), training,
                            RooflineCosts(H100), microbatches=1)
    ops: list = []
    builder._layer_pass(ops, "recompute", 0, False)
    calls = _collectives(ops)
    whole = _collectives(_moe_recompute_ops(("moe",), tp=1, ep=4))
    assert [what for _, what, _ in calls] == ["dispatch A", "dispatch B", "combine A",
                                              "combine B"]
    assert [size for _, _, size in calls] == [whole[0][2] / 2] * 2 + [whole[1][2] / 2] * 2


@pytest.mark.parametrize(("pass_", "mode", "modules", "moe_layer", "expected"), [
    # Forward, backward and a full recompute run every call of the layer.
    ("fwd", "selective", ("moe",), True, PassCommunication(full=True)),
    ("bwd", "op", (), False, PassCommunication(full=True)),
    ("recompute", "full", (), True, PassCommunication(full=True)),
    # torchtitan's op policy keeps reduce-scatters and all-to-alls, re-gathers, no ring.
    ("recompute", "op", (), True, PassCommunication(full=False, op_sac=True, ring=False)),
    # Megatron-Core's modules: each re-runs its own calls, and only in layers that have it.
    ("recompute", "selective", ("layernorm",), True, PassCommunication(full=False,
                                                                       ring=False)),
    ("recompute", "selective", ("core_attn",), True, PassCommunication(full=False)),
    ("recompute", "selective", ("mlp",), False, PassCommunication(full=False, ring=False,
                                                                  mlp=True)),
    ("recompute", "selective", ("mlp",), True, PassCommunication(full=False, ring=False)),
    ("recompute", "selective", ("moe", "shared_experts"), True,
     PassCommunication(full=False, ring=False, moe=True)),
    ("recompute", "selective", ("shared_experts",), True,
     PassCommunication(full=False, ring=False, shared_experts=True)),
    ("recompute", "selective", ("moe", "shared_experts"), False,
     PassCommunication(full=False, ring=False)),
])
def test_what_a_pass_runs_of_its_layers_communication(pass_, mode, modules, moe_layer,
                                                      expected):
    comm = pass_communication(pass_, mode, modules, moe_layer)
    assert comm == expected
    assert comm.saved == (SAVED_COLLECTIVES if comm.op_sac else frozenset())
