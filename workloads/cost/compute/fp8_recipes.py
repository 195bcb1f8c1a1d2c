"""FP8 recipes: how FP8 tensors get their scales, and the HBM traffic and GEMM rate each
way costs (``training.fp8_recipe``; docs/fp8.md names the sources).

An FP8 GEMM (E4M3 forward, E5M2 gradients) reads 1-byte operands, each with a scale that
maps its range onto FP8's.  Where the scale comes from decides which kernels run besides
the GEMM:

``delayed`` (Transformer Engine ``DelayedScaling``, TE 1.x's default, Megatron-Core / NeMo)
    The scale of each tensor comes from the amax history of earlier iterations, so a cast
    needs no look at the tensor first: it can be fused into the kernel that produces the
    tensor (``LayerNormLinear`` / ``LayerNormMLP`` write the norm's output in FP8, TE's
    activation kernels write FP8 under ``LayerNormMLP``), and a stand-alone cast is one
    ``cast_transpose`` kernel (read 16-bit, write FP8 and its transpose: Hopper's FP8
    tensor cores take only the "TN" layout, so the weight-gradient GEMM needs the tensor
    transposed).  A producer-fused cast writes the FP8 tensor only; its transpose is a
    ``fp8_transpose`` in the backward (read and write one byte per element).  The amax of
    every cast is taken in the same kernel; the histories are rolled and the scales
    updated by one small kernel per pass (``fp8_scale_update``) and reduced across the
    group once per step (a few kB: not modelled as traffic).
``current`` (TE ``Float8CurrentScaling``; torchao's tensorwise dynamic scaling)
    The scale comes from the tensor's own amax: one more read pass of every cast tensor
    before the cast (TE's FP8 current-scaling page: "the tensor needs to be read twice"),
    and nothing the cast could be fused into, since the producer would need the amax of
    what it is still writing.  No scale history, so no update kernel.
``blockwise`` (DeepSeek-V3, arXiv 2412.19437 §3.3.2; TE ``Float8BlockScaling``; DeepGEMM)
    One fp32 scale per 1×128 block of an activation or gradient and per 128×128 block of a
    weight: the block's amax is taken in registers by the quantisation kernel itself, which
    writes the FP8 tensor, its transpose (re-blocked 128×1 for the weight gradient) and
    both copies' scales.  No fusion into producers (our assumption: TE's block-scaled
    norms run in 16 bits and quantise after).  The GEMM promotes partial sums to fp32 every
    128 of k on the CUDA cores: DeepGEMM's forward and data-gradient kernels reach the rate
    of per-tensor FP8 GEMMs, its weight-gradient kernel less
    (:data:`BLOCKWISE_WGRAD_EFFICIENCY`).

Weights are cast once per step (after the optimizer updates them) and the FP8 copy is
cached across the step's micro-batches (TE's ``is_first_microbatch``):
:attr:`Fp8Recipe.weight_cast_bytes_per_param`, charged with the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.workloads.strategy.parallel import FP8_RECIPES

__all__ = [
    "BLOCKWISE_SCALE_BYTES_PER_ELEMENT",
    "BLOCKWISE_WGRAD_EFFICIENCY",
    "FP8_RECIPES",
    "FP8_RECIPE_SPECS",
    "Fp8Recipe",
    "fp8_recipe",
]

FP8_BYTES = 1
_FP32_SCALE_BYTES = 4
# DeepSeek-V3 (arXiv 2412.19437 §3.3.2, "Fine-Grained Quantization"): activations scaled
# per 1×128 tile, weights per 128×128 block.  An activation or gradient cast writes two
# FP8 copies (row-wise 1×128 blocks for the forward / data-gradient GEMM, column-wise
# 128×1 blocks for the weight gradient), each with one fp32 scale per 128 elements.
BLOCK_ELEMENTS = 128
BLOCKWISE_SCALE_BYTES_PER_ELEMENT = 2 * _FP32_SCALE_BYTES / BLOCK_ELEMENTS
# Block-scaled weight-gradient GEMM rate over the per-tensor FP8 GEMM's at a like shape.
# DeepGEMM's dense wgrad kernel (deepseek-ai/DeepGEMM PR #95, table in
# shared/data/kernels/deepgemm_h800/deepgemm_pr_tables_fp8.csv): median 931 TFLOP/s over
# its six k = 4096 shapes and 1052 over its three k = 8192 ones; cuBLASLt per-tensor FP8
# on H100 reaches 1216.9 at 4096³ and 1290.1 at 8192³ (Azure AI benchmarking guide,
# shared/data/kernels/azure_ai_benchmarking_guide/gemm_blaslt.csv): 0.765 and 0.815,
# mean 0.79.  DeepGEMM's forward kernel is not slower than per-tensor FP8 (4096×4096×7168:
# 1265 TFLOP/s, deepgemm_readme_h800_fp8.csv of 2025-03-25, to cuBLASLt's 1216.9 at
# 4096³), so forward and data-gradient GEMMs keep the per-tensor rate (factor 1).
BLOCKWISE_WGRAD_EFFICIENCY = 0.79
# Weight re-cast after each optimizer step, per parameter: read the 16-bit weight (2 B),
# write its FP8 copy and the transpose (1 + 1 B).  Current scaling reads it once more for
# its amax; block scales add 4 B per 128×128 block (the square block serves the transpose).
_WEIGHT_CAST_BYTES = 2.0 + 2 * FP8_BYTES
_WEIGHT_AMAX_BYTES = 2.0
_WEIGHT_BLOCK_SCALE_BYTES = _FP32_SCALE_BYTES / BLOCK_ELEMENTS ** 2


@dataclass(frozen=True, slots=True)
class Fp8Recipe:
    """What one FP8 recipe runs besides the FP8 GEMMs (module docstring).

    ``fuses_into_producer``: a norm or activation may write the FP8 copy itself (only when
    the stack's layers do: :class:`~distsim_gpu.workloads.cost.compute.stacks.Stack`'s
    ``fp8_norm_cast_fusion`` / ``fp8_activation_cast_fusion``).  ``amax_pass``: each cast
    reads its tensor once more first.  ``scale_bytes_per_element``: scale bytes a cast
    writes per element.  ``scale_update_kernel``: one amax-history / scale update kernel
    per layer pass.  ``wgrad_efficiency``: the weight-gradient GEMM's rate over the
    per-tensor FP8 rate.  ``weight_cast_bytes_per_param``: the per-step weight re-cast.
    """

    name: str
    source: str
    fuses_into_producer: bool
    amax_pass: bool
    scale_bytes_per_element: float
    scale_update_kernel: bool
    wgrad_efficiency: float
    weight_cast_bytes_per_param: float

    def cast_bytes(self, elements: float, input_bytes: int) -> float:
        """Bytes a stand-alone cast of ``elements`` 16-bit values moves: its amax read
        (``current``), the read it casts, the FP8 tensor and its transpose, the scales."""
        reads = input_bytes * (2 if self.amax_pass else 1)
        return elements * (reads + 2 * FP8_BYTES + self.scale_bytes_per_element)

    @property
    def cast_launches(self) -> int:
        """Kernels of one stand-alone cast (the amax reduction is a kernel of its own)."""
        return 2 if self.amax_pass else 1

    @staticmethod
    def transpose_bytes(elements: float) -> float:
        """Bytes of the backward ``fp8_transpose`` of a producer-written FP8 tensor."""
        return 2.0 * FP8_BYTES * elements


FP8_RECIPE_SPECS: dict[str, Fp8Recipe] = {
    "delayed": Fp8Recipe(
        "delayed", "Transformer Engine DelayedScaling (TE 1.x default; Megatron-Core, "
        "NeMo): amax history, fused norm/activation casts, cast_transpose kernels",
        fuses_into_producer=True, amax_pass=False, scale_bytes_per_element=0.0,
        scale_update_kernel=True, wgrad_efficiency=1.0,
        weight_cast_bytes_per_param=_WEIGHT_CAST_BYTES),
    "current": Fp8Recipe(
        "current", "Transformer Engine Float8CurrentScaling / torchao tensorwise dynamic "
        "scaling: an amax pass over each tensor before its cast",
        fuses_into_producer=False, amax_pass=True, scale_bytes_per_element=0.0,
        scale_update_kernel=False, wgrad_efficiency=1.0,
        weight_cast_bytes_per_param=_WEIGHT_CAST_BYTES + _WEIGHT_AMAX_BYTES),
    "blockwise": Fp8Recipe(
        "blockwise", "DeepSeek-V3 fine-grained FP8 (1x128 activations, 128x128 weights; "
        "DeepGEMM, TE Float8BlockScaling)",
        fuses_into_producer=False, amax_pass=False,
        scale_bytes_per_element=BLOCKWISE_SCALE_BYTES_PER_ELEMENT,
        scale_update_kernel=False, wgrad_efficiency=BLOCKWISE_WGRAD_EFFICIENCY,
        weight_cast_bytes_per_param=_WEIGHT_CAST_BYTES + _WEIGHT_BLOCK_SCALE_BYTES),
}


def fp8_recipe(name: str, *, key: str = "training.fp8_recipe") -> Fp8Recipe:
    """The recipe called ``name``; a ConfigError listing the recipes otherwise."""
    return FP8_RECIPE_SPECS[check_choice(name, FP8_RECIPES, key=key, what="FP8 recipe")]
