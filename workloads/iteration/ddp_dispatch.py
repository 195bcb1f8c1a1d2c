"""When Megatron-Core's DDP dispatches its parameter gathers and gradient reductions.

**Parameter gathers.**  With ``parallelism.overlap_param_gather`` (Megatron-Core's
``DistributedDataParallel``, ``megatron/core/distributed/``) the previous step's updated
parameters are all-gathered during the next forward, bucket group by bucket group, and a
module's forward pre-hook waits for its bucket (``finish_param_sync``).  Who dispatches
them depends on ``align_param_gather``:

* **off** (Megatron-LM's setting without the interleaved schedule, NeMo's without
  virtual stages): nothing is dispatched before the forward.  A chunk's first bucket is
  dispatched by the pre-hook that needs it, and waited for at once — exposed — and each
  wait dispatches the next bucket (``next_param_gather_bucket_group``): one bucket in
  flight ahead of the forward;
* **on** (interleaved only): the schedule dispatches every bucket of a chunk at once
  (``param_sync_func``, ``start_param_sync``) — chunks 0 and 1 at its start, chunk
  ``c ≥ 2`` at the forward whose virtual micro-batch plus the stage's rank is the first
  micro-batch of chunk ``c − 1`` (``schedules.py``: the same moment on every stage), so
  ``(c − 1)·pp − stage`` forwards in — and the pre-hooks only wait.

**Gradient reductions** under ``align_grad_reduce`` (interleaved only; Megatron-LM's
``--align-grad-reduce`` and NeMo's ``grad_sync_func``, both on by default): every
backward runs without gradient sync, so no bucket goes out during a chunk's last
backward; after backward ``k`` the schedule dispatches all of chunk ``c``'s buckets at once
where backward ``k − stage`` is chunk ``c``'s last micro-batch — the same moment on every
stage — and after the last backward whatever chunk is left (``schedules.py``,
``backward_step_helper_postprocess``).

:class:`ParamWaits` places the waits (and lazy dispatches) in a chunk's first forward;
:class:`Dispatch` what the schedule dispatches between passes; :class:`DdpOps` builds
both for a stage's stream (:class:`~workloads.iteration.streams.StreamBuilder`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from distsim_gpu.workloads.cost.traffic import (
    activation_bytes_per_element,
    aligns_grad_reduce,
    aligns_param_gather,
    grad_bytes_per_element,
    gradient_reduce_op,
    reduces_every_microbatch,
    reduces_in_buckets,
    stage_param_bytes,
)
from distsim_gpu.workloads.iteration.ops import Collective, Op, Wait
from distsim_gpu.workloads.strategy.fb_pairs import Pair, Unit
from distsim_gpu.workloads.strategy.schedule import virtual_stage

__all__ = ["DdpOps", "Dispatch", "ParamBuckets", "ParamWaits", "aligned_launches",
           "param_gather_op", "reduce_points"]

#: A chunk's parameter buckets in the order its forward needs them: (the layer before which
#: the forward waits for it, None: the chunk's start; bytes per GPU; handle).
ParamBuckets = tuple[tuple[int | None, float, str], ...]


def param_gather_op(bucket: tuple[int | None, float, str]) -> Collective:
    """The data-parallel all-gather of one parameter bucket, on the communication stream."""
    _at, size_bytes, handle = bucket
    return Collective("all_gather", size_bytes, f"gather params {handle}", group="dp",
                      blocking=False, handle=handle)


class ParamWaits:
    """A chunk's first forward waiting for its parameter ``buckets`` (module docstring);
    ``lazy``: the forward dispatches them too, each wait the next bucket."""

    def __init__(self, buckets: ParamBuckets, lazy: bool) -> None:
        self.buckets = buckets
        self.lazy = lazy
        self._index = {at: n for n, (at, _size, _handle) in enumerate(buckets)}

    def before(self, ops: list[Op], at: int | None) -> None:
        """Append to ``ops`` what comes before layer ``at`` (None: the chunk's start)."""
        n = self._index.get(at)
        if n is None:
            return
        if self.lazy and n == 0:  # the first pre-hook dispatches its own bucket
            ops.append(param_gather_op(self.buckets[0]))
        ops.append(Wait(self.buckets[n][2]))
        if self.lazy and n + 1 < len(self.buckets):
            ops.append(param_gather_op(self.buckets[n + 1]))


def aligned_launches(stage: int, pp: int, chunks: Sequence[int]) -> dict[int, int]:
    """Under ``align_param_gather``: for each of ``chunks`` after the first two, the number
    of forwards stage ``stage`` runs before the schedule dispatches its gathers
    (``(c − 1)·pp − stage``; module docstring) -> the chunk; chunks 0 and 1 go at the
    start."""
    return {(chunk - 1) * pp - stage: chunk for chunk in chunks if chunk >= 2}


def reduce_points(stage: int, backwards: Sequence[tuple[int, int]],
                  last_microbatch: int) -> dict[int, int]:
    """Under ``align_grad_reduce``: after which backward (by count, from 0) stage
    ``stage`` dispatches each chunk's reductions -> the chunk, from the schedule's
    ``backwards`` as ``(micro-batch, chunk)`` in order (the same table on every stage): the
    ``k`` whose ``k − stage``-th backward is the chunk's last micro-batch, where the stage
    runs that many; the chunks left go after its last backward (module docstring)."""
    return {k + stage: chunk for k, (microbatch, chunk) in enumerate(backwards)
            if microbatch == last_microbatch and k + stage < len(backwards)}


@dataclass(slots=True)
class Dispatch:
    """What the schedule dispatches on one stage between passes (module docstring): ops
    at its start, before the ``n``-th forward and after the ``n``-th backward (by count),
    and after its last pass; each taken once."""

    start: tuple[Op, ...] = ()
    before_forward: Mapping[int, tuple[Op, ...]] = field(default_factory=dict)
    after_backward: Mapping[int, tuple[Op, ...]] = field(default_factory=dict)
    end: tuple[Op, ...] = ()
    _forwards: int = 0
    _backwards: int = 0

    def forward(self) -> tuple[Op, ...]:
        """The ops to dispatch before the next forward."""
        ops = self.before_forward.get(self._forwards, ())
        self._forwards += 1
        return ops

    def backward(self) -> tuple[Op, ...]:
        """The ops to dispatch after the next backward."""
        ops = self.after_backward.get(self._backwards, ())
        self._backwards += 1
        return ops


class DdpOps:
    """Megatron-Core DDP's dispatch (module docstring) for a ``StreamBuilder``: each
    chunk's parameter buckets, what the schedule dispatches between passes, and the
    gradient buckets a backward dispatches itself."""

    # The builder's state and helpers these methods use (streams.StreamBuilder sets them).
    model: Any
    parallel: Any
    training: Any
    chunks: Any
    param_gather: bool
    _buckets: Any
    _async_dp: Any

    def _dispatch_plan(self, stage: int, program: Sequence[Unit], last_mb: int,
                       ) -> tuple[dict[int, ParamBuckets], Dispatch]:
        """``overlap_param_gather`` in steady state: the previous step's updated
        parameters gathered by bucket during the forward (:meth:`_param_gathers`, by
        chunk; each chunk's first forward dispatches its own, one bucket ahead, unless
        aligned), and what the schedule dispatches between passes: aligned gathers (chunks
        0 and 1 at its start) and aligned gradient reductions (:mod:`.ddp_dispatch`)."""
        par = self.parallel
        gathers = self._param_gathers(stage) if self.param_gather else {}
        start: tuple[Op, ...] = ()
        before: dict[int, tuple[Op, ...]] = {}
        if gathers and aligns_param_gather(par):
            start = tuple(param_gather_op(b) for chunk in (0, 1) for b in gathers.get(chunk, ()))
            before = {at: tuple(map(param_gather_op, gathers[chunk]))
                      for at, chunk in aligned_launches(stage, par.pp, gathers).items()}
        if not self.grad_aligned:
            return gathers, Dispatch(start, before)
        backwards = [(mb, chunk) for unit in program
                     for pass_, mb, chunk in ((unit.forward, unit.backward)
                                              if isinstance(unit, Pair) else (unit,))
                     if pass_ == "B"]
        points = reduce_points(stage, backwards, last_mb)
        after = {k: self._chunk_reductions(stage, chunk) for k, chunk in points.items()}
        end = tuple(op for chunk in range(par.interleave) if chunk not in points.values()
                    for op in self._chunk_reductions(stage, chunk))
        return gathers, Dispatch(start, before, after, end)

    @property
    def grad_aligned(self) -> bool:
        """Whether the schedule dispatches each chunk's gradient reductions
        (``align_grad_reduce``, :mod:`.ddp_dispatch`), not its last backward."""
        par = self.parallel
        return (aligns_grad_reduce(par) and par.dp_cp > 1 and reduces_in_buckets(par)
                and not reduces_every_microbatch(par))

    def _chunk_reductions(self, stage: int, chunk: int) -> tuple[Op, ...]:
        """All of ``chunk``'s gradient buckets on ``stage``, dispatched at once, in the
        order its backward fills them."""
        vs = virtual_stage(stage, chunk, self.parallel.pp, self.parallel.schedule)
        order = list(reversed(range(*self.chunks[vs])))
        buckets = self._buckets(order, vs)
        return tuple(self._bucket_reduction(buckets[p], order[p - 1], chunk)
                     for p in sorted(p for p in buckets if p is not None)) + (
            (self._bucket_reduction(buckets[None], None, chunk),) if None in buckets else ())

    def _bucket_reduction(self, size_bytes: float, layer: int | None, chunk: int) -> Op:
        """One gradient bucket's reduction on the data-parallel stream: the bucket that
        closes after ``layer`` (backward order), or ``chunk``'s end-of-pass bucket (None)."""
        label = f"grads of chunk {chunk}" if layer is None else f"grads to L{layer}"
        return self._async_dp(gradient_reduce_op(self.parallel), size_bytes, label)

    def _pass_buckets(self, order: list[int], vs: int, last: bool) -> dict[int | None, float]:
        """The gradient buckets a backward of virtual stage ``vs`` dispatches as it fills
        them: the last micro-batch's (ZeRO-2: every one's), unless the schedule dispatches
        them (:attr:`grad_aligned`)."""
        par = self.parallel
        if not (last and par.dp_cp > 1 and reduces_in_buckets(par)) or self.grad_aligned:
            return {}
        return self._buckets(order, vs)

    def _param_gathers(self, stage: int) -> dict[int, ParamBuckets]:
        """``overlap_param_gather``: per model chunk of ``stage``, the distributed
        optimizer's parameter buckets — its gradient buckets, at the parameters' width — in
        the order the forward needs them.  What the buckets leave out of the stage's
        parameters (norms, position and output embeddings, narrower layer groups) joins
        the bucket gathered first, or on the last stage the one gathered last (the output
        layer is used last)."""
        par = self.parallel
        width = (activation_bytes_per_element(self.training.precision)
                 / grad_bytes_per_element(par.grad_reduce_precision))
        plan: dict[int, list[list[Any]]] = {}
        for chunk in range(par.interleave):
            vs = virtual_stage(stage, chunk, par.pp, par.schedule)
            order = list(reversed(range(*self.chunks[vs])))
            buckets = self._buckets(order, vs)
            # The end-of-pass bucket (None) holds the forward's first layers.
            ahead = sorted(buckets, key=lambda p: (p is not None, -(p or 0)))
            plan[chunk] = [[None if p is None else order[p - 1], buckets[p] * width, ""]
                           for p in ahead]
        rest = stage_param_bytes(self.model, par, self.training, stage) - sum(
            b[1] for buckets in plan.values() for b in buckets)
        if not plan[0]:
            plan[0].append([None, 0.0, ""])
        target = (plan[par.interleave - 1][-1] if stage == par.pp - 1 and par.pp > 1
                  and plan[par.interleave - 1] else plan[0][0])
        target[1] += max(rest, 0.0)
        return {chunk: tuple((at, size, f"params {chunk}.{n}")
                             for n, (at, size, _h) in enumerate(buckets))
                for chunk, buckets in plan.items() if buckets}
