"""FP8 casts as DeepSeek's framework lays them out (``compute.stack: deepseek``): the
forward writes a GEMM input's row-wise copy, the backward re-blocks it and the output
gradient column-wise, each FP8 weight is transposed every micro-batch (a grouped GEMM's
in the forward), and the attention output and SwiGLU inputs are cached by kernels of
their own — each kernel's bytes against hand counts, and the difference from Transformer
Engine's layout as a closed form."""

from __future__ import annotations

import pytest
from distsim_gpu.workloads.cost.compute import STACKS, forward_layer_work, get_stack
from distsim_gpu.workloads.cost.compute.fp8_casts import ATTENTION_CACHE_ELEMENT_BYTES
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec
from hypothesis import given, settings
from hypothesis import strategies as st

# A small SwiGLU layer: h 1024, 16 heads, FFN 2816 (gated), b 2, s 512; bf16 activations.
MODEL = ModelSpec("llama-small", layers=4, hidden=1024, heads=16, seq_len=512, vocab=32000,
                  ffn_hidden=2816, gated_mlp=True, norm="rmsnorm", position="rotary",
                  attention_bias=False, mlp_bias=False)
MOE = ModelSpec("moe-small", layers=2, hidden=1024, heads=16, seq_len=512, vocab=32000,
                ffn_hidden=512, gated_mlp=True, norm="rmsnorm", position="rotary",
                attention_bias=False, mlp_bias=False, experts=16, top_k=4)
B, S, H, F = 2, 512, 1024, 2816
T = B * S
A = 2
ROW = 1 + 4 / 128   # one FP8 copy and its 1×128 scales, per element
REBLOCK = 2 * ROW   # read one copy, write the other
# Megatron-Core with TE's block-scaled recipe: its quantisers write both copies at the cast.
TE_BLOCKWISE = STACKS["megatron-core"].with_fp8_recipe("blockwise")


def work(stack: str = "deepseek", model: ModelSpec = MODEL, tp: int = 1, b: int = B,
         precision: str = "fp8", **shard):
    return forward_layer_work(model, LayerShard(micro_batch=b, seq_len=S, tp=tp, **shard),
                              precision=precision, stack=get_stack(stack))


def test_the_deepseek_stack_runs_block_scaled_fp8():
    assert STACKS["deepseek"].fp8_recipe == "blockwise"
    assert STACKS["deepseek"].fp8.gemm_epilogue_exposed


def test_the_forward_cast_writes_the_row_wise_copy_alone():
    w = work()
    assert w.kernel("cast_qkv").bytes_moved == pytest.approx(T * H * (A + ROW))
    te = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=1), precision="fp8",
                            stack=TE_BLOCKWISE).kernel("cast_attn_out").bytes_moved
    assert te == pytest.approx(T * H * (A + 2 * ROW))  # TE's quantiser writes both copies


def test_the_backward_reblocks_inputs_and_gradients_and_transposes_weights():
    bwd = work().backward()
    n, k = H, F  # mlp_fc2: T×F in, T×H out, weight F×H
    assert [name for name in bwd.names() if name.startswith("mlp_fc2.")] == [
        "mlp_fc2.grad_cast", "mlp_fc2.grad_transpose", "mlp_fc2.input_transpose",
        "mlp_fc2.weight_transpose", "mlp_fc2.dgrad", "mlp_fc2.wgrad"]
    assert bwd.kernel("mlp_fc2.grad_cast").bytes_moved == pytest.approx(T * n * (A + ROW))
    assert bwd.kernel("mlp_fc2.grad_transpose").bytes_moved == pytest.approx(T * n * REBLOCK)
    assert bwd.kernel("mlp_fc2.input_transpose").bytes_moved == pytest.approx(T * k * REBLOCK)
    assert bwd.kernel("mlp_fc2.weight_transpose").bytes_moved == 2 * k * n
    assert all(bwd.kernel(f"mlp_fc2.{s}").cast for s in ("grad_cast", "weight_transpose"))


@settings(max_examples=25, deadline=None)
@given(b=st.integers(1, 4), tp=st.sampled_from([1, 2, 4]))
def test_deepseeks_layout_moves_one_more_copy_of_each_operand_than_te(b, tp):
    """Per FP8 GEMM (m, n, k) over a forward and backward: the gradient read again for its
    re-blocking, T·n·ROW; the input's column-wise copy read back, T·k·ROW; the weight
    transposed, 2·k·n — with the activation caches apart."""
    def layer(stack):
        return forward_layer_work(MODEL, LayerShard(micro_batch=b, seq_len=S, tp=tp),
                                  precision="fp8", stack=stack)

    def cast_bytes(stack) -> float:
        w = layer(stack)
        kernels = (*w.kernels, *w.backward().kernels)
        return sum(k.total_bytes for k in kernels if k.cast and "_cache" not in k.name)

    expected = sum(g.m * g.n * ROW + g.m * g.k * ROW + 2 * g.k * g.n
                   for g in layer(TE_BLOCKWISE).kernels if g.fp8)
    assert cast_bytes(STACKS["deepseek"]) - cast_bytes(TE_BLOCKWISE) == pytest.approx(expected)


def test_the_attention_output_and_swiglu_inputs_are_cached_and_cast_back():
    w = work()
    v, up = H, 2 * F  # the attention output's width; a SwiGLU input's
    cache = w.kernel("attn_out_cache")
    assert cache.bytes_moved == pytest.approx(T * v * (A + ATTENTION_CACHE_ELEMENT_BYTES))
    assert ATTENTION_CACHE_ELEMENT_BYTES == 1.5 + 4 / 128  # E5M6 with 1×128 scales
    assert w.kernel("mlp_act_cache").bytes_moved == pytest.approx(T * up * (A + ROW))
    bwd = w.backward()
    assert bwd.kernel("attn_out_cache.bwd").bytes_moved == cache.bytes_moved
    assert bwd.kernel("mlp_act_cache.bwd").bytes_moved == w.kernel("mlp_act_cache").bytes_moved
    names = w.names()
    assert names.index("attention") < names.index("attn_out_cache") < names.index("attn_out")
    assert names.index("mlp_act_cache") < names.index("mlp_act")


def test_nothing_is_cached_in_bf16_or_under_te():
    for names in (work(precision="bf16").names(), work("megatron-core").names()):
        assert not [n for n in names if n.endswith("_cache") or "transpose" in n]


def test_a_gelu_mlp_caches_no_swiglu_input():
    gelu = ModelSpec("gpt-small", layers=4, hidden=1024, heads=16, seq_len=512, vocab=50304)
    names = work(model=gelu).names()
    assert "attn_out_cache" in names and "mlp_act_cache" not in names


def test_grouped_experts_transpose_their_weights_in_the_forward():
    """The profile's batched_transpose of the local experts' weights runs in the forward,
    one launch a projection; their backward has no weight transpose."""
    w = work(model=MOE, ep=1)
    item = w.kernel("expert_fc1")
    transpose = w.kernel("transpose_expert_fc1")
    assert item.grouped and transpose.count == 1 and transpose.launches == 1
    assert transpose.bytes_moved == 2 * item.count * item.k * item.n
    assert not [n for n in w.backward().names() if n.startswith("expert_fc1.weight")]
    names = w.names()
    assert names.index("cast_expert_fc1") < names.index("transpose_expert_fc1")


def test_tokens_a_deepep_dispatch_delivered_need_no_forward_cast():
    w = work(model=MOE, ep=4, deepep=True)
    assert "cast_moe_dispatch" in w.names() and "cast_expert_fc1" not in w.names()
    item = w.kernel("expert_fc1")
    reblock = w.backward().kernel("expert_fc1.input_transpose")
    assert reblock.bytes_moved == pytest.approx(item.m * item.k * REBLOCK)
    te = work("megatron-core", model=MOE, ep=4, deepep=True)
    assert "cast_expert_fc1" in te.names()  # TE's blockwise writes the column-wise copy


def test_a_te_stack_on_the_block_scaled_recipe_says_it_borrowed_deepgemms_rate():
    from distsim_gpu.workloads.cost.compute import RooflineCosts
    from distsim_gpu.workloads.specs.gpus import get_gpu

    h100 = get_gpu("h100-sxm")
    te = RooflineCosts(h100, "fp8", stack=TE_BLOCKWISE).notes
    assert [n.key for n in te] == ["training.fp8_recipe"] and "DeepGEMM" in te[0].message
    assert not RooflineCosts(h100, "fp8", stack=STACKS["deepseek"]).notes
    assert not RooflineCosts(h100, "fp8", stack=STACKS["megatron-core"]).notes
