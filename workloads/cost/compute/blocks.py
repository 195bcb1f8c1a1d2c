"""A layer's two blocks — attention and MLP — and the share of a pass each takes.

A transformer layer is an attention block then an MLP block. A MoE layer's norm and
router run before its dispatch — its tokens are routed before they are sent — so they end
its attention block (DeepSeek's trace annotates them inside ``attn``); its token copies
(permutation and un-permutation, around the all-to-alls), experts and shared experts are
its MLP block, and the dispatch and combine between them are communication alone. In a
dense layer the norm is the MLP block's: it follows the attention's TP reduce-scatter. A
backward pass splits further into the input gradients (``dgrad``: what the block before
waits for) and the weight gradients (``wgrad``: what nobody waits for until the
optimizer), the split DualPipe and zero-bubble schedules run apart. Profiler traces
annotate the same blocks (``attn(F)``, ``mlp(W)``:
:mod:`scenarios.fit.validate_operators` checks the cost model against them); the
iteration runs a layer pass as its two blocks (:mod:`workloads.iteration.streams`), and
forward-backward pairs overlap one pass's all-to-alls with the other's blocks
(:mod:`workloads.iteration.overlaps`).

:func:`block_shares` gives each block's share of a pass from the operators of the
roofline model behind a cost model (a profiled table's per-layer time is split by its
roofline's shares); without a roofline, half each, and half of each backward block its
weight gradients (its dgrad and wgrad GEMMs have the same FLOP).
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.workloads.cost.compute.operators import Operator
from distsim_gpu.workloads.cost.compute.roofline import roofline_behind
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.models import ModelSpec

__all__ = ["ATTENTION_OPERATORS", "BLOCK_NAMES", "GATE_OPERATORS", "MLP_OPERATORS",
           "TOKEN_COPY_OPERATORS", "WEIGHT_GRADIENT_SUFFIXES", "BlockShares",
           "block_operators", "block_shares", "is_weight_gradient"]

#: The forward operators of the attention block (a backward operator counts to the forward
#: one it derives from, :attr:`Operator.base_name`).
ATTENTION_OPERATORS = (
    "input_norm", "cast_qkv", "qkv", "attention", "attn_scores", "attn_softmax",
    "attn_dropout", "attn_context", "attn_context_copy", "attn_out_cache", "cast_attn_out",
    "attn_out",
    "attn_residual",
    # multi-head latent attention's projections (workloads.specs.mla)
    "cast_q_down", "q_down", "q_norm", "cast_q_up", "q_up", "cast_q_proj", "q_proj",
    "cast_kv_down", "kv_down", "kv_norm", "cast_kv_up", "kv_up", "attn_rope")
#: The forward operators of the MLP block: a dense layer's, a MoE layer's experts and shared
#: ones (its norm and router, :data:`GATE_OPERATORS`, end its attention block).
MLP_OPERATORS = (
    "post_attn_norm", "router", "cast_expert_fc1", "transpose_expert_fc1", "expert_fc1",
    "expert_act_cache", "expert_act", "cast_expert_fc2", "transpose_expert_fc2",
    "expert_fc2", "cast_mlp_fc1", "mlp_fc1", "mlp_act_cache", "mlp_act", "cast_mlp_fc2",
    "mlp_fc2", "mlp_residual", "cast_shared_fc1", "shared_fc1", "shared_act_cache",
    "shared_act", "cast_shared_fc2", "shared_fc2")
#: A MoE layer's operators that run before its dispatch (the router, and the FP8 cast of
#: the tokens a DeepEP dispatch sends): the attention block's there.
GATE_OPERATORS = ("post_attn_norm", "router", "cast_moe_dispatch")
#: A MoE layer's token copies around its all-to-alls: the MLP block's.
TOKEN_COPY_OPERATORS = ("moe_dispatch", "moe_combine")
_ATTENTION_NAMES = ("attn", "attention", "self_attn")
_MLP_NAMES = ("mlp", "moe", "ffn", "experts")
#: Block names as traces annotate them (lower case): the attention and MLP blocks, and the
#: all-to-alls between them, whose kernels are communication (no operator of the model's).
BLOCK_NAMES = (*_ATTENTION_NAMES, *_MLP_NAMES, "dispatch", "combine")


def block_operators(block: str, moe: bool) -> tuple[str, ...] | None:
    """The forward operators block ``block`` (a name of :data:`BLOCK_NAMES`, any case)
    holds in a MoE layer (``moe``) or a dense one; ``()`` for the all-to-alls, ``None``
    for a name that is not a block's."""
    name = block.lower()
    if name in _ATTENTION_NAMES:
        return ATTENTION_OPERATORS + (GATE_OPERATORS if moe else ())
    if name in _MLP_NAMES:
        if not moe:
            return MLP_OPERATORS
        return tuple(n for n in MLP_OPERATORS if n not in GATE_OPERATORS) + \
            TOKEN_COPY_OPERATORS
    return () if name in ("dispatch", "combine") else None


#: Backward operators that compute weight gradients (or accumulate them).
WEIGHT_GRADIENT_SUFFIXES = (".wgrad", ".grad_accum")


def is_weight_gradient(item: Operator) -> bool:
    """Whether backward operator ``item`` computes (or accumulates) weight gradients."""
    return item.name.endswith(WEIGHT_GRADIENT_SUFFIXES)


@dataclass(frozen=True, slots=True)
class BlockShares:
    """Fractions of one layer pass's time (they sum to 1): the attention block's and the
    MLP block's input side (the whole block in a forward), and each one's weight
    gradients (0 in a forward)."""

    attention: float
    attention_weights: float
    mlp: float
    mlp_weights: float


_EVEN = {"fwd": BlockShares(0.5, 0.0, 0.5, 0.0), "bwd": BlockShares(0.25, 0.25, 0.25, 0.25),
         "recompute": BlockShares(0.5, 0.0, 0.5, 0.0)}


def block_shares(costs: object, pass_: str, model: ModelSpec, shard: LayerShard,
                 ) -> BlockShares:
    """Each block's share of pass ``pass_`` (``fwd``, ``bwd``, or ``recompute``: of
    what ``shard.recompute`` re-runs) of the layer ``shard`` describes, from the
    operators of the roofline behind ``costs`` (module docstring): a MoE layer's norm and
    router count to its attention block, its token copies to its MLP block."""
    roofline = roofline_behind(costs)
    if roofline is None:
        return _EVEN[pass_]
    attention = block_operators("attn", model.is_moe_layer(shard.layer_index))
    parts = [0.0, 0.0, 0.0, 0.0]  # attention, its weights, MLP, its weights
    for item in roofline.layer_work(pass_, model, shard).kernels:
        index = (0 if item.base_name in attention else 2) + is_weight_gradient(item)
        parts[index] += roofline.kernel_time_s(item)
    total = sum(parts)
    if total <= 0:
        return _EVEN[pass_]
    return BlockShares(*(part / total for part in parts))
