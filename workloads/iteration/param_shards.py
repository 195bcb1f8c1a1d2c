"""ZeRO-3/FSDP's parameter gathers in a stage's stream: a mixin of
:class:`~workloads.iteration.streams.StreamBuilder`.

Without a pipeline (FSDP's ``reshard_after_forward: True``) every pass gathers each layer
ahead of its compute (the next layer's gather launched before this one computes: FSDP's
forward and backward prefetch) and frees it after; the root unit (embeddings, final norm,
output layer) is gathered before the embedding's forward and kept through the backward.
FSDP2 (``parallelism.fsdp``) reduces each layer's gradients once the previous layer's
reduce-scatter is done and the root's last (:meth:`ShardedParamOps._reduce_in_turn`,
:meth:`ShardedParamOps._reduce_root_last`); DeepSpeed's ZeRO-3 without the waits.

Under a pipeline (:func:`~workloads.cost.traffic.keeps_params_gathered`: torchtitan's
``reshard_after_forward: False`` with PP) only each chunk's first forward gathers: its
stage's root first (FSDP2's root pre-forward hook gathers before any layer's), then its
layers with the same prefetch; every later pass finds them gathered.  The gradients are
reduce-scattered once, after the chunk's last backward (:meth:`ShardedParamOps.
_reduce_after_backward`).

With HSDP (``parallelism.dp_replicate``, :mod:`workloads.strategy.sharding`) the gathers
and reduce-scatters run within each shard group, and each reduced shard is all-reduced
across the replicate groups after its reduce-scatter, on the same stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim_gpu.workloads.cost.traffic import (
    gathers_layer_params,
    layer_gather_bytes,
    reduces_in_buckets,
    stage_param_bytes,
)
from distsim_gpu.workloads.iteration.ops import Collective, Op, Wait
from distsim_gpu.workloads.strategy import schedule as pipeline
from distsim_gpu.workloads.strategy.sharding import shard_ranks

__all__ = ["ShardUnit", "ShardedParamOps"]


@dataclass(frozen=True, slots=True)
class ShardUnit:
    """One FSDP unit's gradients to reduce: a layer's, or the stage's ``root`` unit's."""

    size_bytes: float
    label: str
    root: bool


class ShardedParamOps:
    """The gathers of sharded parameters (module docstring), for a ``StreamBuilder``."""

    # The builder's state and helpers these methods use (streams.StreamBuilder sets them).
    model: Any
    parallel: Any
    training: Any
    chunks: Any
    kept: bool  # parameters kept gathered (a pipeline's stages)
    entries: Any  # virtual stages where micro-batches enter (the embedding's)
    exits: Any  # and where they leave (the output layer's)

    def _gather_root(self, ops: list[Op], vs: int) -> None:
        """ZeRO-3/FSDP sharded throughout: what no layer holds (embeddings, final norm,
        output layer: FSDP's root unit) gathered before the embedding's forward and, as
        FSDP keeps its root unsharded after the forward, kept through the backward."""
        par = self.parallel
        if (par.dp_cp == 1 or not gathers_layer_params(par) or reduces_in_buckets(par)
                or self.kept):  # kept gathered: :meth:`_gather_stage_root`'s
            return
        size = stage_param_bytes(self.model, par, self.training, pipeline.stage_of(
            vs, par.pp, par.schedule)) - sum(map(self._param_bytes, range(*self.chunks[vs])))
        ops += [self._shard_dp("all_gather", size, "root gather params", "root"), Wait("root")]

    def _gather_stage_root(self, ops: list[Op], vs: int) -> None:
        """Parameters kept gathered (a pipeline's stages): the stage's own root — the
        embeddings on the first stage, the final norm and output layer on the last, none
        between — gathered at the start of the forward of the chunk ``vs`` that holds it
        (it is gathered once: its first forward)."""
        par = self.parallel
        if par.dp_cp == 1 or (vs not in self.entries and vs not in self.exits):
            return
        stage = pipeline.stage_of(vs, par.pp, par.schedule)
        layers = sum(self._param_bytes(layer)
                     for chunk in range(par.interleave)
                     for layer in range(*self.chunks[pipeline.virtual_stage(
                         stage, chunk, par.pp, par.schedule)]))
        size = stage_param_bytes(self.model, par, self.training, stage) - layers
        if size > 0:
            ops += [self._shard_dp("all_gather", size, "root gather params", "root"),
                    Wait("root")]

    def _gather_params(self, ops: list[Op], order: list[int], position: int) -> None:
        """ZeRO-3/FSDP: the first layer's all-gather, the next one's as prefetch, then wait.

        The gather of layer ``order[position + 1]`` is launched before layer
        ``order[position]`` computes, so it overlaps that compute (FSDP's forward and
        backward prefetch).
        """
        if self.parallel.dp_cp == 1:
            return
        layer = order[position]
        if position == 0:
            ops.append(self._shard_dp("all_gather", self._param_bytes(layer),
                                      f"L{layer} gather params", f"L{layer}"))
        if position + 1 < len(order):
            ahead = order[position + 1]
            ops.append(self._shard_dp("all_gather", self._param_bytes(ahead),
                                      f"L{ahead} gather params", f"L{ahead}"))
        ops.append(Wait(f"L{layer}"))

    def _shard_dp(self, op: str, size_bytes: float, label: str, handle: str | None = None,
                  ) -> Collective:
        """An asynchronous ZeRO-3/FSDP call: among the data-parallel group, or with HSDP
        among the shard group (``dp_shard``)."""
        group = "dp_shard" if self.parallel.dp_replicate > 1 else "dp"
        return Collective(op, size_bytes, label, group=group, blocking=False, handle=handle)

    def _reduce_shard(self, ops: list[Op], size_bytes: float, label: str,
                      handle: str | None = None) -> None:
        """A ZeRO-3/FSDP gradient reduce-scatter of ``size_bytes`` (the GPU's whole
        gradients of a unit) and, with HSDP, the all-reduce of the reduced shard across the
        replicate groups after it (FSDP2's HSDP: reduce-scatter, then all-reduce).  With a
        ``handle``: the reduce-scatter's, and ``handle`` + `` across replicas`` the
        all-reduce's.  FSDP2's ``foreach_reduce`` issues the all-reduce on its
        ``all_reduce_stream``; here it shares the reduce-scatters' stream, so the next
        reduce-scatter queues behind it (a known difference, HSDP only)."""
        ops.append(self._shard_dp("reduce_scatter", size_bytes, label, handle))
        if self.parallel.dp_replicate > 1:
            ops.append(Collective("all_reduce", size_bytes / shard_ranks(self.parallel),
                                  f"{label} across replicas", group="dp_replicate",
                                  blocking=False,
                                  handle=handle and f"{handle} across replicas"))

    def _reduce_unit(self, ops: list[Op], units: list[ShardUnit], size_bytes: float,
                     label: str, root: bool = False) -> None:
        """A unit's gradient reduction where its backward ends (``root``: the stage's root
        unit's, not a layer's).  Kept gathered (a pipeline's stages), noted in ``units``
        for :meth:`_reduce_after_backward`; FSDP2 without a pipeline, a layer's launched
        in turn (:meth:`_reduce_in_turn`) and the root's noted for the end."""
        unit = ShardUnit(size_bytes, label, root)
        if self.kept or (root and self._in_turn()):
            units.append(unit)
        elif self._in_turn():
            self._reduce_in_turn(ops, units, unit)
        else:
            self._reduce_shard(ops, size_bytes, label)

    def _in_turn(self) -> bool:
        """FSDP2 (``parallelism.fsdp``; not DeepSpeed's ZeRO-3 nor a per-operator plan):
        one reduce-scatter in flight, the root's reduced at the end of the backward."""
        return bool(self.parallel.fsdp) and self.parallel.operator_sharding is None

    def _reduce_in_turn(self, ops: list[Op], units: list[ShardUnit], unit: ShardUnit) -> None:
        """FSDP2 without a pipeline: a layer's reduce-scatter once its backward is done,
        after the compute stream has waited for the previous unit's.

        FSDP2's ``FSDPParamGroup.post_backward`` (``_fsdp_param_group.py``) makes the
        current (compute) stream wait for ``comm_ctx.reduce_scatter_state.event`` — the
        previous unit's reduce-scatter — before it issues its own on the reduce-scatter
        stream, so the next layer's backward (and the all-gather it prefetches, gated by
        its copy-out on the compute stream) waits too whenever a reduce-scatter outlasts
        a layer's backward.  ``units``: this backward's units, those launched (not root)
        in order."""
        launched = [done for done in units if not done.root]
        if launched:
            ops.append(Wait(launched[-1].label))
        self._reduce_shard(ops, unit.size_bytes, unit.label, handle=unit.label)
        units.append(unit)

    def _reduce_root_last(self, ops: list[Op], units: list[ShardUnit]) -> None:
        """FSDP2 without a pipeline, the end of a backward: the root unit (embeddings,
        final norm and output layer, one FSDP group in torchtitan's ``apply_fsdp`` until
        July 2025: ``fully_shard(model)`` over what the blocks leave) is reduced in one
        reduce-scatter by the root's final callback (``_fsdp_state.py``,
        ``_root_post_backward_final_callback``: its forward input, the token ids, needs no
        gradient, so no hook reduces it earlier), after the last layer's; the callback then
        waits for that reduce-scatter and ``finalize_backward`` for every unit's reduction
        (with HSDP, the all-reduces across replicas)."""
        launched = [unit for unit in units if not unit.root]
        roots = [unit for unit in units if unit.root]
        if roots:
            self._reduce_in_turn(ops, units, ShardUnit(
                sum(unit.size_bytes for unit in roots), "root reduce grads", True))
            launched.append(units[-1])
        if not launched:
            return
        ops.append(Wait(launched[-1].label))
        if self.parallel.dp_replicate > 1:
            ops += [Wait(f"{unit.label} across replicas") for unit in launched]

    def _reduce_after_backward(self, ops: list[Op], units: list[ShardUnit]) -> None:
        """Kept gathered: the last micro-batch's reductions of a chunk, after its backward.

        torch.distributed.pipelining runs every backward of an FSDP2 stage without
        gradient sync; after the last micro-batch's it calls each FSDP unit's
        ``post_backward`` — the stage's root (embeddings, or final norm and output layer)
        first, then its layers in forward order (``pipelining/stage.py``,
        ``backward_maybe_with_nosync``; since PyTorch 2.7 the schedule's ``REDUCE_GRAD``
        action after the last backward).  FSDP2 keeps one reduce-scatter in flight: each
        unit's ``post_backward`` first makes the compute stream wait for the previous
        unit's, and the root's final callback waits for the last.  So the chunk's compute
        stream — and the input gradient it then sends to the stage before — waits for all
        of them: the reductions do not overlap this backward.  Not kept gathered (FSDP2
        without a pipeline): the root's, then the waits (:meth:`_reduce_root_last`)."""
        if not self.kept:
            if self._in_turn():
                self._reduce_root_last(ops, units)
            return
        # ``units`` come in backward order: the root first, then layers in forward order.
        ordered = ([unit for unit in units if unit.root]
                   + [unit for unit in reversed(units) if not unit.root])
        for position, unit in enumerate(ordered):
            if position:
                ops.append(Wait(ordered[position - 1].label))
            self._reduce_shard(ops, unit.size_bytes, unit.label, handle=unit.label)
        if ordered:
            ops.append(Wait(ordered[-1].label))
        if self.parallel.dp_replicate > 1:  # the final callback waits for every unit's
            ops += [Wait(f"{unit.label} across replicas") for unit in ordered]

    def _param_bytes(self, layer: int) -> float:
        return layer_gather_bytes(self.model, layer, self.parallel, self.training)
