"""The numeric formats a training job computes and stores in, and their FP8/FP4 recipes.

``training.precision`` (:data:`PRECISIONS`), the scaled low-precision ones whose linear
layers need a recipe (:data:`LOW_PRECISIONS`, :data:`RECIPES_OF_PRECISION`), what a
gradient reduction may carry on the wire (``parallelism.grad_reduce_precision``) and how
Adam's moments are stored (``training.optimizer_moments``).  What each recipe costs is
:mod:`workloads.cost.compute.fp8_recipes`'.

``training.activation_func_fp8_input_store`` is Megatron-Core's
``--activation-func-fp8-input-store``: the fused SwiGLU kernel keeps its input for the
backward as a plain ``float8_e4m3fn`` cast, one byte an element without scales, and casts
it back before the backward (``bias_swiglu_impl``'s ``fp8_input_store``; read for this
module, no code taken) — what DeepSeek-V3 does with its MoE's SwiGLU inputs (report §3.3,
with 1x128 scales besides, 3 % more than counted here).  Megatron-Core runs it only in the
fused SwiGLU path, so it needs a gated MLP; it applies to every MLP of the model, dense,
routed and shared.  The cast's bytes (one more byte an element written in the forward, one
fewer read in the backward) are not added to the kernel's time.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError

__all__ = [
    "FP8_RECIPES",
    "GRAD_BYTES",
    "GRAD_REDUCE_PRECISIONS",
    "LOW_PRECISIONS",
    "OPTIMIZER_MOMENTS",
    "PRECISIONS",
    "RECIPES_OF_PRECISION",
    "SWIGLU_FP8_INPUT_BYTES",
    "check_activation_fp8_store",
    "check_fp8_recipe",
    "grad_element_bytes",
    "swiglu_input_bytes",
]

PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "fp32")
#: Bytes an element of a SwiGLU input kept by ``activation_func_fp8_input_store``.
SWIGLU_FP8_INPUT_BYTES = 1.0
#: Precisions whose linear-layer GEMMs run on scaled low-precision operands (a recipe).
LOW_PRECISIONS = ("fp8", "fp4")
# How FP8 tensors get their scales (docs/fp8.md; the kernels each adds are
# workloads.cost.compute.fp8_recipes'): Transformer Engine's DelayedScaling (the amax of
# past iterations), Float8CurrentScaling / torchao's tensorwise dynamic scaling (the
# tensor's own amax, read before its cast) and DeepSeek-V3's block-wise scales.
FP8_RECIPES = ("delayed", "current", "blockwise", "mxfp8", "nvfp4")
#: The recipes of each low precision (NVFP4 is the only FP4 one; it needs precision fp4).
RECIPES_OF_PRECISION = {"fp8": ("delayed", "current", "blockwise", "mxfp8"), "fp4": ("nvfp4",)}
# What a gradient all-reduce may carry on the wire (GRAD_BYTES sizes each).
GRAD_REDUCE_PRECISIONS = ("fp32", "bf16", "fp16")
#: Bytes per gradient element by ``parallelism.grad_reduce_precision``: on the wire
#: (workloads.cost.traffic) and in the gradient buffer (workloads.cost.memory.state_bytes).
GRAD_BYTES: Mapping[str, int] = MappingProxyType({"fp32": 4, "bf16": 2, "fp16": 2})
#: How Adam's two moments are stored (``training.optimizer_moments``): fp32, or bf16 as
#: DeepSeek-V3 trains (report §3.3) and Megatron-Core's precision-aware optimizer offers
#: (``--exp-avg-dtype`` / ``--exp-avg-sq-dtype bf16``); the master weights stay fp32.
OPTIMIZER_MOMENTS = ("fp32", "bf16")
#: Over whom FP8 delayed scaling all-reduces its amaxes after each pass
#: (``training.fp8_amax_reduction``, workloads.iteration.amax): the stage's tensor-,
#: context- and data-parallel GPUs (Transformer Engine's ``reduce_amax`` with Megatron-Core's
#: amax group, the default), the tensor-parallel group alone (``--tp-only-amax-red``), or
#: no one (``reduce_amax=False``).
FP8_AMAX_REDUCTIONS = ("stage", "tp", "none")


def check_fp8_recipe(recipe: str | None, precision: str, *, key: str = "training.fp8_recipe",
                     source: str | None = None) -> None:
    """A ConfigError unless ``recipe`` is None or one of the recipes of ``precision``
    (:data:`RECIPES_OF_PRECISION`): a recipe under another precision would say scaled
    casts run where none do, so it is refused rather than ignored (a precision edited
    without the recipe is then caught instead of silently running 16-bit)."""
    if recipe is None:
        return
    check_choice(recipe, FP8_RECIPES, key=key, source=source, what="FP8 recipe")
    allowed = RECIPES_OF_PRECISION.get(precision, ())
    if recipe not in allowed:
        needs = next(p for p, names in RECIPES_OF_PRECISION.items() if recipe in names)
        raise ConfigError(f"an {needs.upper()} recipe ({recipe!r}) needs training.precision "
                          f"{needs}, not {precision!r}", key=key, source=source,
                          hint=(f"set training.precision: {needs}, or remove "
                                "training.fp8_recipe" if not allowed else
                                f"{precision} recipes: {', '.join(allowed)}"))


def check_activation_fp8_store(enabled: bool, *, gated_mlp: bool,
                               source: str | None = None) -> None:
    """A ConfigError when ``activation_func_fp8_input_store`` is asked of a model whose
    MLP is not gated: Megatron-Core stores only the fused SwiGLU's input in FP8."""
    if enabled and not gated_mlp:
        raise ConfigError("activation_func_fp8_input_store keeps a SwiGLU's input in FP8; "
                          "this model's MLP is not gated", source=source,
                          key="training.activation_func_fp8_input_store",
                          hint="remove it, or use a gated-MLP model (model.gated_mlp: true)")


def swiglu_input_bytes(fp8_input_store: bool) -> float | None:
    """Bytes an element of a SwiGLU's input kept for the backward:
    :data:`SWIGLU_FP8_INPUT_BYTES` under ``activation_func_fp8_input_store``, else None
    (the activations' own width)."""
    return SWIGLU_FP8_INPUT_BYTES if fp8_input_store else None


def grad_element_bytes(grad_reduce_precision: str) -> int:
    """Bytes of one gradient element at ``grad_reduce_precision`` (a clear error naming
    ``parallelism.grad_reduce_precision`` and its choices otherwise)."""
    return GRAD_BYTES[check_choice(grad_reduce_precision, GRAD_BYTES,
                                   key="parallelism.grad_reduce_precision",
                                   what="gradient precision")]
