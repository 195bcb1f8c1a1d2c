"""Memory per GPU against the closed forms of the ZeRO and Korthikanti et al. papers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import (
    SavedFormats,
    activation_bytes_per_layer,
    memory_of_strategy,
    memory_per_gpu,
)
from distsim_gpu.workloads.cost.parameters import params_on_gpu, stage_layers
from distsim_gpu.workloads.specs.models import ModelSpec, get_model
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
    training_from_mapping,
)
from distsim_gpu.workloads.strategy.schedule import microbatches_in_flight

GPT3 = get_model("gpt3-175b")
S, B, H, A, L, V = 2048, 1, 12288, 96, 96, 50257
SBH = S * B * H


# ------------------------------------------------- Korthikanti et al. 2022, Table 2
def test_no_parallelism_34sbh_plus_5as2b():
    assert activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S,
                                                       recompute="none")) == (
        SBH * 34 + 5 * A * S * S * B)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel(t):
    got = activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S, tp=t,
                                                      recompute="none"))
    assert got == pytest.approx(SBH * (10 + 24 / t + 5 * A * S / (H * t)), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_and_sequence_parallel(t):
    got = activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S, tp=t,
                                                      sequence_parallel=True, recompute="none"))
    assert got == pytest.approx(SBH * (34 / t + 5 * A * S / (H * t)), rel=1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_selective_recompute(t):
    sp = activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S, tp=t,
                                                     sequence_parallel=True, recompute="selective"))
    plain = activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S, tp=t,
                                                        recompute="selective"))
    assert sp == pytest.approx(SBH * 34 / t, rel=1e-12)
    assert plain == pytest.approx(SBH * (10 + 24 / t), rel=1e-12)


def test_full_recompute_keeps_the_input():
    assert activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S, tp=8,
                                                       recompute="full")) == 2 * SBH
    assert activation_bytes_per_layer(GPT3, LayerShard(
        micro_batch=B, seq_len=S, tp=8, sequence_parallel=True, recompute="full")) == 2 * SBH / 8


def test_gpt3_layer_number():
    # 34·s·b·h + 5·a·s²·b at s 2048, b 1, h 12288, a 96: 2.87 GB per layer per micro-batch.
    got = activation_bytes_per_layer(GPT3, LayerShard(micro_batch=1, seq_len=GPT3.seq_len,
                                                      recompute="none"))
    assert got == 34 * 2048 * 12288 + 5 * 96 * 2048**2
    assert got == pytest.approx(2.869e9, rel=1e-3)


def test_flash_attention_drops_the_quadratic_term():
    got = activation_bytes_per_layer(GPT3, LayerShard(micro_batch=B, seq_len=S, recompute="none"),
                                     flash_attention=True)
    assert got == SBH * 34 + 4 * A * S * B


def test_gqa_and_gated_mlp_generalisation():
    m = get_model("llama2-70b")  # h 8192, kv 1024, ffn 28672, gated, a 64
    s, h, f, kv = 4096, 8192, 28672, 1024
    got = activation_bytes_per_layer(m, LayerShard(micro_batch=1, seq_len=s, recompute="selective"))
    # 10 sbh + Q and out (4 sbh) + K, V (2·2·s·kv) + SwiGLU input (2·2·s·f) + FC2 (2·s·f)
    assert got == 10 * s * h + 4 * s * h + 4 * s * kv + 6 * s * f


def test_moe_layer_stores_top_k_copies():
    m = get_model("mixtral-8x7b")
    s, h, f = 4096, 4096, 14336
    dense = ModelSpec("d", layers=32, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                      seq_len=4096, vocab=32000, gated_mlp=True)
    moe = activation_bytes_per_layer(m, LayerShard(micro_batch=1, seq_len=s, recompute="selective"))
    plain = activation_bytes_per_layer(dense, LayerShard(micro_batch=1, seq_len=s,
                                                         recompute="selective"))
    mlp = 6 * s * f
    assert moe - plain == pytest.approx((2 - 1) * mlp + 2 * 2 * s * h + 4 * s * 8)


# ------------------------------------------------------------------ in-flight counts
def test_microbatches_in_flight():
    assert microbatches_in_flight("gpipe", pp=4, stage=2, num_microbatches=16) == 16
    assert [microbatches_in_flight("1f1b", pp=4, stage=r, num_microbatches=16)
            for r in range(4)] == [4, 3, 2, 1]
    assert microbatches_in_flight("1f1b", pp=8, stage=0, num_microbatches=3) == 3


@pytest.mark.parametrize(("p", "v"), [(2, 2), (4, 2), (8, 4), (16, 3)])
def test_interleaved_first_stage_factor(p, v):
    # Korthikanti et al. 2022 §4.2.3: first stage holds p micro-batches' worth of its
    # layers, times (1 + (p − 1)/(p·v)).
    got = microbatches_in_flight("interleaved", pp=p, stage=0, num_microbatches=64,
                                 interleave=v)
    assert got == pytest.approx(p * (1 + (p - 1) / (p * v)))


def test_interleaved_last_stage():
    # Last stage: (v − 1)·p + 1 chunks warm-up + steady state.
    assert microbatches_in_flight("interleaved", pp=4, stage=3, num_microbatches=64,
                                  interleave=2) == pytest.approx(5 / 2)


# ------------------------------------------------------------------ pipeline totals
def test_first_stage_1f1b_holds_all_layers_worth():
    # Korthikanti et al. §4.2.3: with 1F1B the first stage stores L/p layers × p micro-
    # batches = L layers' activations, plus the embedding dropout mask per micro-batch.
    p, t = 8, 8
    mem = memory_per_gpu(GPT3, ParallelConfig(tp=t, pp=p, sequence_parallel=True),
                         TrainingConfig(recompute="selective"), num_microbatches=32, stage=0)
    per_layer = SBH * 34 / t
    assert mem.activations_bytes == pytest.approx(L * per_layer + p * SBH / t, rel=1e-12)


def test_middle_stage_has_no_extras():
    p, t = 8, 8
    mem = memory_per_gpu(GPT3, ParallelConfig(tp=t, pp=p, sequence_parallel=True),
                         num_microbatches=32, stage=3)
    per_layer = SBH * (34 / t + 5 * A * S / (H * t))
    assert mem.activations_bytes == pytest.approx(per_layer * L / p * (p - 3), rel=1e-12)


def test_last_stage_extras():
    # Korthikanti et al. §4.3: last stage adds 4·s·b·h/t·(1 + V/h) with sequence parallel.
    p, t = 8, 8
    mem = memory_per_gpu(GPT3, ParallelConfig(tp=t, pp=p, sequence_parallel=True),
                         TrainingConfig(recompute="selective"), num_microbatches=32, stage=p - 1)
    per_layer = SBH * 34 / t
    extra = 4 * SBH / t * (1 + V / H)
    assert mem.activations_bytes == pytest.approx(per_layer * L / p + extra, rel=1e-12)


def test_gpipe_holds_every_microbatch():
    m = 16
    mem = memory_per_gpu(GPT3, ParallelConfig(tp=8, pp=8, sequence_parallel=True,
                                              schedule="gpipe"),
                         TrainingConfig(recompute="selective"), num_microbatches=m, stage=3)
    assert mem.activations_bytes == pytest.approx(SBH * 34 / 8 * L / 8 * m, rel=1e-12)


def test_full_recompute_stage_adds_one_layer_working_set():
    t, p = 8, 8
    mem = memory_per_gpu(GPT3, ParallelConfig(tp=t, pp=p, sequence_parallel=True),
                         TrainingConfig(recompute="full"), num_microbatches=32, stage=2)
    inputs = 2 * SBH / t * (L / p) * (p - 2)
    working = SBH * (34 / t + 5 * A * S / (H * t))
    assert mem.activations_bytes == pytest.approx(inputs + working, rel=1e-12)


def test_full_recompute_on_an_embedding_only_first_stage_adds_no_working_set():
    """NeMo's split puts only the embedding on a 2-layer model's first of 4 stages (2 + 2
    over 4 chunks); full recompute there keeps nothing of a layer, and must not fail."""
    model = replace(GPT3, layers=2)
    parallel = ParallelConfig(tp=8, pp=4, sequence_parallel=True, partition="embedding")
    assert list(stage_layers(model, pp=4, stage=0, partition="embedding")) == []
    mem = memory_per_gpu(model, parallel, TrainingConfig(recompute="full"),
                         num_microbatches=8, stage=0)
    assert mem.activations_bytes > 0


# ------------------------------------------------------------ weights and ZeRO
BF16_GRADS = ParallelConfig(grad_reduce_precision="bf16")


def test_model_state_16_bytes_per_param_without_zero():
    mem = memory_per_gpu(GPT3, BF16_GRADS)
    n = GPT3.total_params()
    assert (mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes) == (
        2 * n, 2 * n, 12 * n)
    assert mem.total_bytes == pytest.approx(16 * n + mem.activations_bytes)


@pytest.mark.parametrize(("stage", "fsdp", "factors"), [
    (0, False, (1, 1, 1)),
    (1, False, (1, 1, 1 / 64)),
    (2, False, (1, 1 / 64, 1 / 64)),
    (3, False, (1 / 64, 1 / 64, 1 / 64)),
    (0, True, (1 / 64, 1 / 64, 1 / 64)),
])
def test_zero_sharding(stage, fsdp, factors):
    # Rajbhandari et al. 2020, Figure 1: Ψ(2 + 2 + K) with K = 12 → P_os, P_os+g, P_os+g+p,
    # its gradients 16-bit (reduced in bf16, as DeepSpeed's and FSDP's can be).
    dp = 64
    mem = memory_per_gpu(GPT3, ParallelConfig(dp=dp, zero=stage, fsdp=fsdp,
                                              grad_reduce_precision="bf16"))
    n = GPT3.total_params()
    assert mem.weights_bytes == pytest.approx(2 * n * factors[0])
    assert mem.gradients_bytes == pytest.approx(2 * n * factors[1])
    assert mem.optimizer_bytes == pytest.approx(12 * n * factors[2])


@pytest.mark.parametrize(("zero", "per_param"), [
    (0, lambda d: 2 + 4 + 12),
    (1, lambda d: 6 + 12 / d),  # Megatron-Core's distributed optimizer, its own formula
    (2, lambda d: 2 + (4 + 12) / d),
    (3, lambda d: (2 + 4 + 12) / d),
])
@pytest.mark.parametrize("dp", [8, 64])
def test_fp32_main_gradients_take_four_bytes_a_parameter(zero, per_param, dp):
    """Megatron-Core keeps fp32 main gradients under bf16
    (``accumulate_allreduce_grads_in_fp32``, its default; its docs count ``6 + 12/d``
    bytes a parameter with the distributed optimizer over ``d`` ranks), sharded as ZeRO
    shards gradients.  Until 7 December they counted 2 bytes whatever the precision."""
    parallel = ParallelConfig(dp=dp, zero=zero, grad_reduce_precision="fp32")
    mem = memory_per_gpu(GPT3, parallel, TrainingConfig(precision="bf16"))
    n = GPT3.total_params()
    state = mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes
    assert state == pytest.approx(per_param(dp) * n, rel=1e-12)


@pytest.mark.parametrize(("precision", "reduce", "grad_b"), [
    ("bf16", "bf16", 2), ("fp16", "fp16", 2), ("bf16", "fp32", 4), ("fp8", "fp32", 4),
    ("fp32", "fp32", 4), ("fp32", "bf16", 4),  # never narrower than the training's own
])
def test_gradient_buffer_follows_its_reduce_dtype(precision, reduce, grad_b):
    parallel = ParallelConfig(grad_reduce_precision=reduce)
    mem = memory_per_gpu(GPT3, parallel, TrainingConfig(precision=precision))
    assert mem.gradients_bytes == grad_b * GPT3.total_params()


def test_fp32_training_bytes():
    mem = memory_per_gpu(GPT3, ParallelConfig(), TrainingConfig(precision="fp32"))
    n = GPT3.total_params()
    assert (mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes) == (
        4 * n, 4 * n, 8 * n)


def test_pipeline_stages_partition_the_model():
    m = get_model("llama3-70b")  # untied: no duplicated embedding
    total = sum(params_on_gpu(m, pp=8, stage=r).total for r in range(8))
    assert total == m.total_params()
    gpt = GPT3  # tied: the last stage holds a copy of the word embedding
    total = sum(params_on_gpu(gpt, pp=8, stage=r).total for r in range(8))
    assert total == gpt.total_params() + gpt.vocab * gpt.hidden


def test_tensor_parallel_shards_all_but_replicated_parts():
    t = 8
    shard = params_on_gpu(GPT3, tp=t).total
    n = GPT3.total_params()
    # Replicated per layer: 2 LayerNorms (4h) and the two row-parallel biases (2h);
    # plus positions (s·h) and the final LayerNorm (2h).
    replicated = L * 6 * H + S * H + 2 * H
    assert shard == pytest.approx((n - replicated) / t + replicated)


def test_expert_parallel_shards_experts_and_zero_uses_expert_dp():
    m = get_model("mixtral-8x7b")
    full = params_on_gpu(m)
    ep8 = params_on_gpu(m, ep=8)
    assert ep8.dense == full.dense
    assert ep8.expert == pytest.approx(full.expert / 8)
    mem = memory_per_gpu(m, ParallelConfig(dp=16, ep=8, zero=1))
    assert mem.optimizer_bytes == pytest.approx(12 * (ep8.dense / 16 + ep8.expert / 2))


def test_interleaved_stage_layers():
    m = ModelSpec("m", layers=16, hidden=64, heads=4, seq_len=8, vocab=10)
    assert stage_layers(m, pp=4, stage=1) == (4, 5, 6, 7)
    assert stage_layers(m, pp=4, stage=1, interleave=2) == (2, 3, 10, 11)


# ------------------------------------------------------------------- bad inputs
# memory_per_gpu takes a validated strategy: the bad ones are refused where a strategy is
# built and checked against the model (parallel_from_mapping, training_from_mapping,
# check_strategy), with these messages.
def _check(model: ModelSpec, parallel: dict, training: dict) -> None:
    par = parallel_from_mapping(parallel)
    train = training_from_mapping({"global_batch": 64, **training})
    check_strategy(model, par, train, num_gpus=par.tp * par.pp * par.dp * par.cp)


@pytest.mark.parametrize(("parallel", "training", "needle"), [
    ({"pp": 5}, {}, "pp: 96 layers do not split into pp·interleave = 5 equal chunks"),
    ({"tp": 5}, {}, "tp: 96 attention heads do not split over tp = 5"),
    ({"zero": 4}, {}, "zero: must be 0, 1, 2 or 3, got 4"),
    ({"fsdp": True, "zero": 1}, {}, "fsdp shards like ZeRO-3; zero 1 contradicts it "
                                    "(use zero 0 or 3 with fsdp)"),
    ({"schedule": "interleaved"}, {}, "needs interleave >= 2"),
    ({"interleave": 2}, {}, "interleave: interleave 2 needs schedule: interleaved"),
    ({"schedule": "1f1b1"}, {}, "did you mean '1f1b'"),
    ({}, {"recompute": "partial"}, "unknown recompute mode 'partial'"),
    ({"ep": 2, "dp": 2}, {}, "ep: ep = 2 needs a MoE model, one with experts > 1 (set ep to 1"),
    ({}, {"precision": "int8"}, "unknown precision 'int8'"),
    ({}, {"micro_batch": 0}, "micro_batch: must be a whole number >= 1, got 0"),
])
def test_bad_inputs(parallel, training, needle):
    with pytest.raises(ConfigError) as info:
        _check(GPT3, parallel, training)
    assert needle in str(info.value)


def test_stage_outside_the_pipeline():
    with pytest.raises(ConfigError, match=r"stage 2 is outside 0\.\.1"):
        memory_per_gpu(GPT3, ParallelConfig(pp=2), stage=2)


def test_ep_must_divide_a_stage():
    with pytest.raises(ConfigError, match=r"expert_tp·ep = 1·8 = 8 does not divide the 4 GPUs"):
        _check(get_model("mixtral-8x7b"), {"ep": 8, "dp": 4}, {})


def test_memory_of_a_strategy_passes_every_field_through():
    model = get_model("gpt3-175b")
    parallel = ParallelConfig(tp=4, pp=8, dp=2, sequence_parallel=True, zero=1,
                              schedule="interleaved", interleave=2)
    training = TrainingConfig(micro_batch=2, global_batch=64, recompute="selective",
                              precision="fp16")
    for stage in (0, 7):
        assert memory_of_strategy(model, parallel, training, seq_len=1024, microbatches=16,
                                  stage=stage, flash_attention=False) == memory_per_gpu(
            model, parallel, replace(training, seq_len=1024), num_microbatches=16, stage=stage,
            flash_attention=False)


# ------------------------------------------- low-precision linear inputs (TE keeps FP8)
@pytest.mark.parametrize("q", [1.0, 1.0 + 4 / 128, 0.5 + 1 / 16])
@pytest.mark.parametrize("t", [1, 4])
def test_linear_inputs_kept_quantized_save_their_bytes(q, t):
    """GPT-3's linear inputs per layer — QKV's and FC1's (2·sbh, /t with s.p.), the
    attention output (sbh/t) and FC2's (4·sbh/t) — kept at ``q`` bytes instead of 2: the
    layer shrinks by (2 − q) times those elements, exactly."""
    shard = LayerShard(micro_batch=B, seq_len=S, tp=t, sequence_parallel=True,
                       recompute="selective")
    plain = activation_bytes_per_layer(GPT3, shard, precision="fp8")
    kept = activation_bytes_per_layer(GPT3, shard, precision="fp8", linear_input_bytes=q)
    elements = 2 * SBH / t + SBH / t + 4 * SBH / t
    assert plain - kept == pytest.approx((2 - q) * elements)
    assert plain == activation_bytes_per_layer(GPT3, shard, precision="fp8",
                                               linear_input_bytes=2.0)


def test_moe_and_mla_linear_inputs_kept_quantized():
    """DeepSeek-V3's MoE layer at ep 8: the routed copies' FC2 and FC1 (dispatched token)
    inputs, top_k·(f + h) per token; the shared expert's FC2 input f_shared; QKV/FC1
    input 2h; the attention output (the output projection's input) a·d_v; MLA's normed
    latents r_q + r_kv — each 1 byte instead of 2."""
    model = get_model("deepseek-v3")
    shard = LayerShard(micro_batch=1, seq_len=4096, ep=8, layer_index=10,
                       recompute="none")
    plain = activation_bytes_per_layer(model, shard, precision="fp8", flash_attention=True)
    kept = activation_bytes_per_layer(model, shard, precision="fp8", flash_attention=True,
                                      linear_input_bytes=1.0)
    mla = model.mla
    per_token = (model.top_k * (model.ffn_hidden + model.hidden)
                 + model.shared_experts * model.ffn_hidden + 2 * model.hidden
                 + model.heads * model.v_head_dim + mla.q_lora_rank + mla.kv_lora_rank)
    assert plain - kept == pytest.approx(4096 * per_token)


def test_transformer_engine_stacks_keep_quantized_inputs_and_torchao_does_not():
    from distsim_gpu.workloads.cost.compute import RooflineCosts, saved_linear_input_bytes
    from distsim_gpu.workloads.cost.compute.stacks import get_stack
    from distsim_gpu.workloads.specs.gpus import get_gpu

    h100 = get_gpu("h100-sxm")

    def saved(stack: str, precision: str, recipe: str | None = None) -> float | None:
        chosen = get_stack(stack).with_fp8_recipe(recipe)
        return saved_linear_input_bytes(RooflineCosts(h100, precision=precision,
                                                      stack=chosen))

    assert saved("megatron-core", "fp8") == 1.0  # delayed scaling: per-tensor scales
    assert saved("megatron-core", "fp8", "blockwise") == pytest.approx(1 + 4 / 128)
    assert saved("nemo", "fp8") == 1.0
    assert saved("megatron-core", "bf16") is None
    assert saved("torch-compile", "fp8") is None  # torchao keeps the 16-bit input


def test_deepseeks_caches_keep_the_attention_output_in_e5m6_and_swiglu_inputs_in_fp8():
    """The deepseek stack's formats (activation_storage): linear inputs and SwiGLU inputs
    one FP8 copy with its 1×128 scales, the attention output E5M6 with its scales.  On
    DeepSeek-V3's MoE layer the attention output costs a·d_v·(1.5 − 1) bytes a token more
    than a linear input's FP8 copy, the SwiGLU inputs 2·f·(1 + 4/128 − 1) more than
    Megatron's scale-less FP8 store — per routed copy and for the shared expert."""
    from distsim_gpu.workloads.cost.compute import RooflineCosts, activation_storage
    from distsim_gpu.workloads.cost.compute.stacks import get_stack
    from distsim_gpu.workloads.specs.gpus import get_gpu

    row = 1 + 4 / 128
    costs = RooflineCosts(get_gpu("h100-sxm"), precision="fp8", stack=get_stack("deepseek"))
    formats = activation_storage(costs)["formats"]
    assert formats == SavedFormats(row, row, 1.5 + 4 / 128)
    assert activation_storage(RooflineCosts(get_gpu("h100-sxm"), precision="bf16",
                                            stack=get_stack("deepseek")))["formats"] == \
        SavedFormats()
    model = get_model("deepseek-v3")
    shard = LayerShard(micro_batch=1, seq_len=4096, ep=8, layer_index=10, recompute="none")
    te = activation_bytes_per_layer(model, shard, precision="fp8", flash_attention=True,
                                    linear_input_bytes=row, activation_input_bytes=1.0)
    deepseek = activation_bytes_per_layer(
        model, shard, precision="fp8", flash_attention=True, linear_input_bytes=row,
        activation_input_bytes=row, attention_output_bytes=1.5 + 4 / 128)
    swiglu = 2 * model.ffn_hidden * (model.top_k + model.shared_experts)
    assert deepseek - te == pytest.approx(4096 * (model.heads * model.v_head_dim * 0.5
                                                  + swiglu * 4 / 128))
    # Only a SwiGLU's input is cached: GPT-3's GeLU input stays 16-bit.
    gelu = LayerShard(micro_batch=B, seq_len=S, tp=1, recompute="none")
    assert activation_bytes_per_layer(GPT3, gelu, precision="fp8", activation_input_bytes=row) \
        == activation_bytes_per_layer(GPT3, gelu, precision="fp8")


# --------------------------------------------------------- bf16 optimizer moments
@pytest.mark.parametrize(("precision", "fp32_state", "bf16_state"),
                         [("bf16", 12, 8), ("fp8", 12, 8), ("fp32", 8, 4)])
def test_bf16_moments_hold_four_bytes_less_a_parameter(precision, fp32_state, bf16_state):
    """Adam's two moments at 2 bytes instead of 4 (DeepSeek-V3 §3.3): the optimizer state
    per parameter is K − 4, ZeRO-sharded as before; weights and gradients do not move."""
    parallel = ParallelConfig(tp=8, pp=8, dp=4, zero=1)
    plain = memory_per_gpu(GPT3, parallel, TrainingConfig(precision=precision), stage=3)
    moments = memory_per_gpu(GPT3, parallel, TrainingConfig(
        precision=precision, optimizer_moments="bf16"), stage=3)
    assert moments.optimizer_bytes == pytest.approx(plain.optimizer_bytes * bf16_state
                                                    / fp32_state)
    assert (moments.weights_bytes, moments.gradients_bytes) == (plain.weights_bytes,
                                                                plain.gradients_bytes)


def test_bf16_moments_step_moves_eight_bytes_less_a_parameter():
    from distsim_gpu.workloads.cost.compute import RooflineCosts
    from distsim_gpu.workloads.specs.gpus import get_gpu

    gpu = get_gpu("h100-sxm")
    plain = RooflineCosts(gpu).optimizer_bytes()
    assert RooflineCosts(gpu, optimizer_moments="bf16").optimizer_bytes() == plain - 8


@pytest.mark.parametrize(("training", "parallel", "message"), [
    ({"optimizer_moments": "fp16"}, {},
     r"training\.optimizer_moments: unknown .*valid: bf16, fp32"),
    ({"optimizer_moments": "bf16"}, {"zero": 1, "offload": {"optimizer": "cpu"}},
     r"training\.optimizer_moments: bf16 optimizer moments with the optimizer offloaded"),
])
def test_optimizer_moments_errors_name_the_key(training, parallel, message):
    with pytest.raises(ConfigError, match=message):
        check_strategy(GPT3, parallel_from_mapping({"dp": 2, **parallel}),
                       training_from_mapping({"global_batch": 2, **training}), num_gpus=2)


def test_a_run_with_bf16_moments_holds_less_and_steps_faster(write_scenario, tmp_path):
    """Through the scenario: the optimizer state per GPU is 8/12 of fp32 moments', and the
    iteration (with its optimizer step) is no slower."""
    from distsim_gpu.scenarios.scenario import load_scenario, run_scenario

    base = {"name": "m", "cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {"name": "m", "layers": 4, "hidden": 2048, "heads": 16,
                      "seq_len": 1024, "vocab": 32000},
            "parallelism": {"tp": 2, "dp": 4, "zero": 1},
            "compute": {"gpu": "h100-sxm", "costs": "roofline"}}
    reports = {}
    for moments in ("fp32", "bf16"):
        training = {"micro_batch": 1, "global_batch": 8, "optimizer_moments": moments}
        path = write_scenario(tmp_path / f"{moments}.yaml", {**base, "training": training})
        reports[moments] = run_scenario(load_scenario(path))
    fp32, bf16 = (reports[m].per_gpu[0].memory for m in ("fp32", "bf16"))
    assert bf16.optimizer_bytes == pytest.approx(fp32.optimizer_bytes * 8 / 12)
    assert reports["bf16"].iteration_time_s <= reports["fp32"].iteration_time_s


def test_a_profiled_table_keeps_activations_as_its_fallback_roofline():
    """activation_storage reads the roofline behind a cost table (its fallback): an FP8
    table on megatron-core keeps its linear inputs at a byte; no roofline, 16 bits."""
    from types import SimpleNamespace

    from distsim_gpu.workloads.cost.compute import (
        RooflineCosts,
        activation_storage,
        roofline_behind,
    )
    from distsim_gpu.workloads.specs.gpus import get_gpu

    roofline = RooflineCosts(get_gpu("h100-sxm"), precision="fp8")
    table = SimpleNamespace(fallback=roofline)
    assert roofline_behind(table) is roofline
    assert roofline_behind(object()) is None
    assert activation_storage(table) == {"flash_attention": True,
                                         "formats": SavedFormats(linear_input_bytes=1.0)}
    assert activation_storage(object()) == {"flash_attention": True,
                                            "formats": SavedFormats()}
