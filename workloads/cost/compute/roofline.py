"""The roofline cost model: each operator at the slower of its compute and memory roofline,
plus its launches; a pass is its operators in sequence on the GPU, each kernel no earlier
than the host has issued it.

``operator time = count · (max(FLOP / (peak · eff), bytes / (bw · memory_efficiency)) +
launches · launch_overhead_s)`` with ``eff`` = :func:`matmul_efficiency` (tiles and waves)
for GEMMs — at the FP8 peak and the stack's FP8 efficiency for FP8 GEMMs — and
``attention_efficiency`` for fused attention; element-wise operators run their few FLOP
on the CUDA cores (fp32 rate) and are memory bound.  Compute rates scale with the GPU's
``clock_fraction`` under a power limit (:mod:`~distsim_gpu.workloads.specs.gpus`).  A pass is the
GPU running its kernels in sequence, each no earlier than the host has issued it
(:func:`issue_timeline_s`, at the stack's host seconds per kernel for the pass): an eager
framework's CPU issues kernels ahead of the GPU until kernels get shorter than its
per-kernel dispatch time, and then the GPU waits for it.

:class:`CostModel` is the protocol the workload builder asks of any cost model (this one
and :class:`~distsim_gpu.workloads.cost.compute.table_costs.TableCosts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from distsim_gpu.simcore.config import check_bool, check_choice, check_number, check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.workloads.cost.compute.attention_rates import (
    attention_efficiency,
    attention_shape_factor,
)
from distsim_gpu.workloads.cost.compute.cross_entropy import CROSS_ENTROPY
from distsim_gpu.workloads.cost.compute.fp8_casts import ATTENTION_CACHE_ELEMENT_BYTES
from distsim_gpu.workloads.cost.compute.issue_timeline import issue_timeline_s
from distsim_gpu.workloads.cost.compute.operators import (
    PASSES,
    LayerWork,
    Operator,
    bytes_per_element,
    check_shard,
    elementwise,
    gemm,
    layer_work,
)
from distsim_gpu.workloads.cost.compute.stacks import (
    ATTENTION_IMPLEMENTATIONS,
    CUDA_GRAPH_LAUNCH_S,
    DEFAULT_STACK,
    FP8_MATMUL_EFFICIENCY,
    FP8_STACKS,
    STACKS,
    Stack,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import SavedFormats
from distsim_gpu.workloads.specs.gpus import GpuSpec
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.precision import LOW_PRECISIONS

__all__ = [
    "ADAM_BYTES_PER_PARAM",
    "DEFAULT_GEMM_TILES",
    "FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE",
    "GEMM_K_HALF",
    "GEMM_K_HALF_BY_ARCHITECTURE",
    "LAUNCH_OVERHEAD_S",
    "MATMUL_EFFICIENCY",
    "MATMUL_EFFICIENCY_BY_ARCHITECTURE",
    "MEMORY_EFFICIENCY",
    "MEMORY_EFFICIENCY_BY_GPU",
    "CostModel",
    "RooflineCosts",
    "activation_storage",
    "issue_timeline_s",
    "matmul_efficiency",
    "roofline_behind",
    "saved_formats",
    "saved_linear_input_bytes",
    "stores_attention_scores",
]

# Asymptotic fraction of dense tensor-core peak a large, well-shaped cuBLAS GEMM reaches.
# Bekman, "Machine Learning Engineering" (github.com/stas00/ml-engineering,
# compute/accelerator, "Maximum Achievable Matmul FLOPS" table, bf16, CUDA 12.1): best
# shapes reach 85.9 % on A100 SXM (267.9 of 312 TFLOP/s) and 80.1 % on H100 SXM (792.1 of
# 989); typical training shapes sit a little lower: 0.8 on Ampere (0.93 of its best), and
# the same 0.93 of Hopper's best, 0.745, on Hopper.  Hopper's figure was checked against a
# fit (validation/kernels/fit_kernels.py on XLA's H100 BF16 perf table, MAMF and vLLM's
# cuBLAS rows, 114 GEMMs with every dimension >= 1024): the fit (0.837 with k_half 512)
# has CV median error 11.3 % against 8.2 % for 0.745 with k_half 64, so 0.745 stays.
# Blackwell and CDNA3: fitted by validation/kernels/fit_kernels.py (GEMMs with every
# dimension >= 1024) — B200 on XLA's B200 BF16 table + MAMF + vLLM's SM100 row, 110 rows,
# CV median error 18.9 % (32.0 % at 0.8); MI300X on ROCm XLA's gfx942 BF16 table + MAMF,
# 109 rows, CV median error 15.6 % (48.4 % at 0.8), with k_half 512 (GEMM_K_HALF_BY_...).
# The Blackwell fit counts GB200's rows (MAMF, Azure) with B200's: 112 rows, CV median
# error 18.7 %.  CDNA 4 (MI355X): the same script on ROCm XLA's gfx950 BF16 table + MAMF,
# 109 rows, 0.393 at k_half 512, CV median error 27.1 % (MAMF's best shape alone reaches
# 62 % of the data sheet's 2516.6 TFLOP/s: the XLA table's shapes run far lower).
# A generation without a figure takes MATMUL_EFFICIENCY.
MATMUL_EFFICIENCY = 0.8
MATMUL_EFFICIENCY_BY_ARCHITECTURE: dict[str, float] = {
    "ampere": 0.8, "hopper": 0.745, "blackwell": 0.639, "cdna3": 0.481, "cdna4": 0.393}
# Fraction of the FP8 dense peak a per-tensor-scaled FP8 GEMM reaches, by the rule that
# gives Hopper's BF16 figure: 0.93 of the best shape's fraction in Bekman's MAMF table
# (H100 SXM e4m3: 1402.6 of 1979 TFLOP/s, 70.9 %; BF16: 80.3 % -> 0.745), so 0.66.  The
# kernel tables agree where training GEMMs live: validation/kernels/fit_kernels.py on
# Hopper FP8 GEMMs with every dimension >= 2048 (Azure's cuBLASLt runs on H100 and H200,
# 17 rows) at Hopper's k_half 64 fits 0.659, CV median error 4.9 %; over all dimensions
# >= 1024 the 1024-cubed rows (launch-bound, 14 % of peak) drag a log fit to 0.57.  Other
# generations keep the stack's figure or generic_fp8_efficiency until a table of theirs is
# fitted the same way (the script prints Blackwell's and CDNA3's fits).
FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE: dict[str, float] = {"hopper": 0.66}
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
# Per generation where the kernel tables say otherwise: fitted with the asymptotic
# efficiency above (validation/kernels/fit_kernels.py; the grid's largest value, 512, is the
# best fit on B200's and MI300X's XLA tables: their GEMMs keep rising in k up to 4096).
GEMM_K_HALF_BY_ARCHITECTURE: dict[str, float] = {"blackwell": 512.0, "cdna3": 512.0,
                                                 "cdna4": 512.0}
# Fraction of datasheet HBM bandwidth a streaming kernel achieves.  Device-memory copy
# benchmarks reach ~80-92 % (e.g. Jia et al. 2018, "Dissecting the NVIDIA Volta GPU
# Architecture via Microbenchmarking": ~750 of 900 GB/s on V100); PyTorch's own element-wise
# kernels on >= 64 MB tensors in the corpus's Kineto traces
# (validation/memory_bandwidth/measure_bandwidth.py) reach a median 0.80 on A100-40GB (78
# kernels), 0.86 on V100 (36) and 0.70 on A100-80GB (15): 0.8.
MEMORY_EFFICIENCY = 0.8
# Per GPU where kernel tables exist, fitted by validation/kernels/fit_kernels.py on
# BabelStream (Azure guide), Liger's fused norm/SwiGLU forwards and cuDNN's fused norms,
# rows moving >= 64 MiB: H100 SXM 17 rows, CV median error 7.3 %; H200 30 rows, CV 11.1 %
# (0.8: 8.1 % BabelStream, 8.2 % norms); MI300X 5 BabelStream rows (no CV: one group).
# A100 keeps 0.8 (fit 0.761, CV 11.0 %; the trace figure above is its own calibration);
# B200's two rows are too few.
MEMORY_EFFICIENCY_BY_GPU: dict[str, float] = {"h100-sxm": 0.834, "h200": 0.737,
                                              "mi300x": 0.779}
# Per-kernel launch/scheduling gap when the CPU queue runs ahead: a few µs (NVIDIA blog
# "Getting Started with CUDA Graphs", 2019: back-to-back short kernels cost a few µs each).
LAUNCH_OVERHEAD_S = 3e-6
# Layer passes a cost model keeps built (RooflineCosts._layers): every pass of every layer
# of the largest presets' runs (hundreds) many times over, a few tens of MB at most.
LAYER_MEMO_LIMIT = 4096
# Bytes of HBM traffic per parameter for one mixed-precision Adam step with fp32 master
# weights, fp32 main gradients and fp32 moments (the 4+4+4 B "K = 12" optimizer state of
# Rajbhandari et al. 2020, "ZeRO", §3.1): read master, grad, m, v (16 B), write master,
# m, v (12 B) and the bf16/fp16 model copy (2 B) = 30 B.  With 16-bit gradients: 28 B.
ADAM_BYTES_PER_PARAM = 30.0
# Gradient-norm clipping reads every fp32 gradient once more (Megatron's
# clip_grad_norm_fp32 / DeepSpeed's get_grad_norm: a multi-tensor L2 norm, then a scale
# folded into Adam); fp16 loss scaling adds an unscale-and-inf-check pass (read and write
# the fp32 gradient).  FP8 weights are re-cast after the step, by the FP8 recipe
# (fp8_recipes.Fp8Recipe.weight_cast_bytes_per_param).
GRAD_CLIP_BYTES_PER_PARAM = 4.0
FP16_UNSCALE_BYTES_PER_PARAM = 8.0
# bf16 Adam moments (training.optimizer_moments): each of the two is read and written at 2
# bytes instead of 4, 8 bytes a parameter less per step.
BF16_MOMENTS_STEP_SAVED_BYTES = 8.0


def generic_fp8_efficiency(gpu: GpuSpec) -> float:
    """The FP8 GEMM fraction of a generation without a fit: FP8_MATMUL_EFFICIENCY (stacks.py),
    but no more than the fraction its BF16 GEMMs reach.  No GPU in MAMF's table runs FP8
    closer to its peak than BF16 (H100 70.9 against 80.3 %, B200 76.3 / 77.6, GB200 72.3 /
    72.9), and MI300X's hipBLASLt FP8 GEMMs reach 46.8 % at 8192 cubed (Azure's guide,
    kernels/azure_ai_benchmarking_guide), below 0.6 and near CDNA 3's BF16 0.481."""
    return min(FP8_MATMUL_EFFICIENCY,
               MATMUL_EFFICIENCY_BY_ARCHITECTURE.get(gpu.architecture, MATMUL_EFFICIENCY))


def matmul_efficiency(m: int, n: int, k: int, *, sm_count: int,
                      asymptotic_efficiency: float = MATMUL_EFFICIENCY,
                      tiles: Sequence[tuple[int, int, float]] = DEFAULT_GEMM_TILES,
                      k_half: float = GEMM_K_HALF, groups: int = 1) -> float:
    """Fraction of peak a ``(m×k)·(k×n)`` GEMM reaches on a GPU with ``sm_count`` SMs.

    For each candidate tile ``(tm, tn, r)``: ``tiles = ⌈m/tm⌉·⌈n/tn⌉``,
    ``waves = ⌈tiles/sm_count⌉``; wave efficiency ``tiles / (waves·sm_count)`` (idle SMs
    in the last wave), tile efficiency ``m·n / (⌈m/tm⌉·tm·⌈n/tn⌉·tn)`` (padding).  The
    result is ``asymptotic_efficiency · max_tile(r · wave · tile) · k/(k + k_half)``.  It is
    ~asymptotic for large GEMMs and falls for small or skinny ones.  ``groups``: a grouped
    GEMM of that many equal groups in one launch — each group pads to the tile on its own,
    and all groups' tiles share the waves.
    """
    for name, value in (("m", m), ("n", n), ("k", k), ("sm_count", sm_count)):
        check_whole(value, key=name)
    best = 0.0
    for tile_m, tile_n, relative in tiles:
        tiles_m, tiles_n = -(-m // tile_m), -(-n // tile_n)
        count = tiles_m * tiles_n * groups
        waves = -(-count // sm_count)
        wave_eff = count / (waves * sm_count)
        tile_eff = (m * n) / (tiles_m * tile_m * tiles_n * tile_n)
        best = max(best, relative * wave_eff * tile_eff)
    return asymptotic_efficiency * best * k / (k + k_half)


def stores_attention_scores(costs: object) -> bool:
    """Whether a cost model's attention keeps the ``s×s`` softmax output for backward
    (what the memory model's ``flash_attention=False`` counts): only a roofline whose
    stack runs unfused attention.  A profiled table does not say how it ran attention; it
    is taken as flash, the kernels current stacks use."""
    stack = getattr(costs, "resolved_stack", None)
    return stack is not None and stack.attention == "unfused"


def roofline_behind(costs: object) -> RooflineCosts | None:
    """The roofline behind ``costs``: itself, or a profiled table's fallback; None when
    there is none."""
    for candidate in (costs, getattr(costs, "fallback", None)):
        if isinstance(candidate, RooflineCosts):
            return candidate
    return None


def saved_formats(costs: object) -> SavedFormats:
    """What a layer keeps for the backward in other than 16 bits
    (:class:`~workloads.cost.memory.SavedFormats`), under a low-precision run: a linear
    layer's input as one quantized copy where the stack keeps it
    (``Stack.fp8_saves_quantized_inputs``), and where the stack caches them
    (``Stack.fp8_activation_caches``) the SwiGLU inputs likewise and the attention output
    in E5M6.  A profiled table is taken to have run as its fallback roofline's stack."""
    model = roofline_behind(costs)
    if model is None or model.precision not in LOW_PRECISIONS:
        return SavedFormats()
    stack = model.resolved_stack
    if not stack.fp8_linear:
        return SavedFormats()
    copy = stack.fp8.one_copy_bytes
    linear = copy if stack.fp8_saves_quantized_inputs else None
    if not stack.fp8_activation_caches:
        return SavedFormats(linear)
    return SavedFormats(linear, copy, ATTENTION_CACHE_ELEMENT_BYTES)


def saved_linear_input_bytes(costs: object) -> float | None:
    """Bytes per element a linear layer keeps of its input for the backward where that is
    not the 16-bit activation (:func:`saved_formats`'); None otherwise."""
    return saved_formats(costs).linear_input_bytes


def activation_storage(costs: object) -> dict[str, Any]:
    """How ``costs`` keeps a layer's activations, as the memory model's keywords
    (``memory_of_strategy``): whether attention stores its scores, and the formats of what
    it keeps (:func:`saved_formats`)."""
    return {"flash_attention": not stores_attention_scores(costs),
            "formats": saved_formats(costs)}


@runtime_checkable
class CostModel(Protocol):
    """What the workload builder asks of a cost model.  Every time is in seconds."""

    def layer_time_s(self, pass_: str, model: ModelSpec, shard: LayerShard) -> float:
        """One pass of transformer layer ``shard.layer_index`` on one TP rank (a
        ``recompute`` pass of kind ``shard.recompute``)."""
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


@dataclass(frozen=True, slots=True)
class RooflineCosts:
    """Analytic costs: each operator at the slower of its compute and memory roofline
    (module docstring), the operators a :class:`Stack` lays out.

    ``peak`` is the GPU's dense rate at ``precision``; ``matmul_asymptotic_efficiency``,
    when given, overrides the GPU generation's GEMM efficiency.  ``attention`` (``flash`` |
    ``unfused``), when given, overrides the stack's attention, ``cross_entropy`` its loss
    (:mod:`~workloads.cost.compute.cross_entropy`); ``host_overhead_s`` its host
    seconds per forward kernel (:meth:`Stack.with_host_overhead`).  ``attention_efficiency``,
    when given, overrides :func:`attention_efficiency` of the stack's flash kernel on the
    GPU's architecture.  ``optimizer_bytes_per_param``
    is Adam's traffic with fp32 moments; ``optimizer_moments`` ``bf16`` (the scenario's
    ``training.optimizer_moments``) reads and writes them at 2 bytes, 8 bytes less;
    clipping, fp16 unscaling and FP8 weight casts are added by the precision and stack.
    ``comm_sms``: SMs that communication kernels hold throughout, overlapped with compute
    (DeepEP under DualPipe keeps 20 of an H800's 132): compute runs on the rest — GEMM
    waves over them, every FLOP rate scaled by their share — while memory-bound kernels,
    which saturate HBM with a fraction of the SMs, keep their rate.  Every default is a
    module constant with its source.
    """

    gpu: GpuSpec
    precision: str = "bf16"
    matmul_asymptotic_efficiency: float | None = None
    attention_efficiency: float | None = None
    memory_efficiency: float | None = None
    launch_overhead_s: float = LAUNCH_OVERHEAD_S
    gemm_tiles: tuple[tuple[int, int, float], ...] = DEFAULT_GEMM_TILES
    gemm_k_half: float | None = None
    causal: bool = True
    optimizer_bytes_per_param: float = ADAM_BYTES_PER_PARAM
    attention: str | None = None
    stack: Stack = field(default=STACKS[DEFAULT_STACK])
    cross_entropy: str | None = None
    host_overhead_s: float | None = None
    comm_sms: int = 0
    cuda_graphs: bool | None = None
    optimizer_moments: str = "fp32"
    # Each layer pass's work and seconds (:meth:`layer_work`, :meth:`layer_time_s`): pure
    # functions of (pass, model, shard) and this frozen cost model's fields, which a stream
    # builder asks for again for every pipeline pass, stage and overlap that runs the layer.
    # Keyed by the model's identity, its entry holding the model so the id stays its own;
    # no part of the cost model's value (not compared, hashed, shown or passed to init).
    _layers: dict[tuple[str, int, LayerShard], list[Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.gpu.peak_flops(self.precision)  # ConfigError if the GPU lacks the precision
        bytes_per_element(self.precision)
        if self.attention is not None:
            check_choice(self.attention, ATTENTION_IMPLEMENTATIONS, key="attention")
        if self.cross_entropy is not None:
            check_choice(self.cross_entropy, CROSS_ENTROPY, key="cross_entropy",
                         what="cross entropy")
        if not isinstance(self.stack, Stack):
            raise ConfigError(f"must be a Stack, got {self.stack!r}", key="stack")
        if self.precision in LOW_PRECISIONS and not self.stack.fp8_linear:
            raise ConfigError(f"stack {self.stack.name!r} has no FP8 kernels", key="stack",
                              hint=f"precision {self.precision} runs on stack "
                                   + ", ".join(FP8_STACKS))
        self._check_recipe_hardware()
        for name in ("matmul_asymptotic_efficiency", "attention_efficiency",
                     "memory_efficiency"):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), key=name, above=True, maximum=1)
        for name in ("launch_overhead_s", "gemm_k_half", "optimizer_bytes_per_param"):
            if getattr(self, name) is not None:
                check_number(getattr(self, name), key=name)
        if self.host_overhead_s is not None:  # a second per kernel is past any host
            check_number(self.host_overhead_s, key="host_overhead_s", maximum=1.0,
                         hint="seconds the host spends per kernel it launches, e.g. 2e-05")
        if not self.gemm_tiles:
            raise ConfigError("needs at least one tile", key="gemm_tiles")
        check_whole(self.comm_sms, key="comm_sms", minimum=0)
        if self.cuda_graphs is not None:
            check_bool(self.cuda_graphs, key="cuda_graphs")
        if self.comm_sms >= self.gpu.sm_count:
            raise ConfigError(f"{self.comm_sms} SMs for communication leave none of the "
                              f"{self.gpu.sm_count} of {self.gpu.name} for compute",
                              key="comm_sms", hint="DeepEP holds 20 of an H800's 132")

    def _check_recipe_hardware(self) -> None:
        """MXFP8 and NVFP4 need Blackwell's block-scaled tensor cores: a ConfigError
        naming the GPU's generation otherwise.  Precision fp4 runs the nvfp4 recipe."""
        if self.precision not in LOW_PRECISIONS:
            return
        if self.precision == "fp4" and self.stack.fp8_recipe != "nvfp4":
            # FP4 has one recipe; training.fp8_recipe naming another is refused upstream
            # (strategy.parallel.check_fp8_recipe), so the stack's FP8 default yields.
            object.__setattr__(self, "stack", self.stack.with_fp8_recipe("nvfp4"))
        recipe = self.stack.fp8
        generation = self.gpu.architecture or "of an unknown generation"
        if self.precision == "fp4" and self.gpu.architecture not in recipe.architectures:
            # The user asked for a precision, not a recipe: name that, and what runs instead.
            raise ConfigError(
                f"fp4 runs NVIDIA's NVFP4 recipe, which needs a "
                f"{' or '.join(recipe.architectures)} GPU; {self.gpu.name} is {generation}"
                + (" (its MXFP4 is not modelled)" if self.gpu.architecture == "cdna4" else ""),
                key="training.precision", hint=f"fp8 or bf16 run on {self.gpu.name}")
        if recipe.architectures and self.gpu.architecture not in recipe.architectures:
            raise ConfigError(
                f"recipe {recipe.name!r} needs a {' or '.join(recipe.architectures)} GPU; "
                f"{self.gpu.name} is {generation}",
                key="training.fp8_recipe",
                hint="delayed, current or blockwise run on Hopper's FP8")

    @property
    def compute_sms(self) -> int:
        """The SMs compute kernels run on: the GPU's, less those communication holds."""
        return self.gpu.sm_count - self.comm_sms

    @property
    def resolved_matmul_efficiency(self) -> float:
        """Large GEMMs' fraction of peak: as given, else the GPU generation's
        (:data:`MATMUL_EFFICIENCY_BY_ARCHITECTURE`)."""
        if self.matmul_asymptotic_efficiency is not None:
            return self.matmul_asymptotic_efficiency
        return MATMUL_EFFICIENCY_BY_ARCHITECTURE.get(self.gpu.architecture, MATMUL_EFFICIENCY)

    @property
    def resolved_memory_efficiency(self) -> float:
        """Streaming kernels' fraction of HBM bandwidth: as given, else the GPU preset's
        (:data:`MEMORY_EFFICIENCY_BY_GPU`), else :data:`MEMORY_EFFICIENCY`."""
        if self.memory_efficiency is not None:
            return self.memory_efficiency
        return MEMORY_EFFICIENCY_BY_GPU.get(self.gpu.name, MEMORY_EFFICIENCY)

    @property
    def resolved_gemm_k_half(self) -> float:
        """The GEMM small-k half point: as given, else the GPU generation's
        (:data:`GEMM_K_HALF_BY_ARCHITECTURE`), else :data:`GEMM_K_HALF`."""
        if self.gemm_k_half is not None:
            return self.gemm_k_half
        return GEMM_K_HALF_BY_ARCHITECTURE.get(self.gpu.architecture, GEMM_K_HALF)

    @property
    def resolved_fp8_matmul_efficiency(self) -> float:
        """Large FP8 GEMMs' fraction of the FP8 peak: the stack's, else the GPU
        generation's (:data:`FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE`), else
        :func:`generic_fp8_efficiency`."""
        if self.stack.fp8_matmul_efficiency is not None:
            return self.stack.fp8_matmul_efficiency
        return FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE.get(self.gpu.architecture,
                                                         generic_fp8_efficiency(self.gpu))

    @property
    def resolved_attention_efficiency(self) -> float:
        """The fused attention kernel's fraction of peak at
        :data:`ATTENTION_REFERENCE_SHAPE` (other shapes: :func:`attention_shape_factor`): as
        given, else the stack's flash kernel on this GPU's architecture
        (:func:`attention_efficiency`)."""
        if self.attention_efficiency is not None:
            return self.attention_efficiency
        return attention_efficiency(self.stack.flash_kernel, self.gpu.architecture)

    @property
    def resolved_stack(self) -> Stack:
        """The stack with ``attention``, ``cross_entropy``, ``host_overhead_s`` and
        ``cuda_graphs`` applied."""
        return self.stack.with_attention(self.attention).with_cross_entropy(
            self.cross_entropy).with_host_overhead(self.host_overhead_s).with_cuda_graphs(
            self.cuda_graphs)

    def to_dict(self) -> dict[str, Any]:
        """Resolved settings, every default filled in (JSON/YAML-ready)."""
        return {"kind": "roofline", "gpu": self.gpu.to_dict(), "precision": self.precision,
                "matmul_asymptotic_efficiency": self.resolved_matmul_efficiency,
                "fp8_matmul_efficiency": self.resolved_fp8_matmul_efficiency,
                "attention_efficiency": self.resolved_attention_efficiency,
                "memory_efficiency": self.resolved_memory_efficiency,
                "launch_overhead_s": self.launch_overhead_s,
                "gemm_tiles": [list(t) for t in self.gemm_tiles],
                "gemm_k_half": self.resolved_gemm_k_half, "causal": self.causal,
                "optimizer_bytes_per_param": self.optimizer_bytes_per_param,
                **({"optimizer_moments": self.optimizer_moments}
                   if self.optimizer_moments != "fp32" else {}),
                "attention": self.resolved_stack.attention, "stack": self.stack.name,
                "cross_entropy": self.resolved_stack.cross_entropy,
                "host_overhead_s": self.resolved_stack.host_overhead_s,
                "comm_sms": self.comm_sms,
                **({"cuda_graphs": True} if self.resolved_stack.cuda_graphs else {})}

    @property
    def peak_flops_per_s(self) -> float:
        """The GPU's dense peak at this precision's 16-bit GEMMs (FP8 GEMMs: see
        :meth:`kernel_time_s`)."""
        return self.gpu.peak_flops("bf16" if self.precision in LOW_PRECISIONS
                                   else self.precision)

    def matmul_efficiency(self, m: int, n: int, k: int, *, fp8: bool = False,
                          groups: int = 1) -> float:
        """:func:`matmul_efficiency` with this model's GPU and constants."""
        asymptotic = (self.resolved_low_precision_matmul_efficiency if fp8
                      else self.resolved_matmul_efficiency)
        # A recipe whose epilogue is exposed times small k by its output's bytes instead.
        exposed = fp8 and self.stack.fp8.gemm_epilogue_exposed
        return matmul_efficiency(m, n, k, sm_count=self.compute_sms,
                                 asymptotic_efficiency=asymptotic, tiles=self.gemm_tiles,
                                 k_half=0.0 if exposed else self.resolved_gemm_k_half,
                                 groups=groups)

    @property
    def resolved_low_precision_matmul_efficiency(self) -> float:
        """The fraction of their peak the run's FP8 / FP4 GEMMs reach: the recipe's where
        measured (MXFP8, NVFP4), else :attr:`resolved_fp8_matmul_efficiency`."""
        if self._recipe_gemm_efficiency_applies:
            return self.stack.fp8.gemm_efficiency
        return self.resolved_fp8_matmul_efficiency

    @property
    def _recipe_gemm_efficiency_applies(self) -> bool:
        """Whether the recipe's measured GEMM rate holds here: it has one, measured on this
        GPU generation (or any), and the stack sets none of its own."""
        recipe = self.stack.fp8
        return (recipe.gemm_efficiency is not None and self.stack.fp8_matmul_efficiency is None
                and recipe.gemm_efficiency_architecture in (None, self.gpu.architecture))

    @property
    def notes(self) -> tuple[RunNote, ...]:
        """The figures a low-precision run takes without a measurement of its own (the
        run prints them, :mod:`scenarios.run_notes`): NVFP4's GEMM rate and BF16 tail, or
        an FP8 GEMM rate no kernel table of this GPU generation fitted."""
        if self.precision not in LOW_PRECISIONS:
            return ()
        recipe, stack = self.stack.fp8, self.stack
        if recipe.name == "nvfp4":
            return (RunNote(
                "defaulted", f"NVFP4 GEMMs run at {recipe.gemm_efficiency:g} of the FP4 peak, "
                "MXFP8's measured fraction (no NVFP4 GEMM table is in the kernel data); the "
                f"last {recipe.bf16_layer_fraction:.0%} of the layers keep BF16 GEMMs",
                "training.precision"),)
        fitted = self.gpu.architecture in FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE
        if not self._recipe_gemm_efficiency_applies and stack.fp8_matmul_efficiency is None \
                and not fitted:
            return (RunNote(
                "defaulted", f"FP8 GEMMs run at {generic_fp8_efficiency(self.gpu):.3g} of the "
                f"FP8 peak, the generic figure: no FP8 GEMM fit ships for "
                f"{self.gpu.architecture or 'this'} GPUs", "compute.stack"),)
        if recipe.gemm_epilogue_exposed and self._recipe_gemm_efficiency_applies \
                and not stack.deepgemm:
            return (RunNote(
                "defaulted", f"block-scaled FP8 GEMMs timed as DeepGEMM's kernels (main loop "
                f"at {recipe.gemm_efficiency:g} of the FP8 peak, then the output written; "
                f"docs/fp8.md): stack {stack.name}'s own were not measured",
                "training.fp8_recipe"),)
        return ()

    def kernel_time_s(self, kernel: Operator) -> float:
        """Seconds for all ``kernel.count`` instances of an operator."""
        efficiency = self.resolved_memory_efficiency
        if kernel.cast and self.stack.fp8.cast_memory_efficiency is not None:
            efficiency = self.stack.fp8.cast_memory_efficiency
        memory_s = kernel.bytes_moved / (self.gpu.memory_bandwidth_bytes_per_s * efficiency)
        compute_s = 0.0
        if kernel.flops > 0:
            if kernel.kind in ("gemm", "bmm"):
                peak = (self.gpu.peak_flops(self.precision) if kernel.fp8
                        else self.peak_flops_per_s)
                rate = peak * kernel.efficiency_factor * self.matmul_efficiency(
                    kernel.m, kernel.n, kernel.k, fp8=kernel.fp8,
                    groups=kernel.count if kernel.grouped else 1)
            elif kernel.kind == "attention":  # m: its sequence, k: its head width
                rate = self.peak_flops_per_s * self.resolved_attention_efficiency \
                    * attention_shape_factor(self.stack.flash_kernel, self.gpu.architecture,
                                             kernel.m, kernel.k)
            else:
                rate = self.gpu.peak_flops("fp32")
            # A power limit below TDP lowers the compute clock, not the memory's; SMs held
            # by communication take their share of every FLOP rate.
            share = self.compute_sms / self.gpu.sm_count
            compute_s = kernel.flops / (rate * self.gpu.clock_fraction * share)
            if kernel.fp8 and self.stack.fp8.gemm_epilogue_exposed:
                compute_s += kernel.output_bytes / self.gpu.memory_bandwidth_bytes_per_s
        launches_s = kernel.launches * self.launch_overhead_s
        if kernel.grouped:  # one launch for every group
            return kernel.count * max(compute_s, memory_s) + launches_s
        return kernel.count * (max(compute_s, memory_s) + launches_s)

    def work_time_s(self, work: LayerWork) -> float:
        """Seconds for every operator of ``work`` one after another on the GPU, each
        kernel no earlier than the host has issued it (:func:`issue_timeline_s`); a
        pass captured as a CUDA graph is one graph launch, then its kernels back to back."""
        gpu_s = issue_timeline_s(
            ((self.kernel_time_s(k), (1 if k.grouped else k.count) * k.launches)
             for k in work.kernels),
            work.stack.host_s_per_kernel(work.pass_))
        return max(gpu_s, CUDA_GRAPH_LAUNCH_S) if work.stack.cuda_graphs else gpu_s

    def operator_times_s(self, work: LayerWork) -> dict[str, float]:
        """Seconds per forward operator name (a backward operator counts to the forward
        one it derives from: ``qkv.dgrad`` and ``qkv.wgrad`` to ``qkv``), in order."""
        out: dict[str, float] = {}
        for item in work.kernels:
            out[item.base_name] = out.get(item.base_name, 0.0) + self.kernel_time_s(item)
        return out

    def layer_work(self, pass_: str, model: ModelSpec, shard: LayerShard) -> LayerWork:
        """:func:`layer_work` at this model's precision, causality and stack (built once
        per pass, model and shard: a frozen :class:`LayerWork`, shared)."""
        return self._layer_entry(pass_, model, shard)[1]

    def layer_time_s(self, pass_: str, model: ModelSpec, shard: LayerShard) -> float:
        """Seconds of one pass of one layer on one TP rank (operators in sequence)."""
        entry = self._layer_entry(pass_, model, shard)
        if entry[2] is None:
            entry[2] = self.work_time_s(entry[1])
        return entry[2]

    def _layer_entry(self, pass_: str, model: ModelSpec, shard: LayerShard) -> list[Any]:
        """``[model, work, seconds or None]`` of a layer pass, from ``_layers`` or built
        now; the memo starts over past :data:`LAYER_MEMO_LIMIT` entries (a sweep or a
        search reusing one cost model over many shapes keeps its memory bounded)."""
        key = (pass_, id(model), shard)
        entry = self._layers.get(key)
        if entry is None or entry[0] is not model:
            work = layer_work(pass_, model, shard, precision=self.precision,
                              causal=self.causal, stack=self.resolved_stack)
            if len(self._layers) >= LAYER_MEMO_LIMIT:
                self._layers.clear()
            entry = self._layers[key] = [model, work, None]
        return entry

    def embedding_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int,
                         seq_len: int, tp: int = 1,
                         sequence_parallel: bool = False) -> float:
        """Vocabulary-parallel lookup: read this rank's rows (~T·h/tp), write T·h;
        learned positions add a read and an add (2·T·h), an embedding norm 2·T·h.
        Backward scatters the gradient: 2× the bytes.  Recompute: 0 (never recomputed).
        """
        check_choice(pass_, PASSES, key="pass")
        check_shard(model, LayerShard(micro_batch, seq_len, tp))
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
        return self.kernel_time_s(elementwise("embedding", moved))

    def loss_work(self, model: ModelSpec, *, micro_batch: int, seq_len: int, tp: int = 1,
                  sequence_parallel: bool = False) -> LayerWork:
        """Final norm, logits GEMM (m=T, k=h, n=V/tp, 16-bit also under FP8) and
        vocabulary-parallel cross entropy over the T·V/tp logits, as the stack's
        implementation moves them (:mod:`~workloads.cost.compute.cross_entropy`)."""
        check_shard(model, LayerShard(micro_batch, seq_len, tp))
        _, ab = bytes_per_element(self.precision)
        stack = self.resolved_stack
        tokens = micro_batch * seq_len
        tokens_ew = tokens / tp if sequence_parallel else float(tokens)
        vocab_local = -(-model.vocab // tp)
        logits_elems = tokens * vocab_local
        norm = elementwise("final_norm", 2 * tokens_ew * model.hidden * ab,
                           bwd_bytes_factor=1.5)
        logits = gemm("logits", (tokens, vocab_local, model.hidden), ab, ab)
        loss = CROSS_ENTROPY[stack.cross_entropy]
        entropy = elementwise("cross_entropy", logits_elems * loss.forward_bytes(ab),
                              flops=5.0 * logits_elems, launches=loss.launches,
                              bwd_bytes_factor=loss.backward_bytes(ab) / loss.forward_bytes(ab))
        return LayerWork("fwd", (norm, logits, entropy), ab, ab, stack, self.precision)

    def loss_time_s(self, pass_: str, model: ModelSpec, *, micro_batch: int, seq_len: int,
                    tp: int = 1, sequence_parallel: bool = False) -> float:
        """:meth:`loss_work`'s seconds; backward also runs the GEMM's dgrad and wgrad.
        Recompute: 0."""
        check_choice(pass_, PASSES, key="pass")
        if pass_ == "recompute":
            return 0.0
        work = self.loss_work(model, micro_batch=micro_batch, seq_len=seq_len, tp=tp,
                              sequence_parallel=sequence_parallel)
        return self.work_time_s(work.backward() if pass_ == "bwd" else work)

    def optimizer_bytes(self) -> float:
        """HBM bytes per parameter of one step: Adam, gradient clipping, and the fp16
        unscale or FP8 weight re-cast (the stack's FP8 recipe's) the precision needs."""
        extra = GRAD_CLIP_BYTES_PER_PARAM
        if self.precision == "fp16":
            extra += FP16_UNSCALE_BYTES_PER_PARAM
        if self.precision in LOW_PRECISIONS:
            extra += self.stack.fp8.weight_cast_bytes_per_param
        if self.optimizer_moments == "bf16":  # both moments read and written at 2 bytes
            extra -= BF16_MOMENTS_STEP_SAVED_BYTES
        return self.optimizer_bytes_per_param + extra

    def optimizer_step_time_s(self, params_on_gpu: float) -> float:
        """``params · optimizer_bytes() / (bw · memory_efficiency)`` + launches.

        Pass the parameters this GPU updates (its ZeRO shard when the optimizer state is
        sharded).  0 parameters take 0 s.
        """
        check_number(params_on_gpu, key="params_on_gpu")
        if params_on_gpu == 0:
            return 0.0
        return self.kernel_time_s(elementwise(
            "adam", params_on_gpu * self.optimizer_bytes(), launches=2))
