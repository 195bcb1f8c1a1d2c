"""Running a tensor-parallel collective pipelined with its GEMM when it shares its links.

A :class:`~workloads.iteration.ops.TpOverlap` whose collective is exclusive is folded into
its pass in closed form (:func:`workloads.iteration.ops.fuse`); otherwise (pipeline sends
or data-parallel collectives may share its links) it runs here, chunk by chunk, as flows:
``splits`` collectives of ``1/splits`` of the bytes one after another, beside the GEMM's
chunks, the collective's first chunk before the GEMM (all-gather) or its last after it
(reduce-scatter).  Uncontended this is :func:`workloads.cost.tp_overlap.pipelined_pair_s`
exactly: ``c`` + (``n − 1`` chunks of each side at once) + ``g``; a bulk pair runs its
collective whole beside the GEMM (:func:`workloads.cost.tp_overlap.bulk_pair_s`).

The accounting: the GEMM's time is compute, the rest of the pair exposed communication;
each chunk's transfer is a communication interval.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy
from distsim_gpu.workloads.iteration.ops import TpOverlap
from distsim_gpu.workloads.iteration.timeline import RankGroup
from distsim_gpu.workloads.strategy.dimensions import peer_group

__all__ = ["run_tp_overlap"]

#: Starts one TP collective of a rank group: (group, op, size_bytes) -> its done event.
TpCall = Callable[[RankGroup, str, float], simpy.Event]

_TP = peer_group("tp")


def run_tp_overlap(env: simpy.Environment, tp_call: TpCall, tracer: Any, group: RankGroup,
                   op: TpOverlap) -> Generator[simpy.Event, Any, None]:
    """Run ``op`` for ``group`` (module docstring); a straggler slows the GEMM only."""
    start = env.now
    splits = op.splits
    size = (op.comm.size_bytes or 0.0) / splits
    kind = op.comm.op or ""
    chunk_s = op.stretched_gemm_s * group.slowdown / splits

    def transfers(count: int) -> Generator[simpy.Event, Any, None]:
        for _ in range(count):
            began = env.now
            yield tp_call(group, kind, size)
            group.comm_intervals.append((began, env.now))
            tracer.span(group.name, _TP.comm_kind, op.comm.label, began, env.now,
                        collective=kind)

    def middle() -> simpy.Event:
        return env.all_of([env.process(transfers(splits - 1)),
                           env.timeout((splits - 1) * chunk_s)])

    if op.bulk:  # the whole collective beside the whole GEMM
        yield env.all_of([env.process(transfers(1)), env.timeout(chunk_s)])
    elif op.comm_first:
        yield from transfers(1)
        yield middle()
        yield env.timeout(chunk_s)
    else:
        yield env.timeout(chunk_s)
        yield middle()
        yield from transfers(1)
    compute_s = splits * chunk_s
    exposed_s = max(env.now - start - compute_s, 0.0)
    group.compute_s += compute_s
    group.exposed_s += exposed_s
    if group.compute_intervals is not None:  # the GEMM's span, as the trace draws it
        group.compute_intervals.extend((env.now - compute_s, env.now))
    # On the critical path: the exposed share as TP communication, then the GEMM.
    if exposed_s > 0:
        group.path.append((start, start + exposed_s, _TP.comm_kind, op.label, None))
    group.path.append((start + exposed_s, env.now, "compute", op.label, None))
    if tracer.enabled:
        # As long as the GEMM ran (what a cost table read back from the trace needs).
        tracer.span(group.name, "compute", op.gemm.label, env.now - compute_s, env.now,
                    **op.gemm.trace_args())
