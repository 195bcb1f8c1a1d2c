"""The SMs an NCCL collective takes from the compute it overlaps.

An NCCL collective runs as one kernel of one CTA a channel, and a channel's CTA holds its
SM alone for as long as the kernel runs — waiting for late peers included: NCCL's
kernels use every register of the SM, so compute kernels are not placed beside them
(the NCCL maintainers, NVIDIA/nccl#689).  A GEMM issued while a data-parallel reduction
is in flight therefore runs on the SMs the collective leaves, and takes
``compute_sms / (compute_sms − held)`` of its time alone; a compute-bound kernel slows in
proportion, and the iteration's compute does too wherever the framework overlaps
collectives with it.

What holds SMs here: the collectives a rank group runs on a communication stream of its
own — data-parallel gathers and reductions (one kernel at a time on each stream), and the
expert all-to-alls that ``moe_overlap`` / ``fb_overlap`` put on theirs — each
``communication.nccl_sms`` SMs while the stream has a call not yet done.  DeepEP's
kernels are not counted here: their SMs (``compute.comm_sms``) are taken from compute for
the whole run.  Point-to-point sends (the pipeline's, a context-parallel ring's) run on a
channel or two a peer (``NCCL_NCHANNELS_PER_NET_PEER``, 2 by default) and are not
counted, nor are userbuffers' TP overlaps, whose GEMMs run on an SM share of their own
(:mod:`workloads.cost.tp_overlap`; ``Compute.own_sms``) and are not slowed here.

Compute runs at the pace the calls in flight leave it and speeds up as each ends
(:meth:`NcclSmShare.run`), step by step through a fused op's compute and closed-form
collectives; no call starts while a rank group computes, since its own stream launches
them between ops, so the pace is exact.  Memory-bound kernels, which need fewer SMs to
reach HBM's rate, are slowed as compute-bound ones are: a bound from above on their
share, small beside the GEMMs'.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

import simpy
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute.roofline import roofline_behind
from distsim_gpu.workloads.iteration.ops import Collective, Fused
from distsim_gpu.workloads.strategy.parallel import ParallelConfig

__all__ = ["NcclSmShare", "nccl_streams"]


def nccl_streams(parallel: ParallelConfig, comm: CommParams) -> tuple[str, ...]:
    """The communication streams of a run of ``parallel`` whose calls are NCCL collectives
    overlapped with compute (:meth:`workloads.iteration.simulator.IterationSimulator.
    _on_stream`'s names): the data-parallel gathers and reductions (among replicas, or an
    expert group's data-parallel ranks), and the expert all-to-alls when ``moe_overlap`` or
    ``fb_overlap`` put them on their own stream and they are NCCL's, not DeepEP's."""
    streams: tuple[str, ...] = ()
    if parallel.dp_cp > 1 or parallel.ep > 1:
        streams = ("gather", "reduce")
    if (parallel.ep > 1 and (parallel.moe_overlap or parallel.fb_overlap)
            and comm.all_to_all != "deepep"):
        streams = (*streams, "ep")
    return streams


class NcclSmShare:
    """How much longer a rank group's compute takes while its NCCL streams have calls in
    flight: ``scale(streams)`` is ``1`` with none, ``compute_sms / (compute_sms − k·n)``
    with ``k`` of them (``n`` = ``communication.nccl_sms``).

    ``costs``: the run's cost model (its roofline gives the GPU's compute SMs; a cost
    table without one leaves compute unscaled); ``comm``: the collectives' parameters."""

    __slots__ = ("scales", "streams")

    def __init__(self, costs: object, comm: CommParams, parallel: ParallelConfig) -> None:
        roofline = roofline_behind(costs)
        streams = nccl_streams(parallel, comm)
        if roofline is None or not comm.nccl_sms or not streams:
            self.streams: tuple[str, ...] = ()
            self.scales: tuple[float, ...] = (1.0,)
            return
        sms = roofline.compute_sms
        if len(streams) * comm.nccl_sms >= sms:
            raise ConfigError(
                f"{len(streams)} NCCL collectives of {comm.nccl_sms} SMs each would hold "
                f"every one of the {sms} SMs {roofline.gpu.name} has for compute",
                key="communication.nccl_sms",
                hint=f"at most {(sms - 1) // len(streams)} (NCCL uses 16 on a DGX node "
                "with 8 NICs, 2 with one NIC)")
        self.streams = streams
        self.scales = tuple(sms / (sms - held * comm.nccl_sms)
                            for held in range(len(streams) + 1))

    def busy(self, streams: Mapping[str, Any]) -> list[Any]:
        """The last calls of a group's NCCL streams that have not ended (``streams[name]``:
        a call with a ``done`` event; one in flight on each stream while its last has not
        ended, the ones before it having ended or being the one in flight)."""
        return [call for name in self.streams
                if (call := streams.get(name)) is not None and not call.done.triggered]

    def scale(self, streams: Mapping[str, Any]) -> float:
        """The factor on compute that starts now, given a group's streams' last calls."""
        return self.scales[len(self.busy(streams))]

    def run(self, env: simpy.Environment, streams: Mapping[str, Any], op: Fused,
            slowdown: float = 1.0) -> Generator[simpy.Event, Any, float]:
        """Run ``op``'s steps in order, its compute ``slowdown`` times as long as alone;
        the seconds its compute took.

        Compute runs at ``1/scales[k]`` of its pace while ``k`` of the group's calls are
        in flight and speeds up as each ends; no call starts meanwhile (only the group's
        own stream launches them, and it is busy with ``op``), so the pace is exact.  A
        collective step (closed form) takes its own time.  With no call in flight the op
        is one timeout, as it always was."""
        busy = self.busy(streams)
        if not busy:
            yield env.timeout(op.slowed_compute_s(slowdown) + op.comm_s)
            return op.slowed_compute_s(slowdown)
        return (yield from self.run_beside(env, busy, op, slowdown))

    def run_beside(self, env: simpy.Environment, busy: list[Any], op: Fused,
                   slowdown: float = 1.0) -> Generator[simpy.Event, Any, float]:
        """:meth:`run` where ``busy`` (:meth:`busy`'s answer, not empty) are in flight: a
        caller that found the streams quiet runs the op as one timeout itself, without
        this generator (a million fused ops in a large MoE run)."""
        computed = 0.0
        for step, seconds in zip(op.steps, op.durations_s, strict=True):
            if isinstance(step, Collective):
                yield env.timeout(seconds)
                continue
            if step.own_sms or step.host:  # SMs of its own (a userbuffers GEMM), or none
                took = seconds if step.host else seconds * slowdown  # the host's: unslowed
                yield env.timeout(took)
                computed += took
                continue
            began = env.now
            yield from self._compute(env, busy, seconds * slowdown)
            computed += env.now - began
            busy = [call for call in busy if not call.done.triggered]
        return computed

    def _compute(self, env: simpy.Environment, busy: list[Any],
                 compute_s: float) -> Generator[simpy.Event, Any, None]:
        """``compute_s`` of compute beside the calls ``busy`` (in flight when it starts)."""
        remaining = compute_s
        while busy and remaining > 0.0:
            scale, since = self.scales[len(busy)], env.now
            finish = env.timeout(remaining * scale)
            yield env.any_of([finish, *(call.done for call in busy)])
            if finish.processed:
                return
            remaining = max(0.0, remaining - (env.now - since) / scale)
            busy = [call for call in busy if not call.done.triggered]
        if remaining > 0.0:
            yield env.timeout(remaining)
