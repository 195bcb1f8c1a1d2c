"""Memory per GPU: weights, gradients, optimizer state and activations, from published formulas.

**Model state** (weights, gradients, optimizer state by ZeRO stage and schedule) is
:mod:`workloads.cost.model_state`'s: 2 + 2 + 12 bytes a parameter in mixed precision
(ZeRO paper §3.1), the gradients at ``grad_reduce_precision``'s width.  ``fp8`` training
keeps 16-bit weights (Transformer Engine), so it counts as mixed precision here.  The
temporarily all-gathered layer weights of ZeRO-3/FSDP and allocator fragmentation are *not*
counted.  Per-operator sharding (OSDP,
:mod:`workloads.strategy.operator_sharding`) divides its sharded operators' state by dp, holds the
replicated ones whole, and counts the largest gathered operator's weights (÷ its split).

Parameters on one GPU (Megatron-LM's layout) are counted in
:mod:`workloads.cost.parameters`.

**Activations** per layer per micro-batch (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", Table 2; 16-bit activations, 1-byte dropout
masks; ``s`` sequence, ``b`` micro-batch, ``h`` hidden, ``a`` heads, ``t`` tensor
parallel)::

    no parallelism                       s·b·h·(34 + 5·a·s/h)
    tensor parallel                      s·b·h·(10 + 24/t + 5·a·s/(h·t))
    tensor + sequence parallel           s·b·h·(34/t + 5·a·s/(h·t))
    selective recompute (+ sequence p.)  s·b·h·34/t        (without s.p.: s·b·h·(10 + 24/t))
    full recompute                       2·s·b·h           (the layer input; /t with s.p.)
    per-op recompute (torchtitan, ``op``) 2·s·b·(h/tₛ + Σ n_kept) + 2·s·b·h/t + 4·a·s·b/t
                                         (+ 4·s·b·h/t with s.p. and t > 1)

The paper's derivation (its §4.1) is generalised term by term: ``10·s·b·h`` is two norm
inputs, the QKV and FC1 inputs (2 bytes each) and two dropout masks; the ``24/t`` part is
Q, K, V and the attention output (K and V at width ``kv_heads·head_dim`` for grouped-query
attention) plus the activation-function input (twice as wide for a gated MLP) and FC2
input at width ``ffn_hidden``; the ``5·a·s/h`` part is the softmax output, its dropout
mask and output.  A MoE layer stores the MLP part for each of its ``top_k`` routed copies
plus the dispatched tokens (our extension, not in the paper), and its
shared experts' once each, split over tp.  Under multi-head latent attention
(:mod:`workloads.specs.mla`) Q and K are ``a·d_qk`` wide and V and the output ``a·d_v``, and the
latents — the query latent before and after its norm, the key-value latent with the
rotary key and after its norm, ``2·r_q + 2·r_kv + d_r`` per token — are held whole on
every tensor rank (the down projections are duplicated).  Shared experts' and MLA's
weights are dense parameters (on every EP rank; MLA's down projections and latent norms
whole on every TP rank).  ``flash_attention`` drops
the s² term for a 4-byte log-sum-exp per head and token.  With full recompute the layer
being recomputed holds its full activations once more during backward (added once per
stage).

``op`` (:mod:`workloads.specs.recompute`) keeps what torchtitan's per-operator policy saves, from
the same per-tensor accounting: the layer input (``tₛ = t`` with s.p., else 1), each saved
weight mm's output at its per-rank width ``n`` (Llama: ``wq`` h/t, ``wv`` kv_heads·d/t,
``w1`` f/t and ``w2``'s h partial sums; a MoE layer's routed mms at ``top_k`` times the
tokens), flash attention's output and fp32 log-sum-exp, and with s.p. the two
reduce-scatters' outputs; norms, activations, products, residual sums and dropout masks
are recomputed, not stored (unfused attention is recomputed too: no s² term).  While a
layer is back-propagated, what ``op`` did not keep is held once more (added once per
stage, as for full recompute).

``selective`` with Megatron-Core's ``recompute_modules``
(:mod:`~workloads.specs.recompute_modules`) keeps the terms above less each module's:
``core_attn`` the s² (or log-sum-exp) term, ``layernorm`` a separate norm's output (the
QKV or FC1 input term), ``mla_up_proj`` MLA's Q, K, V and normed latents, ``moe_act`` the
routed FC2 inputs, ``mlp`` a dense layer's FC1, activation and FC2 inputs,
``shared_experts`` the shared experts' activation and FC2 inputs, ``moe`` all of a MoE
layer's MLP side but its input (the router's logits, the dispatched tokens, the routed
and shared experts' activations); the layer being back-propagated holds them once more
(added once per stage).

**Low-precision linear inputs.**  Under ``precision: fp8`` (or ``fp4``) Transformer
Engine's linear layers keep for the backward not their 16-bit input but the quantized
column-wise copy the weight-gradient GEMM reads (transformer_engine/pytorch/module/
linear.py: "Discard row-wise data since it is not needed in backward pass"; ``saved_
inputmat`` is the quantized input): one byte an element plus the recipe's scales
(``linear_input_bytes``; :func:`~workloads.cost.compute.roofline.saved_linear_input_bytes`,
stacks with ``fp8_saves_quantized_inputs``).  The inputs that are a linear layer's: QKV's
and FC1's, the attention output (the output projection's), FC2's, the dispatched tokens
(the experts' FC1), MLA's normed latents (the up projections'); norm inputs, Q, K, V,
activation inputs and masks stay as above.  torchao's float8 linears keep the 16-bit
input, and so does every stack without the flag; NVFP4's 16-bit last layers are counted
at the FP4 size.  Megatron-Core's ``activation_func_fp8_input_store`` keeps every
SwiGLU's input at one byte an element (:mod:`workloads.strategy.precision`).

**Context parallelism** (``cp`` ranks share each sequence, :mod:`workloads.cost.context_parallel`):
every activation above is counted at the rank's ``s/cp`` tokens (Transformer Engine's
ring attention saves only the local Q, K, V, output and log-sum-exp; the K/V blocks of
other ranks come round again in backward).  While one layer runs, the ring holds
double-buffered K/V blocks and, in backward, their gradients: ``4`` K/V blocks of
``2·(s/cp)·b·kv_heads/t·d_head`` elements (:func:`cp_kv_block_bytes`), added once per
stage like the recomputed layer; the other ``cp_comm_type`` values hold what
:func:`cp_buffer_bytes` says instead.

First stage extra: the embedding dropout mask, ``s·b·h`` bytes (/t with s.p.); the
output layer's stage (the last, or the first in a V schedule such as DualPipeV) extra:
final-norm input, output-layer input and fp32 logits, ``4·s·b·h·(1 + V/h)/t`` with s.p.
(Korthikanti et al. 2022 §4.3), each per micro-batch in flight.  Each of DeepSeek-V3's
``mtp_depth`` multi-token-prediction modules (report §2.2, on the output layer's stage)
adds a transformer block's activations like the model's last layer, the inputs of its two
norms (``h`` wide each) and of its ``2h → h`` projection (``2h`` wide) — ``4·s·b·h``
16-bit elements, /t with s.p. — and the output head's again: final-norm and head inputs
and its fp32 logits.

**Micro-batches in flight** on stage ``r`` of ``p`` (counted in whole stages' worth of
layers): GPipe ``m`` (all forwards before any backward); 1F1B ``min(p − r, m)``
(Narayanan et al. 2021, §2.2.1: the first stage holds ``p``); interleaved with ``v``
chunks: ``min(2·(p − r − 1) + (v − 1)·p + 1, m·v) / v`` chunk-micro-batches — the
warm-up count of Megatron-LM's interleaved schedule plus the steady-state one — which
for the first stage is ``p·(1 + (p − 1)/(p·v))``, Korthikanti et al. 2022 §4.2.3's
interleaving factor.  The two-chunk schedules (DualPipeV, DualPipe) hold their chunks
unevenly — a warm-up of one chunk's forwards, the other's later — and their chunks differ
(one holds the embedding, the other the output head and any MTP module): their
activations are the peak over the stage's program of each chunk's bytes times the
forwards of it not yet backward (:func:`~workloads.strategy.schedule.peak_bytes_held`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from distsim_gpu.simcore.config import check_choice, check_whole
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.model_state import PRECISION_BYTES, model_state_bytes, state_bytes
from distsim_gpu.workloads.cost.parameters import (
    check_model_split,
    layer_group_extra_params,
    layer_params_local,
    params_on_gpu,
    stage_layers,
)
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.moe_routing import moe_pace
from distsim_gpu.workloads.specs.recompute import RECOMPUTE_MODES, op_sac_matmuls
from distsim_gpu.workloads.specs.recompute_modules import (
    DEFAULT_RECOMPUTE_MODULES,
    separate_norms,
)
from distsim_gpu.workloads.strategy.layer_groups import layer_settings
from distsim_gpu.workloads.strategy.offload import OffloadConfig
from distsim_gpu.workloads.strategy.operator_sharding import peak_gathered_params, sharded_params
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    chunk_layers,
)
from distsim_gpu.workloads.strategy.precision import swiglu_input_bytes
from distsim_gpu.workloads.strategy.schedule import (
    V_SCHEDULES,
    end_stages,
    microbatches_in_flight,
    peak_bytes_held,
    route_ends,
    stage_program,
    virtual_stage,
)
from distsim_gpu.workloads.strategy.tp_nd import mesh_of, weight_replicas

__all__ = [
    "PRECISION_BYTES",
    "MemoryBreakdown",
    "SavedFormats",
    "activation_bytes_per_layer",
    "cp_buffer_bytes",
    "cp_kv_block_bytes",
    "cp_qkvo_bytes",
    "memory_of_strategy",
    "memory_per_gpu",
    "offloaded",
    "state_bytes",
]


@dataclass(frozen=True, slots=True)
class SavedFormats:
    """Bytes an element of what a layer keeps for the backward where that is not the
    activations' 16 bits (None: 16 bits): a linear layer's input (a low-precision run
    whose stack keeps the quantized copy), an MLP activation's input (else
    ``training.activation_func_fp8_input_store``'s), the attention output (else a linear
    input's) — the last two where a stack caches them (``Stack.fp8_activation_caches``:
    DeepSeek's FP8 and E5M6; :func:`~workloads.cost.compute.roofline.saved_formats`)."""

    linear_input_bytes: float | None = None
    activation_input_bytes: float | None = None
    attention_output_bytes: float | None = None




@dataclass(frozen=True, slots=True)
class MemoryBreakdown:
    """Bytes on one GPU by kind; ``total_bytes`` is their sum."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    total_bytes: float

    @classmethod
    def of(cls, weights_bytes: float, gradients_bytes: float, optimizer_bytes: float,
           activations_bytes: float) -> MemoryBreakdown:
        """A breakdown with the total filled in."""
        return cls(weights_bytes, gradients_bytes, optimizer_bytes, activations_bytes,
                   weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes)

    def to_dict(self) -> dict[str, float]:
        """Every field (bytes)."""
        return {"weights_bytes": self.weights_bytes, "gradients_bytes": self.gradients_bytes,
                "optimizer_bytes": self.optimizer_bytes,
                "activations_bytes": self.activations_bytes, "total_bytes": self.total_bytes}


def activation_bytes_per_layer(model: ModelSpec, shard: LayerShard, *,
                               flash_attention: bool = False, precision: str = "bf16",
                               linear_input_bytes: float | None = None,
                               activation_input_bytes: float | None = None,
                               attention_output_bytes: float | None = None) -> float:
    """Activation bytes layer ``shard.layer_index`` keeps for backward, per micro-batch,
    under recomputation ``shard.recompute`` (``none``, ``selective``, ``full``, ``op``;
    module docstring).

    A MoE layer's routed part is the most loaded EP rank's (``shard.ep``; its
    :attr:`~workloads.specs.moe_routing.MoeLoads.pace_factor` times a uniform router's): the
    peak is that GPU's.  ``linear_input_bytes``: bytes per element of what a linear layer
    keeps of its input for the backward where that is not the activations' 16 bits (a
    low-precision run whose stack keeps the quantized copy, module docstring); None: 16
    bits like the rest; ``activation_input_bytes`` the same for an MLP activation's input
    (Megatron-Core's ``activation_func_fp8_input_store``: :mod:`workloads.strategy.precision`)
    and ``attention_output_bytes`` for the attention output (:class:`SavedFormats`).
    """
    micro_batch = check_whole(shard.micro_batch, key="micro_batch")
    s = check_whole(shard.seq_len, key="seq_len")
    tp, sequence_parallel, recompute = shard.tp, shard.sequence_parallel, shard.recompute
    layer_index, ep = shard.layer_index, shard.ep
    check_model_split(model, tp=tp, ep=ep)
    check_choice(recompute, RECOMPUTE_MODES, key="recompute")
    e = _activation_element_bytes(precision)
    q = e if linear_input_bytes is None else linear_input_bytes  # a linear layer's input
    b, h = micro_batch, model.hidden
    sbh = float(s) * b * h
    spread = tp if sequence_parallel else 1  # element-wise ops: the sequence-parallel split
    if recompute == "full":
        return e * sbh / spread
    if recompute == "op":
        return _op_saved_bytes(model, tokens=float(s) * b, tp=tp, sequence_parallel=(
            sequence_parallel), flash_attention=flash_attention, element_bytes=e,
            layer_index=layer_index, ep=ep)
    formats = SavedFormats(q, activation_input_bytes, attention_output_bytes)
    return _selective_saved_bytes(model, shard, s, b, e, q, formats,
                                  flash_attention=flash_attention)


def _selective_saved_bytes(model: ModelSpec, shard: LayerShard, s: int, b: int, e: int,
                           q: float, formats: SavedFormats, *, flash_attention: bool) -> float:
    """What a layer keeps for backward without recomputation or under ``selective``: a
    linear layer's input at ``q`` bytes an element, the caches at ``formats``'."""
    tp, layer_index, ep, recompute = shard.tp, shard.layer_index, shard.ep, shard.recompute
    h, a = model.hidden, model.heads
    sbh = float(s) * b * h
    spread = tp if shard.sequence_parallel else 1  # as in activation_bytes_per_layer
    tokens = float(s) * b
    f = model.mlp_width(layer_index)
    # Megatron-Core's submodules a selective recompute does not keep (recompute_modules).
    dropped = frozenset(shard.recompute_modules) if recompute == "selective" else frozenset()
    moe_layer = model.is_moe_layer(layer_index)
    # Replicated unless sequence parallel: two norm inputs, QKV and FC1 inputs, 2 masks.
    replicated = 2 * e * sbh + _kept_norm_outputs(model, layer_index, dropped) * q * sbh \
        + 2 * sbh
    # Split over tp: Q, K, V, attention output; MLP activation input and FC2 input.
    attention_part = _attention_activations(model, tokens, e, q,
                                            up_projections="mla_up_proj" not in dropped,
                                            output_bytes=formats.attention_output_bytes)
    # Only a SwiGLU's input is cached in FP8 (Megatron-Core refuses the store otherwise).
    cached = formats.activation_input_bytes if model.gated_mlp else None
    activation_input = tokens * f * (cached or e) * (2 if model.gated_mlp else 1)
    mlp_part = activation_input + tokens * f * q
    if moe_layer and "moe" in dropped:  # re-run from its input, the FC1-side norm's output
        mlp_part = 0.0
    elif moe_layer:
        # dense, beside the routed experts
        shared = 0.0 if "shared_experts" in dropped else model.shared_experts * mlp_part
        routed = activation_input + (0.0 if "moe_act" in dropped else tokens * f * q)
        mlp_part = model.top_k * (routed + q * sbh)  # + dispatched tokens (FC1 input)
        mlp_part *= moe_pace(model.moe, experts=model.experts, top_k=model.top_k, ep=ep)
        mlp_part += shared
        replicated += 4.0 * tokens * model.experts  # fp32 router logits
    elif "mlp" in dropped:
        mlp_part = 0.0
    split = attention_part + mlp_part
    core_recomputed = "core_attn" in dropped
    if core_recomputed or flash_attention:
        squared = 4.0 * a * tokens if flash_attention and not core_recomputed else 0.0
    else:
        squared = (2 * e + 1) * a * float(s) * s * b  # softmax out, dropout mask and out
    return (replicated / spread + (split + squared) / tp
            + _mla_latent_bytes(model, tokens, e, q, normed="mla_up_proj" not in dropped))


def _kept_norm_outputs(model: ModelSpec, layer_index: int, dropped: frozenset[str]) -> int:
    """How many of the layer's two norm outputs (QKV's and FC1's inputs) are kept: a
    separate norm's not under ``layernorm`` recomputation, a dense MLP's input not
    under ``mlp`` (:mod:`~workloads.specs.recompute_modules`)."""
    kept = 2
    if "layernorm" in dropped:
        kept -= len(separate_norms(model, layer_index))
    if "mlp" in dropped and not model.is_moe_layer(layer_index):
        kept -= 1
    return kept


def _attention_activations(model: ModelSpec, tokens: float, e: float, q: float, *,
                           up_projections: bool = True,
                           output_bytes: float | None = None) -> float:
    """Q, K, V and the attention output of one layer over all ranks' heads: ``2·s·b·h +
    2·s·b·kv_dim`` elements, or under MLA ``s·b·heads·(2·d_qk + 2·d_v)`` (whole query
    and key heads after the rotary part is joined, values and output at d_v); the output,
    the output projection's input, at ``q`` bytes an element (``output_bytes`` where a
    cache sets them), the rest at ``e``.  Not
    ``up_projections``: MLA's Q, K and V are recomputed (``mla_up_proj``), the output
    alone is kept."""
    out = q if output_bytes is None else output_bytes
    if model.mla is None:
        return tokens * (e * (model.hidden + 2 * model.kv_dim) + out * model.hidden)
    qkv = e * (2 * model.qk_head_dim + model.v_head_dim) if up_projections else 0.0
    return tokens * model.heads * (qkv + out * model.v_head_dim)


def _mla_latent_bytes(model: ModelSpec, tokens: float, e: float, q: float, *,
                      normed: bool = True) -> float:
    """MLA's latents, kept whole on every TP rank (the down projections are duplicated):
    the query latent before and after its norm (2·r_q), the key-value latent with the
    rotary key (r_kv + d_r) and the normed key-value latent (r_kv); the normed latents,
    the up projections' inputs, at ``q`` bytes an element, and not kept unless
    ``normed`` (``mla_up_proj`` recomputes them with the up projections they are fused
    into)."""
    if model.mla is None:
        return 0.0
    mla = model.mla
    kept_normed = q * (mla.q_lora_rank + mla.kv_lora_rank) if normed else 0.0
    return tokens * (e * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim)
                     + kept_normed)


def _op_saved_bytes(model: ModelSpec, *, tokens: float, tp: int, sequence_parallel: bool,
                    flash_attention: bool, element_bytes: int, layer_index: int,
                    ep: int) -> float:
    """What torchtitan's per-op checkpointing keeps of one layer (module docstring): its
    input, the saved mms' outputs, flash attention's output and log-sum-exp, and with
    sequence parallelism the two reduce-scatters' outputs."""
    e, h = element_bytes, model.hidden
    shard = tp if sequence_parallel else 1
    routed = model.top_k * moe_pace(model.moe, experts=model.experts, top_k=model.top_k,
                                    ep=ep) if model.is_moe_layer(layer_index) else 1.0
    kept = e * tokens * h / shard  # the layer input
    kept += sum(e * tokens * (routed if m.routed else 1.0) * m.out_features
                for m in op_sac_matmuls(model, tp=tp, layer_index=layer_index) if m.saved)
    if flash_attention:  # SDPA's output and its fp32 log-sum-exp per head and token
        kept += e * tokens * (model.heads // tp) * model.head_dim
        kept += 4.0 * tokens * (model.heads // tp)
    if tp > 1 and sequence_parallel:
        kept += 2 * e * tokens * h / tp
    return kept


def _recompute_transient_bytes(stored_bytes: float, held_bytes: float, mode: str) -> float:
    """Bytes the layer being back-propagated holds again while its activations are
    recomputed: all of them (``full``; ``held_bytes``, as without recomputation), or
    those ``op`` or ``selective``'s submodules did not keep (``held_bytes −
    stored_bytes``, ``held_bytes`` being the layer's activations with only what is never
    held again left out: :func:`_held_modules`); 0 without recomputation."""
    if mode == "full":
        return held_bytes
    if mode in ("op", "selective"):
        return max(held_bytes - stored_bytes, 0.0)
    return 0.0


def _held_modules(mode: str, modules: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The recompute mode and submodules whose activations are what a layer holds while
    it is back-propagated under ``mode``: without recomputation for ``full`` and ``op``;
    for ``selective``, all but core attention, whose recomputed scores live one kernel
    (flash attention's backward) or one head's softmax at a time and are left out."""
    if mode == "selective":
        return "selective", tuple(m for m in modules if m == "core_attn")
    return "none", DEFAULT_RECOMPUTE_MODULES


def cp_kv_block_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int, cp: int,
                      precision: str = "bf16") -> float:
    """Bytes of the K and V one CP rank holds for its ``seq_len/cp`` tokens on one tensor
    rank: ``2·(s/cp)·b·kv_heads/t·d_head`` elements (key/value heads replicated when fewer
    than ``t``) — what each step of the ring passes on (:mod:`workloads.cost.context_parallel`)."""
    kv_local = max(1, model.kv_heads // tp)
    tokens = seq_len / cp * micro_batch
    if model.mla is not None:  # whole heads: keys d_qk wide, values d_v
        return (tokens * kv_local * (model.qk_head_dim + model.v_head_dim)
                * _activation_element_bytes(precision))
    return 2.0 * tokens * kv_local * model.head_dim * _activation_element_bytes(precision)


def cp_qkvo_bytes(model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int, cp: int,
                  precision: str = "bf16") -> tuple[float, float]:
    """Bytes of the Q, K and V, and of the attention output, one CP rank holds for its
    ``seq_len/cp`` tokens on one tensor rank — the buffers an all-to-all of
    ``cp_comm_type`` a2a moves (:mod:`workloads.cost.context_parallel`):
    ``(s/cp)·b·(heads/t·d_qk + K/V)`` and ``(s/cp)·b·heads/t·d_v``."""
    tokens = seq_len / cp * micro_batch
    q_heads, element = model.heads // tp, _activation_element_bytes(precision)
    kv = cp_kv_block_bytes(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp,
                           precision=precision)
    return (tokens * q_heads * model.qk_head_dim * element + kv,
            tokens * q_heads * model.v_head_dim * element)


def cp_buffer_bytes(model: ModelSpec, parallel: ParallelConfig, *, micro_batch: int,
                    seq_len: int, precision: str) -> float:
    """What context parallelism's attention holds beside the saved activations while one
    layer runs, by ``parallel.cp_comm_type`` (in K/V blocks of :func:`cp_kv_block_bytes`):
    p2p 4 (double-buffered K/V and dK/dV); all_gather ``2·cp`` (the gathered K/V and the
    whole sequence's dK/dV before their reduce-scatter); a2a one set of received Q, K, V
    (:func:`cp_qkvo_bytes`), a2a+p2p that and the ring's 4; PyTorch's torch_allgather
    ``cp`` gathered blocks and torch_alltoall 2, each with two fp32 dK/dV ring buffers."""
    tp, cp, kind = parallel.tp, parallel.cp, parallel.cp_comm_type
    block = cp_kv_block_bytes(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp,
                              precision=precision)
    fp32_dkv = 2 * block * 4 / _activation_element_bytes(precision)
    qkv = cp_qkvo_bytes(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp, cp=cp,
                        precision=precision)[0]
    return {"p2p": 4 * block, "all_gather": 2 * cp * block, "a2a": qkv,
            "a2a+p2p": qkv + 4 * block, "torch_allgather": cp * block + fp32_dkv,
            "torch_alltoall": 2 * block + fp32_dkv}[kind]


def _swiglu_bytes(formats: SavedFormats, training: TrainingConfig) -> float | None:
    """A SwiGLU input's bytes an element: the stack's cache, else Megatron-Core's
    ``activation_func_fp8_input_store``, else None (16 bits)."""
    return formats.activation_input_bytes or swiglu_input_bytes(
        training.activation_func_fp8_input_store)


def memory_per_gpu(model: ModelSpec, parallel: ParallelConfig | None = None,
                   training: TrainingConfig | None = None, *, stage: int = 0,
                   num_microbatches: int = 1, flash_attention: bool = False,
                   formats: SavedFormats = SavedFormats()) -> MemoryBreakdown:
    """Bytes one GPU of pipeline stage ``stage`` needs (module docstring for formulas),
    with ``num_microbatches`` micro-batches per step; ``formats``: what a layer keeps
    where not in 16 bits (:class:`SavedFormats`).

    ``parallel`` and ``training`` (defaults: one GPU, one sequence of the model's length)
    are taken as valid — built by ``parallel_from_mapping`` / ``training_from_mapping``
    and checked against the model by ``check_strategy``; a configuration those refuse
    gives meaningless numbers here.  ZeRO shards over ``parallel.dp_cp`` ranks (HSDP: its
    shard group's), and each rank holds ``seq_len/cp`` tokens of its sequences.  Counted:
    the 1-D tensor, pipeline,
    data, expert and context split, ZeRO/FSDP and recomputation; offload, layer groups,
    operator sharding and n-D tensor meshes are :func:`memory_of_strategy`'s.
    """
    parallel = parallel or ParallelConfig()
    training = training or TrainingConfig()
    tp, pp, ep, cp = parallel.tp, parallel.pp, parallel.ep, parallel.cp
    sequence_parallel, interleave = parallel.sequence_parallel, parallel.interleave
    micro_batch, recompute = training.micro_batch, training.recompute
    precision = training.precision
    full = model.seq_len if training.seq_len is None else training.seq_len
    s = full // cp  # the tokens of each sequence this rank holds
    weights, gradients, optimizer = model_state_bytes(model, parallel, training, stage)

    layers = stage_layers(model, pp=pp, stage=stage, interleave=interleave,
                          partition=parallel.partition, schedule=parallel.schedule)

    swiglu_bytes = _swiglu_bytes(formats, training)

    def per_layer(index: int, mode: str,
                  modules: tuple[str, ...] = training.recompute_modules) -> float:
        return activation_bytes_per_layer(
            model, LayerShard(micro_batch, s, tp=tp, sequence_parallel=sequence_parallel,
                              ep=ep, layer_index=index, recompute=mode,
                              expert_tp=parallel.expert_tp, recompute_modules=modules),
            flash_attention=flash_attention, precision=precision,
            linear_input_bytes=formats.linear_input_bytes, activation_input_bytes=swiglu_bytes,
            attention_output_bytes=formats.attention_output_bytes)

    if parallel.schedule in V_SCHEDULES:  # each chunk by the micro-batches it holds
        activations = _two_chunk_activations(model, parallel, training, s=s, stage=stage,
                                             microbatches=num_microbatches,
                                             per_layer=per_layer)
    else:  # the stage's layers, embedding and output head by the micro-batches in flight
        in_flight = microbatches_in_flight(parallel.schedule, pp=pp, stage=stage,
                                           num_microbatches=num_microbatches,
                                           interleave=interleave,
                                           fb_overlap=parallel.fb_overlap)
        firsts, lasts = end_stages(parallel.schedule, pp, interleave)
        activations = in_flight * (sum(per_layer(i, recompute) for i in layers)
                                   + _edge_activation_bytes(
                                       model, parallel, training, s=s, entry=stage in firsts,
                                       exit=stage in lasts, per_layer=per_layer))
    if recompute != "none":
        held = _held_modules(recompute, training.recompute_modules)
        # (a stage may hold no layer: NeMo's embedding-only or loss-only first/last chunk)
        activations += max((_recompute_transient_bytes(per_layer(i, recompute),
                                                       per_layer(i, *held), recompute)
                            for i in layers), default=0.0)
    if cp > 1:  # the attention's K/V (and dK/dV) buffers, one layer at a time
        activations += cp_buffer_bytes(model, parallel, micro_batch=micro_batch,
                                       seq_len=full, precision=precision)
    return MemoryBreakdown.of(weights, gradients, optimizer, activations)


def _two_chunk_activations(model: ModelSpec, parallel: ParallelConfig,
                           training: TrainingConfig, *, s: int, stage: int,
                           microbatches: int, per_layer: Callable[[int, str], float]) -> float:
    """A two-chunk schedule's activations on ``stage``: the peak over its program of each
    chunk's bytes (its layers', and the embedding's or the output head's where it holds
    them) times that chunk's forwards not yet backward (module docstring)."""
    pp, interleave, schedule = parallel.pp, parallel.interleave, parallel.schedule
    entries, exits = route_ends(schedule, pp, interleave)
    bounds = chunk_layers(model.layers, pp, interleave, parallel.partition, schedule)
    per_chunk = []
    for chunk in range(interleave):
        vs = virtual_stage(stage, chunk, pp, schedule)
        layers = sum(per_layer(i, training.recompute) for i in range(*bounds[vs]))
        per_chunk.append(layers + _edge_activation_bytes(
            model, parallel, training, s=s, entry=vs in entries, exit=vs in exits,
            per_layer=per_layer))
    program = stage_program(schedule, pp=pp, stage=stage, microbatches=microbatches,
                            fb_overlap=parallel.fb_overlap)
    return peak_bytes_held(program, per_chunk)


def _edge_activation_bytes(model: ModelSpec, parallel: ParallelConfig,
                           training: TrainingConfig, *, s: int, entry: bool, exit: bool,
                           per_layer: Callable[[int, str], float]) -> float:
    """Per micro-batch in flight: the embedding's (``entry``: where micro-batches enter)
    and the output head's (``exit``: where they leave)."""
    tp, micro_batch = parallel.tp, training.micro_batch
    e = _activation_element_bytes(training.precision)
    sbh = float(s) * micro_batch * model.hidden
    sp_shard = tp if parallel.sequence_parallel else 1
    edges = 0.0
    if entry:
        edges += sbh / sp_shard  # embedding dropout mask
    if exit:  # the output layer's
        head = 2 * e * sbh / sp_shard + 4.0 * s * micro_batch * model.vocab / tp
        # Each MTP module: a block like the last layer, its norms' and projection's
        # inputs (2h wide each) and the shared head once more (module docstring).
        mtp = model.mtp_depth * (per_layer(model.layers - 1, training.recompute)
                                 + 4 * e * sbh / sp_shard + head)
        edges += head + mtp
    return edges



def memory_of_strategy(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                       *, seq_len: int, microbatches: int, stage: int,
                       flash_attention: bool,
                       formats: SavedFormats = SavedFormats()) -> MemoryBreakdown:
    """:func:`memory_per_gpu` of pipeline stage ``stage`` under a strategy, as the simulated
    iteration and the strategy search both count it.

    A 2-D/2.5-D/3-D mesh (:mod:`workloads.strategy.tp_nd`) splits everything over its ``tp`` GPUs
    — weights (2.5-D: each of its ``d`` depth layers holds them all, so ``d/tp``),
    gradients, optimizer state and every activation — as Optimus, Tesseract and Bian et
    al. account for it: the unsplit (tp = 1) memory scaled down."""
    mesh = mesh_of(parallel.tp_mode, parallel.tp, parallel.tp_depth)
    if mesh is not None:
        whole = memory_of_strategy(model, replace(parallel, tp=1, tp_mode="1d", tp_depth=1),
                                   training, seq_len=seq_len, microbatches=microbatches,
                                   stage=stage, flash_attention=flash_attention,
                                   formats=formats)
        params = weight_replicas(mesh) / mesh.tp
        return MemoryBreakdown.of(whole.weights_bytes * params,
                                  whole.gradients_bytes * params,
                                  whole.optimizer_bytes * params,
                                  whole.activations_bytes / mesh.tp)
    if parallel.layer_groups:
        return _layer_grouped(model, parallel, training, seq_len=seq_len,
                              microbatches=microbatches, stage=stage,
                              flash_attention=flash_attention,
                              formats=formats)
    if parallel.operator_sharding is not None:
        return _operator_sharded(model, parallel, training, seq_len=seq_len,
                                 microbatches=microbatches, stage=stage,
                                 flash_attention=flash_attention,
                                 formats=formats)
    return offloaded(memory_per_gpu(
        model, parallel, replace(training, seq_len=seq_len), stage=stage,
        num_microbatches=microbatches, flash_attention=flash_attention,
        formats=formats), parallel.offload)


def _operator_sharded(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                      *, seq_len: int, microbatches: int, stage: int,
                      flash_attention: bool, formats: SavedFormats) -> MemoryBreakdown:
    """Per-operator sharding (:mod:`workloads.strategy.operator_sharding`): the replicated memory
    with the sharded operators' weights, gradients and optimizer state divided by dp, plus
    the largest gathered operator's whole weights (÷ its split) live while it runs."""
    plan = parallel.operator_sharding
    assert plan is not None
    whole = memory_of_strategy(model, replace(parallel, operator_sharding=None), training,
                               seq_len=seq_len, microbatches=microbatches, stage=stage,
                               flash_attention=flash_attention,
                               formats=formats)
    params = params_on_gpu(model, tp=parallel.tp, pp=parallel.pp, stage=stage).total
    layers = sum(layer_params_local(model, i, parallel.tp, 1)[0]
                 for i in stage_layers(model, pp=parallel.pp, stage=stage))
    sharded = sharded_params(plan, model, parallel.tp, stage_params=params,
                             layer_params=layers)
    kept = (params - sharded + sharded / parallel.dp_cp) / params
    weight_b = PRECISION_BYTES[training.precision][0]
    gathered = weight_b * peak_gathered_params(plan, model, parallel.tp)
    return MemoryBreakdown.of(whole.weights_bytes * kept + gathered,
                              whole.gradients_bytes * kept, whole.optimizer_bytes * kept,
                              whole.activations_bytes)


def _layer_grouped(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                   *, seq_len: int, microbatches: int, stage: int,
                   flash_attention: bool, formats: SavedFormats) -> MemoryBreakdown:
    """Layer groups (:mod:`workloads.strategy.layer_groups`): each layer's weights, gradients and
    optimizer state at its own tp, its activations at its share of the micro-batch, its
    tp and its recompute (plus, with full recompute, the largest such layer's whole
    activations while it is recomputed)."""
    base = memory_of_strategy(model, replace(parallel, layer_groups=()),
                              replace(training, recompute="none"), seq_len=seq_len,
                              microbatches=microbatches, stage=stage,
                              flash_attention=flash_attention,
                              formats=formats)
    settings = layer_settings(parallel.layer_groups, tp=parallel.tp,
                              micro_batch=training.micro_batch, recompute=training.recompute)

    def act(i: int, tp: int, micro_batch: int, mode: str,
            modules: tuple[str, ...] = training.recompute_modules) -> float:
        return activation_bytes_per_layer(
            model, LayerShard(micro_batch, seq_len, tp=tp, ep=parallel.ep, layer_index=i,
                              recompute=mode, recompute_modules=modules),
            flash_attention=flash_attention, precision=training.precision,
            linear_input_bytes=formats.linear_input_bytes,
            attention_output_bytes=formats.attention_output_bytes,
            activation_input_bytes=_swiglu_bytes(formats, training))

    layers = stage_layers(model, pp=parallel.pp, stage=stage, interleave=parallel.interleave,
                          schedule=parallel.schedule,
                          partition=parallel.partition)
    stored = sum(act(i, settings[i].tp, settings[i].micro_batch, settings[i].recompute)
                 - act(i, parallel.tp, training.micro_batch, "none") for i in layers)
    in_flight = microbatches_in_flight(parallel.schedule, pp=parallel.pp, stage=stage,
                                       num_microbatches=microbatches,
                                       interleave=parallel.interleave,
                                       fb_overlap=parallel.fb_overlap)
    transient = [_recompute_transient_bytes(
        act(i, settings[i].tp, settings[i].micro_batch, settings[i].recompute),
        act(i, settings[i].tp, settings[i].micro_batch,
            *_held_modules(settings[i].recompute, training.recompute_modules)),
        settings[i].recompute) for i in layers]
    activations = base.activations_bytes + stored * in_flight + max(transient, default=0.0)
    extra = layer_group_extra_params(model, parallel, stage)
    weight_b, grad_b, optim_b = state_bytes(training, parallel.grad_reduce_precision)
    return MemoryBreakdown.of(base.weights_bytes + weight_b * extra,
                              base.gradients_bytes + grad_b * extra,
                              base.optimizer_bytes + optim_b * extra, activations)


def offloaded(memory: MemoryBreakdown, offload: OffloadConfig) -> MemoryBreakdown:
    """What stays on the GPU once ``offload`` moved its part to the host (ZeRO-Offload:
    the 16-bit weights and the activations; gradients and optimizer state leave; with
    ``params`` offloaded the weights too — the layer being gathered is not counted, as
    for ZeRO-3).  The host's side is :func:`workloads.strategy.offload.host_bytes_per_gpu`."""
    if offload.optimizer == "none":
        return memory
    weights = 0.0 if offload.params != "none" else memory.weights_bytes
    return MemoryBreakdown.of(weights, 0.0, 0.0, memory.activations_bytes)

def _activation_element_bytes(precision: str) -> int:
    check_choice(precision, PRECISION_BYTES, key="precision")
    return 4 if precision == "fp32" else 2


