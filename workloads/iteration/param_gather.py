"""When the distributed optimizer's overlapped parameter gathers are dispatched and waited.

With ``parallelism.overlap_param_gather`` (Megatron-Core's ``DistributedDataParallel``,
``megatron/core/distributed/``) the previous step's updated parameters are all-gathered
during the next forward, bucket group by bucket group, and a module's forward pre-hook
waits for its bucket (``finish_param_sync``).  Who dispatches a gather depends on
``align_param_gather``:

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

:class:`ParamWaits` places both in a chunk's first forward; :func:`aligned_launches`
says where the schedule dispatches.
"""

from __future__ import annotations

from collections.abc import Sequence

from distsim_gpu.workloads.iteration.ops import Collective, Op, Wait

__all__ = ["ParamBuckets", "ParamWaits", "aligned_launches", "param_gather_op"]

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
