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
    updated by one small kernel per pass (``fp8_scale_update``), after Transformer Engine
    all-reduces the pass's amaxes over the tensor-, context- and data-parallel group at the
    end of every forward and backward (``reduce_and_update_fp8_tensors`` at the outermost
    ``fp8_autocast`` exit; Megatron-Core's amax reduction group): a few kB, a latency-bound
    collective a pass that the iteration runs (:mod:`workloads.iteration.amax`).
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
    128 of k on the CUDA cores and writes its output after the main loop: its time is the
    main loop at :data:`BLOCKWISE_GEMM_EFFICIENCY` of the FP8 peak (Hopper, DeepGEMM's
    tables) plus the output's bytes at HBM bandwidth — which makes small-k GEMMs and the
    weight gradient (fp32, read and accumulated) slower than per-tensor FP8's.

``mxfp8`` (TE ``MXFP8BlockScaling``, Blackwell; OCP Microscaling spec v1.0)
    One E8M0 (power-of-two, 1-byte) scale per 32 consecutive elements along the GEMM's
    contraction dimension.  Since the blocks run along k, the forward's row-wise copy
    cannot serve the weight gradient (whose k is the tokens): each cast writes a row-wise
    and a column-wise FP8 copy, each with its scales (no transpose kernel: Blackwell's
    tensor cores take either layout).  Block amax in registers, no history; casts are
    kernels of their own (torchao's and TE's quantisers).  Its GEMMs, cast kernels and
    weight gradient run at the rates torchao measured on B200 (module constants).
``nvfp4`` (TE ``NVFP4BlockScaling``; NVIDIA, "Pretraining Large Language Models with
    NVFP4", arXiv 2509.25149): FP4 E2M1 elements (half a byte) with one FP8 E4M3 scale per
    16 elements and an fp32 scale per tensor, under ``training.precision: fp4``.  The
    per-tensor scale needs the tensor's amax first (an amax pass), the weight-gradient
    operands go through a 16-point random Hadamard transform, gradients are rounded
    stochastically; each cast writes a row-wise and a column-wise copy.  These kernels are
    compute-bound far below HBM's rate (:data:`NVFP4_CAST_MEMORY_EFFICIENCY`).  The
    recipe keeps the last layers' linear GEMMs in BF16
    (:data:`NVFP4_BF16_LAYER_FRACTION`); attention stays 16-bit as under FP8.

Weights are cast once per step (after the optimizer updates them) and the FP8 copy is
cached across the step's micro-batches (TE's ``is_first_microbatch``):
:attr:`Fp8Recipe.weight_cast_bytes_per_param`, charged with the optimizer step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.workloads.strategy.precision import FP8_RECIPES

__all__ = [
    "BLOCKWISE_GEMM_EFFICIENCY",
    "BLOCKWISE_SCALE_BYTES_PER_ELEMENT",
    "DISPATCH_FP8_ELEMENT_BYTES",
    "FP8_RECIPES",
    "FP8_RECIPE_SPECS",
    "MXFP8_CAST_MEMORY_EFFICIENCY",
    "MXFP8_GEMM_EFFICIENCY",
    "MXFP8_WGRAD_EFFICIENCY",
    "NVFP4_BF16_LAYER_FRACTION",
    "NVFP4_CAST_MEMORY_EFFICIENCY",
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
#: Bytes per element of the tokens DeepEP's FP8 dispatch sends: one e4m3 byte and one fp32
#: scale per 128 elements (DeepEP README; DeepSeek-V3 report §3.3.1, 1×128 activation
#: tiles) — the row-wise copy of the ``blockwise`` recipe.
DISPATCH_FP8_ELEMENT_BYTES = FP8_BYTES + _FP32_SCALE_BYTES / BLOCK_ELEMENTS
# DeepGEMM's block-scaled GEMMs on Hopper (deepseek-ai/DeepGEMM; shared/data/kernels/
# deepgemm_h800): the main loop promotes partial sums on the CUDA cores every 128 of k, and
# the output is written after it, not under the next tile's main loop — so a GEMM takes
# its main loop at this fraction of the FP8 peak (tiles and waves counted, no small-k
# half point) plus its output's bytes at HBM bandwidth: 2 a bf16 element (forward, data
# gradient), 8 an fp32 weight-gradient element it reads and accumulates into.  Fitted on
# the 2025-03-25 README's six M = 4,096 forward GEMMs and PR #95's fourteen weight-gradient
# GEMMs (dense and k-grouped) together (validation/kernels/compare_blockwise.py --fit;
# leave-one-out median 4.9 %, max 12.4 %): one main-loop rate serves both, the weight
# gradient's lower one is its fp32 epilogue.  Other measurements of the same kernels are
# slower (the model is 21-26 % fast on a user's H200 weight gradients, 52 % on torchao's
# H100 one): docs/fp8.md.
BLOCKWISE_GEMM_EFFICIENCY = 0.683
# Weight re-cast after each optimizer step, per parameter: read the 16-bit weight (2 B),
# write its FP8 copy and the transpose (1 + 1 B).  Current scaling reads it once more for
# its amax; block scales add 4 B per 128×128 block (the square block serves the transpose).
_WEIGHT_CAST_BYTES = 2.0 + 2 * FP8_BYTES
_WEIGHT_AMAX_BYTES = 2.0
_WEIGHT_BLOCK_SCALE_BYTES = _FP32_SCALE_BYTES / BLOCK_ELEMENTS ** 2

# MXFP8 (OCP Microscaling v1.0): one 1-byte E8M0 scale per 32 elements; a cast writes two
# copies (row- and column-wise blocks), so 2/32 scale bytes per element.
MX_BLOCK_ELEMENTS = 32
MXFP8_SCALE_BYTES_PER_ELEMENT = 2.0 / MX_BLOCK_ELEMENTS
# torchao's MXFP8 MoE kernel breakdown on B200 at 1000 W (shared/data/kernels/
# torchao_lowp_kernels/b200_mxfp8_moe_kernel_breakdown_dsv3.csv, DeepSeek-V3 shapes, 131072
# tokens): the 2D-3D scaled GEMMs (forward, data gradient) reach 65.6 % and 65.1 % of the
# FP8 peak, the 2D-2D weight-gradient GEMM 52.1 % (0.795 of the others); its six MXFP8
# quantisation kernels 68.4-81.9 % of HBM peak, median 75.4 %.
MXFP8_GEMM_EFFICIENCY = 0.654
MXFP8_WGRAD_EFFICIENCY = 0.795
MXFP8_CAST_MEMORY_EFFICIENCY = 0.754
# NVFP4: half a byte per element plus one 1-byte E4M3 scale per 16, two copies per cast.
NVFP4_ELEMENT_BYTES = 0.5
NVFP4_SCALE_BYTES_PER_ELEMENT = 2.0 / 16
# torchao's NVFP4 pre-processing kernels on GB200 (gb200_nvfp4_*_cutedsl_vs_triton.csv: the
# CuTe DSL kernels, the faster ones): RHT + row/column quantisation 2421 GB/s, RHT amax
# 2434 GB/s, 2D weight quantisation 2412 GB/s (medians) against 7928 GB/s peak: 0.305.
NVFP4_CAST_MEMORY_EFFICIENCY = 0.305
# NVFP4 GEMMs: no table of them is in the data; taken at MXFP8's measured fraction of its
# own peak (an assumption, printed with the recipe; docs/fp8.md).
NVFP4_GEMM_EFFICIENCY = MXFP8_GEMM_EFFICIENCY
# The NVFP4 recipe keeps a few final blocks' linear layers in BF16 (arXiv 2509.25149, §4:
# about 15 % of the linear layers, the last ones, for the 12B model); taken as that share
# of any model's layers, the last ones.
NVFP4_BF16_LAYER_FRACTION = 0.15
# NVFP4 weight re-cast per parameter: read 16 bits, an amax pass, two FP4 copies with scales.
_NVFP4_WEIGHT_CAST_BYTES = 2.0 + 2.0 + 2 * NVFP4_ELEMENT_BYTES + NVFP4_SCALE_BYTES_PER_ELEMENT


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
    # Bytes of one low-precision element (FP8: 1, FP4: 0.5); scales are counted apart.
    element_bytes: float = FP8_BYTES
    # Where measured for this recipe's kernels (None: the GPU's figures): the GEMMs'
    # fraction of their peak, and the cast kernels' fraction of HBM bandwidth.
    gemm_efficiency: float | None = None
    cast_memory_efficiency: float | None = None
    # GPU generations with the recipe's hardware (empty: any with FP8).
    architectures: tuple[str, ...] = field(default=())
    # Share of the layers, the last ones, whose linear GEMMs stay 16-bit.
    bf16_layer_fraction: float = 0.0
    # The GPU generation ``gemm_efficiency`` was measured on (None: any the recipe runs
    # on); elsewhere the GPU's own FP8 figure.
    gemm_efficiency_architecture: str | None = None
    # The GEMM writes its output after its main loop (DeepGEMM): the output's bytes at HBM
    # bandwidth are added to the main loop's time, in place of the small-k half point.
    gemm_epilogue_exposed: bool = False
    # The recipe's row-wise activation copy is the format DeepEP's FP8 dispatch sends
    # (1×128 blocks with fp32 scales): the tokens a dispatch delivers need only their
    # column-wise copy.
    rowwise_is_dispatch_format: bool = False

    def cast_bytes(self, elements: float, input_bytes: float) -> float:
        """Bytes a stand-alone cast of ``elements`` 16-bit values moves: its amax read
        (``current``, ``nvfp4``), the read it casts, the two low-precision copies (the
        tensor and its transpose, or its row- and column-wise blocks), the scales."""
        reads = input_bytes * (2 if self.amax_pass else 1)
        return elements * (reads + 2 * self.element_bytes + self.scale_bytes_per_element)

    @property
    def one_copy_bytes(self) -> float:
        """Bytes an element of one low-precision copy takes with its scales (the
        recipe's scale figure counts a cast's two copies, row- and column-wise)."""
        return self.element_bytes + self.scale_bytes_per_element / 2

    def one_copy_cast_bytes(self, elements: float, input_bytes: float) -> float:
        """Bytes of a cast that writes one of the two copies (the row-wise one) with its
        scales: :meth:`cast_bytes` less one copy
        (:mod:`~distsim_gpu.workloads.cost.compute.fp8_casts`)."""
        reads = input_bytes * (2 if self.amax_pass else 1)
        return elements * (reads + self.one_copy_bytes)

    def high_precision_layer(self, layer_index: int, layers: int) -> bool:
        """Whether layer ``layer_index`` of ``layers`` keeps its GEMMs 16-bit."""
        keep = round(self.bf16_layer_fraction * layers)
        return layer_index >= layers - keep

    @property
    def cast_launches(self) -> int:
        """Kernels of one stand-alone cast (the amax reduction is a kernel of its own)."""
        return 2 if self.amax_pass else 1

    def transpose_bytes(self, elements: float) -> float:
        """Bytes of a kernel that makes an FP8 tensor's second copy from its first: the
        backward ``fp8_transpose`` of a producer-written tensor, or a block-scaled copy's
        re-blocking (read one copy and its scales, write the other and its own)."""
        return elements * (2.0 * self.element_bytes + self.scale_bytes_per_element)

    def dispatched_cast(self, elements: float) -> tuple[float, int]:
        """Bytes and kernels that make a GEMM input of ``elements`` values a dispatch
        delivered in FP8 (:data:`DISPATCH_FP8_ELEMENT_BYTES`): under ``blockwise`` the
        row-wise copy is what arrived, and one kernel writes the column-wise copy (reads
        one copy, writes the other, each with its scales); any other recipe casts the
        FP8 tokens again into its own format, as it would 16-bit ones."""
        if self.rowwise_is_dispatch_format:
            return self.transpose_bytes(elements), 1
        return self.cast_bytes(elements, DISPATCH_FP8_ELEMENT_BYTES), self.cast_launches


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
        scale_update_kernel=False, wgrad_efficiency=1.0,
        weight_cast_bytes_per_param=_WEIGHT_CAST_BYTES + _WEIGHT_BLOCK_SCALE_BYTES,
        gemm_efficiency=BLOCKWISE_GEMM_EFFICIENCY, gemm_efficiency_architecture="hopper",
        gemm_epilogue_exposed=True, rowwise_is_dispatch_format=True),
    "mxfp8": Fp8Recipe(
        "mxfp8", "Transformer Engine MXFP8BlockScaling (Blackwell): E8M0 scales per 32 "
        "elements, row- and column-wise copies; rates from torchao's B200 kernels",
        fuses_into_producer=False, amax_pass=False,
        scale_bytes_per_element=MXFP8_SCALE_BYTES_PER_ELEMENT, scale_update_kernel=False,
        wgrad_efficiency=MXFP8_WGRAD_EFFICIENCY,
        weight_cast_bytes_per_param=_WEIGHT_CAST_BYTES + MXFP8_SCALE_BYTES_PER_ELEMENT,
        gemm_efficiency=MXFP8_GEMM_EFFICIENCY,
        cast_memory_efficiency=MXFP8_CAST_MEMORY_EFFICIENCY, architectures=("blackwell",)),
    "nvfp4": Fp8Recipe(
        "nvfp4", "Transformer Engine NVFP4BlockScaling (arXiv 2509.25149): FP4 E2M1 with E4M3 "
        "scales per 16 and an fp32 tensor scale, RHT on weight-gradient inputs, stochastic "
        "rounding; the last layers in BF16",
        fuses_into_producer=False, amax_pass=True,
        scale_bytes_per_element=NVFP4_SCALE_BYTES_PER_ELEMENT, scale_update_kernel=False,
        wgrad_efficiency=1.0, weight_cast_bytes_per_param=_NVFP4_WEIGHT_CAST_BYTES,
        element_bytes=NVFP4_ELEMENT_BYTES, gemm_efficiency=NVFP4_GEMM_EFFICIENCY,
        cast_memory_efficiency=NVFP4_CAST_MEMORY_EFFICIENCY, architectures=("blackwell",),
        bf16_layer_fraction=NVFP4_BF16_LAYER_FRACTION),
}


def fp8_recipe(name: str, *, key: str = "training.fp8_recipe") -> Fp8Recipe:
    """The recipe called ``name``; a ConfigError listing the recipes otherwise."""
    return FP8_RECIPE_SPECS[check_choice(name, FP8_RECIPES, key=key, what="FP8 recipe")]
