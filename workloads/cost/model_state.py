"""Model state: the weights, gradients and optimizer state one GPU holds, by ZeRO stage.

Mixed-precision Adam holds per parameter 2 bytes of 16-bit weights, the gradients at the
width they are accumulated and reduced in, and K = 12 bytes of fp32 master weights,
momentum and variance (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
Trillion Parameter Models", §3.1; K = 8 with bf16 moments, DeepSeek-V3 report §3.3).
ZeRO-1 shards the optimizer state over the data-parallel group (HSDP: over its shard
group), ZeRO-2 also the gradients, ZeRO-3 and FSDP also the weights — as far as the
schedule lets a GPU drop what it does not own:

* under a pipeline the stages reduce their gradients once a step, on the last
  micro-batch, so they hold them whole until then (ZeRO-2 runs as ZeRO-1), and ZeRO-3 /
  FSDP keeps each stage's 16-bit weights gathered all step (torchtitan's FSDP2 default,
  :func:`~workloads.strategy.sharding.keeps_params_gathered`): only the optimizer state
  stays sharded;
* without one, ``reshard_after_forward: false`` keeps the weights whole and shards the
  rest (FSDP's ``SHARD_GRAD_OP``).
"""

from __future__ import annotations

from distsim_gpu.workloads.cost.parameters import Chunking, params_on_gpu
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy import sharding
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from distsim_gpu.workloads.strategy.precision import grad_element_bytes

__all__ = ["BF16_MOMENTS_SAVED_BYTES", "PRECISION_BYTES", "held_zero_stage",
           "model_state_bytes", "state_bytes"]

#: (weight, gradient, optimizer) bytes per parameter, ZeRO paper §3.1.
PRECISION_BYTES: dict[str, tuple[int, int, int]] = {
    "bf16": (2, 2, 12),
    "fp16": (2, 2, 12),
    "fp8": (2, 2, 12),  # FP8 / FP4 copies are transient casts of the 16-bit weights
    "fp4": (2, 2, 12),
    "fp32": (4, 4, 8),
}
#: Bytes per parameter bf16 moments save: two moments at 2 bytes instead of 4.
BF16_MOMENTS_SAVED_BYTES = 4


def state_bytes(training: TrainingConfig, grad_reduce_precision: str | None = None,
                ) -> tuple[int, int, int]:
    """(weight, gradient, optimizer) bytes per parameter: the precision's (ZeRO paper
    §3.1), the optimizer's 4 bytes less with ``training.optimizer_moments: bf16``.

    The gradient buffer holds the gradients in the dtype they are accumulated and reduced
    in (``grad_reduce_precision``; None: the training precision's), never narrower than
    the training precision's: Megatron-Core's fp32 main gradients
    (``accumulate_allreduce_grads_in_fp32``) take 4 bytes a parameter under bf16 — its
    ``6 + 12/d`` with the distributed optimizer — and FSDP's or DeepSpeed's gradients
    reduced in bf16 take 2, the ZeRO paper's ``2 + 2 + 12``."""
    weight_b, grad_b, optim_b = PRECISION_BYTES[training.precision]
    if grad_reduce_precision is not None:
        grad_b = max(grad_b, grad_element_bytes(grad_reduce_precision))
    if training.optimizer_moments == "bf16":
        optim_b -= BF16_MOMENTS_SAVED_BYTES
    return weight_b, grad_b, optim_b


def held_zero_stage(parallel: ParallelConfig) -> int:
    """The ZeRO stage of what a GPU holds through the step (module docstring): the
    configured one, but 1 at most under a pipeline, and 2 for ZeRO-3 / FSDP whose
    weights stay gathered from the forward to the backward."""
    shard = 3 if parallel.fsdp else parallel.zero
    if parallel.pp > 1:  # gradients reduced once a step, weights kept gathered
        return min(shard, 1)
    if shard == 3 and not sharding.reshards_after_forward(parallel):
        return 2
    return shard


def model_state_bytes(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                       stage: int) -> tuple[float, float, float]:
    """Weights, gradients and optimizer state on one GPU of ``stage``, ZeRO/FSDP-sharded."""
    tp, pp, ep, dp = parallel.tp, parallel.pp, parallel.ep, sharding.shard_ranks(parallel)
    params = params_on_gpu(model, tp=tp, pp=pp, ep=ep, stage=stage, etp=parallel.etp,
                           chunking=Chunking.of(parallel))
    shard = held_zero_stage(parallel)
    # ZeRO shards an expert over the ranks holding it: Megatron-Core's expert data
    # parallelism, tp·dp·cp / (expert_tp·ep) (workloads.strategy.expert_grid).
    expert_dp = max(1, dp * tp // (parallel.etp * ep))

    def sharded(per_param: int, from_stage: int) -> float:
        if shard >= from_stage:
            return per_param * (params.dense / dp + params.expert / expert_dp)
        return per_param * params.total

    weight_b, grad_b, optim_b = state_bytes(training, parallel.grad_reduce_precision)
    return sharded(weight_b, 3), sharded(grad_b, 2), sharded(optim_b, 1)
