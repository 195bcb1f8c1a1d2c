"""Megatron-Core's fine-grained selective recomputation: which submodules ``selective`` re-runs.

``training.recompute: selective`` re-runs, by default, core attention (Korthikanti et al.
2022 §5).  Megatron-Core (0.13 on) lets a recipe name the submodules instead —
``--recompute-modules`` / ``TransformerConfig.recompute_modules``, default
``["core_attn"]`` — and MoE recipes use it to fit: DeepSeek-V3's report recomputes its
RMSNorms and MLA up-projections and caches only the SwiGLU inputs (§3.2.3, §3.3).
``training.recompute_modules`` is that list (read for this module, no code taken):

* ``core_attn`` — core attention, from the scores to the context: its s² tensors (or flash
  attention's log-sum-exp) are not kept, and the backward runs it again.
* ``layernorm`` — the norms' outputs are discarded and recomputed (output-discarding
  checkpointing).  Under Megatron-Core's Transformer Engine layer spec a norm that feeds
  one linear is fused into it (``TELayerNormColumnParallelLinear``; the layer's own norm is
  an identity) and the module does nothing there; the norms of their own are multi-head
  latent attention's input norm (two down projections read it) and a MoE layer's pre-MLP
  norm (the router and the dispatch read it).  Their outputs — the QKV / FC1 input of
  distsim's activation count — are not kept.
* ``mla_up_proj`` — MLA's up projections with their fused latent norms and the rotary
  embedding: Q, K, V and the normed latents are not kept (the down projections' outputs
  are, as the checkpoint's inputs).
* ``moe_act`` — the routed experts' activation function: its output, FC2's input, is not
  kept (its input, FC1's output, is).
* ``mlp`` — a dense layer's MLP, re-run from its input (normal checkpointing): its FC1,
  activation and FC2 inputs are not kept, and with tensor parallelism its collectives run
  again.
* ``shared_experts`` — a MoE layer's shared experts, the same way: their activation and
  FC2 inputs are not kept, and with tensor parallelism their gather and scatter run again.
* ``moe`` — the whole MoE layer, re-run from its input (Megatron-Core's ``MoELayer``
  checkpoints its router, dispatch, experts, shared experts and combine as one function):
  nothing of it is kept but that input, and its backward runs the router, the expert
  all-to-alls and the expert-tensor collectives again.

What "not kept" means for memory is :func:`~workloads.cost.memory.activation_bytes_per_layer`'s;
which operators the recompute pass runs is :func:`recomputed_operators`, and which
collectives with them the iteration's (:mod:`workloads.iteration.streams`).  Under FP8 a
Transformer Engine linear keeps its own quantized copy of its input; Megatron-Core's FP8
support for these modules (0.14) recomputes that copy too, which is what is counted.
The list describes ``selective`` and the other modes ignore it (a sweep over
``training.recompute`` keeps one list; a layer group's ``selective`` uses it too).
Refused with a clear error: a module the model has nothing for (``mla_up_proj`` without
MLA, ``moe_act``, ``moe`` or ``shared_experts`` without experts, ``layernorm`` where every
norm is fused).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.workloads.specs.recompute import SAVED_COLLECTIVES

__all__ = [
    "CORE_ATTENTION_KERNELS",
    "DEFAULT_RECOMPUTE_MODULES",
    "RECOMPUTE_MODULES",
    "PassCommunication",
    "check_recompute_modules",
    "is_recomputed",
    "pass_communication",
    "recompute_modules_from",
    "recomputed_operators",
    "recomputes_communication",
    "separate_norms",
]

RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe",
                     "shared_experts")
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)  # Megatron-Core's default, and distsim's before
# The operators selective recomputation of core attention re-runs (Korthikanti et al.
# 2022 §5: from the scores to the context), for either attention implementation.
CORE_ATTENTION_KERNELS = frozenset({"attention", "attn_scores", "attn_softmax",
                                    "attn_dropout", "attn_context"})
# Each module's forward operators (workloads.cost.compute.operators' names; an FP8 cast
# of a GEMM's input, ``cast_<gemm>``, goes with its GEMM).
_MODULE_OPERATORS = {
    "mla_up_proj": frozenset({"q_norm", "q_up", "q_proj", "kv_norm", "kv_up", "attn_rope"}),
    "moe_act": frozenset({"expert_act"}),
    "mlp": frozenset({"mlp_fc1", "mlp_act", "mlp_fc2"}),
    "shared_experts": frozenset({"shared_fc1", "shared_act", "shared_fc2"}),
    # Megatron-Core's MoELayer.forward under its checkpoint (the gate's norm is the
    # layer's input, kept): routing, token copies, experts, shared experts.
    "moe": frozenset({"router", "moe_dispatch", "expert_fc1", "expert_act", "expert_fc2",
                      "moe_combine", "shared_fc1", "shared_act", "shared_fc2"}),
}
_KEY = "training.recompute_modules"


class _Model(Protocol):
    """What the checks read of a model (a ``ModelSpec``)."""

    layers: int
    experts: int
    shared_experts: int
    mla: Any

    def is_moe_layer(self, index: int) -> bool: ...


def recompute_modules_from(value: Any, *, key: str = _KEY,
                           source: str | None = None) -> tuple[str, ...]:
    """The modules of a YAML list (in :data:`RECOMPUTE_MODULES`' order, so two spellings
    of one set compare equal); a ConfigError for anything else."""
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"expected a list of submodules, got {value!r}", key=key,
                          source=source, hint="e.g. [layernorm, mla_up_proj, moe_act]; "
                          f"choices: {', '.join(RECOMPUTE_MODULES)}")
    names = [str(v).lower() for v in value]
    for name in names:
        if name not in RECOMPUTE_MODULES:
            raise ConfigError(f"unknown submodule {name!r}", key=key, source=source,
                              hint=closest(name, RECOMPUTE_MODULES)
                              or f"choices: {', '.join(RECOMPUTE_MODULES)}")
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ConfigError(f"{', '.join(twice)} named twice", key=key, source=source)
    return tuple(m for m in RECOMPUTE_MODULES if m in names)


def separate_norms(model: _Model, layer_index: int) -> frozenset[str]:
    """The norms of layer ``layer_index`` that are modules of their own under
    Megatron-Core's Transformer Engine spec (module docstring): MLA's input norm and a
    MoE layer's pre-MLP norm."""
    norms = {"input_norm"} if model.mla is not None else set()
    if model.is_moe_layer(layer_index):
        norms.add("post_attn_norm")
    return frozenset(norms)


def recomputed_operators(modules: Sequence[str], model: _Model,
                         layer_index: int) -> frozenset[str]:
    """The forward operators of layer ``layer_index`` that selective recomputation of
    ``modules`` runs again (a GEMM's FP8 input cast with it: test names with
    :func:`is_recomputed`)."""
    names: set[str] = set()
    for module in modules:
        if module == "core_attn":
            names |= CORE_ATTENTION_KERNELS
        elif module == "layernorm":
            names |= separate_norms(model, layer_index)
        else:
            names |= _MODULE_OPERATORS[module]
    return frozenset(names)


def check_recompute_modules(modules: tuple[str, ...], model: _Model, *,
                            source: str | None = None) -> None:
    """A ConfigError unless each of ``modules`` has something to recompute in ``model``
    (module docstring); checked whatever the recompute mode, so a list is right before a
    sweep or a layer group makes it ``selective``."""
    if modules == DEFAULT_RECOMPUTE_MODULES:
        return
    moe_layers = [i for i in range(model.layers) if model.is_moe_layer(i)]
    missing = {
        "layernorm": (model.mla is None and not moe_layers,
                      "every norm of this model is fused into the linear after it"),
        "mla_up_proj": (model.mla is None, "the model has no multi-head latent attention"),
        "moe_act": (not moe_layers, "the model has no MoE layer"),
        "moe": (not moe_layers, "the model has no MoE layer"),
        "mlp": (len(moe_layers) == model.layers, "every layer of the model is a MoE layer"),
        "shared_experts": (not model.shared_experts or not moe_layers,
                           "the model has no shared experts"),
    }
    for module in modules:
        absent, why = missing.get(module, (False, ""))
        if absent:
            raise ConfigError(f"recompute module {module!r} has nothing to recompute: {why}",
                              key=_KEY, source=source, hint=f"remove {module}")


def recomputes_communication(modules: Sequence[str], *, tp: int, ep: int) -> bool:
    """Whether recomputing ``modules`` of a MoE layer runs communication again: ``moe``
    its all-to-alls (``ep > 1``) or its tensor-parallel collectives, ``shared_experts``
    their gather and scatter (``tp > 1``)."""
    return ("moe" in modules and (ep > 1 or tp > 1)) or (
        "shared_experts" in modules and tp > 1)


def is_recomputed(operator_name: str, names: frozenset[str]) -> bool:
    """Whether forward operator ``operator_name`` is one of ``names`` or the FP8 input
    cast of one (``cast_<gemm>``)."""
    return operator_name in names or operator_name.removeprefix("cast_") in names


@dataclass(frozen=True, slots=True)
class PassCommunication:
    """Which of a layer's communication one of its passes runs.

    ``full``: all of it (a forward, a backward, a ``full`` recompute).  ``op_sac``:
    torchtitan's per-op recompute, which keeps the reduce-scatters' and all-to-alls'
    outputs (``saved``) and runs only the TP all-gathers again.  A ``selective`` recompute
    runs what its modules re-run: the CP ring with core attention (``ring``), a dense
    MLP's TP collectives (``mlp``), a MoE layer's all-to-alls and its MLP block's TP
    collectives (``moe``), or the shared experts' gather and scatter (``shared_experts``).
    """

    full: bool
    op_sac: bool = False
    ring: bool = True
    mlp: bool = False
    moe: bool = False
    shared_experts: bool = False

    @property
    def saved(self) -> frozenset[str]:
        """The collectives whose outputs the pass keeps rather than runs again."""
        return SAVED_COLLECTIVES if self.op_sac else frozenset()


def pass_communication(pass_: str, recompute: str, modules: Sequence[str],
                       moe_layer: bool) -> PassCommunication:
    """What pass ``pass_`` (``fwd``, ``bwd``, ``recompute``) of a layer recomputed as
    ``recompute`` with ``modules`` (a ``selective`` one's) runs of its communication."""
    if pass_ != "recompute" or recompute == "full":
        return PassCommunication(full=True)
    if recompute == "op":
        return PassCommunication(full=False, op_sac=True, ring=False)
    selected = modules if recompute == "selective" else ()
    moe = moe_layer and "moe" in selected
    return PassCommunication(
        full=False, ring="core_attn" in selected,
        mlp="mlp" in selected and not moe_layer, moe=moe,
        shared_experts=moe_layer and "shared_experts" in selected and not moe)
