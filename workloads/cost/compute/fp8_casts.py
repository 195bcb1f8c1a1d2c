"""The FP8 cast kernels around one GEMM, as a stack lays out an input's two copies.

An FP8 GEMM's operands need two copies each: row-wise for the forward and data-gradient
GEMMs, column-wise (the transpose, or under block scaling the 128×1 re-blocking) for the
weight gradient, whose contraction runs over the tokens.  Stacks make the second copy at
one of two times:

* **At the cast** (Transformer Engine's quantisers, torchao): the forward's cast of a GEMM
  input writes both copies, and the layer keeps the column-wise one for the backward; the
  backward casts the output gradient into both (``<gemm>.grad_cast``).  A producer that
  writes the FP8 input itself (delayed scaling's fused norm or activation) writes one
  copy, and the backward transposes it (``<gemm>.input_transpose``).
* **In the backward** (``Stack.fp8_colwise_in_backward``: DeepSeek's framework — the V3
  report, arXiv 2412.19437 §3.3.3, caches activations as their 1×128 FP8 copy and
  converts them "from an 1×128 quantization tile to an 128×1 tile in the backward pass";
  its released profile, deepseek-ai/profile-data ``train.json``, runs a row-wise
  ``per_token_cast_to_fp8`` before each forward GEMM and ``per_channel_cast_and_transpose``
  kernels beside each weight gradient): the forward cast writes the row-wise copy
  alone; the backward re-blocks the kept copy column-wise (``<gemm>.input_transpose``),
  casts the output gradient row-wise (``<gemm>.grad_cast``) and re-blocks that too
  (``<gemm>.grad_transpose``).  Tokens a DeepEP dispatch delivered in the recipe's
  row-wise format need no forward cast at all.

A re-blocking reads one FP8 copy with its scales and writes the other with its own.  A
stack whose data-gradient GEMM reads the weight's transpose without caching it
(``Stack.fp8_weight_transpose_per_pass``: DeepGEMM's kernels take the NT layout only, and
DeepSeek's profile transposes every FP8 weight once a micro-batch, ``batched_transpose``)
adds ``<gemm>.weight_transpose`` before each data gradient: read and write one copy of
the weight — except a grouped GEMM's, whose local experts' weights the profile transposes
in the forward, one ``batched_transpose`` a projection (``transpose_<gemm>``).

``Stack.fp8_activation_caches``: what DeepSeek keeps for the backward besides the GEMM
inputs (the report, §3.3.3) is cast by kernels of its own and cast back in the backward —
the attention output in E5M6 (:data:`ATTENTION_CACHE_ELEMENT_BYTES`;
``per_token_cast_to_fp8_with_fp8_special_fmt`` and ``per_token_cast_back_special_fmt``
in the profile) and each SwiGLU's input in FP8 with 1×128 scales (``per_token_cast_to_fp8``
and ``cast_back``).
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.workloads.cost.compute.fp8_recipes import Fp8Recipe
from distsim_gpu.workloads.cost.compute.stacks import Stack

__all__ = ["ATTENTION_CACHE_ELEMENT_BYTES", "CastKernel", "activation_cache",
           "attention_output_cache", "backward_casts", "dispatched_row_copy_kept",
           "forward_casts"]

#: Bytes an element of the attention output takes in DeepSeek's E5M6 cache (the V3
#: report, §3.3.3: 1 sign, 5 exponent, 6 mantissa bits) with one fp32 scale per 1×128
#: tile (``Stack.fp8_activation_caches``).
ATTENTION_CACHE_ELEMENT_BYTES = 1.5 + 4.0 / 128


@dataclass(frozen=True, slots=True)
class CastKernel:
    """One cast kernel: its name's affix, bytes per instance, launches, instances."""

    suffix: str
    bytes_moved: float
    launches: int = 1
    count: int = 1


def forward_casts(stack: Stack, mnk: tuple[int, int, int], count: int, grouped: bool,
                  input_bytes: float) -> list[CastKernel]:
    """The forward's stand-alone casts of an FP8 GEMM ``(m, n, k)`` run ``count`` times:
    its input's (both copies, or the row-wise one where the stack makes the column-wise
    copy in the backward), then a grouped GEMM's weight transposes where the stack makes
    them each micro-batch (module docstring)."""
    recipe, (m, n, k) = stack.fp8, mnk
    if stack.fp8_colwise_in_backward:
        moved = recipe.one_copy_cast_bytes(m * k, input_bytes)
    else:
        moved = recipe.cast_bytes(m * k, input_bytes)
    out = [CastKernel("cast", moved, recipe.cast_launches, count)]
    if grouped and stack.fp8_weight_transpose_per_pass:  # one batched launch
        out.append(CastKernel("transpose", count * _weight_transpose_bytes(recipe, k * n)))
    return out


def backward_casts(stack: Stack, mnk: tuple[int, int, int], *, input_fused: bool,
                   grouped: bool, activation_bytes: float) -> list[CastKernel]:
    """The cast kernels an FP8 GEMM ``(m, n, k)`` runs in the backward, in order: the output
    gradient's cast(s), the input's second copy, the weight's transpose (module
    docstring)."""
    recipe, (m, n, k) = stack.fp8, mnk
    gradient = m * n
    if stack.fp8_colwise_in_backward:
        out = [CastKernel("grad_cast", recipe.one_copy_cast_bytes(gradient, activation_bytes),
                          recipe.cast_launches),
               CastKernel("grad_transpose", recipe.transpose_bytes(gradient))]
    else:
        out = [CastKernel("grad_cast", recipe.cast_bytes(gradient, activation_bytes),
                          recipe.cast_launches)]
    if input_fused or stack.fp8_colwise_in_backward:
        out.append(CastKernel("input_transpose", recipe.transpose_bytes(m * k)))
    if stack.fp8_weight_transpose_per_pass and not grouped:
        out.append(CastKernel("weight_transpose", _weight_transpose_bytes(recipe, k * n)))
    return out


def _weight_transpose_bytes(recipe: Fp8Recipe, elements: float) -> float:
    """Read and write one FP8 copy of a weight (a 128×128 block's scale serves both
    layouts)."""
    return 2.0 * recipe.element_bytes * elements


def attention_output_cache(elements: float, activation_bytes: float) -> CastKernel:
    """The E5M6 cache of an attention output of ``elements`` values: read 16 bits, write
    the cache (its backward, the cast back, moves the same bytes)."""
    return CastKernel("cache", elements * (activation_bytes + ATTENTION_CACHE_ELEMENT_BYTES))


def activation_cache(recipe: Fp8Recipe, elements: float,
                     activation_bytes: float) -> CastKernel:
    """The FP8 cache of a SwiGLU input of ``elements`` values: one row-wise copy with its
    scales (its backward, the cast back, moves the same bytes)."""
    return CastKernel("cache", recipe.one_copy_cast_bytes(elements, activation_bytes))


def dispatched_row_copy_kept(stack: Stack) -> bool:
    """Whether tokens a DeepEP dispatch delivered in FP8 need no forward cast: the recipe's
    row-wise copy is the dispatch's format and the stack makes the column-wise copy in
    the backward."""
    return stack.fp8.rowwise_is_dispatch_format and stack.fp8_colwise_in_backward
