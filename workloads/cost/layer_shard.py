"""The shard of one transformer layer that one rank computes.

A :class:`LayerShard` is what every per-layer cost asks of the strategy: the micro-batch
and the sequence length a rank sees, how the layer is split over its tensor-parallel group
(with or without sequence parallelism), its expert-parallel group and the experts' own
tensor parallelism, which layer of the
model it is (dense or MoE), whether its experts' tokens move by DeepEP's kernels and how
that layer is recomputed.  The cost models
(:meth:`~distsim_gpu.workloads.cost.compute.roofline.CostModel.layer_time_s`), the
operator lists (:func:`~distsim_gpu.workloads.cost.compute.operators.layer_work`), the
activation memory (:func:`~distsim_gpu.workloads.cost.memory.activation_bytes_per_layer`)
and context parallelism's core attention all take one, so a new split is one field here
instead of one keyword on each of them.

The record is not validated on construction: the functions that use it check it against
the model (a ``tp`` that does not divide the heads is a property of the pair).
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.workloads.specs.recompute_modules import DEFAULT_RECOMPUTE_MODULES

__all__ = ["LayerShard"]


@dataclass(frozen=True, slots=True)
class LayerShard:
    """Layer ``layer_index`` over ``micro_batch`` sequences of ``seq_len`` tokens on one
    rank of ``tp`` tensor-parallel (``sequence_parallel``: element-wise ops on ``1/tp`` of
    the tokens) and ``ep`` expert-parallel ranks.

    ``recompute`` is the layer's recomputation mode: the kind of ``recompute`` pass a cost
    model times (``full``, ``selective``, ``op``), and what the activation memory keeps
    (``none`` too), ``recompute_modules`` what a ``selective`` one covers.  Its default
    ``full`` is the cost models'; the memory model's no-recomputation case is
    ``recompute="none"``."""

    micro_batch: int
    seq_len: int
    tp: int = 1
    sequence_parallel: bool = False
    ep: int = 1
    layer_index: int = 0
    recompute: str = "full"
    #: The routed experts' tensor parallelism (None: ``tp``; 1: each expert whole on its
    #: GPU, the tokens it serves gathered from the other tensor ranks by the dispatch).
    expert_tp: int | None = None
    #: What a ``selective`` recompute re-runs and does not keep (Megatron-Core's
    #: submodules, :mod:`~distsim_gpu.workloads.specs.recompute_modules`).
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    #: The MoE exchange runs DeepEP's kernels (``communication.all_to_all: deepep``,
    #: :func:`~distsim_gpu.workloads.cost.traffic.exchanges_by_deepep`): a token arrives
    #: once at each GPU holding one of its experts and is copied into expert order there,
    #: and a low-precision run sends it in FP8, cast once before the dispatch.
    deepep: bool = False

    @property
    def etp(self) -> int:
        """The routed experts' tensor parallelism: ``expert_tp``, else ``tp``."""
        return self.tp if self.expert_tp is None else self.expert_tp
