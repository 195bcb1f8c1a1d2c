"""ZeRO/FSDP sharding: the stage check, ZeRO-3 under a pipeline, ``reshard_after_forward``
and HSDP's groups, as the frameworks run them, and the checks that refuse what distsim
does not model.

**Under a pipeline** torchtitan applies FSDP2 (``fully_shard``) to each pipeline stage's
module with ``reshard_after_forward`` False (its ``"default"`` policy: False with PP, True
without), so a stage's parameters are gathered by the step's first forward and stay
gathered to the step's end, and ``torch.distributed.pipelining`` runs every micro-batch's
backward but the last without gradient sync (``set_requires_gradient_sync(False)``), and
each FSDP unit's gradients reduce-scattered after the last one's backward, one unit at a
time (:func:`keeps_params_gathered`; the stream in :mod:`workloads.iteration.param_shards`).

**HSDP** (FSDP's ``HYBRID_SHARD``; torchtitan's ``data_parallel_replicate_degree``):
``parallelism.dp_replicate`` groups of ``dp·cp / dp_replicate`` ranks each shard the
parameters, gradients and optimizer state (the shard group innermost, as torchtitan's
mesh ``["dp_replicate", "dp_shard", "cp"]`` lays it out: consecutive replicas); each
reduce-scattered gradient shard is then all-reduced across the ``dp_replicate`` groups
(ranks ``dp·cp / dp_replicate`` replicas apart), as FSDP2's HSDP does after its
reduce-scatter.
"""

from __future__ import annotations

from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.strategy.schedule import V_SCHEDULES

__all__ = ["check_fsdp_layout", "check_zero", "keeps_params_gathered", "replicate_sets",
           "reshards_after_forward", "shard_ranks", "shard_sets"]


def check_zero(zero: int, fsdp: bool, *, key: str = "zero", source: str | None = None) -> None:
    """A ZeRO stage (written at ``key``) of 0-3, and 0 or 3 with fsdp (which shards like 3)."""
    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise ConfigError(f"must be 0, 1, 2 or 3, got {zero!r}", key=key, source=source)
    if fsdp and zero not in (0, 3):
        leaf = key.rsplit(".", 1)[-1]
        raise ConfigError(f"fsdp shards like ZeRO-3; {leaf} {zero} contradicts it", key=key,
                          source=source, hint=f"use {leaf} 0 or 3 with fsdp")


def keeps_params_gathered(parallel: Any) -> bool:
    """Whether ZeRO-3/FSDP keeps each stage's parameters gathered for the whole step: under
    a pipeline (module docstring).  Each chunk's first forward gathers its layers (the
    next prefetched) and the stage's root (embeddings, final norm, output layer); only the
    last micro-batch's backward is followed by the reduce-scatters, unit by unit.  ``parallel``: a
    :class:`~workloads.strategy.parallel.ParallelConfig` (typed ``Any`` here: parallel.py
    calls this module's checks, and no import may loop, not even a type-only one)."""
    return (parallel.zero == 3 or parallel.fsdp) and parallel.pp > 1 and (
        parallel.operator_sharding is None)


def reshards_after_forward(parallel: Any) -> bool:
    """Whether ZeRO-3/FSDP frees each layer's gathered parameters after its forward (and so
    gathers them again for its backward): ``parallelism.reshard_after_forward``, by
    default torchtitan's policy — True without a pipeline, False with one.  False without
    a pipeline (FSDP's ``SHARD_GRAD_OP`` memory, FULL_SHARD's gradients): each forward
    gathers, the backward finds the layers gathered, every micro-batch reduce-scatters.
    A per-operator plan gathers its sharded operators for every pass (True)."""
    if not (parallel.fsdp or parallel.zero == 3) or parallel.operator_sharding is not None:
        return True
    if parallel.reshard_after_forward is None:
        return parallel.pp == 1
    return parallel.reshard_after_forward


def shard_ranks(parallel: Any) -> int:
    """The ranks one parameter's ZeRO/FSDP shards are spread over: ``dp·cp``, or with HSDP
    ``dp·cp / dp_replicate`` (one shard group)."""
    return parallel.dp_cp // parallel.dp_replicate


def shard_sets(parallel: Any) -> tuple[tuple[int, ...], ...]:
    """HSDP's shard groups as replica indices of a stage: blocks of :func:`shard_ranks`
    consecutive replicas."""
    size = shard_ranks(parallel)
    return tuple(tuple(range(b, b + size)) for b in range(0, parallel.dp_cp, size))


def replicate_sets(parallel: Any) -> tuple[tuple[int, ...], ...]:
    """HSDP's replicate groups as replica indices: the replicas at one offset of every
    shard group."""
    size = shard_ranks(parallel)
    return tuple(tuple(range(o, parallel.dp_cp, size)) for o in range(size))


def check_fsdp_layout(parallel: Any, *, source: str | None = None) -> None:
    """ZeRO-3/FSDP with ``pp`` > 1 on a one-direction schedule (gpipe, 1f1b, interleaved)
    without offload; ``dp_replicate`` (HSDP) dividing ``dp``, with ZeRO-3/FSDP, neither
    offload nor experts; ``reshard_after_forward`` with ZeRO-3/FSDP, not true under a
    pipeline nor false with offload.  A :class:`ConfigError` naming the clash otherwise."""
    sharded = parallel.fsdp or parallel.zero == 3
    _check_hsdp(parallel, sharded, source)
    _check_reshard(parallel, sharded, source)
    if not sharded or parallel.pp == 1:
        return
    if parallel.schedule in V_SCHEDULES:
        # Their split backward's weight half would have to reduce-scatter by FSDP unit.
        raise ConfigError(f"ZeRO-3/FSDP with schedule {parallel.schedule} is not modelled",
                          key="parallelism.schedule", source=source,
                          hint="schedule gpipe, 1f1b or interleaved with zero 3 / fsdp "
                          "(torchtitan's), or zero <= 2")
    if parallel.offload.enabled:
        raise ConfigError("offload with ZeRO-3/FSDP under a pipeline is not modelled",
                          key="parallelism.offload", source=source,
                          hint="pp 1 to offload with zero 3, or leave offload out")


def _check_reshard(parallel: Any, sharded: bool, source: str | None) -> None:
    key, reshard = "parallelism.reshard_after_forward", parallel.reshard_after_forward
    if reshard is not None and not sharded:
        raise ConfigError("reshard_after_forward needs zero 3 or fsdp (it says whether the "
                          "gathered parameters are freed after the forward)", key=key,
                          source=source, hint="set fsdp: true, or leave it out")
    if reshard and parallel.pp > 1:
        raise ConfigError("reshard_after_forward: true under a pipeline is not modelled",
                          key=key, source=source, hint="leave it out (or false: torchtitan's "
                          "default with PP keeps each stage's parameters gathered)")
    if reshard is False and parallel.offload.enabled:
        raise ConfigError("reshard_after_forward: false with offload is not modelled",
                          key=key, source=source, hint="leave it out to offload")


def _check_hsdp(parallel: Any, sharded: bool, source: str | None) -> None:
    replicate, key = parallel.dp_replicate, "parallelism.dp_replicate"
    if replicate == 1:
        return
    if not sharded:
        raise ConfigError("dp_replicate (HSDP: shard within a group, replicate across) "
                          "needs zero 3 or fsdp", key=key, source=source,
                          hint="set fsdp: true, or leave dp_replicate out (1)")
    if parallel.dp % replicate:
        divisors = [d for d in range(1, parallel.dp + 1) if parallel.dp % d == 0]
        raise ConfigError(f"dp_replicate {replicate} does not divide dp {parallel.dp}",
                          key=key, source=source, hint=f"one of {divisors}")
    clashes = [name for name, on in (("offload", parallel.offload.enabled),
                                     ("ep > 1", parallel.ep > 1),
                                     ("operator_sharding",
                                      parallel.operator_sharding is not None)) if on]
    if clashes:
        raise ConfigError(f"dp_replicate with {', '.join(clashes)} is not modelled",
                          key=key, source=source,
                          hint="HSDP runs dense layers without offload here")
