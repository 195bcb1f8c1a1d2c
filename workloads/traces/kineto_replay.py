"""Replay a measured job from its profiler traces, with collectives re-simulated, and
compare: each step's time per rank, measured and predicted, and each collective's transfer.

:func:`replay_traces` checks the traces (one per rank, step boundaries, shared steps),
removes the ranks' clock skew, builds each step's graph from the traces
(:mod:`workloads.traces.kineto_graph`, whose docstring says how) and runs it on the
cluster's network model (:mod:`workloads.traces.replay`).  ``mode="measured"`` replays with
measured transfers instead of simulated ones — the check that the graph reproduces the
trace.  A replayed step's time is :func:`predicted_step_s`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.records import ProfilerStep, RankTrace
from distsim_gpu.measured.summary import COMM_KERNEL_NAMES
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.intervals import union_length
from distsim_gpu.simcore.trace import Span
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.traces.kineto_graph import (
    build_rank_step,
    clock_offsets,
    match_collectives,
)
from distsim_gpu.workloads.traces.replay import (
    RankStep,
    Rendezvous,
    Replay,
    RuntimeCall,
    place_ranks,
)

__all__ = [
    "CollectiveResult",
    "RankStepResult",
    "ReplayResult",
    "StepResult",
    "check_one_job",
    "predicted_step_s",
    "replay_traces",
]


@dataclass(frozen=True, slots=True)
class CollectiveResult:
    """One collective call, matched across the present ranks of its group."""

    step: int
    op: str
    group: tuple[int, ...]
    index: int  # its order among the group's calls in the step
    size_bytes: int | None
    simulated: bool  # False: the trace lacked its size or kind; measured transfer kept
    measured_transfer_s: float
    predicted_transfer_s: float
    measured_wait_s: dict[int, float]
    predicted_wait_s: dict[int, float]

    @property
    def error_pct(self) -> float:
        return _error_pct(self.predicted_transfer_s, self.measured_transfer_s)


@dataclass(frozen=True, slots=True)
class RankStepResult:
    """One rank's step, measured and predicted (seconds; busy times are interval unions)."""

    rank: int
    step: int
    measured_s: float
    predicted_s: float
    measured_compute_s: float
    predicted_compute_s: float
    measured_communication_s: float
    predicted_communication_s: float
    measured_idle_s: float
    predicted_idle_s: float
    measured_comm_wait_s: float
    predicted_comm_wait_s: float

    @property
    def error_pct(self) -> float:
        return _error_pct(self.predicted_s, self.measured_s)


@dataclass(frozen=True, slots=True)
class StepResult:
    """One profiler step of the job: the slowest rank sets its time."""

    step: int
    measured_s: float
    predicted_s: float
    ranks: tuple[RankStepResult, ...]
    collectives: tuple[CollectiveResult, ...]

    @property
    def error_pct(self) -> float:
        return _error_pct(self.predicted_s, self.measured_s)


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The replay of every common profiler step, with what was assumed along the way."""

    mode: str
    ranks: tuple[int, ...]
    world_size: int
    steps: tuple[StepResult, ...]
    clock_offsets_s: dict[int, float]
    notes: tuple[str, ...]
    # Every replayed op as measured and as replayed, for the side-by-side Perfetto trace:
    # processes ``rank r · measured`` / ``rank r · replayed``, threads the streams, times
    # from the first step's base; rank by rank, each in step order.
    measured_spans: tuple[Span, ...]
    predicted_spans: tuple[Span, ...]

    @property
    def measured_s(self) -> float:
        return statistics.fmean(s.measured_s for s in self.steps)

    @property
    def predicted_s(self) -> float:
        return statistics.fmean(s.predicted_s for s in self.steps)

    @property
    def error_pct(self) -> float:
        return _error_pct(self.predicted_s, self.measured_s)


def _error_pct(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured * 100.0 if measured > 0 else math.nan


# --------------------------------------------------------------------------- driver


def predicted_step_s(measured_s: float, cpu_shift_s: float, gpu_shift_s: float) -> float:
    """A rank's replayed step time from its measured ``ProfilerStep`` length.

    The step is done when both its sides are: the CPU side (the annotation's end) and the
    GPU side (the last end of the ops the step launched).  Each end moves in the replay by
    ``cpu_shift_s`` and ``gpu_shift_s``; the step grows (or shrinks) by the later of the
    two.  Measured steps take the annotation as it is: in steady state a CPU that runs
    ahead is held back by the GPU's queue, so the annotation's length is the period between
    steps (on the pipelined TorchRec trace of the corpus it matches the period of the last
    stream's ends to within 1 ms), while the span of one step's GPU work can be far longer.
    """
    return measured_s + max(cpu_shift_s, gpu_shift_s)


def _rank_result(rs: RankStep, number: int, step_end_sim_s: float) -> RankStepResult:
    start, end = rs.t(rs.step.start_s), rs.t(rs.step.end_s)
    measured = rs.step.duration_s
    gpu_shift = (max(node.sim_end_s for node in rs.ops) - max(node.end_s for node in rs.ops)
                 if rs.ops else 0.0)
    predicted = predicted_step_s(measured, step_end_sim_s - end, gpu_shift)

    def busy(kind: str | None, replayed: bool) -> float:
        """Busy time of ``kind`` ops (:func:`_class_of`; None: every op) within the step's
        window (measured or replayed)."""
        stop = start + (predicted if replayed else measured)
        # Measured: each op its own duration from its start (its end in epoch seconds
        # is rounded to ~0.24 µs, which had read DLRM's compute 1 % off the replay's).
        spans = [(node.sim_start_s, node.sim_end_s) if replayed
                 else (node.start_s, node.start_s + node.kernel.duration_s)
                 for node in rs.ops if kind is None or _class_of(node.op) == kind]
        return union_length([(max(a, start), min(b, stop)) for a, b in spans
                              if b > start and a < stop])

    measured_wait = 0.0
    for node in rs.ops:
        if node.rendezvous is not None:
            measured_wait += node.kernel.duration_s - node.rendezvous.measured_transfer_s
    return RankStepResult(
        rank=rs.trace.rank or 0, step=number,
        measured_s=measured, predicted_s=predicted,
        measured_compute_s=busy("compute", False), predicted_compute_s=busy("compute", True),
        measured_communication_s=busy("communication", False),
        predicted_communication_s=busy("communication", True),
        measured_idle_s=max(0.0, measured - busy(None, False)),
        predicted_idle_s=max(0.0, predicted - busy(None, True)),
        measured_comm_wait_s=measured_wait,
        predicted_comm_wait_s=sum(node.sim_wait_s for node in rs.ops if node.rendezvous))


def _class_of(op: object) -> str:
    """The breakdown's class of a replayed op, as ``trace summary`` counts its kernel: a
    collective, or DeepEP's dispatch and combine kernels (:data:`COMM_KERNEL_NAMES`), which
    the replay keeps at their measured time having no collective to re-simulate them as, are
    communication; other kernels compute; copies and sets neither."""
    if isinstance(op, Collective):
        return "communication"
    if isinstance(op, Compute):
        return "communication" if COMM_KERNEL_NAMES.search(op.label) else "compute"
    return "other"


def _step_end_sim(rs: RankStep) -> float:
    """The replayed end of the rank's ProfilerStep annotation: its measured end moved as
    much as the last runtime call before it moved."""
    end = rs.t(rs.step.end_s)
    last: RuntimeCall | None = None
    for calls in rs.calls_by_thread.values():
        for call in calls:
            if call.end_s <= end and (last is None or call.end_s > last.end_s):
                last = call
    return end if last is None else end + (last.sim_end_s - last.end_s)


def replay_traces(traces: Sequence[RankTrace], topology: Topology,
                  params: CommParams | None = None, *, mode: str = "simulated",
                  steps: Sequence[int] | None = None,
                  ranks_per_node: int | None = None) -> ReplayResult:
    """Replay ``traces`` (one per rank of one job) on ``topology``; see the module docstring.

    ``mode`` is ``"simulated"`` (collectives on the network model) or ``"measured"``
    (measured transfers: the graph's self-check).  ``steps`` restricts the profiler step
    numbers replayed (default: every step all traces hold).  Rank ``r`` runs on GPU
    ``r % ranks_per_node`` of node ``r // ranks_per_node`` (default: the node's GPU count,
    i.e. ranks fill nodes in order, as torchrun places them).
    """
    check_choice(mode, ("simulated", "measured"), key="mode", what="replay mode")
    params = params or CommParams()
    notes: list[str] = []
    by_rank = _traces_by_rank(traces)
    ordered = [by_rank[r] for r in sorted(by_rank)]
    world_size = max([t.world_size or 0 for t in ordered] + [max(by_rank) + 1])
    rank_gpus = place_ranks(topology, world_size, ranks_per_node)
    missing = sorted(set(range(world_size)) - set(by_rank))
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" …" if len(missing) > 8 else "")
        notes.append(f"{len(missing)} of {world_size} ranks have no trace ({shown}): they are "
                     "taken to reach each collective with the last present rank")
    for trace in ordered:
        if not trace.steps:
            raise ConfigError("no ProfilerStep#N annotations: replay needs step boundaries",
                              source=trace.source,
                              hint="profile with torch.profiler.profile(schedule=...) and "
                                   "call prof.step() each iteration")
    step_maps = {t.rank or 0: {s.number: s for s in t.steps} for t in ordered}
    common = _common_steps(step_maps, steps)
    offsets = clock_offsets(ordered, step_maps, world_size)

    results: list[StepResult] = []
    unlaunched = 0
    measured_spans: dict[int, list[Span]] = {}
    predicted_spans: dict[int, list[Span]] = {}
    for number in common:
        base = min(step_maps[r][number].start_s - offsets[r] for r in step_maps)
        rank_steps = [build_rank_step(t, step_maps[t.rank or 0][number], offsets[t.rank or 0],
                                       base, world_size) for t in ordered]
        unlaunched += sum(1 for rs in rank_steps for node in rs.ops if node.launch is None)
        rendezvous = match_collectives(rank_steps, world_size, number, notes)
        Replay(rank_steps, rendezvous, topology, params, mode, rank_gpus).run()
        ranks = tuple(_rank_result(rs, number, _step_end_sim(rs)) for rs in rank_steps)
        collectives = tuple(_collective_result(rv, number) for rv in rendezvous)
        results.append(StepResult(number, max(r.measured_s for r in ranks),
                                  max(r.predicted_s for r in ranks), ranks, collectives))
        shift = base - min(step_maps[r][common[0]].start_s - offsets[r] for r in step_maps)
        _add_spans(rank_steps, shift, measured_spans, predicted_spans)
    if unlaunched:
        notes.append(f"{unlaunched} GPU ops have no launching call in the traces (the profiler "
                     "dropped it): each is replayed behind the op before it on its stream at "
                     "its measured gap, or at its measured start")
    unsized = sum(1 for s in results for c in s.collectives if not c.simulated)
    if unsized and mode == "simulated":
        notes.append(f"{unsized} collectives without a size or known kind in the trace kept "
                     "their measured transfer time")
    return ReplayResult(mode, tuple(sorted(by_rank)), world_size, tuple(results),
                        {r: offsets[r] for r in sorted(offsets)}, tuple(dict.fromkeys(notes)),
                        _by_rank(measured_spans), _by_rank(predicted_spans))


def check_one_job(traces: Sequence[RankTrace]) -> None:
    """A ConfigError when the traces say they come from jobs of different sizes or on
    different GPUs (rank 3 of 8 on A100 beside rank 1 of 2 on V100 is no one job), or
    two of them are one rank (the same file given twice, too)."""
    seen: dict[int, str] = {}
    for trace in traces:
        if trace.rank is None:
            continue
        if trace.rank in seen:
            other = seen[trace.rank]
            raise ConfigError(f"two traces of rank {trace.rank}", source=trace.source,
                              hint="the same file given twice" if other == trace.source
                              else f"the other is {other}")
        seen[trace.rank] = trace.source
    for what, value_of in (("world size", lambda t: t.world_size),
                           ("GPU", lambda t: t.gpu_model)):
        stated = {trace.source: value_of(trace) for trace in traces
                  if value_of(trace) is not None}
        if len(set(stated.values())) > 1:
            first, first_value = next(iter(stated.items()))
            other, other_value = next((source, value) for source, value in stated.items()
                                      if value != first_value)
            raise ConfigError(f"the traces are not of one job: {first} says {what} "
                              f"{first_value}, this one {other_value}", source=other,
                              hint="give the traces of one run's ranks")


def _traces_by_rank(traces: Sequence[RankTrace]) -> dict[int, RankTrace]:
    """Each trace by the rank it says it is; every rank once, of one job."""
    if not traces:
        raise ConfigError("no traces to replay")
    check_one_job(traces)
    by_rank: dict[int, RankTrace] = {}
    for trace in traces:
        if trace.rank is None:
            raise ConfigError("the trace does not say its rank", source=trace.source,
                              hint="Kineto writes distributedInfo.rank; or name the file "
                                   "rank<N>.json / worker<N>.json")
        by_rank[trace.rank] = trace  # (check_one_job: each rank once)
    return by_rank


def _common_steps(step_maps: dict[int, dict[int, ProfilerStep]],
                  steps: Sequence[int] | None) -> list[int]:
    """The step numbers to replay: those asked for, which every trace must hold, or else
    every one they all hold."""
    common = sorted(set.intersection(*(set(m) for m in step_maps.values())))
    if steps is not None:
        unknown = sorted(set(steps) - set(common))
        if unknown:
            raise ConfigError(f"no step {unknown[0]} in every trace", key="--step",
                              hint="steps all traces hold: " + ", ".join(map(str, common)))
        common = sorted(set(steps))
    if not common:
        raise ConfigError("the traces share no ProfilerStep number",
                          hint="; ".join(f"rank {r}: {sorted(m)}" for r, m in step_maps.items()))
    return common


def _add_spans(rank_steps: Sequence[RankStep], shift_s: float,
               measured: dict[int, list[Span]], predicted: dict[int, list[Span]]) -> None:
    """Every op of the step as measured and as replayed, ``shift_s`` later (from the first
    step's base), per rank."""
    for rs in rank_steps:
        for node in rs.ops:
            name = node.op.label.split("(", 1)[0]
            track = f"stream {node.stream}"
            measured.setdefault(node.rank, []).append(Span(
                f"rank {node.rank} · measured", track, name, node.start_s + shift_s,
                node.end_s + shift_s))
            args = {"wait_us": node.sim_wait_s * 1e6} if node.rendezvous else {}
            predicted.setdefault(node.rank, []).append(Span(
                f"rank {node.rank} · replayed", track, name, node.sim_start_s + shift_s,
                node.sim_end_s + shift_s, args))


def _by_rank(spans: dict[int, list[Span]]) -> tuple[Span, ...]:
    return tuple(span for rank in sorted(spans) for span in spans[rank])


def _collective_result(rv: Rendezvous, number: int) -> CollectiveResult:
    transfer = rv.measured_transfer_s
    return CollectiveResult(
        step=number, op=rv.call.op or "unknown", group=rv.group, index=rv.index,
        size_bytes=rv.call.size_bytes, simulated=rv.simulable,
        measured_transfer_s=transfer,
        predicted_transfer_s=rv.transfer_end_s - rv.transfer_start_s,
        measured_wait_s={r: node.kernel.duration_s - transfer for r, node in rv.members.items()},
        predicted_wait_s={r: node.sim_wait_s for r, node in rv.members.items()})
