"""Activation recomputation modes, and what torchtitan's per-operator checkpointing saves.

``training.recompute`` (and a layer group's ``recompute``) is one of :data:`RECOMPUTE_MODES`:

* ``none`` — every activation the backward needs is kept;
* ``selective`` — Megatron-LM's selective recomputation (Korthikanti et al. 2022, §5):
  only core attention (scores to context) is recomputed, unless Megatron-Core's
  ``recompute_modules`` name other submodules (:mod:`workloads.specs.recompute_modules`);
* ``op`` — torchtitan's per-operator selective activation checkpointing
  (``activation_checkpoint.mode = "selective"``, ``selective_ac_option = "op"``, its
  default): see below;
* ``full`` — only each layer's input is kept; the backward re-runs the whole forward.

**torchtitan's op policy** (``torchtitan/models/llama3/parallelize_llama.py`` as of late
2024, later ``torchtitan/distributed/activation_checkpoint.py``; read for this module, no
code taken).  Each transformer block is wrapped by PyTorch's non-reentrant checkpoint with a
selective-checkpoint policy (``torch.utils.checkpoint.create_selective_checkpoint_contexts``)
that decides per dispatched operator: the outputs of operators in a *save list* —
``aten.mm``, the scaled-dot-product flash / memory-efficient (and, later, cuDNN) attention
ops, ``_c10d_functional.reduce_scatter_tensor``, ``aten.max`` (the amax of float8 scaling)
and, in later versions, ``all_to_all_single`` for MoE — are kept (``MUST_SAVE``), **except
every second** ``aten.mm``: a counter, fresh for each block's forward, counts the mms and
one whose count is even is recomputed (``PREFER_RECOMPUTE``).  Every other operator — norms,
rotary embedding, SiLU, multiplies, residual adds, casts, the all-gathers of sequence
parallelism — is recomputed when the backward first needs a tensor the block did not keep.

A Llama layer runs its mms in the order ``wq, wk, wv, wo, w1, w3, w2`` (separate q, k, v
projections; the SwiGLU MLP computes ``w2(silu(w1·x) · w3·x)``), so ``wk``, ``wo`` and
``w3`` are recomputed and ``wq``, ``wv``, ``w1``, ``w2`` kept; attention is kept.
:func:`op_sac_matmuls` lists a layer's mms in that order with what is kept.  distsim's
operator list fuses q, k and v into one ``qkv`` GEMM and a gated MLP's ``w1`` and ``w3``
into one ``mlp_fc1``; the mms here are the unfused model's, which is what torchtitan runs
and counts, and the recompute pass runs the recomputed ones at their own shapes
(:meth:`~distsim_gpu.workloads.cost.compute.operators.LayerWork.recompute`).  A MoE layer's
router and expert GEMMs are counted the same way after ``wo`` (experts as one grouped GEMM
per weight: ``w1``, ``w3``, ``w2``).  Linear layers dispatch ``aten.mm`` also under float8
(torchao's tensor subclass turns it into ``_scaled_mm`` below the policy), so the rule is
the same in FP8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from distsim_gpu.simcore.errors import ConfigError

__all__ = [
    "RECOMPUTE_MODES",
    "RECOMPUTE_TABLE_PASSES",
    "SAVED_COLLECTIVES",
    "LayerShape",
    "Matmul",
    "op_sac_matmuls",
    "table_pass",
]

RECOMPUTE_MODES = ("none", "selective", "op", "full")
# Collectives whose outputs the op policy keeps, so its recompute pass does not run them
# again (reduce-scatter in torchtitan's save list; all-to-all in its later MoE list).
SAVED_COLLECTIVES = frozenset({"reduce_scatter", "alltoall"})


def table_pass(mode: str) -> str:
    """What a cost table calls the recompute pass of ``mode``: ``recompute`` for ``full``
    (the whole forward again), ``recompute_<mode>`` for the partial ones."""
    return "recompute" if mode == "full" else f"recompute_{mode}"


RECOMPUTE_TABLE_PASSES = tuple(table_pass(m) for m in ("full", "selective", "op"))


@dataclass(frozen=True, slots=True)
class Matmul:
    """One weight mm of a layer on one tensor-parallel rank, as an unfused model runs it:
    ``in_features`` × ``out_features`` per token (a row-parallel one's output is the whole
    hidden width of partial sums), part of distsim operator ``operator``; ``routed``: its
    rows are the tokens routed to experts (``top_k`` per token) rather than the layer's
    tokens; ``saved``: whether torchtitan's op policy keeps its output."""

    name: str
    operator: str
    in_features: int
    out_features: int
    routed: bool = False
    saved: bool = True

    def flops_per_token(self) -> float:
        """Multiply-add FLOP per row: ``2·in·out``."""
        return 2.0 * self.in_features * self.out_features


class LayerShape(Protocol):
    """What :func:`op_sac_matmuls` reads of a model (a ``ModelSpec``; not imported here,
    since ``workloads.specs.models`` takes :data:`RECOMPUTE_MODES` from this module)."""

    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    experts: int
    gated_mlp: bool

    @property
    def head_dim(self) -> int: ...

    def is_moe_layer(self, index: int) -> bool: ...

    def mlp_width(self, index: int) -> int: ...


def op_sac_matmuls(model: LayerShape, *, tp: int = 1, layer_index: int = 0,
                   ) -> tuple[Matmul, ...]:
    """Layer ``layer_index``'s weight mms on one of ``tp`` ranks in forward order, every
    second one (2nd, 4th, ...) not saved (module docstring)."""
    if getattr(model, "mla", None) is not None or getattr(model, "shared_experts", 0):
        raise ConfigError("recompute op is not modelled for multi-head latent attention "
                          "or shared experts", key="recompute",
                          hint="use recompute none, selective or full with model.mla / "
                               "model.shared_experts")
    h, d = model.hidden, model.head_dim
    q = model.heads // tp * d
    kv = max(1, model.kv_heads // tp) * d  # KV heads replicated when kv_heads < tp
    f = model.mlp_width(layer_index) // tp
    parts = [("wq", "qkv", h, q, False), ("wk", "qkv", h, kv, False),
             ("wv", "qkv", h, kv, False), ("wo", "attn_out", q, h, False)]
    moe = model.is_moe_layer(layer_index)
    fc1, fc2 = ("expert_fc1", "expert_fc2") if moe else ("mlp_fc1", "mlp_fc2")
    if moe:
        parts.append(("router", "router", h, model.experts, False))
    parts.append(("w1", fc1, h, f, moe))
    if model.gated_mlp:
        parts.append(("w3", fc1, h, f, moe))
    parts.append(("w2", fc2, f, h, moe))
    return tuple(Matmul(name, op, k, n, routed, saved=position % 2 == 1)
                 for position, (name, op, k, n, routed) in enumerate(parts, start=1))
