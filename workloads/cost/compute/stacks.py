"""Software stacks: which kernels a framework version runs for a transformer layer, which of
them it fuses, and the few physical efficiency figures its kernels reach.

The same model on the same GPU runs a different list of kernels under Megatron-LM of 2021
(attention as two batched GEMMs around a fused softmax, dropout everywhere, eager PyTorch)
and under Transformer Engine (FlashAttention, fused norms, FP8 casts).  A :class:`Stack`
names those choices; :mod:`~distsim_gpu.workloads.cost.compute.operators` turns a stack and a
model into operators, :mod:`~distsim_gpu.workloads.cost.compute.roofline` times them.

Every figure is physical — achieved fraction of GEMM peak, achieved fraction of memory
bandwidth, launch gap and host dispatch time per kernel — not a fit to measured iterations.

Stacks (``compute.stack``):

``megatron-core`` (the default)
    Current Megatron-Core / NeMo with cuDNN FlashAttention, fused bias-GeLU/SwiGLU, fused
    bias-dropout-add, fused (apex/TE) norms, fp32 main-grad accumulation fused into the
    weight-gradient GEMM (``--gradient-accumulation-fusion``).  Dropout off, as in current
    LLM pre-training recipes (Llama, Nemotron).  Its operator list is the one distsim used
    before stacks existed.  ``precision: fp8`` runs the linear GEMMs in FP8 through
    Transformer Engine (Megatron-Core's FP8 needs ``--transformer-impl
    transformer_engine``, whose layer spec runs qkv and fc1 as TE ``LayerNormLinear``):
    the norm writes qkv's and fc1's FP8 input under delayed scaling, attn_out's and fc2's
    inputs are cast by kernels of their own (Megatron's own SwiGLU/GeLU writes 16 bits).
``nemo``
    NeMo 2.x performance recipes on Megatron-Core + Transformer Engine: the layer as
    ``megatron-core``, and the overlaps the recipes switch on — tensor-parallel
    communication overlapped with the GEMMs (``tp_comm_overlap``, TE userbuffers) and the
    distributed optimizer's parameter all-gather with the next forward
    (``overlap_param_gather``); FP8 through Transformer Engine (docs/overlaps.md).
``megatron-lm-2021``
    Megatron-LM as published for GPT-3-scale training (Narayanan et al. 2021, SC'21;
    github.com/NVIDIA/Megatron-LM v2.x, ``megatron/model/transformer.py``): unfused
    attention — ``torch.baddbmm`` for Q·Kᵀ, the fused ``scaled_upper_triang_masked_softmax``
    CUDA kernel, ``torch.nn.Dropout`` on the attention probabilities (p = 0.1), ``torch.bmm``
    for P·V and a ``permute().contiguous()`` copy of the context; TorchScript-fused
    ``bias_gelu`` and ``bias_dropout_add`` (hidden dropout 0.1); apex ``FusedLayerNorm``;
    vocabulary-parallel cross entropy in eager fp32 PyTorch; fp32 main grads accumulated
    by the weight-gradient GEMM.
``megatron-deepspeed``
    Microsoft's Megatron-DeepSpeed (the code BLOOM and vTrain's measurements ran): the
    2021 Megatron layer under DeepSpeed's engine, whose fp16 gradients accumulate in the
    parameters' ``.grad`` through a separate autograd add per weight and micro-batch (bf16
    ones into fp32 buffers, cast and added by the ``BF16_Optimizer`` after each
    micro-batch, as BLOOM ran), and are all-reduced after the backward pass rather than
    during it (DeepSpeed's ``allreduce_gradients`` after ``loss.backward()``; its pipeline
    engine's ``ReduceGrads`` step after the last micro-batch) — in fp16 with the FP16
    optimizer.
``transformer-engine``
    Megatron-Core with Transformer Engine layers (``--transformer-impl
    transformer_engine``): FlashAttention (cuDNN), LayerNorm fused into the following
    linear layer (``LayerNormLinear``, ``LayerNormMLP``), and with ``precision: fp8`` the
    linear GEMMs in FP8 (E4M3 forward, E5M2 gradients) with their casts and delayed
    scaling bookkeeping; attention core, embedding and logits stay in 16 bits (TE's
    ``fp8_autocast`` covers only TE linear modules); the activation writes fc2's FP8
    input itself (``LayerNormMLP``).
``torch-compile``
    torchtitan-style eager model under ``torch.compile`` with FSDP2: SDPA FlashAttention,
    element-wise chains (residual add + RMSNorm, SwiGLU) fused by Inductor, no dropout,
    gradients reduced in the parameters' dtype; ``precision: fp8`` as torchao's float8
    linear layers (tensorwise dynamic scaling: the ``current`` recipe, casts as kernels of
    their own).
``torch-eager``
    The same model without ``torch.compile``: RMSNorm as PyTorch's composite of four
    kernels, residual adds as kernels of their own, eager host dispatch.

Sources of the efficiency figures are in :mod:`~distsim_gpu.workloads.cost.compute.roofline`
(``MATMUL_EFFICIENCY``, ``MEMORY_EFFICIENCY``, ``LAUNCH_OVERHEAD_S``) and here
(``EAGER_HOST_OVERHEAD_S``, ``EAGER_HOST_BACKWARD_OVERHEAD_S``,
``FP8_MATMUL_EFFICIENCY``); of the FP8 recipes' in
:mod:`~distsim_gpu.workloads.cost.compute.fp8_recipes`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from distsim_gpu.simcore.config import check_bool, check_choice, check_number
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute.cross_entropy import CROSS_ENTROPY
from distsim_gpu.workloads.cost.compute.fp8_recipes import FP8_RECIPES, Fp8Recipe, fp8_recipe
from distsim_gpu.workloads.strategy.framework_names import STACK_NAMES

__all__ = [
    "ATTENTION_IMPLEMENTATIONS",
    "CUDA_GRAPH_LAUNCH_S",
    "DEFAULT_STACK",
    "EAGER_HOST_BACKWARD_OVERHEAD_S",
    "EAGER_HOST_OVERHEAD_S",
    "FLASH_KERNELS",
    "FP8_MATMUL_EFFICIENCY",
    "FP8_STACKS",
    "STACKS",
    "Stack",
    "get_stack",
]

ATTENTION_IMPLEMENTATIONS = ("flash", "unfused")
FLASH_KERNELS = ("fa2", "cudnn")
# Host time eager PyTorch spends per kernel it launches (Python, the dispatcher, the
# view/reshape ops between kernels, autograd, the launch call), measured as the median
# interval between consecutive kernel launches on a host thread that issues back to back
# (validation/host_dispatch/measure_host.py): in the A100-SXM4-80GB trace of the HTA
# corpus (negative_queue_length_values_check/rank0.json.gz, PyTorch profiler) 20 µs on
# the thread running the forward pass and 43 µs on the autograd engine's thread (the
# backward: each node dispatches its gradient ops and accumulates); the A100 and V100
# traces of the same corpus give 29-36 µs and 32-74 µs.  The profiler adds ~1-2 µs per
# recorded op, so these are upper-side figures.  It binds when kernels are shorter.
# Compiled stacks (CUDA graphs, Inductor) pay less: a few µs per graph replay node.
EAGER_HOST_OVERHEAD_S = 20e-6
EAGER_HOST_BACKWARD_OVERHEAD_S = 43e-6
COMPILED_HOST_OVERHEAD_S = 4e-6
# Host seconds of one CUDA graph launch (``cudaGraphLaunch``) that replays a captured layer
# pass.  NVIDIA's "Constant Time Launch for Straight-Line Graphs" (developer.nvidia.com
# blog, CUDA 12.6) makes a straight-line graph's launch independent of its node count, of
# the order of one kernel launch; taken as the compiled stacks' per-launch figure above.
CUDA_GRAPH_LAUNCH_S = COMPILED_HOST_OVERHEAD_S
# Fraction of the FP8 dense peak a well-shaped FP8 GEMM reaches.  An H100 measurement of a
# 13B GPT under Megatron + Transformer Engine gained 1.42x end to end from FP8
# (github.com/NVIDIA/Megatron-LM issue 396: 0.34 -> 0.24 s/step; NVIDIA's answer: 2x is
# the arithmetic peak, not the achieved rate); Transformer Engine's "GEMM Speedups Across
# Precisions" page shows the per-GEMM gain below 2x and shape dependent.  0.6 of the FP8
# peak is 1.61x the 0.745 of its BF16 peak Hopper's BF16 GEMMs reach (roofline.py).  The
# fallback for a GPU generation without a measured figure (roofline.py's
# FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE).
FP8_MATMUL_EFFICIENCY = 0.6


@dataclass(frozen=True, slots=True)
class Stack:
    """What one framework version runs: its fusions, and its kernels' efficiency figures.

    Operators switched by a flag (names as :mod:`~distsim_gpu.workloads.cost.compute.operators`
    gives them):

    * ``attention``: ``flash`` (one fused kernel) or ``unfused`` (``attn_scores``,
      ``attn_softmax``, ``attn_context`` batched GEMMs and softmax over the s×s scores);
    * ``flash_kernel``: which fused kernel ``flash`` is — ``fa2`` (Dao's FlashAttention-2:
      the flash-attn package, PyTorch SDPA's flash backend) or ``cudnn`` (cuDNN's fused
      attention through Transformer Engine, FlashAttention-3-class on Hopper); its
      efficiency depends on the GPU's architecture
      (:mod:`~distsim_gpu.workloads.cost.compute.roofline`);
    * ``fused_softmax``: unfused attention's scale, mask and softmax in one kernel (else
      three kernels, each reading and writing the scores);
    * ``attention_dropout``: unfused attention's ``attn_dropout`` over the probabilities;
    * ``context_copy``: ``attn_context_copy``, the permute-and-copy of the context;
    * ``hidden_dropout``: the residual operators write a dropout mask;
    * ``fused_bias_dropout_add``: the residual operators are one kernel (else bias add,
      dropout and add: three kernels and their bytes);
    * ``fused_bias_activation``: ``mlp_act`` includes the bias (else a separate bias add);
    * ``fused_norm``: norms are one kernel (else PyTorch's composite: four kernels);
    * ``separate_projections``: the query, key and value projections, and a gated MLP's
      two input projections, are separate linears reading one input (torchtitan's
      ``wq``/``wk``/``wv`` and ``w1``/``w3``), priced as the fused GEMM they add up to;
      eager autograd adds their input gradients in kernels of their own, one a reader
      after the first (``qkv.grad_sum``, ``mlp_fc1.grad_sum``; under ``torch.compile``
      Inductor fuses the adds into the kernels that read the sum);
    * ``fused_mla_rope``: MLA's rotary embedding and the assembly of whole query and key
      heads in one pass (Megatron-Core's ``fused_apply_mla_rope_for_q`` / ``_for_kv``,
      on with its rope fusion); else as eager PyTorch runs it — a rotary kernel on each
      rotary part, then the query's and the key's heads concatenated by copies
      (:mod:`~workloads.cost.compute.operators`, ``attn_rope``);
    * ``cross_entropy``: the loss's implementation, what it moves per logit
      (:mod:`~workloads.cost.compute.cross_entropy`: ``one_pass``, ``megatron_fused``,
      ``eager``, ``torch``);
    * ``fp32_grad_accumulation``: weight-gradient GEMMs accumulate into fp32 main grads
      in their epilogue (else ``grad_bytes``-wide ``.grad``);
    * ``separate_grad_accumulation``: an extra ``<gemm>.grad_accum`` add per weight gradient;
    * ``bf16_grads_accumulated_in_fp32``: under bf16 that add is DeepSpeed's
      ``BF16_Optimizer`` accumulating each micro-batch's bf16 gradient into fp32
      (:meth:`grad_accum_bytes`);
    * ``fused_bias_grad``: a bias's gradient comes from the GEMM's epilogue (cuBLASLt's
      BGRAD, TE's ``cast_transpose_dbias``); else autograd's ``<gemm>.bias_grad`` sum
      over the tokens, a kernel of its own reading the output gradient;
    * ``fp8_linear``: with ``precision: fp8`` the linear GEMMs run in FP8 with casts (only
      stacks with FP8 kernels; others refuse fp8);
    * ``fp8_recipe``: how FP8 tensors are scaled by default (``training.fp8_recipe``
      overrides it; :mod:`~distsim_gpu.workloads.cost.compute.fp8_recipes`);
    * ``fp8_norm_cast_fusion``: the norm before qkv and fc1 writes their FP8 input itself
      (TE ``LayerNormLinear``), where the recipe allows it;
    * ``fp8_activation_cast_fusion``: the MLP activation writes fc2's FP8 input itself
      (TE ``LayerNormMLP``), where the recipe allows it;
    * ``fp8_tp_all_gather``: under sequence parallelism the tensor-parallel all-gathers
      move the FP8 cast (1 byte an element), not the 16-bit tensor: TE's
      ``LayerNormLinear`` gathers the norm's FP8 output before qkv and fc1, and its
      row-parallel ``Linear`` the FP8 output gradient before the data-gradient GEMM; the
      reduce-scatters stay 16-bit (transformer_engine/pytorch/module/layernorm_linear.py,
      linear.py: ``gather_along_first_dim`` on the FP8 tensor);
    * ``fp8_saves_quantized_inputs``: a linear layer keeps its quantized input (the
      column-wise copy) for the backward, not the 16-bit one (Transformer Engine's
      ``Linear``, ``LayerNormLinear``, ``GroupedLinear``; :mod:`workloads.cost.memory`);
    * ``fp8_colwise_in_backward``: an FP8 GEMM input's column-wise copy (the weight
      gradient's) is made in the backward from the row-wise copy the forward cast wrote,
      and the output gradient is cast row-wise, then re-blocked (DeepSeek's framework;
      :mod:`~distsim_gpu.workloads.cost.compute.fp8_casts`); else the casts write both;
    * ``fp8_weight_transpose_per_pass``: each backward transposes every FP8 weight for its
      data gradient (DeepGEMM takes the NT layout only; DeepSeek's profile) instead of
      caching the transpose with the step's weight cast;
    * ``deepgemm``: its block-scaled FP8 GEMMs are DeepGEMM's kernels, whose measured rate
      the ``blockwise`` recipe carries (another stack's run says it borrowed it);
    * ``fp8_activation_caches``: under FP8 the attention output and the SwiGLU inputs
      are kept for the backward by cast kernels of their own and cast back in it
      (``attn_out_cache``: DeepSeek's E5M6, ``<act>_cache``: FP8 with 1×128 scales; the
      V3 report, §3.3.3; :mod:`~distsim_gpu.workloads.cost.compute.fp8_casts`).

    ``grouped_gemm``: a MoE layer's local experts run as one grouped GEMM per projection
    (Megatron-Core's ``--moe-grouped-gemm`` / TEGroupedMLP, torchtitan's ``grouped_mm``,
    DeepGEMM): one launch whose tiles share the waves; else one GEMM per expert
    (SequentialMLP), each with its own waves and launch.

    ``cuda_graphs``: each layer pass captured as a CUDA graph (Megatron-Core's
    ``--enable-cuda-graph``, TE's ``make_graphed_callables``): the host launches one graph
    instead of every kernel, so no per-kernel host time (:meth:`host_s_per_kernel`); the
    default of ``compute.cuda_graphs`` (off in every stack: Megatron-Core's argument
    default, and NeMo's pre-training recipes leave it off with pipeline parallelism).

    Outside the layer: ``overlap_grad_reduce`` (gradient buckets reduced during the last
    backward; DeepSpeed's engine reduces them all after it) and
    ``fp16_grads_reduced_in_fp16`` (:meth:`grad_reduce_precision`) are the defaults of
    ``parallelism.bucket_params`` and ``parallelism.grad_reduce_precision``;
    ``overlap_param_gather`` (Megatron-Core's ``DistributedDataParallelConfig``, default
    False; on in NeMo's performance recipes) and ``tp_comm_overlap`` (Megatron's
    ``--tp-comm-overlap`` / NeMo's ``tp_comm_overlap``: Transformer Engine userbuffers,
    default off in Megatron-Core) are those of ``parallelism.overlap_param_gather`` and
    ``parallelism.tp_comm_overlap``, applied where the strategy allows them (the
    distributed optimizer; sequence parallelism) — docs/overlaps.md.

    Gradient buckets (:meth:`ddp_bucket_params`, the default of
    ``parallelism.bucket_params``): ``max(bucket_params, bucket_params_per_dp_rank·dp)``
    parameters — Megatron-Core's ``max(40M, 1M·dp)`` (``DistributedDataParallel``), NeMo's
    128 Mi (``MegatronCommOverlapCallback``); ``first_chunk_buckets``: only the first
    pipeline stage's first model chunk is cut into buckets, every other chunk reduced in
    one after its last backward and gathered in one (Megatron-Core's DDP: bucketing off
    for ``pp_rank > 0`` and, by ``disable_bucketing``, for chunks after the first), the
    default of ``parallelism.bucketing``; ``dp_overlaps_need_dp``: the gradient and
    parameter overlaps only where ``dp > 1`` (NeMo's callback leaves both off otherwise).
    """

    name: str
    source: str
    attention: str = "flash"
    flash_kernel: str = "cudnn"
    fused_softmax: bool = True
    attention_dropout: bool = False
    context_copy: bool = False
    hidden_dropout: bool = False
    fused_bias_dropout_add: bool = True
    fused_bias_activation: bool = True
    fused_norm: bool = True
    fused_mla_rope: bool = True
    separate_projections: bool = False
    cross_entropy: str = "one_pass"
    fp32_grad_accumulation: bool = True
    separate_grad_accumulation: bool = False
    bf16_grads_accumulated_in_fp32: bool = False
    fp8_linear: bool = False
    fp8_recipe: str = "delayed"
    fp8_norm_cast_fusion: bool = False
    fp8_tp_all_gather: bool = False
    fp8_activation_cast_fusion: bool = False
    fp8_saves_quantized_inputs: bool = False
    fp8_colwise_in_backward: bool = False
    fp8_weight_transpose_per_pass: bool = False
    fp8_activation_caches: bool = False
    deepgemm: bool = False
    fused_bias_grad: bool = True
    host_overhead_s: float = 0.0
    host_backward_overhead_s: float | None = None
    fp8_matmul_efficiency: float | None = None
    overlap_grad_reduce: bool = True
    fp16_grads_reduced_in_fp16: bool = False
    overlap_param_gather: bool = False
    bucket_params: int = 40_000_000
    bucket_params_per_dp_rank: int = 0
    first_chunk_buckets: bool = False
    dp_overlaps_need_dp: bool = False
    tp_comm_overlap: bool = False
    cuda_graphs: bool = False
    grouped_gemm: bool = True

    def grad_accum_bytes(self, activation_bytes: int, precision: str) -> float:
        """Bytes per weight element of a separate gradient accumulation (a per-micro-batch
        kernel of its own): autograd adding into ``.grad`` reads two gradients and writes
        one (``3·a``); DeepSpeed's ``BF16_Optimizer`` (bf16 with
        ``bf16_grads_accumulated_in_fp32``; deepspeed/runtime/bf16_optimizer.py,
        ``update_hp_grads`` after each micro-batch's backward) casts the bf16 gradient to
        fp32 (read a, write 4), adds it into the fp32 buffer (read 4 + 4, write 4) and
        zeroes the bf16 one (write a): ``2·a + 16``."""
        if precision == "bf16" and self.bf16_grads_accumulated_in_fp32:
            return 2.0 * activation_bytes + 16.0
        return 3.0 * activation_bytes

    def grad_reduce_precision(self, precision: str) -> str:
        """The precision data-parallel gradients travel in by this stack's default:
        fp32 main grads (Megatron's ``accumulate_allreduce_grads_in_fp32``, DeepSpeed's
        BF16 optimizer, FSDP2's float32 ``reduce_dtype`` in torchtitan), except DeepSpeed's
        FP16 optimizer, which all-reduces the fp16 ``.grad`` itself."""
        if precision == "fp16" and self.fp16_grads_reduced_in_fp16:
            return "fp16"
        return "fp32"

    def ddp_bucket_params(self, dp: int) -> int:
        """Parameters per gradient bucket at data-parallel degree ``dp`` (class
        docstring); one bucket after the backward where the stack does not overlap the
        reduction (:data:`ONE_BUCKET`)."""
        if not self.overlap_grad_reduce or (self.dp_overlaps_need_dp and dp < 2):
            return ONE_BUCKET
        return max(self.bucket_params, self.bucket_params_per_dp_rank * dp)

    def ddp_defaults(self, dp: int, schedule: str) -> dict[str, Any]:
        """``parallelism.bucket_params``, ``bucketing`` and ``align_grad_reduce`` by this
        stack at data-parallel degree ``dp`` (class docstring): Megatron-Core's DDP aligns
        each chunk's reductions with the interleaved schedule (None: unset, off)."""
        return {"bucket_params": self.ddp_bucket_params(dp),
                "bucketing": "first_chunk" if self.first_chunk_buckets else "every_chunk",
                "align_grad_reduce": (True if self.first_chunk_buckets
                                      and schedule == "interleaved" else None)}

    def __post_init__(self) -> None:
        check_choice(self.attention, ATTENTION_IMPLEMENTATIONS, key="attention")
        for item in fields(self):
            value = getattr(self, item.name)
            if item.type == "bool":
                check_bool(value, key=item.name)
        check_number(self.host_overhead_s, key="host_overhead_s")
        if self.host_backward_overhead_s is not None:
            check_number(self.host_backward_overhead_s, key="host_backward_overhead_s")
        if self.fp8_matmul_efficiency is not None:
            check_number(self.fp8_matmul_efficiency, key="fp8_matmul_efficiency",
                         above=True, maximum=1)
        check_choice(self.flash_kernel, FLASH_KERNELS, key="flash_kernel")
        check_choice(self.fp8_recipe, FP8_RECIPES, key="fp8_recipe", what="FP8 recipe")
        check_choice(self.cross_entropy, CROSS_ENTROPY, key="cross_entropy",
                     what="cross entropy")

    @property
    def fp8(self) -> Fp8Recipe:
        """The FP8 recipe this stack runs (:attr:`fp8_recipe`)."""
        return fp8_recipe(self.fp8_recipe, key="fp8_recipe")

    def with_fp8_recipe(self, recipe: str | None) -> Stack:
        """This stack with another FP8 recipe (``training.fp8_recipe``; None keeps its
        own)."""
        if recipe is None or recipe == self.fp8_recipe:
            return self
        check_choice(recipe, FP8_RECIPES, key="training.fp8_recipe", what="FP8 recipe")
        return replace(self, fp8_recipe=recipe)

    def host_s_per_kernel(self, pass_: str) -> float:
        """Host seconds per kernel launched in ``pass_``: the backward's autograd engine
        (``host_backward_overhead_s``, else the forward's figure) or the forward thread
        (``fwd`` and ``recompute``: checkpointing re-runs the forward's Python); none
        under ``cuda_graphs``, where a pass is one graph launch
        (:data:`CUDA_GRAPH_LAUNCH_S`)."""
        if self.cuda_graphs:
            return 0.0
        if pass_ == "bwd" and self.host_backward_overhead_s is not None:
            return self.host_backward_overhead_s
        return self.host_overhead_s

    def with_host_overhead(self, host_s: float | None) -> Stack:
        """This stack with ``host_s`` host seconds per forward kernel
        (``compute.host_overhead``); the backward's figure keeps the stack's own ratio to
        the forward's (43 / 20 µs measured for eager PyTorch)."""
        if host_s is None:
            return self
        backward = self.host_backward_overhead_s
        if backward is not None:
            backward = host_s * (backward / self.host_overhead_s if self.host_overhead_s
                                 else 1.0)
        return replace(self, host_overhead_s=host_s, host_backward_overhead_s=backward)

    def with_cuda_graphs(self, cuda_graphs: bool | None) -> Stack:
        """This stack with its layer passes captured as CUDA graphs or not
        (``compute.cuda_graphs``; None: the stack's own)."""
        if cuda_graphs is None or cuda_graphs == self.cuda_graphs:
            return self
        return replace(self, cuda_graphs=cuda_graphs)

    def with_cross_entropy(self, cross_entropy: str | None) -> Stack:
        """This stack with another loss implementation (``compute.cross_entropy``)."""
        if cross_entropy is None or cross_entropy == self.cross_entropy:
            return self
        return replace(self, cross_entropy=cross_entropy)

    def with_attention(self, attention: str | None) -> Stack:
        """This stack with another attention implementation (``compute.attention``)."""
        if attention is None or attention == self.attention:
            return self
        return replace(self, attention=attention)

    def to_dict(self) -> dict[str, Any]:
        """Every field (JSON/YAML-ready)."""
        return {item.name: getattr(self, item.name) for item in fields(self)}


#: Megatron-Core's DistributedDataParallel (class docstring): buckets of max(40M, 1M·dp)
#: parameters (``distributed_data_parallel.py``), on the first stage's first chunk only.
_MCORE_DDP: dict[str, Any] = {"bucket_params_per_dp_rank": 1_000_000,
                              "first_chunk_buckets": True}

#: ``bucket_params`` for one bucket after the backward: more parameters than any model's.
ONE_BUCKET = 10**15

STACKS: dict[str, Stack] = {
    "megatron-core": Stack(
        "megatron-core", "Megatron-Core (github.com/NVIDIA/Megatron-LM, core_r0.x) with "
        "cuDNN/Dao FlashAttention, fused bias-GeLU/SwiGLU and bias-dropout-add, "
        "--gradient-accumulation-fusion, Transformer Engine's one-pass cross entropy "
        "(--cross-entropy-loss-fusion --cross-entropy-fusion-impl te); dropout 0; FP8 "
        "GEMMs through Transformer Engine (TELayerNormColumnParallelLinear for qkv and "
        "fc1), delayed scaling",
        fp8_linear=True, fp8_norm_cast_fusion=True, fp8_tp_all_gather=True,
        fp8_saves_quantized_inputs=True, **_MCORE_DDP),
    "megatron-lm-2021": Stack(
        "megatron-lm-2021", "Megatron-LM v2.x megatron/model/transformer.py (2021): "
        "baddbmm + scaled_upper_triang_masked_softmax + Dropout(0.1) + bmm; jit "
        "bias_gelu, bias_dropout_add; apex FusedLayerNorm",
        attention="unfused", flash_kernel="fa2", attention_dropout=True, context_copy=True,
        hidden_dropout=True, cross_entropy="eager", fused_bias_grad=False,
        host_overhead_s=EAGER_HOST_OVERHEAD_S,
        host_backward_overhead_s=EAGER_HOST_BACKWARD_OVERHEAD_S),
    "megatron-deepspeed": Stack(
        "megatron-deepspeed", "microsoft/Megatron-DeepSpeed (2021-2022, BLOOM, vTrain): "
        "the 2021 Megatron layer under DeepSpeed's engine; gradients accumulate in .grad "
        "(fp16) or, under bf16, in fp32 by DeepSpeed's BF16_Optimizer",
        attention="unfused", flash_kernel="fa2", attention_dropout=True, context_copy=True,
        hidden_dropout=True, cross_entropy="eager", fp32_grad_accumulation=False,
        separate_grad_accumulation=True, bf16_grads_accumulated_in_fp32=True,
        fused_bias_grad=False, host_overhead_s=EAGER_HOST_OVERHEAD_S,
        host_backward_overhead_s=EAGER_HOST_BACKWARD_OVERHEAD_S, overlap_grad_reduce=False,
        fp16_grads_reduced_in_fp16=True),
    # NeMo 2.x performance recipes (nemo/collections/llm/recipes/*_pretrain.py with the
    # MegatronCommOverlapCallback; NeMo's "Communication Overlap" guide): the distributed
    # optimizer with overlap_grad_reduce and overlap_param_gather, tp_comm_overlap with
    # sequence parallelism (TE userbuffers), FP8 through Transformer Engine.
    "nemo": Stack(
        "nemo", "NeMo 2.x performance recipes on Megatron-Core + Transformer Engine: "
        "tp_comm_overlap (TE userbuffers), overlap_grad_reduce and overlap_param_gather "
        "with the distributed optimizer, Megatron-Core's fused cross entropy (NeMo 2's "
        "cross_entropy_loss_fusion, before TE's), FP8 via TE "
        "(TELayerNormColumnParallelLinear for qkv and fc1), delayed scaling",
        fp8_linear=True, fp8_norm_cast_fusion=True,
        fp8_tp_all_gather=True, fp8_saves_quantized_inputs=True,
        overlap_param_gather=True, tp_comm_overlap=True, cross_entropy="megatron_fused",
        first_chunk_buckets=True, bucket_params=128 * 2**20, dp_overlaps_need_dp=True),
    "transformer-engine": Stack(
        "transformer-engine", "NVIDIA Transformer Engine 1.x layers in Megatron-Core "
        "(LayerNormLinear, LayerNormMLP, DotProductAttention); FP8 delayed scaling; "
        "Megatron-Core's fused cross entropy (TE 1.x has no loss kernel)",
        fp8_linear=True, fp8_norm_cast_fusion=True, fp8_activation_cast_fusion=True,
        fp8_tp_all_gather=True, fp8_saves_quantized_inputs=True,
        cross_entropy="megatron_fused", **_MCORE_DDP),
    # DeepSeek's training framework (HAI-LLM, not released) as the DeepSeek-V3 report
    # (arXiv 2412.19437 §3.2-3.3) and its released profile (deepseek-ai/profile-data,
    # train.json: H800, EP 64) show it: FlashAttention-3, fused RMSNorm, DeepGEMM's
    # block-scaled FP8 GEMMs, FP8 activations cached row-wise and re-blocked column-wise
    # in the backward, FP8 weights transposed for each data gradient, the attention output
    # cached in E5M6 and the SwiGLU inputs in FP8; fp32 gradient accumulation in the
    # weight-gradient GEMM (its kernel's "_acc"); MLA's rotary parts rotated by a kernel
    # each and the query and key heads joined by two copies (rotary_kernel twice, then
    # _copy_tensor_kernel and a direct copy, in every layer's forward).
    "deepseek": Stack(
        "deepseek", "DeepSeek's framework as the V3 report and its released profile show "
        "it: DeepGEMM block-scaled FP8 (1x128 / 128x128), FP8 activations cached row-wise "
        "and re-blocked column-wise in the backward, FP8 weights transposed each "
        "micro-batch, the attention output cached in E5M6 and SwiGLU inputs in FP8",
        fp8_linear=True, fp8_recipe="blockwise", fp8_saves_quantized_inputs=True,
        fp8_colwise_in_backward=True, fp8_weight_transpose_per_pass=True,
        fp8_activation_caches=True, deepgemm=True, fused_mla_rope=False),
    "torch-compile": Stack(
        "torch-compile", "torchtitan (github.com/pytorch/torchtitan) with torch.compile "
        "and FSDP2: SDPA flash attention, Inductor-fused element-wise chains; FP8 "
        "through torchao float8 linears (tensorwise dynamic scaling)", flash_kernel="fa2",
        fp32_grad_accumulation=False, fp8_linear=True, fp8_recipe="current",
        host_overhead_s=COMPILED_HOST_OVERHEAD_S),
    "torch-eager": Stack(
        "torch-eager", "torchtitan without torch.compile: SDPA flash attention, PyTorch's "
        "composite RMSNorm, SwiGLU and residual adds as separate eager kernels, "
        "F.cross_entropy on the logits cast to fp32",
        flash_kernel="fa2", fused_norm=False, fused_bias_dropout_add=False,
        fused_mla_rope=False, separate_projections=True, cross_entropy="torch",
        fp32_grad_accumulation=False,
        host_overhead_s=EAGER_HOST_OVERHEAD_S,
        host_backward_overhead_s=EAGER_HOST_BACKWARD_OVERHEAD_S),
}
DEFAULT_STACK = "megatron-core"
#: The stacks with FP8 kernels (``precision: fp8`` / ``fp4`` runs on these).
FP8_STACKS = tuple(name for name, stack in STACKS.items() if stack.fp8_linear)


def get_stack(name: str, *, key: str = "compute.stack", source: str | None = None) -> Stack:
    """The stack called ``name``; a :class:`ConfigError` listing the stacks otherwise."""
    if not isinstance(name, str):
        raise ConfigError(f"must be a stack name, got {name!r}", key=key, source=source,
                          hint="valid: " + ", ".join(STACKS))
    framework = STACK_NAMES.get(name.strip().lower())
    if framework is not None and name not in STACKS:  # a framework, not one of its stacks
        raise ConfigError(f"unknown stack {name!r}", key=key, source=source,
                          hint=f"a framework's name: its stack is {framework}")
    return STACKS[check_choice(name, STACKS, key=key, source=source, what="stack")]
