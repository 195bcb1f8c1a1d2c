"""Traffic of one training iteration: how many bytes each of its transfers carries.

The simulated iteration (:mod:`workloads.iteration`) and its lower bound
(:mod:`workloads.cost.bounds`) move the same bytes; this module is the one place that counts
them, as pure functions of the model, the parallel strategy and the training setup.

* **Element sizes** — activations, and the parameters ZeRO gathers, travel at the training
  precision (fp8 training keeps 16-bit activations and weights: 2 bytes); gradients at
  ``grad_reduce_precision`` (Megatron-LM reduces them in fp32 by default).
* **Tensor parallel** — after every attention and MLP block, an all-reduce of the block's
  output, ``micro_batch·seq_len·hidden`` elements; with sequence parallelism an
  all-gather and a reduce-scatter of the same size instead.
* **Pipeline** — one activation (forward) or its gradient (backward) per micro-batch
  between neighbouring stages, split over the tensor-parallel ranks: one TP message / tp
  per rank.
* **Expert parallel** — a MoE layer's dispatch and combine all-to-alls carry ``top_k``
  copies of every token's hidden state (split over tp with sequence parallelism).
* **Data parallel** — the last micro-batch's backward reduces the gradients in buckets of
  ``bucket_params`` parameters as it produces them (all-reduce, reduce-scatter with
  ZeRO ≥ 1), the first chunk's bucket also holding the word embedding's gradients;
  ZeRO-3/FSDP all-gathers each layer's parameters before its passes and reduce-scatters
  its gradients; ZeRO-1/2 all-gather the updated parameters after the optimizer step.
  Per-operator sharding (OSDP, :mod:`workloads.strategy.operator_sharding`) does both at once: a
  layer's sharded operators' parameters gathered and their gradients reduce-scattered as
  ZeRO-3's, the replicated operators' gradients bucketed and all-reduced
  (:func:`layer_sharded_fraction` splits every layer's bytes between the two).
* **Context parallel** — a CP rank holds ``s/cp`` tokens of each sequence, so every
  activation message above is counted at ``s/cp`` (:func:`rank_training`); each step of
  the attention ring passes the K and V of those tokens to the next CP rank,
  ``2·(s/cp)·b·kv_heads/tp·d_head`` elements (:func:`cp_message_bytes`; backward passes
  their gradients too, :mod:`workloads.cost.context_parallel`).  Gradients are reduced, and
  ZeRO shards, over the ``dp·cp`` ranks that hold the same parameters.
* **Tied embeddings** — with pp > 1 the first and last stage all-reduce the word
  embedding's gradients.

Sizes are bytes per call (per GPU's buffer, as the collectives take them), plain floats
or ints; counts of parameters are per GPU, after tensor and expert parallel splitting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.workloads.cost.compute.fp8_recipes import DISPATCH_FP8_ELEMENT_BYTES
from distsim_gpu.workloads.cost.memory import cp_kv_block_bytes
from distsim_gpu.workloads.cost.parameters import Chunking, layer_params_local, params_on_gpu
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.operator_sharding import (
    SHARDABLE_OPERATORS,
    sharded_fraction,
    sharded_params,
)
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from distsim_gpu.workloads.strategy.precision import GRAD_BYTES, grad_element_bytes
from distsim_gpu.workloads.strategy.schedule import end_stages, route_ends, stage_of
from distsim_gpu.workloads.strategy.sharding import (
    keeps_params_gathered,
    reshards_after_forward,
    shard_ranks,
)
from distsim_gpu.workloads.strategy.tp_nd import mesh_of, weight_replicas

__all__ = [
    "ACTIVATION_BYTES",
    "GRAD_BYTES",
    "GradientBucket",
    "activation_bytes_per_element",
    "aligns_grad_reduce",
    "aligns_param_gather",
    "alltoall_bytes",
    "bucket_bytes",
    "chunk_is_bucketed",
    "cp_message_bytes",
    "dispatch_bytes",
    "dispatches_fp8",
    "entry_grad_bytes",
    "exchanges_by_deepep",
    "gathers_layer_params",
    "grad_bytes_per_element",
    "gradient_buckets",
    "gradient_reduce_op",
    "head_grad_bytes",
    "head_params",
    "keeps_params_gathered",
    "layer_gather_bytes",
    "layer_grad_bytes",
    "layer_param_bytes",
    "layer_params",
    "layer_shard_grad_bytes",
    "layer_sharded_fraction",
    "moe_tp_scale",
    "optimizer_params",
    "pipeline_message_bytes",
    "rank_training",
    "reduces_every_microbatch",
    "reduces_in_buckets",
    "reshards_after_forward",
    "seq_len_of",
    "sharded_stage_params",
    "stage_grad_bytes",
    "stage_param_bytes",
    "stage_params",
    "tp_all_gather_bytes",
    "tp_collective_kinds",
    "tp_message_bytes",
    "word_embedding_grad_bytes",
]

#: Bytes per activation (and gathered parameter) element, by training precision.
ACTIVATION_BYTES: Mapping[str, int] = MappingProxyType(
    {"bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2, "fp32": 4})


# --------------------------------------------------------------------------- element sizes


def activation_bytes_per_element(precision: str) -> int:
    """Bytes of one activation or parameter element sent at training ``precision``."""
    return ACTIVATION_BYTES[check_choice(precision, ACTIVATION_BYTES, key="training.precision")]


def grad_bytes_per_element(grad_reduce_precision: str) -> int:
    """Bytes of one gradient element reduced at ``grad_reduce_precision``
    (:data:`~workloads.strategy.precision.GRAD_BYTES`, which the gradient buffer counts too)."""
    return grad_element_bytes(grad_reduce_precision)


# --------------------------------------------------------------------------- per layer pass


def seq_len_of(model: ModelSpec, training: TrainingConfig) -> int:
    """The sequence length trained on: ``training.seq_len``, else the model's."""
    return training.seq_len or model.seq_len


def rank_training(model: ModelSpec, parallel: ParallelConfig,
                  training: TrainingConfig) -> TrainingConfig:
    """The training setup as one context-parallel rank sees it: sequences of
    ``seq_len/cp`` tokens (``training`` itself without context parallelism)."""
    if parallel.cp == 1:
        return training
    return replace(training, seq_len=seq_len_of(model, training) // parallel.cp)


def cp_message_bytes(model: ModelSpec, parallel: ParallelConfig,
                     training: TrainingConfig) -> float:
    """Bytes one GPU sends in one step of the context-parallel ring: the K and V of its
    ``s/cp`` tokens on its tensor rank, ``2·(s/cp)·b·kv_heads/tp·d_head`` elements."""
    return cp_kv_block_bytes(model, micro_batch=training.micro_batch,
                             seq_len=seq_len_of(model, training), tp=parallel.tp,
                             cp=parallel.cp, precision=training.precision)


def tp_collective_kinds(parallel: ParallelConfig) -> tuple[str, ...]:
    """The tensor-parallel collectives after each attention and MLP block, in order."""
    if parallel.tp == 1:
        return ()
    return ("all_gather", "reduce_scatter") if parallel.sequence_parallel else ("all_reduce",)


def tp_message_bytes(model: ModelSpec, training: TrainingConfig) -> int:
    """Bytes of one tensor-parallel collective: a block's output,
    ``micro_batch · seq_len · hidden`` activations."""
    tokens = training.micro_batch * seq_len_of(model, training)
    return tokens * model.hidden * activation_bytes_per_element(training.precision)


def tp_all_gather_bytes(model: ModelSpec, training: TrainingConfig, *,
                        fp8_gather: bool) -> int:
    """Bytes of one tensor-parallel all-gather: :func:`tp_message_bytes`, or the FP8
    cast's half of it when the stack gathers FP8 (``Stack.fp8_tp_all_gather``) under
    ``precision: fp8``."""
    size = tp_message_bytes(model, training)
    return size // 2 if fp8_gather and training.precision == "fp8" else size


def pipeline_message_bytes(model: ModelSpec, parallel: ParallelConfig,
                           training: TrainingConfig) -> float:
    """Bytes each tensor-parallel rank sends to the next (or previous) pipeline stage per
    micro-batch and pass: its 1/tp share of the activation."""
    return tp_message_bytes(model, training) / parallel.tp


def alltoall_bytes(model: ModelSpec, parallel: ParallelConfig,
                   training: TrainingConfig) -> float:
    """Bytes of one expert all-to-all (dispatch or combine) of a MoE layer: ``top_k``
    copies of each token's hidden state, split over tp with sequence parallelism."""
    tokens = training.micro_batch * seq_len_of(model, training)
    act = activation_bytes_per_element(training.precision)
    return (tokens * model.top_k * model.hidden * act
            / (parallel.tp if parallel.sequence_parallel else 1))


def exchanges_by_deepep(all_to_all: str, ep: int) -> bool:
    """Whether a MoE layer's tokens move by DeepEP's kernels (``all_to_all: deepep``,
    over ``ep > 1`` ranks: :attr:`~distsim_gpu.workloads.cost.layer_shard.LayerShard.deepep`)."""
    return all_to_all == "deepep" and ep > 1


def dispatches_fp8(all_to_all: str, precision: str, ep: int) -> bool:
    """Whether a MoE layer's tokens go to their experts as FP8: DeepEP's dispatch under an
    FP8 or FP4 run (the layer then casts its tokens once before it)."""
    return exchanges_by_deepep(all_to_all, ep) and precision in ("fp8", "fp4")


def dispatch_bytes(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                   all_to_all: str = "flat") -> float:
    """Bytes of one MoE dispatch: :func:`alltoall_bytes`, but with DeepEP's kernels
    (``all_to_all: deepep``) under an FP8 or FP4 run the tokens travel as FP8 with their
    scales (its combine stays 16-bit, :func:`alltoall_bytes`)."""
    size = alltoall_bytes(model, parallel, training)
    if dispatches_fp8(all_to_all, training.precision, parallel.ep):
        return size * DISPATCH_FP8_ELEMENT_BYTES / activation_bytes_per_element(
            training.precision)
    return size


def moe_tp_scale(model: ModelSpec, parallel: ParallelConfig) -> float:
    """Bytes of an expert-parallel MoE block's tensor-parallel collectives relative to a
    dense MLP's (``T·h``), as Megatron-Core's all-to-all dispatcher runs them with
    sequence parallelism: the routed tokens, ``top_k`` copies of the tokens, are gathered
    over the expert-tensor group after the dispatch and reduce-scattered before the
    combine (``top_k·etp/tp`` of ``T·h``; none with ``expert_tp`` 1), and shared experts
    gather and scatter their own input like a dense MLP (1 each)."""
    routed = model.top_k * parallel.etp / parallel.tp if parallel.etp > 1 else 0.0
    return routed + (1.0 if model.shared_experts else 0.0)


# --------------------------------------------------------------------------- parameters


def layer_params(model: ModelSpec, layer: int, parallel: ParallelConfig) -> float:
    """Parameters of layer ``layer`` on one GPU, dense and expert together (a GPT layer
    without tensor parallelism: ``12·h² + 13·h``)."""
    mesh = mesh_of(parallel.tp_mode, parallel.tp, parallel.tp_depth)
    if mesh is not None:  # a 2-D/2.5-D/3-D mesh splits every parameter (workloads.strategy.tp_nd)
        dense, expert = layer_params_local(model, layer, 1, parallel.ep)
        return (dense + expert) * weight_replicas(mesh) / mesh.tp
    dense, expert = layer_params_local(model, layer, parallel.tp, parallel.ep, parallel.etp)
    return dense + expert


def layer_param_bytes(model: ModelSpec, layer: int, parallel: ParallelConfig,
                      training: TrainingConfig) -> float:
    """Bytes of layer ``layer``'s parameters that ZeRO-3/FSDP all-gathers before a pass."""
    return layer_params(model, layer, parallel) * activation_bytes_per_element(
        training.precision)


def layer_grad_bytes(model: ModelSpec, layer: int, parallel: ParallelConfig) -> float:
    """Bytes of layer ``layer``'s gradients as the data-parallel reduction moves them."""
    return layer_params(model, layer, parallel) * grad_bytes_per_element(
        parallel.grad_reduce_precision)


def word_embedding_grad_bytes(model: ModelSpec, parallel: ParallelConfig) -> float:
    """Bytes of one GPU's share (1/tp of the vocabulary) of the word embedding's
    gradients: the first chunk's last bucket, and the tied-embedding all-reduce."""
    return (model.vocab * model.hidden / parallel.tp
            * grad_bytes_per_element(parallel.grad_reduce_precision))


def entry_grad_bytes(model: ModelSpec, parallel: ParallelConfig) -> float:
    """Bytes of the gradients one GPU of the first chunk holds past its layers, as
    :func:`~workloads.cost.parameters.params_on_gpu` counts them: the word embedding's
    share (:func:`word_embedding_grad_bytes`), a learned position embedding and an
    embedding norm."""
    params = 0.0
    if model.position == "learned":
        params += model.seq_len * model.hidden
    if model.embedding_norm:
        params += model.norm_params()
    return word_embedding_grad_bytes(model, parallel) + params * grad_bytes_per_element(
        parallel.grad_reduce_precision)


def head_params(model: ModelSpec, parallel: ParallelConfig, *, holds_embedding: bool) -> float:
    """Parameters one GPU holds with the model's last chunk past its layers: the final
    norm, the output layer (1/tp of the vocabulary) and the multi-token-prediction modules,
    as :func:`~workloads.cost.parameters.params_on_gpu` counts them.  A tied output layer
    on a GPU that also holds the word embedding (``holds_embedding``: pp 1, a V's first
    stage) is that embedding, counted with it once."""
    params = float(model.final_norm_params())
    if not (model.tied_embeddings and holds_embedding):
        params += model.vocab * model.hidden / parallel.tp
    if model.mtp_depth:  # each a block like the last layer and its 2h -> h projection
        projection = 2 * model.hidden * model.hidden / parallel.tp + 2 * model.norm_params()
        params += model.mtp_depth * (layer_params(model, model.layers - 1, parallel)
                                     + projection)
    return params


def head_grad_bytes(model: ModelSpec, parallel: ParallelConfig, vs: int) -> float:
    """Bytes of the gradients of :func:`head_params` that virtual stage ``vs`` reduces
    over the data-parallel group: 0 unless micro-batches leave the model there."""
    schedule, pp = parallel.schedule, parallel.pp
    if vs not in route_ends(schedule, pp, parallel.interleave)[1]:
        return 0.0
    firsts = end_stages(schedule, pp, parallel.interleave)[0]
    return head_params(model, parallel, holds_embedding=stage_of(vs, pp, schedule) in firsts
                       ) * grad_bytes_per_element(parallel.grad_reduce_precision)


def stage_params(model: ModelSpec, parallel: ParallelConfig, stage: int) -> float:
    """Parameters one GPU of pipeline stage ``stage`` holds (dense and expert)."""
    mesh = mesh_of(parallel.tp_mode, parallel.tp, parallel.tp_depth)
    if mesh is not None:  # as layer_params
        whole = stage_params(model, replace(parallel, tp=1, tp_mode="1d", tp_depth=1), stage)
        return whole * weight_replicas(mesh) / mesh.tp
    return params_on_gpu(model, tp=parallel.tp, pp=parallel.pp, ep=parallel.ep, stage=stage,
                         etp=parallel.etp, chunking=Chunking.of(parallel)).total


def stage_param_bytes(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                      stage: int) -> float:
    """Bytes of the parameters one GPU of ``stage`` holds, at training precision: what
    ZeRO-1/2 all-gathers after the optimizer step."""
    return stage_params(model, parallel, stage) * activation_bytes_per_element(
        training.precision)


def stage_grad_bytes(model: ModelSpec, parallel: ParallelConfig, stage: int) -> float:
    """Bytes of all the gradients one GPU of ``stage`` reduces in an iteration."""
    return stage_params(model, parallel, stage) * grad_bytes_per_element(
        parallel.grad_reduce_precision)


def optimizer_params(model: ModelSpec, parallel: ParallelConfig, stage: int) -> float:
    """Parameters one GPU of ``stage`` updates in the optimizer step: its stage's, or
    its 1/(dp·cp) shard of them with ZeRO ≥ 1 or FSDP (HSDP: 1/its shard group's ranks)."""
    params = stage_params(model, parallel, stage)
    if parallel.operator_sharding is not None:
        sharded = sharded_stage_params(model, parallel, stage)
        return sharded / parallel.dp_cp + (params - sharded)
    return params / shard_ranks(parallel) if parallel.zero >= 1 or parallel.fsdp else params


def sharded_stage_params(model: ModelSpec, parallel: ParallelConfig, stage: int) -> float:
    """Parameters of ``stage`` a per-operator plan shards: each layer's sharded part, and
    the embeddings and output layer when its default is ``sharded``."""
    plan = parallel.operator_sharding
    params = stage_params(model, parallel, stage)
    if plan is None:
        return params if gathers_layer_params(parallel) else 0.0
    layers = sum(layer_params(model, layer, parallel) for layer in range(model.layers))
    return sharded_params(plan, model, parallel.tp, stage_params=params, layer_params=layers)


# --------------------------------------------------------------------------- data parallel


def gathers_layer_params(parallel: ParallelConfig) -> bool:
    """Whether parameters are sharded and gathered layer by layer (ZeRO-3 or FSDP, or a
    per-operator plan sharding some operator)."""
    plan = parallel.operator_sharding
    if plan is not None:
        return bool(plan.sharded_operators)
    return parallel.zero == 3 or parallel.fsdp


def reduces_in_buckets(parallel: ParallelConfig) -> bool:
    """Whether some layer gradients are reduced in buckets once per iteration: without
    ZeRO-3/FSDP, or with a per-operator plan replicating some operator."""
    plan = parallel.operator_sharding
    if plan is not None:
        return len(plan.sharded_operators) < len(SHARDABLE_OPERATORS)
    return not gathers_layer_params(parallel)


def layer_sharded_fraction(model: ModelSpec, layer: int, parallel: ParallelConfig) -> float:
    """The share of layer ``layer``'s parameters sharded over the data-parallel group:
    1 with ZeRO-3/FSDP, 0 without, a per-operator plan's share in between."""
    plan = parallel.operator_sharding
    if plan is not None:
        return sharded_fraction(plan, model, parallel.tp)
    return 1.0 if gathers_layer_params(parallel) else 0.0


def layer_gather_bytes(model: ModelSpec, layer: int, parallel: ParallelConfig,
                       training: TrainingConfig) -> float:
    """Bytes of layer ``layer``'s sharded parameters all-gathered before each pass."""
    return layer_param_bytes(model, layer, parallel, training) * layer_sharded_fraction(
        model, layer, parallel)


def layer_shard_grad_bytes(model: ModelSpec, layer: int, parallel: ParallelConfig) -> float:
    """Bytes of layer ``layer``'s sharded gradients reduce-scattered every micro-batch."""
    return layer_grad_bytes(model, layer, parallel) * layer_sharded_fraction(
        model, layer, parallel)


def reduces_every_microbatch(parallel: ParallelConfig) -> bool:
    """Whether every micro-batch's backward reduce-scatters its gradient buckets, not only
    the last one's: ZeRO-2 without a pipeline, whose sharded gradient partitions hold only
    the reduced shard, so each micro-batch's gradients are reduced as they are produced
    (DeepSpeed's stage 2 has no ``no_sync``; FSDP's ``SHARD_GRAD_OP`` does the same).
    ZeRO-1 (Megatron-Core's distributed optimizer) keeps whole gradients and reduces them
    once a step.  So does ZeRO-2 under a pipeline: DeepSpeed refuses stage 2 with pipeline
    parallelism, and PyTorch's pipeline stages run FSDP's backward without gradient sync
    and reduce once a step, after the last micro-batch's (Llama 3's and torchtitan's
    recipe)."""
    return parallel.zero == 2 and parallel.pp == 1 and not gathers_layer_params(parallel)


def gradient_reduce_op(parallel: ParallelConfig) -> str:
    """The collective that reduces gradient buckets: reduce-scatter once the optimizer
    state is sharded (ZeRO ≥ 1: each GPU needs only its shard's sum), else all-reduce."""
    return "reduce_scatter" if parallel.zero >= 1 else "all_reduce"


def bucket_bytes(parallel: ParallelConfig) -> float:
    """Gradient bytes a data-parallel bucket collects before it is reduced."""
    return parallel.bucket_params * grad_bytes_per_element(parallel.grad_reduce_precision)


@dataclass(frozen=True, slots=True)
class GradientBucket:
    """One data-parallel gradient reduction of a chunk's last backward pass.

    ``after_layers``: launched once that many of the pass's layers (in backward order)
    are done; None: at the end of the pass, after the embedding's backward.
    """

    size_bytes: float
    after_layers: int | None


def aligns_param_gather(parallel: ParallelConfig) -> bool:
    """``parallelism.align_param_gather`` as set, else on with the interleaved schedule
    (Megatron-LM's ``--align-param-gather``, turned off without it; NeMo's overlap
    callback with virtual stages): :mod:`workloads.iteration.ddp_dispatch`."""
    if parallel.align_param_gather is not None:
        return parallel.align_param_gather
    return parallel.schedule == "interleaved"


def aligns_grad_reduce(parallel: ParallelConfig) -> bool:
    """``parallelism.align_grad_reduce``: a chunk's reductions dispatched by the
    interleaved schedule, not during its last backward (Megatron-LM's
    ``--align-grad-reduce``, NeMo's ``grad_sync_func``; the Megatron-Core stacks' default
    there, :mod:`workloads.iteration.ddp_dispatch`); unset: off, as PyTorch's DDP."""
    return bool(parallel.align_grad_reduce)


def chunk_is_bucketed(parallel: ParallelConfig, vs: int) -> bool:
    """Whether virtual stage ``vs``'s gradients go in buckets (``parallelism.bucketing``):
    every chunk's, or only the first stage's first chunk's (Megatron-Core's DDP)."""
    return parallel.bucketing == "every_chunk" or vs == 0


def gradient_buckets(model: ModelSpec, parallel: ParallelConfig,
                     backward_layers: Sequence[int], *, first_chunk: bool, head_bytes: float,
                     bucketed: bool = True) -> tuple[GradientBucket, ...]:
    """The gradient buckets a chunk's last backward pass reduces without ZeRO-3/FSDP:
    gradients collect in backward order and a bucket goes once it holds at least
    :func:`bucket_bytes`; what is left goes at the end of the pass, with the embeddings'
    gradients on the first chunk (``first_chunk``, :func:`entry_grad_bytes`).  The last
    chunk's backward starts with the output layer's (``head_bytes``,
    :func:`head_grad_bytes`): they open its first bucket, which goes after the first layer
    at the earliest (DDP would send a bucket they fill alone one layer sooner).  A
    per-operator plan buckets only its replicated operators' gradients.  A chunk not
    ``bucketed`` (:func:`chunk_is_bucketed`) reduces all of them in one, at the end."""
    threshold = bucket_bytes(parallel) if bucketed else math.inf
    buckets: list[GradientBucket] = []
    bucket = head_bytes
    plan = parallel.operator_sharding
    for done, layer in enumerate(backward_layers, start=1):
        grads = layer_grad_bytes(model, layer, parallel)
        bucket += grads if plan is None else grads * (
            1.0 - layer_sharded_fraction(model, layer, parallel))
        if bucket >= threshold:
            buckets.append(GradientBucket(bucket, done))
            bucket = 0.0
    if first_chunk:
        bucket += entry_grad_bytes(model, parallel)
    if bucket > 0:
        buckets.append(GradientBucket(bucket, None))
    return tuple(buckets)
