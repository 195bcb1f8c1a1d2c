"""Per-operator compute costs: hand counts of one layer, what each stack's fusions change,
FP8 as Transformer Engine runs it, the host floor, and cost tables filled per operator."""

from __future__ import annotations

import dataclasses

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import (
    CROSS_ENTROPY,
    STACKS,
    CostRow,
    RooflineCosts,
    TableCosts,
    TableHeader,
    forward_layer_work,
    get_stack,
)
from distsim_gpu.workloads.cost.compute.roofline import issue_timeline_s
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import ModelSpec
from hypothesis import given, settings
from hypothesis import strategies as st

A100 = get_gpu("a100-80gb")
H100 = get_gpu("h100-sxm")
# A small GPT layer: h 1024, 16 heads of 64, FFN 4096, on TP 2, b 2, s 512 (fp16: 2 B).
MODEL = ModelSpec("gpt-small", layers=4, hidden=1024, heads=16, seq_len=512, vocab=50304)
B, S, TP, H, F, D = 2, 512, 2, 1024, 4096, 64
T = B * S          # tokens
HEADS = 16 // TP   # heads on this rank
BATCH = B * HEADS  # batched-GEMM batch of the unfused attention
SCORES = BATCH * S * S


def work(stack: str = "megatron-lm-2021", **kwargs):
    return forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP),
                              precision="fp16", stack=get_stack(stack), **kwargs)


def test_megatron_2021_layer_hand_counts():
    w = work()
    assert w.names() == (
        "input_norm", "qkv", "attn_scores", "attn_softmax", "attn_dropout", "attn_context",
        "attn_context_copy", "attn_out", "attn_residual", "post_attn_norm", "mlp_fc1",
        "mlp_act", "mlp_fc2", "mlp_residual")
    k = w.kernel
    # Norm: read and write T·h at 2 B; 8 FLOP per element for LayerNorm.
    assert k("input_norm").bytes_moved == 2 * T * H * 2
    assert k("input_norm").flops == 8 * T * H
    # QKV GEMM: m = T, k = h, n = 3h/t; operands and output at 2 B.
    qkv = k("qkv")
    assert (qkv.m, qkv.n, qkv.k) == (T, 3 * H // TP, H)
    assert qkv.flops == 2 * T * H * 3 * H // TP
    assert qkv.bytes_moved == (T * H + H * 3 * H // TP) * 2 + T * 3 * H // TP * 2
    # Scores: 2·B·s²·d FLOP, read Q and K, write the s×s scores of every head.
    assert k("attn_scores").flops == 2 * BATCH * S * S * D
    assert k("attn_scores").bytes_moved == BATCH * 2 * S * D * 2 + SCORES * 2
    assert k("attn_softmax").bytes_moved == 2 * SCORES * 2       # fused: read + write
    assert k("attn_dropout").bytes_moved == SCORES * (2 * 2 + 1)  # read, write, 1-B mask
    assert k("attn_context").flops == 2 * BATCH * S * S * D
    assert k("attn_context").bytes_moved == SCORES * 2 + 2 * BATCH * S * D * 2
    assert k("attn_context_copy").bytes_moved == 2 * T * H // TP * 2
    assert k("attn_out").flops == 2 * T * H * H // TP
    # Bias + dropout + residual add: read x and the residual, write the sum and a mask.
    assert k("attn_residual").bytes_moved == T * H * (3 * 2 + 1)
    assert k("mlp_fc1").flops == 2 * T * H * F // TP
    assert k("mlp_act").bytes_moved == 2 * T * F // TP * 2       # bias-GeLU: read + write
    assert k("mlp_act").flops == 8 * T * F // TP
    assert k("mlp_fc2").flops == 2 * T * F // TP * H
    # The matmul FLOP are Megatron's count on this rank (attention not halved: the
    # unfused kernels compute the whole s×s matrix).
    assert w.matmul_flops == pytest.approx(
        (24 * T * H * H + 4 * B * S * S * H) / TP, rel=1e-12)


@pytest.mark.parametrize(("stack", "override", "forward", "backward", "launches"), [
    # Eager fp32 cross entropy: cast (2 + 4 B), max, subtract, exp, sum, divide: 38 B;
    # backward: the one-hot an indexed update, times the gradient (8), the cast back (4 + 2).
    ("megatron-lm-2021", None, 38, 14, 6),
    # Megatron-Core's fused path (NeMo 2's): the subtract and the exp one TorchScript
    # kernel: 30 B.
    ("nemo", None, 30, 14, 5),
    ("megatron-core", "megatron_fused", 30, 14, 5),
    # A one-pass kernel (TE's, Liger's, Inductor's): the logits read, fp32 written.
    ("megatron-core", None, 6, 6, 1),
    ("torch-compile", None, 6, 6, 1),
    ("megatron-deepspeed", "megatron_fused", 30, 14, 5),
    # PyTorch's F.cross_entropy on the fp32 copy: log_softmax reads thrice, writes once
    # (16); backward nll's zeroed gradient (4), log_softmax's (16), the cast back.
    ("torch-eager", None, 22, 26, 3),
])
def test_loss_hand_counts(stack, override, forward, backward, launches):
    costs = RooflineCosts(A100, precision="fp16", stack=get_stack(stack),
                          cross_entropy=override)
    loss = costs.loss_work(MODEL, micro_batch=B, seq_len=S, tp=TP)
    logits = loss.kernel("logits")
    assert (logits.m, logits.n, logits.k) == (T, 50304 // TP, H)
    entropy = loss.kernel("cross_entropy")
    assert entropy.bytes_moved == T * 50304 // TP * forward
    assert entropy.launches == launches
    assert loss.backward().kernel("cross_entropy.bwd").bytes_moved == pytest.approx(
        T * 50304 // TP * backward, rel=1e-12)


@pytest.mark.parametrize(("implementation", "forward", "backward"), [
    ("one_pass", 8, 8), ("megatron_fused", 24, 8), ("eager", 32, 8), ("torch", 16, 20)])
def test_fp32_logits_are_not_copied(implementation, forward, backward):
    """With fp32 logits there is no fp32 copy to make nor gradient to cast back."""
    loss = CROSS_ENTROPY[implementation]
    assert (loss.forward_bytes(4), loss.backward_bytes(4)) == (forward, backward)


def test_a_bad_cross_entropy_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"cross_entropy: unknown cross entropy"):
        RooflineCosts(A100, cross_entropy="fused")


def test_deepspeed_bf16_accumulates_gradients_in_fp32():
    # BF16_Optimizer: cast the bf16 gradient to fp32 (read 2, write 4), add it into the
    # fp32 buffer (read 4 + 4, write 4), zero the bf16 one (write 2): 20 B per element;
    # fp16 stays autograd's .grad add (6 B); a stack without the flag keeps 6 B in bf16.
    qkv = H * (3 * H // TP)
    bf16 = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), precision="bf16",
                              stack=get_stack("megatron-deepspeed")).backward()
    assert bf16.kernel("qkv.grad_accum").bytes_moved == 20 * qkv
    assert work("megatron-deepspeed").backward().kernel("qkv.grad_accum").bytes_moved == 6 * qkv
    plain = dataclasses.replace(get_stack("megatron-deepspeed"),
                                bf16_grads_accumulated_in_fp32=False)
    other = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP),
                               precision="bf16", stack=plain).backward()
    assert other.kernel("qkv.grad_accum").bytes_moved == 6 * qkv


def test_backward_hand_counts():
    w = work()
    bwd = w.backward()
    # Weight GEMMs: data and weight gradient; DeepSpeed adds the .grad accumulation.
    ds = work("megatron-deepspeed").backward()
    assert ds.kernel("qkv.grad_accum").bytes_moved == 3 * H * (3 * H // TP) * 2
    # Megatron accumulates the weight gradient into fp32 main grads: read + write 4 B.
    wgrad = bwd.kernel("qkv.wgrad")
    assert (wgrad.m, wgrad.n, wgrad.k) == (H, 3 * H // TP, T)
    assert wgrad.bytes_moved == (H * T + T * 3 * H // TP) * 2 + H * 3 * H // TP * 8
    assert "qkv.grad_accum" not in bwd.names()
    # Batched attention GEMMs: two data gradients of the forward's shape, no weights.
    assert bwd.kernel("attn_scores.dgrad").flops == w.kernel("attn_scores").flops
    assert bwd.kernel("attn_scores.dgrad2").flops == w.kernel("attn_scores").flops
    assert "attn_scores.wgrad" not in bwd.names()
    # Dropout backward reads the gradient and the mask and writes one gradient: the
    # forward's bytes; softmax backward reads output and gradient, writes one: 1.5x.
    assert bwd.kernel("attn_dropout.bwd").bytes_moved == SCORES * 5
    assert bwd.kernel("attn_softmax.bwd").bytes_moved == 1.5 * 2 * SCORES * 2


# What each fusion flag changes: exactly the operators it names, nothing else.
FLAG_OPERATORS = {
    "fused_softmax": {"attn_softmax"},
    "attention_dropout": {"attn_dropout"},
    "context_copy": {"attn_context_copy"},
    "hidden_dropout": {"attn_residual", "mlp_residual"},
    "fused_bias_dropout_add": {"attn_residual", "mlp_residual"},
    "fused_bias_activation": {"mlp_act"},
    "fused_norm": {"input_norm", "post_attn_norm"},
}


@pytest.mark.parametrize("flag", sorted(FLAG_OPERATORS))
@pytest.mark.parametrize("base", ["megatron-lm-2021", "megatron-core"])
def test_a_fusion_changes_exactly_the_operators_it_names(flag, base):
    stack = get_stack(base)
    if flag in ("fused_softmax", "attention_dropout", "context_copy"):
        stack = stack.with_attention("unfused")
    flipped = dataclasses.replace(stack, **{flag: not getattr(stack, flag)})
    one = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), stack=stack)
    two = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), stack=flipped)
    before = {k.name: k for k in one.kernels}
    after = {k.name: k for k in two.kernels}
    changed = {name for name in before.keys() | after.keys()
               if before.get(name) != after.get(name)}
    assert changed == FLAG_OPERATORS[flag]


def test_unfused_operators_move_more_and_launch_more():
    fused = get_stack("megatron-lm-2021")
    plain = dataclasses.replace(fused, fused_norm=False, fused_softmax=False,
                                fused_bias_dropout_add=False, fused_bias_activation=False)
    one = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), stack=fused)
    two = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), stack=plain)
    for name in ("input_norm", "attn_softmax", "attn_residual", "mlp_act"):
        assert two.kernel(name).bytes_moved > one.kernel(name).bytes_moved
        assert two.kernel(name).launches > one.kernel(name).launches


def test_flash_stacks_have_one_attention_operator():
    for name in ("megatron-core", "transformer-engine", "torch-compile"):
        names = work(name).names()
        assert "attention" in names and "attn_scores" not in names
    assert work("megatron-core", attention="unfused").kernel("attn_scores")


# --------------------------------------------------------------------------- FP8
def te_costs(precision):
    return RooflineCosts(H100, precision=precision, stack=get_stack("transformer-engine"))


def test_fp8_runs_the_linear_gemms_in_fp8_and_keeps_attention_and_logits_16_bit():
    w = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), precision="fp8",
                           stack=get_stack("transformer-engine"))
    fp8 = {k.name for k in w.kernels if k.fp8}
    assert fp8 == {"qkv", "attn_out", "mlp_fc1", "mlp_fc2"}
    assert not w.kernel("attention").fp8
    # TE fuses the cast into the norm and the activation (they write 1 B FP8 per element,
    # the backward transposes it); attn_out's input is cast on its own.
    assert w.names().count("cast_attn_out") == 1 and "cast_qkv" not in w.names()
    assert w.kernel("input_norm").bytes_moved == T * H * (2 + 1)
    assert w.kernel("cast_attn_out").bytes_moved == T * H // TP * (2 + 2)
    assert w.kernel("qkv").bytes_moved == (T * H + H * 3 * H // TP) * 1 + T * 3 * H // TP * 2
    assert "fp8_scale_update" in w.names()
    bwd = w.backward()
    assert bwd.kernel("qkv.grad_cast").bytes_moved == T * 3 * H // TP * (2 + 2)
    assert bwd.kernel("qkv.input_transpose").bytes_moved == T * H * 2
    loss = te_costs("fp8").loss_work(MODEL, micro_batch=B, seq_len=S, tp=TP)
    assert not loss.kernel("logits").fp8
    # megatron-core runs qkv and fc1 as TE LayerNormLinear (the norm writes their FP8
    # input) and casts attn_out's and fc2's inputs in kernels of their own.
    core = forward_layer_work(MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP), precision="fp8")
    assert {"cast_attn_out", "cast_mlp_fc2"} <= set(core.names())
    assert not {"cast_qkv", "cast_mlp_fc1"} & set(core.names())


@pytest.mark.parametrize("micro_batch", [1, 4])
def test_fp8_layer_speedup_is_between_one_and_two(micro_batch):
    m = ModelSpec("llama-ish", layers=2, hidden=8192, heads=64, kv_heads=8, seq_len=8192,
                  vocab=128256, ffn_hidden=28672, gated_mlp=True, norm="rmsnorm",
                  position="rotary", attention_bias=False, mlp_bias=False)
    args = {"micro_batch": micro_batch, "seq_len": 8192, "tp": 8}
    for pass_ in ("fwd", "bwd"):
        speedup = (te_costs("bf16").layer_time_s(pass_, m, LayerShard(**args))
                   / te_costs("fp8").layer_time_s(pass_, m, LayerShard(**args)))
        assert 1.0 < speedup < 2.0


def test_fp8_needs_a_stack_with_fp8_kernels():
    with pytest.raises(ConfigError, match="stack 'megatron-deepspeed' has no FP8 kernels"):
        RooflineCosts(H100, precision="fp8", stack=get_stack("megatron-deepspeed"))
    with pytest.raises(ConfigError, match="unknown stack 'megatron'"):
        get_stack("megatron")


# --------------------------------------------------------------------- host floor
def test_host_dispatch_binds_only_small_kernels():
    stack = get_stack("megatron-lm-2021")
    costs = RooflineCosts(A100, precision="fp16", stack=stack)
    tiny = ModelSpec("tiny", layers=2, hidden=256, heads=4, seq_len=64, vocab=1000)
    small = costs.layer_work("fwd", tiny, LayerShard(micro_batch=1, seq_len=64))
    # Every kernel shorter than the host's 20 µs: the GPU waits for each issue, and the
    # pass ends one (last) kernel after the host has issued the last one.
    last = small.kernels[-1]
    last_s = costs.kernel_time_s(last) / (last.count * last.launches)
    assert costs.work_time_s(small) == pytest.approx(
        small.launches * stack.host_overhead_s + last_s)
    big = costs.layer_work("fwd", MODEL, LayerShard(micro_batch=8, seq_len=2048))
    device = sum(costs.kernel_time_s(k) for k in big.kernels)
    assert device > big.launches * stack.host_overhead_s
    # The host runs ahead: the device time plus at most the first kernel's issue lag.
    assert device < costs.work_time_s(big) <= device + stack.host_overhead_s + 1e-12


def test_the_backward_pass_is_issued_at_the_autograd_threads_rate():
    stack = get_stack("megatron-deepspeed")
    assert stack.host_s_per_kernel("bwd") == stack.host_backward_overhead_s == 43e-6
    assert stack.host_s_per_kernel("fwd") == stack.host_s_per_kernel("recompute") == 20e-6
    assert get_stack("megatron-core").host_s_per_kernel("bwd") == 0.0
    costs = RooflineCosts(A100, precision="fp16", stack=stack)
    tiny = ModelSpec("tiny", layers=2, hidden=256, heads=4, seq_len=64, vocab=1000)
    bwd = costs.layer_work("bwd", tiny, LayerShard(micro_batch=1, seq_len=64))
    assert costs.work_time_s(bwd) > bwd.launches * 43e-6


def test_issue_timeline_hand_cases():
    # Long kernels: the host runs ahead; only the first issue delays the GPU.
    assert issue_timeline_s([(1e-3, 1), (2e-3, 2)], 10e-6) == pytest.approx(3e-3 + 10e-6)
    # Short kernels: 5 issues at 10 µs, the last 1 µs kernel after the last issue.
    assert issue_timeline_s([(5e-6, 5)], 10e-6) == pytest.approx(5 * 10e-6 + 1e-6)
    # Mixed: 3 short kernels (host-bound until 30 µs, done at 31 µs), then one of 1 ms
    # issued at 40 µs: it starts at 40 µs, not at 31 µs.
    assert issue_timeline_s([(3e-6, 3), (1e-3, 1)], 10e-6) == pytest.approx(40e-6 + 1e-3)
    # No host cost: the device time; an operator without kernels adds its time.
    assert issue_timeline_s([(1e-3, 4), (2e-3, 0)], 0.0) == pytest.approx(3e-3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e-3), st.integers(1, 6)), min_size=1, max_size=12),
       st.floats(0, 1e-4))
def test_issue_timeline_matches_the_kernel_by_kernel_recurrence(ops, host_s):
    host, gpu = 0.0, 0.0
    for device_s, kernels in ops:
        for _ in range(kernels):
            host += host_s
            gpu = max(gpu, host) + device_s / kernels
    got = issue_timeline_s(ops, host_s)
    assert got == pytest.approx(gpu, rel=1e-9, abs=1e-15)
    total = sum(d for d, _ in ops)
    launches = sum(n for _, n in ops)
    assert max(total, launches * host_s) - 1e-15 <= got <= total + launches * host_s + 1e-15


# ------------------------------------------------------------ per-operator tables
def test_a_table_fills_the_operators_it_measured_and_the_roofline_the_rest():
    costs = RooflineCosts(A100, precision="fp16", stack=get_stack("megatron-lm-2021"))
    header = TableHeader(software="test", date="2026-01-01", source="hand-written")
    rows = [CostRow("a100-80gb", "attn_softmax", "fwd", B, S, H, TP, 1e-3),
            CostRow("a100-80gb", "mlp_fc1", "bwd", B, S, H, TP, 2e-3)]
    table = TableCosts(header, rows, fallback=costs)
    args = {"micro_batch": B, "seq_len": S, "tp": TP}
    fwd = costs.layer_work("fwd", MODEL, LayerShard(**args))
    roof = costs.operator_times_s(fwd)
    launches: dict[str, int] = {}
    for item in fwd.kernels:
        launches[item.base_name] = launches.get(item.base_name, 0) + item.count * item.launches
    # The measured softmax in the roofline's place, issued by the same host.
    assert table.layer_time_s("fwd", MODEL, LayerShard(**args)) == pytest.approx(issue_timeline_s(
        [(1e-3 if name == "attn_softmax" else t, launches[name]) for name, t in roof.items()],
        fwd.stack.host_s_per_kernel("fwd")))
    assert table.layer_time_s("fwd", MODEL, LayerShard(**args)) >= sum(roof.values()) - roof[
        "attn_softmax"] + 1e-3
    times = table.operator_breakdown_s("bwd", MODEL, LayerShard(**args))
    assert times["mlp_fc1"] == (2e-3, "table")
    assert times["qkv"][1] == "roofline"
    # The recompute pass re-runs the measured forward.
    assert table.operator_breakdown_s("recompute", MODEL, LayerShard(**args))["attn_softmax"] == (
        1e-3, "table")


def test_every_stack_builds_every_pass():
    for stack in STACKS.values():
        costs = RooflineCosts(A100, stack=stack)
        for pass_ in ("fwd", "bwd", "recompute"):
            assert costs.layer_time_s(pass_, MODEL, LayerShard(micro_batch=B, seq_len=S, tp=TP)) > 0


def test_bias_gradients_are_their_own_kernels_only_where_the_stack_does_not_fuse_them():
    eager = work("megatron-lm-2021").backward()
    assert eager.kernel("mlp_fc1.bias_grad").bytes_moved == T * F // TP * 2  # reads dY
    assert eager.kernel("qkv.bias_grad").bytes_moved == T * 3 * H // TP * 2
    assert not any(n.endswith(".bias_grad") for n in work("megatron-core").backward().names())
    no_bias = dataclasses.replace(MODEL, attention_bias=False, mlp_bias=False)
    bwd = forward_layer_work(no_bias, LayerShard(micro_batch=B, seq_len=S, tp=TP),
                             stack=get_stack("megatron-lm-2021")).backward()
    assert not any(n.endswith(".bias_grad") for n in bwd.names())


@pytest.mark.parametrize("gated", [True, False])
def test_separate_projections_sum_their_input_gradients_in_eager_autograd(gated):
    """torchtitan's wq/wk/wv read one normed input, as its w1/w3 do: eager autograd adds
    their input gradients, one add (read two T·h tensors, write one) a reader after the
    first — two after qkv, one after a gated fc1; a fused GEMM reads its input once."""
    model = dataclasses.replace(MODEL, gated_mlp=gated)
    shard = LayerShard(micro_batch=B, seq_len=S, tp=TP)
    eager = forward_layer_work(model, shard, stack=get_stack("torch-eager")).backward()
    qkv = eager.kernel("qkv.grad_sum")
    assert (qkv.bytes_moved, qkv.flops, qkv.launches) == (2 * 3 * T * H * 2, 2 * T * H, 2)
    names = eager.names()
    assert names.index("qkv.grad_sum") == names.index("qkv.wgrad") + 1
    if gated:
        assert eager.kernel("mlp_fc1.grad_sum").bytes_moved == 3 * T * H * 2
    assert ("mlp_fc1.grad_sum" in names) == gated
    for fused in ("torch-compile", "megatron-core"):
        bwd = forward_layer_work(model, shard, stack=get_stack(fused)).backward()
        assert not any(name.endswith(".grad_sum") for name in bwd.names())


def test_a_table_without_operator_rows_leaves_the_roofline_layer_as_it_is():
    stack = get_stack("megatron-lm-2021")
    costs = RooflineCosts(A100, precision="fp16", stack=stack)
    header = TableHeader(software="test", date="2026-01-01", source="hand-written")
    table = TableCosts(header, [CostRow("a100-80gb", "embedding", "fwd", 1, 64, 256, 1, 1e-3)],
                       fallback=costs)
    tiny = ModelSpec("tiny", layers=2, hidden=256, heads=4, seq_len=64, vocab=1000)
    for pass_ in ("fwd", "bwd", "recompute"):  # host-bound: the floor survives the table
        assert table.layer_time_s(pass_, tiny, LayerShard(micro_batch=1, seq_len=64)) == \
            costs.layer_time_s(pass_, tiny, LayerShard(micro_batch=1, seq_len=64))
