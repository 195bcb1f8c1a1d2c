"""Compute cost models: how long a transformer layer's kernels take on one GPU.

A cost model answers "how many seconds does pass P (``fwd``, ``bwd``, ``recompute``) of
one transformer layer take on one tensor-parallel rank", plus the embedding, the loss
(final norm, logits GEMM, cross entropy) and the optimizer step.  Two implementations
share the :class:`CostModel` protocol:

* :class:`RooflineCosts` — analytic: the layer is broken into kernels
  (:class:`LayerWork`) and each kernel takes
  ``max(FLOP / (peak · efficiency), bytes / (bandwidth · memory_efficiency))`` plus a
  launch overhead.
* :class:`TableCosts` — profiled: times measured on real GPUs (see
  :mod:`workloads.profile_layer`) read from a YAML or CSV table that records where it was
  measured, interpolated between measured points.

Kernels of one transformer layer's forward on one TP rank (``T = b·s`` tokens, ``h``
hidden, ``f`` FFN width, ``t`` tensor-parallel size; with sequence parallelism the
element-wise ops see ``T/t`` tokens, the GEMMs the all-gathered ``T``)::

    input_norm      element-wise   2·T·h elements moved
    qkv             GEMM           m=T, k=h,   n=(h + 2·d_kv)/t
    attention       flash-style    4·b·s²·h/t FLOP (halved when causal), memory ~ linear
    attn_out        GEMM           m=T, k=h/t, n=h

``attention: unfused`` (the pre-FlashAttention kernels: Megatron's fused scale-mask-softmax
between two batched GEMMs) replaces the ``attention`` kernel by three, over ``B = b·a/t``
heads that each materialise an ``s×s`` score matrix (no causal saving: the full matrix
is computed and masked)::

    attn_scores     batched GEMM   Q·Kᵀ: 2·B·s²·d FLOP, writes B·s² scores
    attn_softmax    element-wise   reads and writes the B·s² scores
    attn_context    batched GEMM   P·V:  2·B·s²·d FLOP, reads B·s² probabilities
    attn_residual   element-wise   3·T·h (dropout + residual add)
    post_attn_norm  element-wise   2·T·h
    mlp_fc1         GEMM           m=T, k=h,   n=f/t (2·f/t gated: gate and up fused)
    mlp_act         element-wise   2·T·f/t (GeLU) or 3·T·f/t (SwiGLU)
    mlp_fc2         GEMM           m=T, k=f/t, n=h
    mlp_residual    element-wise   3·T·h

A MoE layer replaces the MLP by a router GEMM (m=T, k=h, n=experts), token dispatch and
combine copies (T·top_k·h each) and ``experts/ep`` local expert MLPs, each fed
``T·top_k·ep/experts`` tokens (balanced routing: the ep ranks' ``ep·T·top_k`` token-expert
pairs spread evenly over the experts); expert weights are split over ``t`` as well
(Megatron-Core's default expert-tensor-parallel = tensor-parallel).

Backward: each GEMM becomes two of the same FLOP — data gradient ``(m, n=k, k=n)`` and
weight gradient ``(m=k, n, k=m)`` — so GEMM FLOP double; flash attention's backward runs
5 matmuls to the forward's 2 (Dao 2023, "FlashAttention-2", §3.1): 2.5× FLOP, ~2× bytes;
element-wise ops move ~2× the bytes.  Recompute: ``full`` repeats the forward, ``selective``
(Korthikanti et al. 2022 §5) only the attention kernel.
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml
from distsim_gpu.simcore.config import check_choice, check_keys, check_number, check_whole
from distsim_gpu.simcore.errors import ConfigError, ParseError, closest
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.units import parse_duration
from distsim_gpu.workloads.gpus import GpuSpec, canonical_gpu_name
from distsim_gpu.workloads.models import ModelSpec
from distsim_gpu.workloads.parallel import check_ep_split, check_tp_split

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "ATTENTION_EFFICIENCY",
    "ATTENTION_IMPLEMENTATIONS",
    "CORE_ATTENTION_KERNELS",
    "DEFAULT_GEMM_TILES",
    "FLASH_ATTENTION_BWD_FLOP_RATIO",
    "GEMM_K_HALF",
    "LAUNCH_OVERHEAD_S",
    "MATMUL_EFFICIENCY",
    "MEMORY_EFFICIENCY",
    "PASSES",
    "RECOMPUTE_GRANULARITIES",
    "TABLE_PASSES",
    "CostModel",
    "CostRow",
    "Kernel",
    "LayerWork",
    "RooflineCosts",
    "TableCosts",
    "TableHeader",
    "bytes_per_element",
    "forward_layer_work",
    "layer_work",
    "matmul_efficiency",
    "read_cost_table",
    "stores_attention_scores",
    "write_cost_table",
]

PASSES = ("fwd", "bwd", "recompute")
ATTENTION_IMPLEMENTATIONS = ("flash", "unfused")
# The kernels selective recomputation re-runs (Korthikanti et al. 2022 §5: "core
# attention", from the scores to the context), for either implementation.
CORE_ATTENTION_KERNELS = frozenset({"attention", "attn_scores", "attn_softmax",
                                    "attn_context"})
RECOMPUTE_GRANULARITIES = ("full", "selective")
TABLE_PASSES = ("fwd", "bwd", "recompute", "recompute_selective")

# ------------------------------------------------------------------ default constants
# Asymptotic fraction of dense tensor-core peak a large, well-shaped cuBLAS GEMM reaches.
# Bekman, "Machine Learning Engineering" (github.com/stas00/ml-engineering,
# compute/accelerator, "Maximum Achievable Matmul FLOPS" table, bf16, CUDA 12.1): best
# shapes reach 85.9 % on A100 SXM (267.9 of 312 TFLOP/s) and 80.1 % on H100 SXM (792.1 of
# 989); typical training shapes sit a little lower, hence 0.8.
MATMUL_EFFICIENCY = 0.8
# Candidate thread-block tiles (tile_m, tile_n, efficiency relative to the best tile).
# Tile and wave quantisation follow NVIDIA's "Matrix Multiplication Background User's
# Guide" (Deep Learning Performance docs, §2.3 and ch. 3): a GEMM runs as
# ceil(m/tile_m)·ceil(n/tile_n) tiles, in waves of one tile per SM; larger tiles reuse
# more data and run closer to peak.  The relative efficiencies are our assumption (the
# guide shows the ordering, not a number); cuBLAS's heuristic is modelled as picking the
# candidate that finishes first.
DEFAULT_GEMM_TILES: tuple[tuple[int, int, float], ...] = (
    (256, 128, 1.0), (128, 128, 0.95), (128, 64, 0.85), (64, 64, 0.7))
# Small-k penalty k / (k + GEMM_K_HALF): each tile pays a fixed prologue/epilogue (load,
# write back its C tile) that the k-loop amortises.  Our assumption: at k = 64 a tile
# spends as long outside its main loop as in it.
GEMM_K_HALF = 64.0
# Fraction of peak a fused (flash) attention kernel reaches: FlashAttention-2 reaches
# 50-73 % of A100 peak forward (Dao 2023, abstract) but ~35 % of H100 peak, where
# FlashAttention-3 reaches up to 75 % (Shah et al. 2024, abstract).  0.5 is in between.
ATTENTION_EFFICIENCY = 0.5
# Dao 2023 §3.1: the backward pass runs 5 matmuls (S, dV, dP, dQ, dK) to the forward's 2.
FLASH_ATTENTION_BWD_FLOP_RATIO = 2.5
# Fraction of datasheet HBM bandwidth a streaming kernel achieves; device-memory copy
# benchmarks reach ~80-92 % (e.g. Jia et al. 2018, "Dissecting the NVIDIA Volta GPU
# Architecture via Microbenchmarking": ~750 of 900 GB/s on V100).
MEMORY_EFFICIENCY = 0.85
# Per-kernel launch/scheduling gap when the CPU queue runs ahead: a few µs (NVIDIA blog
# "Getting Started with CUDA Graphs", 2019: back-to-back short kernels cost a few µs each).
LAUNCH_OVERHEAD_S = 3e-6
# Bytes of HBM traffic per parameter for one mixed-precision Adam step with fp32 master
# weights, fp32 main gradients and fp32 moments (the 4+4+4 B "K = 12" optimizer state of
# Rajbhandari et al. 2020, "ZeRO", §3.1): read master, grad, m, v (16 B), write master,
# m, v (12 B) and the bf16/fp16 model copy (2 B) = 30 B.  With 16-bit gradients: 28 B.
ADAM_BYTES_PER_PARAM = 30.0

_FLOAT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
_LAYER_KINDS = ("transformer_layer", "moe_layer")


def bytes_per_element(precision: str) -> tuple[int, int]:
    """``(GEMM operand bytes, activation bytes)`` for a precision.

    fp8 GEMMs read 1-byte operands but keep activations and outputs in 16 bits
    (Transformer Engine's recipe); other precisions use one size for both.
    """
    check_choice(precision, _BYTES, key="precision")
    operand = _BYTES[precision]
    return operand, 2 if precision == "fp8" else operand


# ------------------------------------------------------------------------- kernels
@dataclass(frozen=True, slots=True)
class Kernel:
    """One GPU kernel of a layer: FLOP and bytes moved per instance, ``count`` instances.

    ``kind`` is ``gemm`` (with shape ``m×k · k×n``), ``attention`` (fused flash-style) or
    ``elementwise`` (memory-bound; FLOP taken as 0).
    """

    name: str
    kind: str
    flops: float
    bytes_moved: float
    m: int = 0
    n: int = 0
    k: int = 0
    count: int = 1

    @property
    def total_flops(self) -> float:
        """FLOP of all instances."""
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        """Bytes moved by all instances."""
        return self.bytes_moved * self.count


def _gemm(name: str, m: int, n: int, k: int, operand_bytes: int, out_bytes: int,
          count: int = 1) -> Kernel:
    moved = (m * k + k * n) * operand_bytes + m * n * out_bytes
    return Kernel(name, "gemm", 2.0 * m * n * k, float(moved), m, n, k, count)


def _elementwise(name: str, bytes_moved: float, count: int = 1) -> Kernel:
    return Kernel(name, "elementwise", 0.0, float(bytes_moved), count=count)


@dataclass(frozen=True, slots=True)
class LayerWork:
    """The kernels one pass of one transformer layer runs on one TP rank, in order."""

    pass_: str
    kernels: tuple[Kernel, ...]
    operand_bytes: int = 2
    activation_bytes: int = 2

    @property
    def flops(self) -> float:
        """Total FLOP of the pass."""
        return sum(k.total_flops for k in self.kernels)

    @property
    def bytes_moved(self) -> float:
        """Total bytes moved by the pass."""
        return sum(k.total_bytes for k in self.kernels)

    def kernel(self, name: str) -> Kernel:
        """The kernel called ``name``; ConfigError listing the names if absent."""
        for item in self.kernels:
            if item.name == name:
                return item
        raise ConfigError(f"no kernel {name!r}", hint=closest(name, [k.name for k in
                                                                    self.kernels]))

    def backward(self) -> LayerWork:
        """The backward pass of this forward work (see the module docstring)."""
        if self.pass_ != "fwd":
            raise ConfigError(f"backward() needs forward work, this is {self.pass_!r}")
        out: list[Kernel] = []
        ob, ab = self.operand_bytes, self.activation_bytes
        for item in reversed(self.kernels):
            if item.kind == "gemm":
                out.append(_gemm(f"{item.name}.dgrad", item.m, item.k, item.n, ob, ab,
                                 item.count))
                out.append(_gemm(f"{item.name}.wgrad", item.k, item.n, item.m, ob, ab,
                                 item.count))
            elif item.kind == "attention":
                out.append(replace(item, name=f"{item.name}.bwd",
                                   flops=item.flops * FLASH_ATTENTION_BWD_FLOP_RATIO,
                                   bytes_moved=item.bytes_moved * 2.0))
            else:
                out.append(replace(item, name=f"{item.name}.bwd",
                                   bytes_moved=item.bytes_moved * 2.0))
        return LayerWork("bwd", tuple(out), ob, ab)

    def recompute(self, granularity: str = "full") -> LayerWork:
        """What activation recomputation re-runs: everything, or only attention."""
        if self.pass_ != "fwd":
            raise ConfigError(f"recompute() needs forward work, this is {self.pass_!r}")
        check_choice(granularity, RECOMPUTE_GRANULARITIES, key="recompute")
        kernels = self.kernels if granularity == "full" else tuple(
            k for k in self.kernels if k.name in CORE_ATTENTION_KERNELS)
        return LayerWork("recompute", kernels, self.operand_bytes, self.activation_bytes)


def forward_layer_work(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                       sequence_parallel: bool = False, precision: str = "bf16",
                       layer_index: int = 0, ep: int = 1, causal: bool = True,
                       attention: str = "flash") -> LayerWork:
    """The forward kernels of layer ``layer_index`` on one TP rank (module docstring)."""
    _check_shard(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, ep=ep)
    check_choice(attention, ATTENTION_IMPLEMENTATIONS, key="attention")
    ob, ab = bytes_per_element(precision)
    h, f, b, s = model.hidden, model.ffn_hidden, micro_batch, seq_len
    tokens = b * s
    tokens_ew = tokens / tp if sequence_parallel else float(tokens)
    heads_local = model.heads // tp
    kv_local = max(1, model.kv_heads // tp)  # KV heads are replicated when kv_heads < tp
    q_width = heads_local * model.head_dim
    kv_width = kv_local * model.head_dim
    attention_flops = 4.0 * b * s * s * q_width * (0.5 if causal else 1.0)
    attention_bytes = tokens * (2 * q_width + 2 * kv_width) * ab + 4.0 * b * heads_local * s
    if attention == "flash":
        core = [Kernel("attention", "attention", attention_flops, attention_bytes)]
    else:
        core = _unfused_attention(b * heads_local, s, model.head_dim, ob, ab)
    kernels: list[Kernel] = [
        _elementwise("input_norm", 2 * tokens_ew * h * ab),
        _gemm("qkv", tokens, q_width + 2 * kv_width, h, ob, ab),
        *core,
        _gemm("attn_out", tokens, h, q_width, ob, ab),
        _elementwise("attn_residual", 3 * tokens_ew * h * ab),
        _elementwise("post_attn_norm", 2 * tokens_ew * h * ab),
    ]
    f_local = f // tp
    up_width = (2 if model.gated_mlp else 1) * f_local
    act_factor = 3 if model.gated_mlp else 2
    if model.is_moe_layer(layer_index):
        local_experts = model.experts // ep
        per_expert = max(1, math.ceil(tokens * model.top_k * ep / model.experts))
        kernels += [
            _gemm("router", tokens, model.experts, h, ob, ab),
            _elementwise("moe_dispatch", (tokens + tokens * model.top_k) * h * ab),
            _gemm("expert_fc1", per_expert, up_width, h, ob, ab, local_experts),
            _elementwise("expert_act", act_factor * per_expert * f_local * ab,
                         local_experts),
            _gemm("expert_fc2", per_expert, h, f_local, ob, ab, local_experts),
            _elementwise("moe_combine", (tokens * model.top_k + tokens) * h * ab),
        ]
    else:
        kernels += [
            _gemm("mlp_fc1", tokens, up_width, h, ob, ab),
            _elementwise("mlp_act", act_factor * tokens * f_local * ab),
            _gemm("mlp_fc2", tokens, h, f_local, ob, ab),
        ]
    kernels.append(_elementwise("mlp_residual", 3 * tokens_ew * h * ab))
    return LayerWork("fwd", tuple(kernels), ob, ab)


def stores_attention_scores(costs: object) -> bool:
    """Whether a cost model's attention keeps the ``s×s`` softmax output for backward
    (what the memory model's ``flash_attention=False`` counts): only a roofline with
    ``attention: unfused``.  A profiled table does not say how it ran attention; it is
    taken as flash, the kernels current stacks use."""
    return getattr(costs, "attention", "flash") == "unfused"


def _unfused_attention(batch: int, s: int, d: int, ob: int, ab: int) -> list[Kernel]:
    """Pre-FlashAttention core attention over ``batch`` heads (module docstring).

    The batched GEMMs are one launch each, so they stand as one GEMM of ``m = batch·s``
    rows (the tiles and waves of the whole batch), with the bytes of every head's
    operands and ``s×s`` result.
    """
    scores = s * s * batch
    return [
        Kernel("attn_scores", "gemm", 2.0 * batch * s * s * d,
               float(batch * 2 * s * d * ob + scores * ab), batch * s, s, d),
        _elementwise("attn_softmax", 2 * scores * ab),
        Kernel("attn_context", "gemm", 2.0 * batch * s * s * d,
               float(scores * ob + batch * s * d * ob + batch * s * d * ab), batch * s, d, s),
    ]


def layer_work(pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
               sequence_parallel: bool = False, precision: str = "bf16",
               layer_index: int = 0, ep: int = 1, causal: bool = True,
               recompute: str = "full", attention: str = "flash") -> LayerWork:
    """The kernels of pass ``pass_`` (``fwd``, ``bwd``, ``recompute``) of one layer."""
    check_choice(pass_, PASSES, key="pass")
    forward = forward_layer_work(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                                 sequence_parallel=sequence_parallel, precision=precision,
                                 layer_index=layer_index, ep=ep, causal=causal,
                                 attention=attention)
    if pass_ == "bwd":
        return forward.backward()
    if pass_ == "recompute":
        return forward.recompute(recompute)
    return forward


def matmul_efficiency(m: int, n: int, k: int, *, sm_count: int,
                      asymptotic_efficiency: float = MATMUL_EFFICIENCY,
                      tiles: Sequence[tuple[int, int, float]] = DEFAULT_GEMM_TILES,
                      k_half: float = GEMM_K_HALF) -> float:
    """Fraction of peak a ``(m×k)·(k×n)`` GEMM reaches on a GPU with ``sm_count`` SMs.

    For each candidate tile ``(tm, tn, r)``: ``tiles = ⌈m/tm⌉·⌈n/tn⌉``,
    ``waves = ⌈tiles/sm_count⌉``; wave efficiency ``tiles / (waves·sm_count)`` (idle SMs
    in the last wave), tile efficiency ``m·n / (⌈m/tm⌉·tm·⌈n/tn⌉·tn)`` (padding).  The
    result is ``asymptotic_efficiency · max_tile(r · wave · tile) · k/(k + k_half)``.  It is
    ~asymptotic for large GEMMs and falls for small or skinny ones.
    """
    for name, value in (("m", m), ("n", n), ("k", k), ("sm_count", sm_count)):
        check_whole(value, key=name)
    best = 0.0
    for tile_m, tile_n, relative in tiles:
        tiles_m, tiles_n = -(-m // tile_m), -(-n // tile_n)
        count = tiles_m * tiles_n
        waves = -(-count // sm_count)
        wave_eff = count / (waves * sm_count)
        tile_eff = (m * n) / (tiles_m * tile_m * tiles_n * tile_n)
        best = max(best, relative * wave_eff * tile_eff)
    return asymptotic_efficiency * best * k / (k + k_half)


# ---------------------------------------------------------------------- protocol
@runtime_checkable
class CostModel(Protocol):
    """What the workload builder asks of a cost model.  Every time is in seconds."""

    def layer_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                     tp: int = 1, sequence_parallel: bool = False, layer_index: int = 0,
                     ep: int = 1, recompute: str = "full") -> float:
        """One pass of transformer layer ``layer_index`` on one TP rank."""
        ...

    def embedding_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int,
                         seq_len: int, tp: int = 1,
                         sequence_parallel: bool = False) -> float:
        """Word (+ position) embedding lookup forward, or its gradient scatter backward."""
        ...

    def loss_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                    tp: int = 1, sequence_parallel: bool = False) -> float:
        """Final norm, logits GEMM (h × V/tp) and cross entropy."""
        ...

    def optimizer_step_time_s(self, params_on_gpu: float) -> float:
        """One optimizer step over ``params_on_gpu`` parameters (memory bound)."""
        ...


# ---------------------------------------------------------------------- roofline
@dataclass(frozen=True, slots=True)
class RooflineCosts:
    """Analytic costs: each kernel at the slower of its compute and memory roofline.

    ``time = count · (max(FLOP / (peak · eff), bytes / (bw · memory_efficiency)) +
    launch_overhead_s)`` with ``eff`` = :func:`matmul_efficiency` for GEMMs and
    ``attention_efficiency`` for fused attention; element-wise kernels are memory bound.
    ``peak`` is the GPU's dense rate at ``precision``.  Every default is a module constant
    with its source; all are overridable.
    """

    gpu: GpuSpec
    precision: str = "bf16"
    matmul_asymptotic_efficiency: float = MATMUL_EFFICIENCY
    attention_efficiency: float = ATTENTION_EFFICIENCY
    memory_efficiency: float = MEMORY_EFFICIENCY
    launch_overhead_s: float = LAUNCH_OVERHEAD_S
    gemm_tiles: tuple[tuple[int, int, float], ...] = DEFAULT_GEMM_TILES
    gemm_k_half: float = GEMM_K_HALF
    causal: bool = True
    optimizer_bytes_per_param: float = ADAM_BYTES_PER_PARAM
    attention: str = "flash"

    def __post_init__(self) -> None:
        self.gpu.peak_flops(self.precision)  # ConfigError if the GPU lacks the precision
        bytes_per_element(self.precision)
        check_choice(self.attention, ATTENTION_IMPLEMENTATIONS, key="attention")
        for name in ("matmul_asymptotic_efficiency", "attention_efficiency",
                     "memory_efficiency"):
            check_number(getattr(self, name), key=name, above=True, maximum=1)
        for name in ("launch_overhead_s", "gemm_k_half", "optimizer_bytes_per_param"):
            check_number(getattr(self, name), key=name)
        if not self.gemm_tiles:
            raise ConfigError("needs at least one tile", key="gemm_tiles")

    def to_dict(self) -> dict[str, Any]:
        """Resolved settings, every default filled in (JSON/YAML-ready)."""
        return {"kind": "roofline", "gpu": self.gpu.to_dict(), "precision": self.precision,
                "matmul_asymptotic_efficiency": self.matmul_asymptotic_efficiency,
                "attention_efficiency": self.attention_efficiency,
                "memory_efficiency": self.memory_efficiency,
                "launch_overhead_s": self.launch_overhead_s,
                "gemm_tiles": [list(t) for t in self.gemm_tiles],
                "gemm_k_half": self.gemm_k_half, "causal": self.causal,
                "optimizer_bytes_per_param": self.optimizer_bytes_per_param,
                "attention": self.attention}

    @property
    def peak_flops_per_s(self) -> float:
        """The GPU's dense peak at this precision."""
        return self.gpu.peak_flops(self.precision)

    def matmul_efficiency(self, m: int, n: int, k: int) -> float:
        """:func:`matmul_efficiency` with this model's GPU and constants."""
        return matmul_efficiency(m, n, k, sm_count=self.gpu.sm_count,
                                 asymptotic_efficiency=self.matmul_asymptotic_efficiency,
                                 tiles=self.gemm_tiles, k_half=self.gemm_k_half)

    def kernel_time_s(self, kernel: Kernel) -> float:
        """Seconds for all ``kernel.count`` instances of a kernel."""
        memory_s = kernel.bytes_moved / (self.gpu.memory_bandwidth_bytes_per_s
                                         * self.memory_efficiency)
        compute_s = 0.0
        if kernel.flops > 0:
            if kernel.kind == "gemm":
                efficiency = self.matmul_efficiency(kernel.m, kernel.n, kernel.k)
            elif kernel.kind == "attention":
                efficiency = self.attention_efficiency
            else:
                efficiency = 1.0
            compute_s = kernel.flops / (self.peak_flops_per_s * efficiency)
        return kernel.count * (max(compute_s, memory_s) + self.launch_overhead_s)

    def work_time_s(self, work: LayerWork) -> float:
        """Seconds for every kernel of ``work``, one after another."""
        return sum(self.kernel_time_s(k) for k in work.kernels)

    def layer_work(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                   tp: int = 1, sequence_parallel: bool = False, layer_index: int = 0,
                   ep: int = 1, recompute: str = "full") -> LayerWork:
        """:func:`layer_work` at this model's precision and causality."""
        return layer_work(pass_, model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                          sequence_parallel=sequence_parallel, precision=self.precision,
                          layer_index=layer_index, ep=ep, causal=self.causal,
                          recompute=recompute, attention=self.attention)

    def layer_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                     tp: int = 1, sequence_parallel: bool = False, layer_index: int = 0,
                     ep: int = 1, recompute: str = "full") -> float:
        """Seconds of one pass of one layer on one TP rank (kernels in sequence)."""
        return self.work_time_s(self.layer_work(
            pass_, model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
            sequence_parallel=sequence_parallel, layer_index=layer_index, ep=ep,
            recompute=recompute))

    def embedding_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int,
                         seq_len: int, tp: int = 1,
                         sequence_parallel: bool = False) -> float:
        """Vocabulary-parallel lookup: read this rank's rows (~T·h/tp), write T·h;
        learned positions add a read and an add (2·T·h), an embedding norm 2·T·h.
        Backward scatters the gradient: 2× the bytes.  Recompute: 0 (never recomputed).
        """
        check_choice(pass_, PASSES, key="pass")
        _check_shard(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, ep=1)
        if pass_ == "recompute":
            return 0.0
        _, ab = bytes_per_element(self.precision)
        th = micro_batch * seq_len * model.hidden
        moved = th * ab * (1.0 / tp + 1.0)
        if model.position == "learned":
            moved += 2.0 * th * ab
        if model.embedding_norm:
            moved += 2.0 * th * ab / (tp if sequence_parallel else 1)
        if pass_ == "bwd":
            moved *= 2.0
        return self.kernel_time_s(_elementwise("embedding", moved))

    def loss_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                    tp: int = 1, sequence_parallel: bool = False) -> float:
        """Final norm, logits GEMM (m=T, k=h, n=V/tp) and vocabulary-parallel cross
        entropy (reads the logits, writes fp32 softmax: T·V/tp·(2 + 4) bytes; backward the
        reverse).  Backward also runs the GEMM's dgrad and wgrad.  Recompute: 0.
        """
        check_choice(pass_, PASSES, key="pass")
        _check_shard(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, ep=1)
        if pass_ == "recompute":
            return 0.0
        ob, ab = bytes_per_element(self.precision)
        tokens = micro_batch * seq_len
        tokens_ew = tokens / tp if sequence_parallel else float(tokens)
        vocab_local = -(-model.vocab // tp)
        norm = _elementwise("final_norm", 2 * tokens_ew * model.hidden * ab)
        logits = _gemm("logits", tokens, vocab_local, model.hidden, ob, ab)
        entropy = _elementwise("cross_entropy", tokens * vocab_local * (ab + 4))
        work = LayerWork("fwd", (norm, logits, entropy), ob, ab)
        if pass_ == "bwd":
            work = work.backward()
        return self.work_time_s(work)

    def optimizer_step_time_s(self, params_on_gpu: float) -> float:
        """``params · optimizer_bytes_per_param / (bw · memory_efficiency)`` + one launch.

        Pass the parameters this GPU updates (its ZeRO shard when the optimizer state is
        sharded).  0 parameters take 0 s.
        """
        check_number(params_on_gpu, key="params_on_gpu")
        if params_on_gpu == 0:
            return 0.0
        return self.kernel_time_s(_elementwise(
            "adam", params_on_gpu * self.optimizer_bytes_per_param))


# ------------------------------------------------------------------- cost tables
@dataclass(frozen=True, slots=True)
class TableHeader:
    """Where a cost table was measured.  ``software``, ``date`` and ``source`` are required."""

    software: str
    date: str
    source: str
    gpu: str = ""
    precision: str = ""
    model: str = ""
    notes: str = ""


@dataclass(frozen=True, slots=True)
class CostRow:
    """One measured time: ``kind`` × ``pass_`` at a shape, on ``gpu``, in seconds.

    ``kind``: ``transformer_layer``, ``moe_layer``, ``embedding``, ``loss`` or any finer
    kernel name; ``pass_``: one of :data:`TABLE_PASSES`.
    """

    gpu: str
    kind: str
    pass_: str
    micro_batch: int
    seq_len: int
    hidden: int
    tp: int
    time_s: float
    sequence_parallel: bool = False

    @property
    def tokens(self) -> int:
        """micro_batch · seq_len."""
        return self.micro_batch * self.seq_len


_HEADER_FIELDS = tuple(f.name for f in fields(TableHeader))
_REQUIRED_HEADER = ("software", "date", "source")
_COLUMNS = ("gpu", "kind", "pass", "micro_batch", "seq_len", "hidden", "tp",
            "sequence_parallel", "time_s")
_REQUIRED_COLUMNS = ("kind", "pass", "micro_batch", "seq_len", "hidden", "tp", "time_s")
_INT_COLUMNS = ("micro_batch", "seq_len", "hidden", "tp")


def read_cost_table(path: str | os.PathLike[str]) -> tuple[TableHeader, tuple[CostRow, ...]]:
    """Read a YAML (``.yaml``/``.yml``) or CSV (``.csv``) cost table.

    YAML: top-level header fields (``software``, ``date``, ``source`` required; ``gpu``,
    ``precision``, ``model``, ``notes`` optional) and ``rows:``, a list of mappings with
    the columns below.  CSV: header fields as leading ``# key: value`` comment lines, then
    a column line, then rows.  Columns: ``kind``, ``pass``, ``micro_batch``, ``seq_len``,
    ``hidden``, ``tp``, ``time_s`` (a number of seconds or a duration such as
    ``"1.2 ms"``), optional ``gpu`` (default: the header's) and ``sequence_parallel``
    (default false).  Malformed content raises :class:`ParseError` with the file and line;
    an unreadable file :class:`ConfigError`.
    """
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"cannot read cost table: {error.strerror or error}",
                          source=name) from None
    if _table_format(name) == ".csv":
        return _read_csv(text, name)
    return _read_yaml(text, name)


def write_cost_table(path: str | os.PathLike[str], header: TableHeader,
                     rows: Iterable[CostRow]) -> None:
    """Write a cost table (format by suffix, as :func:`read_cost_table` reads it).

    Written atomically; times are written with ``repr`` so they read back exactly.
    """
    name = os.fspath(path)
    suffix = _table_format(name)
    rows = tuple(rows)
    if suffix in (".yaml", ".yml"):
        doc: dict[str, Any] = {f: getattr(header, f) for f in _HEADER_FIELDS
                               if getattr(header, f) or f in _REQUIRED_HEADER}
        doc["rows"] = [_row_dict(r) for r in rows]
        atomic_write_text(name, yaml.safe_dump(doc, sort_keys=False, default_flow_style=None,
                                               width=200))
    else:
        buffer = io.StringIO()
        buffer.write("# distsim cost table\n")
        for f in _HEADER_FIELDS:
            value = getattr(header, f)
            if value or f in _REQUIRED_HEADER:
                buffer.write(f"# {f}: {_one_line(value)}\n")
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for r in rows:
            d = _row_dict(r)
            writer.writerow([d[c] for c in _COLUMNS])
        atomic_write_text(name, buffer.getvalue())


def _table_format(name: str) -> str:
    """The file's suffix, lower-cased, when it is one a cost table is written in."""
    return check_choice(Path(name).suffix, (".yaml", ".yml", ".csv"), key=None, source=name,
                        what="cost table format", fold_case=True)


def _one_line(value: str) -> str:
    return " ".join(str(value).split())


def _row_dict(row: CostRow) -> dict[str, Any]:
    return {"gpu": row.gpu, "kind": row.kind, "pass": row.pass_,
            "micro_batch": row.micro_batch, "seq_len": row.seq_len, "hidden": row.hidden,
            "tp": row.tp, "sequence_parallel": row.sequence_parallel,
            "time_s": row.time_s}


def _read_yaml(text: str, name: str) -> tuple[TableHeader, tuple[CostRow, ...]]:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise ParseError(f"malformed YAML: {error.problem or error}", source=name,
                         line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as error:
        raise ParseError(f"malformed YAML: {error}", source=name) from None
    finally:
        loader.dispose()
    if not isinstance(data, Mapping) or node is None:
        raise ParseError("a cost table must be a mapping with header fields and 'rows'",
                         source=name, line=1)
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    values = {str(k.value): v for k, v in node.value}
    check_keys(data, (*_HEADER_FIELDS, "rows"), source=name, lines=lines, error=ParseError)
    header = _header({k: v for k, v in data.items() if k != "rows"}, name, lines)
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise ParseError("'rows' must be a non-empty list of measurements", source=name,
                         key="rows", line=lines.get("rows", 1))
    row_nodes = values["rows"].value
    rows = []
    for index, (raw, row_node) in enumerate(zip(raw_rows, row_nodes)):
        line = row_node.start_mark.line + 1
        if not isinstance(raw, Mapping):
            raise ParseError("a row must be a mapping of column to value", source=name,
                             key=f"rows[{index}]", line=line)
        rows.append(_row({str(k): v for k, v in raw.items()}, header, name, line,
                         f"rows[{index}]"))
    return header, _check_duplicates(rows, name, [n.start_mark.line + 1 for n in row_nodes])


def _read_csv(text: str, name: str) -> tuple[TableHeader, tuple[CostRow, ...]]:
    header_data: dict[str, Any] = {}
    header_lines: dict[str, int] = {}
    columns: list[str] | None = None
    rows: list[CostRow] = []
    row_lines: list[int] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line[1:].strip()
            key, sep, value = body.partition(":")
            if columns is None and sep and key.strip().isidentifier():
                key = check_choice(key.strip(), _HEADER_FIELDS, key=None, source=name,
                                   what="header field", line=number, error=ParseError)
                header_data[key] = value.strip()
                header_lines[key] = number
            continue
        cells = next(csv.reader([raw_line]))
        cells = [c.strip() for c in cells]
        if columns is None:
            for column in cells:
                check_choice(column, _COLUMNS, key=None, source=name, what="column",
                             line=number, error=ParseError)
            missing = [c for c in _REQUIRED_COLUMNS if c not in cells]
            if missing:
                raise ParseError(f"missing column(s) {', '.join(missing)}", source=name,
                                 line=number, hint="columns: " + ", ".join(_COLUMNS))
            columns = cells
            header = _header(header_data, name, header_lines)
            continue
        if len(cells) != len(columns):
            raise ParseError(f"expected {len(columns)} cells, found {len(cells)}",
                             source=name, line=number, hint=", ".join(columns))
        rows.append(_row(dict(zip(columns, cells)), header, name, number, None))
        row_lines.append(number)
    if columns is None:
        raise ParseError("no column line", source=name, line=1,
                         hint="expected a line such as " + ",".join(_COLUMNS))
    if not rows:
        raise ParseError("no measurements", source=name)
    return header, _check_duplicates(rows, name, row_lines)


def _header(data: Mapping[str, Any], name: str, lines: Mapping[str, int]) -> TableHeader:
    values: dict[str, str] = {}
    for key in _HEADER_FIELDS:
        value = data.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            if key in _REQUIRED_HEADER:
                raise ParseError(f"missing header field {key!r}", source=name, line=1,
                                 hint="a cost table records where it was measured: "
                                      "gpu, software, date, source")
            continue
        if isinstance(value, (_dt.date, _dt.datetime)):
            value = value.isoformat()
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ParseError(f"header field must be text, got {value!r}", source=name,
                             key=key, line=lines.get(key))
        values[key] = str(value).strip()
    if "gpu" in values:
        values["gpu"] = canonical_gpu_name(values["gpu"])
    return TableHeader(**values)


def _row(data: Mapping[str, Any], header: TableHeader, name: str, line: int,
         key: str | None) -> CostRow:
    def where(column: str) -> str:
        return f"{key}.{column}" if key else column

    def fail(message: str, column: str, hint: str | None = None) -> ParseError:
        return ParseError(message, source=name, line=line, key=where(column), hint=hint)

    check_keys(data, _COLUMNS, prefix=key or "", source=name, what="column", line=line,
               error=ParseError)
    for column in _REQUIRED_COLUMNS:
        if column not in data or data[column] in (None, ""):
            raise fail("missing value", column)
    gpu = data.get("gpu") or header.gpu
    if not gpu:
        raise fail("no GPU: give a gpu column or a gpu header field", "gpu")
    kind = str(data["kind"]).strip()
    if not kind:
        raise fail("empty kind", "kind")
    pass_ = check_choice(str(data["pass"]).strip(), TABLE_PASSES, key=where("pass"),
                         source=name, line=line, fold_case=True, error=ParseError)
    ints: dict[str, int] = {}
    for column in _INT_COLUMNS:
        value = data[column]
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        ints[column] = check_whole(value, key=where(column), source=name, line=line,
                                   error=ParseError)
    sp_raw = data.get("sequence_parallel", False)
    if isinstance(sp_raw, str):
        text = sp_raw.strip().lower()
        if text not in ("true", "false", "1", "0", "yes", "no", ""):
            raise fail(f"must be true or false, got {sp_raw!r}", "sequence_parallel")
        sp = text in ("true", "1", "yes")
    elif isinstance(sp_raw, bool):
        sp = sp_raw
    else:
        raise fail(f"must be true or false, got {sp_raw!r}", "sequence_parallel")
    raw_time = data["time_s"]
    if isinstance(raw_time, str) and _FLOAT.match(raw_time):
        raw_time = float(raw_time)
    try:
        time_s = parse_duration(raw_time, allow_zero=False)
    except ParseError as error:
        raise fail(error.message, "time_s", error.hint) from None
    return CostRow(canonical_gpu_name(str(gpu)), kind, pass_, ints["micro_batch"],
                   ints["seq_len"], ints["hidden"], ints["tp"], time_s, sp)


def _row_key(row: CostRow) -> tuple[Any, ...]:
    return (row.gpu, row.kind, row.pass_, row.micro_batch, row.seq_len, row.hidden, row.tp,
            row.sequence_parallel)


def _check_duplicates(rows: list[CostRow], name: str,
                      lines: Sequence[int]) -> tuple[CostRow, ...]:
    seen: dict[tuple[Any, ...], int] = {}
    for row, line in zip(rows, lines):
        key = _row_key(row)
        if key in seen:
            raise ParseError(f"duplicate measurement (first on line {seen[key]})",
                             source=name, line=line)
        seen[key] = line
    return tuple(rows)


class TableCosts:
    """Profiled costs from a cost table, for one GPU of the table.

    Lookup: rows of the same ``(gpu, kind, pass, hidden, tp, sequence_parallel)`` form a
    *group*; a group with no row is a :class:`ConfigError` naming the missing key and
    what the table has.  Within the group:

    1. a row at exactly ``(micro_batch, seq_len)`` gives its time;
    2. otherwise the points are the group's rows at the same ``seq_len`` (or, if it has
       none, all the group's rows — recorded as a warning, since attention is not linear
       in tokens across sequence lengths — keeping per token count the row nearest in
       ``seq_len``), keyed by tokens ``micro_batch·seq_len``;
    3. between two points: linear in tokens; outside them (or with one point):
       proportional to tokens from the nearest point, recorded as a warning.

    Warnings accumulate, without repeats, in :attr:`warnings` (a per-instance record; no
    global state).  Layer kinds: ``transformer_layer`` (dense) and ``moe_layer``; the
    recompute pass reads pass ``recompute`` (full) or ``recompute_selective``.  Embedding
    and loss read kinds ``embedding`` and ``loss``; expert parallelism and vocabulary size
    are not keys (a table is measured for one model family — see the header's ``model``).
    Kinds the table lacks entirely, and the optimizer step, go to ``fallback`` if one is
    given, else raise :class:`ConfigError`.
    """

    __slots__ = ("_groups", "_warnings", "fallback", "gpu", "header", "rows", "source")

    def __init__(self, header: TableHeader, rows: Iterable[CostRow], *, gpu: str | None = None,
                 fallback: CostModel | None = None, source: str | None = None) -> None:
        self.header = header
        self.rows = tuple(rows)
        self.source = source
        self.fallback = fallback
        gpus = sorted({r.gpu for r in self.rows})
        if not gpus:
            raise ConfigError("cost table has no rows", source=source)
        if gpu is None:
            if len(gpus) > 1:
                raise ConfigError("cost table holds several GPUs; choose one", source=source,
                                  key="gpu", hint="valid: " + ", ".join(gpus))
            chosen = gpus[0]
        else:
            chosen = canonical_gpu_name(gpu)
            if chosen not in gpus:
                raise ConfigError(f"cost table has no rows for GPU {gpu!r}", source=source,
                                  key="gpu", hint=closest(chosen, gpus))
        self.gpu = chosen
        groups: dict[tuple[Any, ...], list[CostRow]] = {}
        for row in self.rows:
            if row.gpu == chosen:
                groups.setdefault((row.kind, row.pass_, row.hidden, row.tp,
                                   row.sequence_parallel), []).append(row)
        self._groups = groups
        self._warnings: list[str] = []

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, gpu: str | None = None,
                  fallback: CostModel | None = None) -> TableCosts:
        """Read a table with :func:`read_cost_table` and select ``gpu`` (optional when the
        table holds one GPU)."""
        header, rows = read_cost_table(path)
        return cls(header, rows, gpu=gpu, fallback=fallback, source=os.fspath(path))

    def to_file(self, path: str | os.PathLike[str]) -> None:
        """Write every row (all GPUs) back with :func:`write_cost_table`."""
        write_cost_table(path, self.header, self.rows)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Interpolation warnings recorded so far, oldest first."""
        return tuple(self._warnings)

    def kinds(self) -> list[str]:
        """Kinds this table measures for the selected GPU."""
        return sorted({key[0] for key in self._groups})

    def _warn(self, text: str) -> None:
        if text not in self._warnings:
            self._warnings.append(text)

    def lookup(self, kind: str, pass_: str, *, micro_batch: int, seq_len: int, hidden: int,
               tp: int = 1, sequence_parallel: bool = False) -> float:
        """Seconds for ``kind``/``pass_`` at this shape, by the rule in the class docstring."""
        group = self._groups.get((kind, pass_, hidden, tp, sequence_parallel))
        if not group:
            raise ConfigError(
                f"cost table has no {kind!r} {pass_!r} rows for gpu {self.gpu}, "
                f"hidden {hidden}, tp {tp}, sequence_parallel {str(sequence_parallel).lower()}",
                source=self.source, hint="the table has: " + self._available(kind, pass_))
        for row in group:
            if row.micro_batch == micro_batch and row.seq_len == seq_len:
                return row.time_s
        tokens = micro_batch * seq_len
        where = (f"{kind} {pass_} hidden {hidden} tp {tp} at micro_batch {micro_batch}, "
                 f"seq_len {seq_len}")
        candidates = [r for r in group if r.seq_len == seq_len]
        if not candidates:
            measured = sorted({r.seq_len for r in group})
            self._warn(f"{where}: seq_len {seq_len} not measured (have "
                       f"{', '.join(map(str, measured))}); interpolated over tokens")
            candidates = group
        by_tokens: dict[int, CostRow] = {}
        for row in candidates:
            best = by_tokens.get(row.tokens)
            if best is None or abs(row.seq_len - seq_len) < abs(best.seq_len - seq_len):
                by_tokens[row.tokens] = row
        points = sorted(by_tokens.items())
        low = [p for p in points if p[0] <= tokens]
        high = [p for p in points if p[0] >= tokens]
        if low and high:
            (t0, r0), (t1, r1) = low[-1], high[0]
            if t0 == t1:
                return r0.time_s
            return r0.time_s + (r1.time_s - r0.time_s) * (tokens - t0) / (t1 - t0)
        nearest_tokens, nearest = (low[-1] if low else high[0])
        self._warn(f"{where}: {tokens} tokens outside the measured "
                   f"{points[0][0]}..{points[-1][0]}; extrapolated proportionally to tokens")
        return nearest.time_s * tokens / nearest_tokens

    def _available(self, kind: str, pass_: str) -> str:
        same = sorted((k[2], k[3], k[4]) for k in self._groups if k[0] == kind and
                      k[1] == pass_)
        if same:
            return "; ".join(f"hidden {h} tp {t} sequence_parallel {str(sp).lower()}"
                             for h, t, sp in same)
        pairs = sorted({f"{k[0]}/{k[1]}" for k in self._groups})
        return "kinds/passes " + ", ".join(pairs)

    def _has_kind(self, kind: str) -> bool:
        return any(key[0] == kind for key in self._groups)

    def layer_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                     tp: int = 1, sequence_parallel: bool = False, layer_index: int = 0,
                     ep: int = 1, recompute: str = "full") -> float:
        """Looked-up seconds for one pass of layer ``layer_index`` (ep is not a key)."""
        check_choice(pass_, PASSES, key="pass")
        check_choice(recompute, RECOMPUTE_GRANULARITIES, key="recompute")
        kind = "moe_layer" if model.is_moe_layer(layer_index) else "transformer_layer"
        table_pass = pass_
        if pass_ == "recompute" and recompute == "selective":
            table_pass = "recompute_selective"
        if not self._has_kind(kind) and self.fallback is not None:
            return self.fallback.layer_time_s(
                pass_, model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                sequence_parallel=sequence_parallel, layer_index=layer_index, ep=ep,
                recompute=recompute)
        return self.lookup(kind, table_pass, micro_batch=micro_batch, seq_len=seq_len,
                           hidden=model.hidden, tp=tp, sequence_parallel=sequence_parallel)

    def _edge(self, kind: str, pass_: str, model: ModelSpec, micro_batch: int, seq_len: int,
              tp: int, sequence_parallel: bool) -> float:
        check_choice(pass_, PASSES, key="pass")
        if pass_ == "recompute":
            return 0.0
        if not self._has_kind(kind) and self.fallback is not None:
            method = (self.fallback.embedding_time_s if kind == "embedding"
                      else self.fallback.loss_time_s)
            return method(pass_, model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                          sequence_parallel=sequence_parallel)
        return self.lookup(kind, pass_, micro_batch=micro_batch, seq_len=seq_len,
                           hidden=model.hidden, tp=tp, sequence_parallel=sequence_parallel)

    def embedding_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int,
                         seq_len: int, tp: int = 1,
                         sequence_parallel: bool = False) -> float:
        """Kind ``embedding`` (or the fallback); recompute is 0."""
        return self._edge("embedding", pass_, model, micro_batch, seq_len, tp,
                          sequence_parallel)

    def loss_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                    tp: int = 1, sequence_parallel: bool = False) -> float:
        """Kind ``loss`` (or the fallback); recompute is 0."""
        return self._edge("loss", pass_, model, micro_batch, seq_len, tp, sequence_parallel)

    def optimizer_step_time_s(self, params_on_gpu: float) -> float:
        """Delegated to the fallback; a table does not measure optimizer steps."""
        if self.fallback is None:
            raise ConfigError("a cost table has no optimizer step time", source=self.source,
                              hint="give TableCosts a fallback, e.g. RooflineCosts(gpu)")
        return self.fallback.optimizer_step_time_s(params_on_gpu)


# ----------------------------------------------------------------------- helpers
def _check_shard(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int,
                 ep: int) -> None:
    for name, value in (("micro_batch", micro_batch), ("seq_len", seq_len), ("tp", tp),
                        ("ep", ep)):
        check_whole(value, key=name)
    check_tp_split(heads=model.heads, kv_heads=model.kv_heads, tp=tp)
    if model.ffn_hidden % tp:
        raise ConfigError(f"ffn_hidden {model.ffn_hidden} is not divisible by tp {tp}",
                          key="tp")
    check_ep_split(experts=model.experts, ep=ep)

