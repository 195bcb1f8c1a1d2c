"""FP8 recipes (training.fp8_recipe): the bytes of each recipe's cast, amax and transpose
kernels on a small layer against hand counts, the block-scaled weight-gradient rate, the
per-step weight re-cast, the stacks' defaults, the recipe's validation, and the casts
around a MoE dispatch that sends FP8 (DeepEP's)."""

from __future__ import annotations

import re

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import (
    FP8_RECIPE_SPECS,
    STACKS,
    RooflineCosts,
    forward_layer_work,
    get_stack,
    layer_work,
)
from distsim_gpu.workloads.cost.compute.blocks import block_operators
from distsim_gpu.workloads.cost.compute.fp8_recipes import (
    BLOCKWISE_GEMM_EFFICIENCY,
    BLOCKWISE_SCALE_BYTES_PER_ELEMENT,
)
from distsim_gpu.workloads.cost.compute.roofline import matmul_efficiency
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import TrainingConfig
from distsim_gpu.workloads.strategy.precision import check_fp8_recipe
from hypothesis import given, settings
from hypothesis import strategies as st

H100 = get_gpu("h100-sxm")
# A small GPT layer: h 1024, 16 heads, FFN 4096 (GeLU), TP 2, b 2, s 512; bf16 activations.
MODEL = ModelSpec("gpt-small", layers=4, hidden=1024, heads=16, seq_len=512, vocab=50304)
B, S, TP, H, F = 2, 512, 2, 1024, 4096
T = B * S
A = 2  # activation bytes


def fp8_work(recipe: str, stack: str = "megatron-core", b: int = B, tp: int = TP):
    return forward_layer_work(MODEL, LayerShard(micro_batch=b, seq_len=S, tp=tp),
                              precision="fp8", stack=get_stack(stack).with_fp8_recipe(recipe))


def test_delayed_fuses_the_norm_casts_and_casts_the_rest_in_cast_transpose_kernels():
    w = fp8_work("delayed")
    names = set(w.names())
    # Megatron-Core's TE spec: LayerNormLinear for qkv and fc1 (the norm writes FP8, 1 B).
    assert not {"cast_qkv", "cast_mlp_fc1"} & names
    assert w.kernel("input_norm").bytes_moved == T * H * (A + 1)
    # attn_out's and fc2's inputs: one cast_transpose each, read 2 B, write FP8 + transpose.
    assert w.kernel("cast_attn_out").bytes_moved == T * H // TP * (A + 2)
    assert w.kernel("cast_mlp_fc2").bytes_moved == T * F // TP * (A + 2)
    assert w.kernel("cast_attn_out").launches == 1
    assert "fp8_scale_update" in names
    bwd = w.backward()
    # The output gradients (E5M2 + transpose), and the transposes of the fused FP8 inputs.
    assert bwd.kernel("qkv.grad_cast").bytes_moved == T * 3 * H // TP * (A + 2)
    assert bwd.kernel("mlp_fc2.grad_cast").bytes_moved == T * H * (A + 2)
    assert bwd.kernel("qkv.input_transpose").bytes_moved == 2 * T * H
    assert bwd.kernel("mlp_fc1.input_transpose").bytes_moved == 2 * T * H
    assert "attn_out.input_transpose" not in bwd.names()


def test_transformer_engine_layernorm_mlp_also_fuses_the_activation_cast():
    w = fp8_work("delayed", stack="transformer-engine")
    assert "cast_mlp_fc2" not in w.names()
    # GeLU reads and writes T·F/t: 2 B in, 1 B (FP8) out.
    assert w.kernel("mlp_act").bytes_moved == T * F // TP * (A + 1)
    assert w.backward().kernel("mlp_fc2.input_transpose").bytes_moved == 2 * T * F // TP


def test_current_scaling_reads_each_tensor_once_more_and_fuses_nothing():
    w = fp8_work("current")
    # amax pass (read 2 B) + cast_transpose (read 2 B, write 1 + 1 B): two kernels.
    assert w.kernel("cast_qkv").bytes_moved == T * H * (2 * A + 2)
    assert w.kernel("cast_qkv").launches == 2
    assert w.kernel("cast_mlp_fc1").bytes_moved == T * H * (2 * A + 2)
    assert w.kernel("input_norm").bytes_moved == T * H * 2 * A
    assert "fp8_scale_update" not in w.names()
    bwd = w.backward()
    assert bwd.kernel("attn_out.grad_cast").bytes_moved == T * H * (2 * A + 2)
    assert not [n for n in bwd.names() if n.endswith("input_transpose")]


def test_blockwise_writes_block_scales_and_no_history():
    w = fp8_work("blockwise")
    # 1×128 row-wise and 128×1 column-wise copies, one fp32 scale per 128 elements each.
    assert BLOCKWISE_SCALE_BYTES_PER_ELEMENT == 2 * 4 / 128
    assert w.kernel("cast_qkv").bytes_moved == pytest.approx(T * H * (A + 2 + 8 / 128))
    assert w.kernel("cast_qkv").launches == 1
    assert "fp8_scale_update" not in w.names()
    bwd = w.backward()
    # The weight gradient reads and accumulates fp32 main grads: 8 bytes an output element.
    assert bwd.kernel("qkv.wgrad").output_bytes == H * 3 * H // TP * 8
    assert bwd.kernel("qkv.dgrad").output_bytes == T * H * A


def test_the_norm_backward_does_not_depend_on_what_its_forward_wrote():
    delayed, current = (fp8_work(r).backward().kernel("input_norm.bwd").bytes_moved
                        for r in ("delayed", "current"))
    assert delayed == current == 1.5 * 2 * T * H * A


@settings(max_examples=30, deadline=None)
@given(b=st.integers(1, 4), tp=st.sampled_from([1, 2, 4]))
def test_recipe_differences_are_the_amax_read_and_the_scales(b, tp):
    elements = b * S * H // tp  # attn_out's input on one rank
    delayed, current, block = (fp8_work(r, b=b, tp=tp).kernel("cast_attn_out").bytes_moved
                               for r in ("delayed", "current", "blockwise"))
    assert current - delayed == elements * A
    assert block - delayed == pytest.approx(elements * 8 / 128)


@pytest.mark.parametrize("name", ["mlp_fc1.wgrad", "mlp_fc1.dgrad", "mlp_fc2.dgrad"])
def test_block_scaled_gemms_run_their_main_loop_then_write_their_output(name):
    """DeepGEMM's time: the main loop at BLOCKWISE_GEMM_EFFICIENCY of the FP8 peak (tiles
    and waves, no small-k half point), plus the output's bytes at HBM bandwidth (8 an
    element for a weight gradient accumulating into fp32)."""
    big = ModelSpec("big", layers=2, hidden=8192, heads=64, seq_len=4096, vocab=32000)
    shard = LayerShard(micro_batch=1, seq_len=4096, tp=1)
    costs = RooflineCosts(H100, "fp8", launch_overhead_s=0.0,
                          stack=STACKS["megatron-core"].with_fp8_recipe("blockwise"))
    item = costs.layer_work("bwd", big, shard).kernel(name)
    shape = matmul_efficiency(item.m, item.n, item.k, sm_count=H100.sm_count,
                              asymptotic_efficiency=BLOCKWISE_GEMM_EFFICIENCY, k_half=0.0)
    out_bytes = 8 if name.endswith("wgrad") else A
    expected = (item.flops / (H100.peak_flops("fp8") * shape)
                + item.m * item.n * out_bytes / H100.memory_bandwidth_bytes_per_s)
    assert costs.kernel_time_s(item) == pytest.approx(expected)
    delayed = RooflineCosts(H100, "fp8", launch_overhead_s=0.0)
    if name.endswith("wgrad"):  # the fp32 epilogue makes it slower than per-tensor FP8
        assert costs.kernel_time_s(item) > delayed.kernel_time_s(item)


def test_block_scaled_small_k_gemms_pay_for_their_output():
    """At k = 512 the output's write is 43 % of a DeepGEMM kernel (MLA's kv_up shape:
    main loop 2·4096·32768·512 / (1978.9 T · 0.683) = 101.7 µs, output 4096·32768·2 B /
    3.35 TB/s = 80.1 µs), at k = 16384 under 3 %."""
    costs = RooflineCosts(H100, "fp8", launch_overhead_s=0.0,
                          stack=STACKS["megatron-core"].with_fp8_recipe("blockwise"))
    from distsim_gpu.workloads.cost.compute.operators import gemm
    for k, share in ((512, 101.7 / (101.7 + 80.1)), (16384, 3254.4 / (3254.4 + 80.1))):
        item = gemm("g", (4096, 32768, k), 1, 2, fp8=True)
        main = item.flops / (H100.peak_flops("fp8") * matmul_efficiency(
            4096, 32768, k, sm_count=H100.sm_count,
            asymptotic_efficiency=BLOCKWISE_GEMM_EFFICIENCY, k_half=0.0))
        assert main / costs.kernel_time_s(item) == pytest.approx(share, abs=0.01)


def test_weight_recast_per_step_by_recipe():
    def extra(recipe):
        costs = RooflineCosts(H100, "fp8", stack=STACKS["megatron-core"].with_fp8_recipe(recipe))
        return costs.optimizer_bytes() - RooflineCosts(H100, "bf16").optimizer_bytes()
    assert extra("delayed") == 2 + 1 + 1           # read bf16, write FP8 and its transpose
    assert extra("current") == 2 + 2 + 1 + 1       # and an amax read first
    assert extra("blockwise") == pytest.approx(4 + 4 / 128**2)


def test_stack_defaults_and_determinism():
    assert STACKS["megatron-core"].fp8_recipe == "delayed"
    assert STACKS["transformer-engine"].fp8_recipe == "delayed"
    assert STACKS["torch-compile"].fp8_recipe == "current"
    assert set(FP8_RECIPE_SPECS) == {"delayed", "current", "blockwise", "mxfp8", "nvfp4"}
    for recipe in ("delayed", "current", "blockwise"):  # Hopper's (MXFP8/NVFP4: Blackwell)
        costs = RooflineCosts(H100, "fp8", stack=STACKS["megatron-core"].with_fp8_recipe(recipe))
        shard = LayerShard(micro_batch=B, seq_len=S, tp=TP)
        assert fp8_work(recipe) == fp8_work(recipe)
        assert costs.layer_time_s("bwd", MODEL, shard) == costs.layer_time_s("bwd", MODEL, shard)


def test_recipe_validation():
    check_fp8_recipe(None, "bf16")
    check_fp8_recipe("blockwise", "fp8")
    with pytest.raises(ConfigError, match=re.escape(
            "training.fp8_recipe: unknown FP8 recipe 'tensorwise'")):
        check_fp8_recipe("tensorwise", "fp8")
    with pytest.raises(ConfigError, match=re.escape(
            "needs training.precision fp8, not 'bf16'")):
        check_fp8_recipe("delayed", "bf16")
    with pytest.raises(ConfigError, match="unknown FP8 recipe 'x'"):
        STACKS["megatron-core"].with_fp8_recipe("x")
    assert "fp8_recipe" not in TrainingConfig().to_dict()
    assert TrainingConfig(precision="fp8", fp8_recipe="current").to_dict()["fp8_recipe"] == \
        "current"



# A MoE layer whose dispatch sends FP8 (DeepEP's): 8 experts of FFN 1024 (SwiGLU), top 2,
# over ep 4 at tp 2 with sequence parallelism (each rank dispatches T/tp tokens).
MOE = ModelSpec("moe-small", layers=2, hidden=H, heads=16, seq_len=S, vocab=50304,
                ffn_hidden=1024, experts=8, top_k=2, gated_mlp=True)
EP = 4
# The routed copies a rank's experts take: T·top_k / ep of its EP group's, each gathered
# over the tensor group (expert_tp = tp): T·top_k.
COPIES = T * 2


def moe_work(recipe: str, deepep: bool, precision: str = "fp8", pass_: str = "fwd",
             recompute: str = "full", modules: tuple[str, ...] = ("core_attn",)):
    shard = LayerShard(micro_batch=B, seq_len=S, tp=TP, sequence_parallel=True, ep=EP,
                       deepep=deepep, recompute=recompute, recompute_modules=modules)
    stack = get_stack("megatron-core").with_fp8_recipe(
        recipe if precision == "fp8" else "nvfp4")
    return layer_work(pass_, MOE, shard, precision=precision, stack=stack)


@pytest.mark.parametrize("recipe", ["delayed", "current", "blockwise"])
def test_an_fp8_dispatch_casts_the_tokens_once_before_it(recipe):
    plain, dispatched = moe_work(recipe, False), moe_work(recipe, True)
    assert "cast_moe_dispatch" not in plain.names()
    cast = dispatched.kernel("cast_moe_dispatch")
    # The rank's T/tp tokens: read 16-bit, write e4m3 with one fp32 scale per 128.
    assert cast.bytes_moved == pytest.approx(T / TP * H * (A + 1 + 4 / 128))
    assert cast.cast and cast.launches == 1
    # Run before the dispatch, with the router: the attention block's (as DeepSeek's trace).
    names = dispatched.names()
    assert names.index("router") < names.index("cast_moe_dispatch") < names.index(
        "moe_dispatch")
    assert "cast_moe_dispatch" in block_operators("attn", moe=True)
    assert "cast_moe_dispatch" not in block_operators("mlp", moe=True)
    # Its backward is a 16-bit combine of gradients: nothing to cast.
    assert not any(n.startswith("cast_moe_dispatch") for n in dispatched.backward().names())


def test_blockwise_experts_only_write_the_column_wise_copy_of_what_arrived():
    plain = moe_work("blockwise", False).kernel("cast_expert_fc1")
    arrived = moe_work("blockwise", True).kernel("cast_expert_fc1")
    s = BLOCKWISE_SCALE_BYTES_PER_ELEMENT / 2  # one copy's fp32 scales per element
    assert plain.total_bytes == pytest.approx(COPIES * H * (A + 2 + 2 * s))
    # Read the 1x128 copy that arrived, write the 128x1 one: no 16-bit read.
    assert arrived.total_bytes == pytest.approx(COPIES * H * 2 * (1 + s))
    assert arrived.launches == 1


@pytest.mark.parametrize("recipe", ["delayed", "current"])
def test_per_tensor_recipes_cast_the_arrived_fp8_tokens_again(recipe):
    spec = FP8_RECIPE_SPECS[recipe]
    arrived = moe_work(recipe, True).kernel("cast_expert_fc1")
    assert arrived.total_bytes == pytest.approx(spec.cast_bytes(COPIES * H, 1 + 4 / 128))
    assert arrived.launches == spec.cast_launches


def test_fp8_dispatch_changes_nothing_but_the_casts_and_copies():
    """DeepEP's exchange moves the casts; in 16 bits it changes nothing but the token
    copies around the exchange (workloads.cost.compute.token_copies)."""
    copies = {"moe_dispatch", "moe_combine"}
    bf16 = [moe_work("delayed", f, precision="bf16") for f in (False, True)]
    assert [k for k in bf16[0].kernels if k.name not in copies] == [
        k for k in bf16[1].kernels if k.name not in copies]
    assert "cast_moe_dispatch" not in bf16[1].names()
    fp4 = moe_work("delayed", True, precision="fp4")  # NVFP4 experts re-cast the FP8 copies
    spec = FP8_RECIPE_SPECS["nvfp4"]
    assert fp4.kernel("cast_expert_fc1").total_bytes == pytest.approx(
        spec.cast_bytes(COPIES * H, 1 + 4 / 128))
    plain, dispatched = moe_work("blockwise", False), moe_work("blockwise", True)
    keep = {"cast_moe_dispatch", "cast_expert_fc1", *copies}
    assert [k for k in plain.kernels if k.name not in keep] == [
        k for k in dispatched.kernels if k.name not in keep]


def test_a_moe_recompute_casts_the_dispatch_again():
    names = moe_work("blockwise", True, pass_="recompute", recompute="selective",
                     modules=("moe",)).names()
    assert "cast_moe_dispatch" in names and "cast_expert_fc1" in names
    assert "cast_moe_dispatch" not in moe_work(
        "blockwise", True, pass_="recompute", recompute="selective",
        modules=("moe_act",)).names()


def test_the_block_scaled_gemm_rate_is_deepgemms_fit(shared_data):
    """BLOCKWISE_GEMM_EFFICIENCY is what DeepGEMM's README and PR #95 tables give
    (compare_blockwise.py --fit): a model change that moves the fit shows here."""
    from tests.conftest import load_script

    compare = load_script("validation/kernels/compare_blockwise.py", "compare_blockwise")
    assert compare.fit_efficiency(shared_data) == BLOCKWISE_GEMM_EFFICIENCY
