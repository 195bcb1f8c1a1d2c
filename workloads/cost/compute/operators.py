"""Operators of a transformer layer: the kernels one pass runs on one tensor-parallel rank,
each with its FLOP and bytes moved, as a software stack lays them out.

An :class:`Operator` (alias ``Kernel``, the record of
:mod:`~distsim_gpu.workloads.cost.compute.operator_record`) is one step of a layer — a
GEMM, a batched activation GEMM, fused attention or a memory-bound element-wise op — with
``launches`` kernels inside it.  :func:`forward_layer_work` lists a layer's forward
operators for a :class:`~distsim_gpu.workloads.cost.compute.stacks.Stack`;
:meth:`LayerWork.backward` and :meth:`LayerWork.recompute` derive the other passes.  Timing is
:mod:`~distsim_gpu.workloads.cost.compute.roofline`'s job.

Forward of one layer on one TP rank (``T = b·s`` tokens, ``h`` hidden, ``f`` FFN width,
``t`` TP size, ``a`` activation bytes, ``o`` GEMM operand bytes; element-wise ops see
``Tₑ = T/t`` tokens with sequence parallelism, else ``T``)::

    input_norm       norm         reads and writes Tₑ·h (fused; else 4 kernels, 5 passes)
    qkv              GEMM         m=T, k=h, n=(h + 2·d_kv)/t
    attention        flash        4·b·s²·h/t FLOP (halved when causal)
      or, unfused, over B = b·a_heads/t heads of head size d:
    attn_scores      batched GEMM Q·Kᵀ: 2·B·s²·d FLOP, writes B·s² scores
    attn_softmax     element-wise reads and writes B·s² (fused; else 3 kernels, ~3× bytes)
    attn_dropout     element-wise reads B·s², writes B·s² and a 1-byte mask
    attn_context     batched GEMM P·V: 2·B·s²·d FLOP
    attn_context_copy element-wise permute().contiguous(): reads and writes T·h/t
    attn_out         GEMM         m=T, k=h/t, n=h
    attn_residual    element-wise bias + dropout + residual add: reads 2·Tₑ·h, writes Tₑ·h
                                  (+ a 1-byte mask with dropout; unfused: 3 kernels)
    post_attn_norm   norm         as input_norm
    mlp_fc1          GEMM         m=T, k=h, n=f/t (2·f/t gated)
    mlp_act          element-wise bias + GeLU: 2·T·f/t, SwiGLU 3·T·f/t (unfused bias: +2·T·f/t)
    mlp_fc2          GEMM         m=T, k=f/t, n=h
    mlp_residual     element-wise as attn_residual

A MoE layer replaces the MLP by a router GEMM (m=T, k=h, n=experts), token dispatch and
combine copies and ``experts/ep`` local expert MLPs, each fed ``T·top_k·ep/experts``
tokens (balanced routing); its shared experts are one dense MLP of their summed width over
all T tokens (``shared_fc1``, ``shared_act``, ``shared_fc2``), as Megatron-Core runs them
on every EP rank.  A MoE model's dense layers use ``dense_ffn_hidden``.

Multi-head latent attention (``model.mla``, :mod:`~distsim_gpu.workloads.specs.mla`) replaces
``qkv`` by ``q_down`` (m=T, k=h, n=r_q, duplicated: not split by ``t``), ``q_norm``
(T·r_q), ``q_up`` (k=r_q, n=a·d_qk/t; ``q_proj`` with k=h when r_q is 0), ``kv_down``
(k=h, n=r_kv + d_r, duplicated), ``kv_norm`` (T·r_kv), ``kv_up`` (k=r_kv,
n=a·(d_n + d_v)/t) and ``attn_rope`` (the rotary parts joined into whole q and k heads);
core attention runs over query-key heads ``d_qk = d_n + d_r`` and values ``d_v``
(flash: ``2·b·s²·a/t·(d_qk + d_v)``, halved when causal) and ``attn_out`` reads
``a·d_v/t``.

FP8 (``precision: fp8`` on a stack with ``fp8_linear``, scaled by the stack's recipe,
:mod:`~distsim_gpu.workloads.cost.compute.fp8_recipes`): the linear GEMMs (qkv, attn_out,
mlp_fc1/fc2, experts) read 1-byte operands, each input cast by ``cast_<gemm>`` unless its
producer writes the FP8 copy (a delayed-scaling stack's ``fp8_norm_cast_fusion`` and
``fp8_activation_cast_fusion``), each output gradient by ``<gemm>.grad_cast`` in the
backward — which copies each writes, and the transposes, re-blockings and caches beside
them, are :mod:`~distsim_gpu.workloads.cost.compute.fp8_casts`'.  A MoE layer whose
dispatch sends FP8 (``LayerShard.deepep``) casts its Tₑ·h tokens once before it
(``cast_moe_dispatch``) and the experts make only what they need of the copies received
(:meth:`Fp8Recipe.dispatched_cast`).  Delayed scaling adds one ``fp8_scale_update``
kernel per layer pass.  The attention core, the router, embedding and logits stay 16-bit.

Backward: a weight GEMM becomes its data gradient ``(m, n=k, k=n)`` and weight gradient
``(m=k, n, k=m)`` — the weight gradient accumulating into fp32 main grads (reads and
writes 4 bytes per weight element) or into ``.grad`` with a separate add per weight
(``<gemm>.grad_accum``: 3·k·n·a bytes, or under bf16 DeepSpeed's fp32 accumulation,
:meth:`~distsim_gpu.workloads.cost.compute.stacks.Stack.grad_accum_bytes`), as the stack does;
a GEMM whose input other operators read too (MLA's query projection, the router; an
eager stack's separate q/k/v and w1/w3 linears, ``Stack.separate_projections``) adds their
input gradients (``<gemm>.grad_sum``: 3·m·k·a bytes an add); a batched GEMM becomes two
batched GEMMs; flash attention runs 5 matmuls to the forward's 2 (Dao 2023,
"FlashAttention-2", §3.1: 2.5× FLOP, ~2× bytes); an element-wise op moves its own
``bwd_bytes_factor`` times its forward bytes (softmax and norms 1.5: read the saved output
or input and the gradient, write one gradient; dropout and copies 1). Recompute: ``full``
repeats the forward, ``selective`` (Korthikanti et al. 2022 §5) only core attention
(or the operators of Megatron-Core's ``recompute_modules``: an FP8 cast with its GEMM),
``op`` (torchtitan's per-op checkpointing, :mod:`~distsim_gpu.workloads.specs.recompute`:
every element-wise operator and unfused attention matmul, and every second weight mm as
torchtitan's unfused model runs them; a re-run ``wk`` of a fused ``qkv`` is a GEMM of its
own at its real shape, ``qkv_wk``, as is a gated ``mlp_fc1``'s ``mlp_fc1_w3``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import distsim_gpu.workloads.cost.compute.fp8_casts as fp8_casts
from distsim_gpu.simcore.config import check_choice, check_whole
from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.workloads.cost.compute.fp8_recipes import DISPATCH_FP8_ELEMENT_BYTES
from distsim_gpu.workloads.cost.compute.operator_record import (
    Kernel,
    Operator,
    bytes_per_element,
    elementwise,
    gemm,
)
from distsim_gpu.workloads.cost.compute.stacks import DEFAULT_STACK, FP8_STACKS, STACKS, Stack
from distsim_gpu.workloads.cost.compute.token_copies import token_copies
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.recompute import Matmul, op_sac_matmuls
from distsim_gpu.workloads.specs.recompute_modules import (
    CORE_ATTENTION_KERNELS,
    is_recomputed,
    recomputed_operators,
)
from distsim_gpu.workloads.strategy.parallel import check_ep_split, check_tp_split
from distsim_gpu.workloads.strategy.precision import LOW_PRECISIONS

__all__ = [
    "CORE_ATTENTION_KERNELS",
    "FLASH_ATTENTION_BWD_FLOP_RATIO",
    "PASSES",
    "RECOMPUTE_GRANULARITIES",
    "Kernel",
    "LayerWork",
    "Operator",
    "bytes_per_element",
    "check_shard",
    "elementwise",
    "forward_layer_work",
    "gemm",
    "layer_work",
]

PASSES = ("fwd", "bwd", "recompute")
RECOMPUTE_GRANULARITIES = ("full", "selective", "op")
# What torchtitan's op policy keeps besides the saved mms: the SDPA (flash) attention's
# outputs, and the float8 amax (``aten.max``) the delayed-scaling update stands for.
_OP_SAVED_KINDS = frozenset({"attention"})
_OP_SAVED_NAMES = frozenset({"fp8_scale_update"})
# Dao 2023 §3.1: the backward pass runs 5 matmuls (S, dV, dP, dQ, dK) to the forward's 2.
FLASH_ATTENTION_BWD_FLOP_RATIO = 2.5
# FLOP per element of the memory-bound operators (CUDA-core arithmetic; never binding on
# a GPU whose FLOP/byte ratio is in the tens, but counted so the roofline sees them).
_NORM_FLOP = {"layernorm": 8.0, "rmsnorm": 4.0}
_GELU_FLOP = 8.0    # tanh approximation: ~8 multiply/add per element
_SWIGLU_FLOP = 6.0  # sigmoid, two multiplies
_SOFTMAX_FLOP = 5.0  # scale, max, subtract, exp, divide
_FP32 = 4


@dataclass(frozen=True, slots=True)
class LayerWork:
    """The operators one pass of one transformer layer runs on one TP rank, in order."""

    pass_: str
    kernels: tuple[Operator, ...]
    operand_bytes: float = 2
    activation_bytes: int = 2
    stack: Stack = STACKS[DEFAULT_STACK]
    precision: str = "bf16"

    @property
    def flops(self) -> float:
        """Total FLOP of the pass, element-wise arithmetic included."""
        return sum(k.total_flops for k in self.kernels)

    @property
    def matmul_flops(self) -> float:
        """FLOP of the GEMMs and attention only (the Megatron count; element-wise
        arithmetic left out)."""
        return sum(k.total_flops for k in self.kernels if k.kind != "elementwise")

    @property
    def bytes_moved(self) -> float:
        """Total bytes moved by the pass."""
        return sum(k.total_bytes for k in self.kernels)

    @property
    def launches(self) -> int:
        """GPU kernels launched by the pass."""
        return sum(k.count * k.launches for k in self.kernels)

    def kernel(self, name: str) -> Operator:
        """The operator called ``name``; ConfigError listing the names if absent."""
        for item in self.kernels:
            if item.name == name:
                return item
        raise ConfigError(f"no operator {name!r}",
                          hint=closest(name, [k.name for k in self.kernels]))

    def names(self) -> tuple[str, ...]:
        """The operators' names, in order."""
        return tuple(k.name for k in self.kernels)

    def backward(self) -> LayerWork:
        """The backward pass of this forward work (see the module docstring)."""
        if self.pass_ != "fwd":
            raise ConfigError(f"backward() needs forward work, this is {self.pass_!r}")
        out: list[Operator] = []
        for item in reversed(self.kernels):
            out += _backward_of(item, self)
        return LayerWork("bwd", tuple(out), self.operand_bytes, self.activation_bytes,
                         self.stack, self.precision)

    def recompute(self, granularity: str = "full", matmuls: Sequence[Matmul] = (),
                  selected: frozenset[str] = CORE_ATTENTION_KERNELS) -> LayerWork:
        """What activation recomputation re-runs: everything (``full``), the operators
        ``selected`` (``selective``: core attention, or Megatron-Core's submodules of
        :mod:`~distsim_gpu.workloads.specs.recompute_modules`), or (``op``, torchtitan's
        per-op policy) every element-wise operator and unfused attention matmul and the
        weight mms of ``matmuls`` (``op_sac_matmuls`` of
        :mod:`workloads.specs.recompute`) it does not keep, each at its own shape (that
        module's docstring)."""
        if self.pass_ != "fwd":
            raise ConfigError(f"recompute() needs forward work, this is {self.pass_!r}")
        check_choice(granularity, RECOMPUTE_GRANULARITIES, key="recompute")
        if granularity == "full":
            kernels = self.kernels
        elif granularity == "selective":
            kernels = tuple(k for k in self.kernels if is_recomputed(k.name, selected))
        else:
            kernels = tuple(part for k in self.kernels
                            for part in self._op_recomputed(k, matmuls))
        return LayerWork("recompute", kernels, self.operand_bytes, self.activation_bytes,
                         self.stack, self.precision)

    def _op_recomputed(self, item: Operator, matmuls: Sequence[Matmul]) -> list[Operator]:
        """The part of forward operator ``item`` the op policy re-runs: a weight GEMM's
        unsaved mms (the whole GEMM when it is one mm; ``qkv_wk`` for a fused qkv's k
        projection), nothing of saved attention, everything of the rest."""
        if item.kind in _OP_SAVED_KINDS or item.name in _OP_SAVED_NAMES:
            return []
        if item.kind != "gemm":
            return [item]
        parts = [m for m in matmuls if m.operator == item.name]
        if sum(m.out_features for m in parts) != item.n or any(
                m.in_features != item.k for m in parts):
            raise ConfigError(f"recompute op: the layer's mms do not make up {item.name!r}",
                              key="recompute",
                              hint="pass op_sac_matmuls(model, tp=..., layer_index=...)")
        if len(parts) == 1:
            return [] if parts[0].saved else [item]
        operand = self.stack.fp8.element_bytes if item.fp8 else self.activation_bytes
        return [gemm(f"{item.name}_{m.name}", (item.m, m.out_features, item.k), operand,
                     self.activation_bytes, item.count, fp8=item.fp8, bias=item.bias)
                for m in parts if not m.saved]


def _backward_of(item: Operator, work: LayerWork) -> list[Operator]:
    """The backward operators of one forward operator, in execution order."""
    ab, stack = work.activation_bytes, work.stack
    name = item.name
    if item.kind == "attention":
        return [replace(item, name=f"{name}.bwd",
                        flops=item.flops * FLASH_ATTENTION_BWD_FLOP_RATIO,
                        bytes_moved=item.bytes_moved * 2.0)]
    if item.kind == "elementwise":
        factor = item.bwd_bytes_factor
        if factor == 0:  # a cast: its backward is the gradient cast of the GEMM it feeds
            return []
        return [replace(item, name=f"{name}.bwd", flops=item.flops * factor,
                        bytes_moved=item.bytes_moved * factor)]
    operand = stack.fp8.element_bytes if item.fp8 else ab  # 16-bit GEMMs stay 16-bit
    out: list[Operator] = _fp8_backward_casts(item, work) if item.fp8 else []
    out.append(replace(gemm(f"{name}.dgrad", (item.m, item.k, item.n), operand, ab,
                            item.count, kind=item.kind, fp8=item.fp8), grouped=item.grouped))
    if item.kind == "bmm":  # both operands are activations: two data gradients
        out.append(gemm(f"{name}.dgrad2", (item.m, item.k, item.n), operand, ab, item.count,
                        kind="bmm"))
        return out
    wgrad_out = 2.0 * _FP32 if stack.fp32_grad_accumulation else ab
    # A grouped GEMM's weight gradient is k-grouped: each group reduces over its own tokens.
    wgrad = replace(gemm(f"{name}.wgrad", (item.k, item.n, item.m), operand, wgrad_out,
                         item.count, fp8=item.fp8), grouped=item.grouped)
    if item.fp8:
        wgrad = replace(wgrad, efficiency_factor=stack.fp8.wgrad_efficiency)
    out.append(wgrad)
    if item.bias and not stack.fused_bias_grad:  # autograd's sum of dY over the tokens
        out.append(elementwise(f"{name}.bias_grad", item.m * item.n * ab, item.count,
                               flops=item.m * item.n, bwd_bytes_factor=0.0))
    sums = item.input_readers - 1  # each add reads two input gradients, writes their sum
    if sums:
        out.append(elementwise(f"{name}.grad_sum", sums * 3 * item.m * item.k * ab,
                               item.count, flops=sums * item.m * item.k, launches=sums,
                               bwd_bytes_factor=0.0))
    if stack.separate_grad_accumulation:
        out.append(elementwise(f"{name}.grad_accum",
                               stack.grad_accum_bytes(ab, work.precision) * item.k * item.n,
                               item.count, flops=item.k * item.n, bwd_bytes_factor=0.0))
    return out


def _fp8_backward_casts(item: Operator, work: LayerWork) -> list[Operator]:
    """An FP8 GEMM's backward casts (:func:`~distsim_gpu.workloads.cost.compute.fp8_casts.
    backward_casts`): its output gradient's, its input's second copy where the stack makes
    it then, the weight's transpose where the stack does not cache it."""
    kernels = fp8_casts.backward_casts(work.stack, (item.m, item.n, item.k),
                                       input_fused=item.fp8_input_fused, grouped=item.grouped,
                                       activation_bytes=work.activation_bytes)
    return [elementwise(f"{item.name}.{kernel.suffix}", kernel.bytes_moved, item.count,
                        launches=kernel.launches, bwd_bytes_factor=0.0, cast=True)
            for kernel in kernels]


def forward_layer_work(model: ModelSpec, shard: LayerShard, *, precision: str = "bf16",
                       causal: bool = True, attention: str | None = None,
                       stack: Stack | None = None) -> LayerWork:
    """The forward operators of layer ``shard.layer_index`` on one TP rank (module
    docstring).

    ``stack`` defaults to ``megatron-core``; ``attention`` (``flash`` | ``unfused``)
    overrides the stack's attention implementation.
    """
    check_shard(model, shard)
    tp, layer_index = shard.tp, shard.layer_index
    stack = (stack or STACKS[DEFAULT_STACK]).with_attention(attention)
    fp8 = _fp8(precision, stack) and not stack.fp8.high_precision_layer(layer_index,
                                                                         model.layers)
    ob, ab = bytes_per_element(precision)
    shape = _Shape(model, shard, ab, stack, fp8)
    kernels: list[Operator] = [shape.norm("input_norm", shape.norm_cast)]
    if model.mla:
        kernels += shape.mla_projections()
    else:
        kernels += _read_by(shape.linear(
            "qkv", shape.tokens, shape.q_width + 2 * shape.kv_width, model.hidden,
            bias=model.attention_bias, fused_cast=shape.norm_cast),
            3 if stack.separate_projections else 1)
    kernels += shape.core_attention(causal)
    if fp8 and stack.fp8_activation_caches:  # its E5M6 copy, cast back in the backward
        cache = fp8_casts.attention_output_cache(shape.tokens * shape.v_width, ab)
        kernels.append(_cache("attn_out", cache))
    kernels += shape.linear("attn_out", shape.tokens, model.hidden, shape.v_width,
                            bias=model.attention_bias)
    kernels += [shape.residual("attn_residual"),
                shape.norm("post_attn_norm", shape.norm_cast)]
    if model.is_moe_layer(layer_index):
        kernels += shape.moe(shard.ep, shard.etp)
        if model.shared_experts:
            kernels += shape.mlp("shared", model.shared_experts * model.ffn_hidden // tp)
    else:
        kernels += shape.mlp("mlp", model.dense_ffn_hidden // tp)
    kernels.append(shape.residual("mlp_residual"))
    if fp8 and stack.fp8.scale_update_kernel:  # amax histories rolled, scales updated
        kernels.append(elementwise("fp8_scale_update", 0.0, bwd_bytes_factor=1.0))
    return LayerWork("fwd", tuple(kernels), ob, ab, stack, precision)


def _cache(name: str, kernel: fp8_casts.CastKernel, count: int = 1) -> Operator:
    """``<name>_cache``: a cast that keeps a tensor for the backward, cast back there."""
    return elementwise(f"{name}_{kernel.suffix}", kernel.bytes_moved, count,
                       bwd_bytes_factor=1.0, cast=True)


def _fp8(precision: str, stack: Stack) -> bool:
    """Whether the linear layers run low-precision GEMMs (fp8 or fp4 on an FP8 stack)."""
    if precision not in LOW_PRECISIONS:
        return False
    if not stack.fp8_linear:
        raise ConfigError(f"stack {stack.name!r} has no FP8 kernels", key="precision",
                          hint=f"precision {precision} runs on compute.stack "
                               + ", ".join(FP8_STACKS))
    return True


def _read_by(linear: list[Operator], readers: int) -> list[Operator]:
    """A linear's operators (its casts, then its GEMM) with the GEMM's input read by
    ``readers`` operators, itself included (:attr:`Operator.input_readers`)."""
    return [*linear[:-1], replace(linear[-1], input_readers=readers)]


class _Shape:
    """One layer's sizes on one rank, and the operators built from them."""

    def __init__(self, model: ModelSpec, shard: LayerShard, ab: int, stack: Stack,
                 fp8: bool) -> None:
        b, s, tp, sp = shard.micro_batch, shard.seq_len, shard.tp, shard.sequence_parallel
        self.model, self.b, self.s, self.tp, self.ab = model, b, s, tp, ab
        self.layer_index = shard.layer_index
        self.stack, self.fp8 = stack, fp8
        self.deepep = shard.deepep
        self.fp8_dispatch = fp8 and shard.deepep
        self.tokens = b * s
        self.tokens_ew = self.tokens / tp if sp else float(self.tokens)
        self.heads_local = model.heads // tp
        kv_local = max(1, model.kv_heads // tp)  # KV heads are replicated when kv_heads < tp
        self.q_width = self.heads_local * model.qk_head_dim
        self.kv_width = kv_local * model.head_dim  # (MLA: the q_width keys, v_width values)
        self.v_width = self.heads_local * model.v_head_dim
        self.f_local = model.ffn_hidden // tp
        self.up_width = (2 if model.gated_mlp else 1) * self.f_local
        # A gated MLP's two input projections as separate linears (w1, w3) read one input.
        self.up_readers = 2 if model.gated_mlp and stack.separate_projections else 1
        # TE's LayerNormLinear / LayerNormMLP write the FP8 copy from the norm or the
        # activation kernel itself where the recipe's scale is known before the tensor is
        # (delayed scaling); otherwise each cast is a kernel of its own.
        fusable = fp8 and stack.fp8.fuses_into_producer
        self.norm_cast = fusable and stack.fp8_norm_cast_fusion
        self.activation_cast = fusable and stack.fp8_activation_cast_fusion

    def norm(self, name: str, fused_cast: bool, width: int = 0,
             tokens: float = 0.0) -> Operator:
        """Layer norm / RMSNorm over Tₑ·h (writing the next GEMM's FP8 input when
        fused), or over ``tokens`` rows of ``width`` (MLA's latents)."""
        elements = (tokens or self.tokens_ew) * (width or self.model.hidden)
        flops = _NORM_FLOP[self.model.norm] * elements
        written = self.stack.fp8.element_bytes if fused_cast else self.ab
        if self.stack.fused_norm:  # backward: 1.5x the 16-bit forward's, whatever it wrote
            return elementwise(name, elements * (self.ab + written), flops=flops,
                               bwd_bytes_factor=3.0 * self.ab / (self.ab + written))
        # PyTorch's composite: mean, variance, normalise, affine — 4 kernels, 5 passes
        return elementwise(name, 5 * elements * self.ab, flops=flops, launches=4,
                           bwd_bytes_factor=1.5)

    def linear(self, name: str, m: int, n: int, k: int, *, bias: bool,
               fused_cast: bool = False, count: int = 1,
               grouped: bool = False) -> list[Operator]:
        """A weight GEMM, in FP8 with its input cast (by its producer when
        ``fused_cast``) when the stack runs FP8; ``grouped``: its ``count`` instances are
        one grouped GEMM."""
        if not self.fp8:
            return [replace(gemm(name, (m, n, k), self.ab, self.ab, count, bias=bias),
                            grouped=grouped)]
        op = replace(gemm(name, (m, n, k), self.stack.fp8.element_bytes, self.ab, count,
                          fp8=True, bias=bias),
                     fp8_input_fused=fused_cast, grouped=grouped)
        if fused_cast:
            return [op]
        return [*(elementwise(f"{kernel.suffix}_{name}", kernel.bytes_moved, kernel.count,
                              launches=kernel.launches, bwd_bytes_factor=0.0, cast=True)
                  for kernel in fp8_casts.forward_casts(self.stack, (m, n, k), count,
                                                        grouped, self.ab)),
                op]

    def mla_projections(self) -> list[Operator]:
        """MLA's query and key-value projections (:mod:`workloads.specs.mla`): the duplicated
        down projections over all tokens (not split by tp), the latent norms, the
        head-split up projections, and the rotary embedding of the decoupled parts."""
        mla, h, tokens, fused = self.model.mla, self.model.hidden, self.tokens, \
            self.norm_cast
        assert mla is not None
        q_down, kv_down = mla.down_widths()
        out: list[Operator] = []
        if q_down:
            # The normed input's other reader is kv_down: autograd sums their gradients
            # (DeepSeek-V3's trace: LinearWithGradAccumulationFP8Backward, over T·h).
            out += _read_by(self.linear("q_down", tokens, q_down, h, bias=False,
                                        fused_cast=fused), 2)
            out.append(self.norm("q_norm", fused, q_down, float(tokens)))
        out += _read_by(self.linear("q_up" if q_down else "q_proj", tokens, self.q_width,
                                    q_down or h, bias=False, fused_cast=fused),
                        1 if q_down else 2)
        out += self.linear("kv_down", tokens, kv_down, h, bias=False, fused_cast=fused)
        out.append(self.norm("kv_norm", fused, mla.kv_lora_rank, float(tokens)))
        kv_up = self.heads_local * (mla.qk_nope_head_dim + mla.v_head_dim)
        out += self.linear("kv_up", tokens, kv_up, mla.kv_lora_rank, bias=False,
                           fused_cast=fused)
        out.append(self.mla_rope())
        return out

    def mla_rope(self) -> Operator:
        """Rotary embedding of the query's and the shared key's rotary parts (``d_r`` wide;
        ~3 FLOP per rotated element), ending in whole query and key heads (``d_qk`` wide).

        Fused (the stack's ``fused_mla_rope``), one pass: reads q (T·n·d_qk), k_nope
        (T·n·d_n) and the rotary key (T·d_r), writes q and k.  Unfused, as eager PyTorch
        runs it: the query's rotary part rotated into a tensor of its own (T·n·d_r read
        and written) and the key's (T·d_r), then ``cat`` copies the query's parts into
        whole heads (T·n·d_qk read and written) and the key's unrotated part with the
        rotary key broadcast to every head (T·n·d_n and T·d_r read, T·n·d_qk written) —
        four kernels.  The backward moves as much: the rotations' gradients, the heads'
        gradients split into contiguous parts, the broadcast's sum over the heads."""
        mla, tokens, n = self.model.mla, self.tokens, self.heads_local
        assert mla is not None
        d_qk, d_n, d_r = mla.qk_head_dim, mla.qk_nope_head_dim, mla.qk_rope_head_dim
        rotated = tokens * (n + 1) * d_r
        if self.stack.fused_mla_rope:
            read = tokens * (n * d_qk + n * d_n + d_r)
            written = 2 * tokens * n * d_qk
            launches = 1
        else:
            read = rotated + tokens * (n * d_qk + n * d_n + d_r)
            written = rotated + 2 * tokens * n * d_qk
            launches = 4
        return elementwise("attn_rope", (read + written) * self.ab, flops=3.0 * rotated,
                           bwd_bytes_factor=1.0, launches=launches)

    def core_attention(self, causal: bool) -> list[Operator]:
        """Flash attention, or the unfused scores / softmax / dropout / context (query-
        key heads ``d_qk`` wide, values ``d_v``: different under MLA)."""
        b, s, ab = self.b, self.s, self.ab
        if self.stack.attention == "flash":
            # The blocks a causal kernel computes: half the square, less in a layer
            # attending locally (the kernel skips the blocks outside the window).
            pairs = self.model.attention_pair_fraction(self.layer_index, s) if causal \
                else 1.0
            if self.model.mla is None:
                flops = 4.0 * b * s * s * self.q_width * pairs
                moved = self.tokens * (2 * self.q_width + 2 * self.kv_width) * ab \
                    + 4.0 * b * self.heads_local * s
            else:  # Q·Kᵀ over d_qk, P·V over d_v; reads q, k, v, writes o
                flops = 2.0 * b * s * s * (self.q_width + self.v_width) * pairs
                moved = self.tokens * (2 * self.q_width + 2 * self.v_width) * ab \
                    + 4.0 * b * self.heads_local * s
            # The kernel's rate depends on its sequence and head width (m and k here).
            return [Operator("attention", "attention", flops, moved, m=s,
                             k=self.model.qk_head_dim)]
        return self.unfused_attention()

    def unfused_attention(self) -> list[Operator]:
        """Scores (B·s × s over d_qk), softmax, dropout, context (over d_v), copy."""
        b, s, ab = self.b, self.s, self.ab
        batch, d = b * self.heads_local, self.model.qk_head_dim
        dv = self.model.v_head_dim
        scores = float(s * s * batch)
        out = [gemm("attn_scores", (batch * s, s, d), ab, ab, kind="bmm")]
        out[0] = replace(out[0], bytes_moved=float(batch * 2 * s * d * ab + scores * ab))
        if self.stack.fused_softmax:
            out.append(elementwise("attn_softmax", 2 * scores * ab,
                                   flops=_SOFTMAX_FLOP * scores, bwd_bytes_factor=1.5))
        else:  # scale, mask (reads a 1-byte mask), softmax
            out.append(elementwise("attn_softmax", scores * (6 * ab + 1),
                                   flops=_SOFTMAX_FLOP * scores, launches=3,
                                   bwd_bytes_factor=0.75))
        if self.stack.attention_dropout:
            out.append(elementwise("attn_dropout", scores * (2 * ab + 1), flops=scores,
                                   bwd_bytes_factor=1.0))
        context = gemm("attn_context", (batch * s, dv, s), ab, ab, kind="bmm")
        out.append(replace(context,
                           bytes_moved=float(scores * ab + 2 * batch * s * dv * ab)))
        if self.stack.context_copy:
            out.append(elementwise("attn_context_copy", 2 * self.tokens * self.v_width * ab,
                                   bwd_bytes_factor=1.0))
        return out

    def residual(self, name: str) -> Operator:
        """Bias + dropout + residual add over Tₑ·h."""
        elements = self.tokens_ew * self.model.hidden
        mask = 1.0 if self.stack.hidden_dropout else 0.0
        if self.stack.fused_bias_dropout_add:
            return elementwise(name, elements * (3 * self.ab + mask), flops=3 * elements,
                               bwd_bytes_factor=1.0)
        # bias add (read, write), dropout (read, write, mask), add (2 reads, write)
        launches = 3 if self.stack.hidden_dropout else 2
        moved = elements * (7 * self.ab + mask) if mask else elements * 5 * self.ab
        return elementwise(name, moved, flops=3 * elements, launches=launches,
                           bwd_bytes_factor=1.0)

    def mlp(self, prefix: str, f_local: int) -> list[Operator]:
        """A dense MLP of per-rank width ``f_local`` over all tokens: ``<prefix>_fc1``,
        ``<prefix>_act``, ``<prefix>_fc2`` (a dense layer's MLP, or a MoE layer's shared
        experts, which Megatron-Core runs as one MLP of their summed width on every EP
        rank, split over tp like a dense MLP)."""
        model, tokens = self.model, self.tokens
        up = (2 if model.gated_mlp else 1) * f_local
        return [*_read_by(self.linear(f"{prefix}_fc1", tokens, up, model.hidden,
                                      bias=model.mlp_bias, fused_cast=self.norm_cast),
                          self.up_readers),
                *self.activation(f"{prefix}_act", tokens, f_local=f_local,
                                 fused_cast=self.activation_cast),
                *self.linear(f"{prefix}_fc2", tokens, model.hidden, f_local,
                             bias=model.mlp_bias, fused_cast=self.activation_cast)]

    def activation(self, name: str, tokens: float, count: int = 1,
                   f_local: int = 0, fused_cast: bool = False) -> list[Operator]:
        """Bias + GeLU (reads and writes T·f/t) or SwiGLU (reads 2, writes 1); ``f_local``
        the per-rank width (default the experts'); ``fused_cast``: it writes FP8.  A
        stack that caches a SwiGLU's input in FP8 by a kernel of its own runs that first
        (``<name>_cache``, cast back in the backward)."""
        gated = self.model.gated_mlp
        f_local = f_local or self.f_local
        read = (2 if gated else 1) * tokens * f_local
        written = tokens * f_local
        flops = (_SWIGLU_FLOP if gated else _GELU_FLOP) * written
        moved = (read + written) * self.ab
        launches = 1
        if not self.stack.fused_bias_activation and self.model.mlp_bias:
            moved += 2 * read * self.ab
            launches = 2
        # Writing FP8 saves a byte per output element; the backward (1.5x the 16-bit
        # forward's bytes) reads the saved 16-bit input either way.
        fp8_saved = written * (self.ab - 1) if fused_cast else 0.0
        act = elementwise(name, moved - fp8_saved, count, flops=flops, launches=launches,
                          bwd_bytes_factor=1.5 * moved / (moved - fp8_saved))
        if not (gated and self.fp8 and self.stack.fp8_activation_caches):
            return [act]
        cache = fp8_casts.activation_cache(self.stack.fp8, read, self.ab)
        return [_cache(name, cache, count), act]

    def moe(self, ep: int, etp: int) -> list[Operator]:
        """Router, dispatch, the local experts' MLPs and combine.  With expert tensor
        parallelism ``etp`` an expert's GEMMs are ``1/etp`` of its width over the tokens
        of ``ep·etp/tp`` tensor ranks' worth of replicas (Megatron-Core's dispatcher
        gathers the routed tokens over the expert-tensor group): the FLOP per GPU is the
        same for every ``etp``, the GEMMs' shapes are not.  The router sees the rank's own
        tokens (its sequence-parallel share); the copies around the exchange are the
        dispatcher's (:mod:`~distsim_gpu.workloads.cost.compute.token_copies`)."""
        model, tokens, ab, h = self.model, self.tokens, self.ab, self.model.hidden
        local_experts = model.experts // ep
        per_expert = max(1, math.ceil(tokens * model.top_k * ep * etp
                                      / (model.experts * self.tp)))
        f_local = model.ffn_hidden // etp
        up_width = (2 if model.gated_mlp else 1) * f_local
        grouped = self.stack.grouped_gemm and local_experts > 1
        fc1 = _read_by(self.linear("expert_fc1", per_expert, up_width, h,
                                   bias=model.mlp_bias, count=local_experts,
                                   grouped=grouped), self.up_readers)
        # The dispatch reads the router's input too (the trace's MatmulToFP32Backward sum).
        gate = [replace(gemm("router", (math.ceil(self.tokens_ew), model.experts, h), ab, ab),
                        input_readers=2)]
        if self.fp8_dispatch:  # cast once before the dispatch, not each copy after it
            gate.append(elementwise(
                "cast_moe_dispatch", self.tokens_ew * h * (ab + DISPATCH_FP8_ELEMENT_BYTES),
                bwd_bytes_factor=0.0, cast=True))
            assert fc1[0].cast  # an FP8 GEMM's stand-alone input cast comes first
            if fp8_casts.dispatched_row_copy_kept(self.stack):  # the row-wise copy arrived
                del fc1[0]
            else:
                moved, launches = self.stack.fp8.dispatched_cast(per_expert * h)
                fc1[0] = replace(fc1[0], bytes_moved=moved, launches=launches)
        sent = DISPATCH_FP8_ELEMENT_BYTES if self.fp8_dispatch else ab
        dispatch, combine = (
            elementwise(name, side.bytes_moved, launches=side.launches,
                        bwd_bytes_factor=side.bwd_bytes_factor)
            for name, side in zip(("moe_dispatch", "moe_combine"), token_copies(
                model, routed_tokens=self.tokens_ew, copies=per_expert * local_experts,
                ep=ep, etp=etp, deepep=self.deepep, element_bytes=(ab, sent)), strict=True))
        return [
            *gate, dispatch, *fc1,
            *self.activation("expert_act", per_expert, local_experts, f_local=f_local),
            *self.linear("expert_fc2", per_expert, h, f_local, bias=model.mlp_bias,
                         count=local_experts, grouped=grouped),
            combine]


def layer_work(pass_: str, model: ModelSpec, shard: LayerShard, *, precision: str = "bf16",
               causal: bool = True, attention: str | None = None,
               stack: Stack | None = None) -> LayerWork:
    """The operators of pass ``pass_`` (``fwd``, ``bwd``, ``recompute``: of kind
    ``shard.recompute``) of one layer."""
    check_choice(pass_, PASSES, key="pass")
    forward = forward_layer_work(model, shard, precision=precision, causal=causal,
                                 attention=attention, stack=stack)
    if pass_ == "bwd":
        return forward.backward()
    if pass_ == "recompute":
        matmuls = op_sac_matmuls(model, tp=shard.tp, layer_index=shard.layer_index) if (
            shard.recompute == "op") else ()
        return forward.recompute(shard.recompute, matmuls, recomputed_operators(
            shard.recompute_modules, model, shard.layer_index))
    return forward


def check_shard(model: ModelSpec, shard: LayerShard) -> None:
    """A ConfigError unless the model's heads, FFN and experts split over tp and ep."""
    tp, ep = shard.tp, shard.ep
    for name, value in (("micro_batch", shard.micro_batch), ("seq_len", shard.seq_len),
                        ("tp", tp), ("ep", ep)):
        check_whole(value, key=name)
    check_tp_split(heads=model.heads, kv_heads=model.kv_heads, tp=tp)
    for name in ("ffn_hidden", "dense_ffn_hidden"):
        if getattr(model, name) % tp:
            raise ConfigError(f"{name} {getattr(model, name)} is not divisible by tp {tp}",
                              key="tp")
    check_ep_split(experts=model.experts, ep=ep)
