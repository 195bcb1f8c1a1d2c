"""Replay a measured job from its profiler traces, with collectives re-simulated.

The job each rank ran is rebuilt as a dependency graph from its Kineto trace
(:mod:`distsim_gpu.measured.kineto`), one profiler step at a time:

* **CPU threads**: the CUDA runtime calls of each thread, in order, separated by the CPU
  time measured between them (Python, framework, data loading — kept as measured).  A call
  that *blocked on the GPU* (``cuda*Synchronize``, a ``cudaMemcpy*`` into pageable
  memory) is tied to the GPU op it waited for: the op launched before it whose measured end
  falls inside the call (for a copy call, only its own copy).  In replay the call ends
  when that op ends, plus the wake-up time measured after it; every later call on the
  thread moves with it.
* **GPU streams**: each op (kernel, memcpy, memset) starts at the latest of its launch
  (launch call + the rank's launch latency), the end of the op before it on its stream and
  the ops of other streams it waits for.  Those cross-stream waits come from two places:
  a ``cudaStreamWaitEvent`` call makes the next op its thread launches wait for the op
  launched (on another stream) just before the ``cudaEventRecord`` that precedes it —
  kept only where the measured times agree (the op did start after it); and where a start
  is otherwise unexplained (later than its launch and its stream allow, right after an op
  on another stream ended), that op.  Kineto does not record the event or stream arguments
  of these calls, so both are inferences.  What is left unexplained of a measured start is
  kept as a fixed delay, so a replay with the measured durations reproduces the measured
  timeline.
* **What each GPU op is** is a typed op (:mod:`workloads.ops`), as in the simulated
  iteration: a kernel is :class:`~workloads.ops.Compute` and a copy or a set
  :class:`~workloads.ops.Memcpy`, both taking their measured durations; an NCCL kernel is a
  :class:`~workloads.ops.Collective` of its process group.  The graph's state (launch,
  stream predecessor, dependencies, replayed times) lives in a node around the op.
* **Collectives** (NCCL kernels) are matched across ranks by process group and order.  A
  rank's kernel starts as above and then *waits* until every rank of the group has arrived;
  the *transfer* then runs on the cluster's network model (:mod:`collectives`, contention-
  aware flows, with the real group), and all ranks finish together.  Ranks absent from the
  traces are taken to arrive with the last present rank (their traces would say otherwise);
  a collective whose size or kind the trace does not give keeps its measured transfer.

A measured NCCL kernel's duration includes waiting for late peers.  The measured transfer of
a collective is taken as the shortest kernel among the present ranks (the last to arrive
barely waits), and each rank's waiting as the rest — a bound that is exact when all ranks
are present and the last arriver starts the transfer at once.

Clocks: ranks on different hosts have skewed clocks; each rank's offset is the median
difference of matched collective end times (collectives end together), removed before the
replay.  ``mode="measured"`` replays with measured transfers instead of simulated ones —
the check that the graph reproduces the trace.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.measured.records import CpuEvent, GpuEvent, ProfilerStep, RankTrace
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.intervals import union_length
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.simcore.trace import Span
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Memcpy, Op

__all__ = [
    "CollectiveResult",
    "GraphNode",
    "GraphResult",
    "RankStepResult",
    "ReplayResult",
    "StepResult",
    "communicator_op",
    "place_ranks",
    "predicted_step_s",
    "replay_graph",
    "replay_traces",
]

# The op of a dependency graph's point-to-point transfer (replay_graph), group (src, dst).
SEND = "send"
# A runtime call whose name says it may block the CPU until GPU work is done.
_BLOCKING_MARKERS = ("Synchronize", "cudaMemcpy")
# The measured end of an awaited op may trail the call's end by timer jitter.
_CLOCK_SLACK_S = 2e-6
# A kernel that started this much later than its launch and its stream allowed waited for
# something; an op on another stream that ended at most _WAIT_WINDOW_S before is the cause.
_WAIT_THRESHOLD_S = 2e-6
_WAIT_WINDOW_S = 20e-6

# Operation names as PyTorch's ``nccl:<op>`` annotations and NCCL kernel names give them,
# normalised (see :func:`communicator_op`), to distsim's collective names.
_COMM_OPS = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce",
    "all_gather": "all_gather", "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce",
    "all_to_all": "alltoall", "alltoall": "alltoall", "all_to_allv": "alltoall",
}


def communicator_op(kernel: GpuEvent) -> str | None:
    """The distsim collective an NCCL kernel ran, or ``None`` where it cannot be told.

    The ``nccl:<op>`` annotation wins over the kernel name (``SendRecv`` kernels implement
    all_to_all); PyTorch's internal variants (``_allgather_base``,
    ``all_gather_into_tensor_coalesced``) are the same collective.

    >>> from distsim_gpu.measured.records import GpuEvent
    >>> communicator_op(GpuEvent("ncclKernel_SendRecv", "communication", 0, 1,
    ...                          collective="sendrecv", comm_op="all_to_all"))
    'alltoall'
    >>> communicator_op(GpuEvent("k", "communication", 0, 1, comm_op="_allgather_base"))
    'all_gather'
    """
    for name in (kernel.comm_op, kernel.collective):
        if not name:
            continue
        key = name.strip("_").lower()
        for suffix in ("_base", "_into_tensor", "_coalesced", "_tensor"):
            key = key.replace(suffix, "")
        op = _COMM_OPS.get(key.strip("_"))
        if op is not None:
            return op
    return None


# --------------------------------------------------------------------------- results


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


# --------------------------------------------------------------------------- the graph


@dataclass(eq=False, slots=True)
class _Node:
    """One GPU op of a rank's step in the replay graph: what it is (``op``), what the trace
    measured (``kernel``; ``start_s``/``end_s`` aligned, from the base), what it waits for
    and, once replayed, when it ran."""

    rank: int
    kernel: GpuEvent
    op: Op
    stream: int
    start_s: float  # measured, aligned, from the base
    end_s: float
    launch: _Call | None = None
    prev: _Node | None = None  # previous replayed op on the stream
    prev_fixed_end_s: float | None = None  # ... or the end of one that is not replayed
    deps: list[_Node] = field(default_factory=list)
    delay_s: float = 0.0
    rendezvous: _Rendezvous | None = None  # a collective's call, matched across ranks
    launched: simpy.Event | None = None
    done: simpy.Event | None = None
    launch_s: float = 0.0  # replayed
    sim_start_s: float = math.nan
    sim_end_s: float = math.nan
    sim_wait_s: float = 0.0


@dataclass(eq=False, slots=True)
class _Call:
    event: CpuEvent
    start_s: float  # measured, aligned, from the base
    end_s: float
    launches: list[_Node] = field(default_factory=list)
    awaited: _Node | None = None
    post_s: float = 0.0
    sim_start_s: float = math.nan
    sim_end_s: float = math.nan


@dataclass(eq=False, slots=True)
class _Rendezvous:
    """One collective call (the ``index``-th of ``group`` in the step), as the first rank's
    trace gives it, and its ranks' nodes."""

    call: Collective
    group: tuple[int, ...]
    index: int
    members: dict[int, _Node] = field(default_factory=dict)
    arrived: int = 0
    finished: simpy.Event | None = None
    transfer_start_s: float = math.nan
    transfer_end_s: float = math.nan

    @property
    def measured_transfer_s(self) -> float:
        return min(node.kernel.duration_s for node in self.members.values())

    @property
    def simulable(self) -> bool:
        return (self.call.op is not None and self.call.size_bytes is not None
                and len(self.group) > 1)


@dataclass(slots=True)
class _RankStep:
    trace: RankTrace
    step: ProfilerStep
    offset_s: float
    base_s: float
    ops: list[_Node] = field(default_factory=list)  # the GPU ops launched in the step
    calls_by_thread: dict[Any, list[_Call]] = field(default_factory=dict)
    launch_latency_s: float = 0.0

    def t(self, trace_time_s: float) -> float:
        """A trace time as replay time: clock offset removed, from the replay's base."""
        return trace_time_s - self.offset_s - self.base_s


def _group_of(kernel: GpuEvent, world_size: int) -> tuple[int, ...]:
    if kernel.group_ranks:
        return tuple(kernel.group_ranks)
    return tuple(range(world_size))


def _op_of(kernel: GpuEvent, world_size: int) -> Op:
    """What a measured GPU event is, as the replay runs it: an NCCL kernel a collective of
    its process group (kind and size where the trace says them), a copy or a set its
    measured time, any other kernel compute of its measured duration."""
    if kernel.kind == "communication":
        return Collective(communicator_op(kernel), kernel.message_bytes, kernel.name,
                          group=_group_of(kernel, world_size))
    if kernel.kind in ("memcpy", "memset"):
        return Memcpy(kernel.duration_s, kernel.name, memset=kernel.kind == "memset")
    return Compute(kernel.duration_s, kernel.name)


def _comm_sequence(trace: RankTrace, step: ProfilerStep,
                   world_size: int) -> list[tuple[tuple[int, ...], int, GpuEvent]]:
    """The step's NCCL kernels as ``(group, index within group, kernel)`` in launch order."""
    kernels = [k for k in trace.gpu_events if k.kind == "communication" and _in_step(k, step)]
    kernels.sort(key=lambda k: (k.launch_s if k.launch_s is not None else k.start_s))
    counts: dict[tuple[int, ...], int] = {}
    result = []
    for kernel in kernels:
        group = _group_of(kernel, world_size)
        index = counts.get(group, 0)
        counts[group] = index + 1
        result.append((group, index, kernel))
    return result


def _in_step(kernel: GpuEvent, step: ProfilerStep) -> bool:
    """Whether ``kernel`` belongs to ``step``: launched in its window (or, without a launch
    record, started in it)."""
    t = kernel.launch_s if kernel.launch_s is not None else kernel.start_s
    return step.start_s <= t < step.end_s


def _clock_offsets(traces: Sequence[RankTrace], steps: dict[int, dict[int, ProfilerStep]],
                   world_size: int) -> dict[int, float]:
    """Per rank, the median of (its collective end − the reference rank's), over matched
    collectives of every step; 0 for the reference (lowest) rank and for unmatched ranks."""
    ends: dict[int, dict[tuple[int, tuple[int, ...], int], float]] = {}
    for trace in traces:
        assert trace.rank is not None
        table = ends.setdefault(trace.rank, {})
        for number, step in steps[trace.rank].items():
            for group, index, kernel in _comm_sequence(trace, step, world_size):
                table[(number, group, index)] = kernel.end_s
    ranks = sorted(ends)
    reference = ends[ranks[0]]
    offsets = {ranks[0]: 0.0}
    for rank in ranks[1:]:
        diffs = [end - reference[key] for key, end in ends[rank].items() if key in reference]
        offsets[rank] = statistics.median(diffs) if diffs else 0.0
    return offsets


def _blocking(call: CpuEvent) -> bool:
    return any(marker in call.name for marker in _BLOCKING_MARKERS)


def _build_rank_step(trace: RankTrace, step: ProfilerStep, offset_s: float, base_s: float,
                     world_size: int | None = None) -> _RankStep:
    """The replay graph of one rank's step (every time aligned and from the base);
    ``world_size``: the job's (default: as the trace says, at least its rank + 1)."""
    rs = _RankStep(trace, step, offset_s, base_s)
    if world_size is None:
        world_size = max(trace.world_size or 0, (trace.rank or 0) + 1)
    _add_nodes(rs, _runtime_calls(rs), world_size)
    ends = sorted(rs.ops, key=lambda o: o.end_s)
    _tie_blocking_calls(rs, ends)
    _explicit_waits(rs)
    _inferred_waits(rs, ends)
    return rs


def _runtime_calls(rs: _RankStep) -> dict[int, _Call]:
    """The step's CUDA runtime calls, per thread into ``rs``; returned by correlation."""
    step = rs.step
    calls: dict[int, _Call] = {}
    for event in rs.trace.cpu_events:
        if event.category not in ("cuda_runtime", "cuda_driver"):
            continue
        if not step.start_s <= event.start_s < step.end_s:
            continue
        call = _Call(event, rs.t(event.start_s), rs.t(event.end_s))
        rs.calls_by_thread.setdefault(event.tid, []).append(call)
        if event.correlation is not None:
            calls[event.correlation] = call
    return calls


def _add_nodes(rs: _RankStep, calls: dict[int, _Call], world_size: int) -> None:
    """The ops launched in the step, in stream order, and the rank's launch latency; every
    GPU op of the trace stays a stream-order constraint."""
    by_stream: dict[int, list[GpuEvent]] = {}
    for kernel in rs.trace.gpu_events:
        by_stream.setdefault(kernel.stream if kernel.stream is not None else -1,
                             []).append(kernel)
    latencies = []
    for stream, kernels in by_stream.items():
        previous: _Node | None = None
        previous_end: float | None = None
        for kernel in kernels:
            call = calls.get(kernel.correlation) if kernel.correlation is not None else None
            if call is None:
                # Not launched in this step: a fixed constraint for what follows it.
                if previous_end is None or rs.t(kernel.end_s) > previous_end:
                    previous_end = rs.t(kernel.end_s)
                previous = None
                continue
            node = _Node(rs.trace.rank or 0, kernel, _op_of(kernel, world_size), stream,
                         rs.t(kernel.start_s), rs.t(kernel.end_s), launch=call, prev=previous,
                         prev_fixed_end_s=previous_end if previous is None else None)
            call.launches.append(node)
            latencies.append(node.start_s - call.start_s)
            rs.ops.append(node)
            previous, previous_end = node, node.end_s
    rs.launch_latency_s = max(0.0, min(latencies)) if latencies else 0.0


def _tie_blocking_calls(rs: _RankStep, ends: list[_Node]) -> None:
    """Which op each blocking call waited for: the latest-ending op launched no later than
    the call whose end falls inside the call.  A copy call blocks only on its own copy
    (a device-to-pageable copy returns when done; an asynchronous one spanning some
    other op's end by chance must not be tied to it).  ``ends``: the ops by end."""
    end_times = [o.end_s for o in ends]
    for thread_calls in rs.calls_by_thread.values():
        for call in thread_calls:
            if not _blocking(call.event):
                continue
            own_only = "Synchronize" not in call.event.name
            hi = bisect.bisect_right(end_times, call.end_s + _CLOCK_SLACK_S)
            lo = bisect.bisect_left(end_times, call.start_s)
            for node in reversed(ends[lo:hi]):
                if own_only and node.launch is not call:
                    continue
                if node.launch is not None and node.launch.start_s <= call.start_s:
                    call.awaited = node
                    call.post_s = max(0.0, call.end_s - node.end_s)
                    break


def _inferred_waits(rs: _RankStep, ends: list[_Node]) -> None:
    """Cross-stream waits, inferred where a start is otherwise unexplained; what is still
    unexplained is the op's fixed delay.  ``ends``: the ops by end."""
    end_times = [o.end_s for o in ends]
    for node in rs.ops:
        ready = _measured_ready(node, rs.launch_latency_s)
        for dep in node.deps:
            ready = max(ready, dep.end_s)
        if node.start_s - ready > _WAIT_THRESHOLD_S:
            lo = bisect.bisect_left(end_times, node.start_s - _WAIT_WINDOW_S)
            hi = bisect.bisect_right(end_times, node.start_s + _CLOCK_SLACK_S)
            for other in reversed(ends[lo:hi]):
                if (other.stream != node.stream and other.launch is not None
                        and node.launch is not None
                        and other.launch.start_s <= node.launch.start_s):
                    node.deps.append(other)
                    ready = max(ready, other.end_s)
                    break
        node.delay_s = max(0.0, node.start_s - ready)


def _explicit_waits(rs: _RankStep) -> None:
    """Cross-stream dependencies from ``cudaEventRecord`` / ``cudaStreamWaitEvent`` pairs
    on one thread (module docstring); each kept only if the measured times satisfy it."""
    for calls in rs.calls_by_thread.values():
        last_launched: _Node | None = None
        recorded: _Node | None = None
        waiting: list[_Node] = []
        for call in calls:
            name = call.event.name
            if name.startswith("cudaEventRecord"):
                recorded = last_launched
            elif name.startswith("cudaStreamWaitEvent"):
                if recorded is not None:
                    waiting.append(recorded)
                recorded = None
            for node in call.launches:
                for dep in waiting:
                    if (dep.stream != node.stream and dep.end_s <= node.start_s + _CLOCK_SLACK_S
                            and dep not in node.deps):
                        node.deps.append(dep)
                waiting = []
                last_launched = node


def _measured_ready(node: _Node, launch_latency_s: float) -> float:
    ready = node.launch.start_s + launch_latency_s if node.launch is not None else node.start_s
    if node.prev is not None:
        ready = max(ready, node.prev.end_s)
    elif node.prev_fixed_end_s is not None:
        ready = max(ready, node.prev_fixed_end_s)
    return ready


# --------------------------------------------------------------------------- the replay


class _Replay:
    """One step of the job as SimPy processes on one simulated network."""

    def __init__(self, rank_steps: Sequence[_RankStep], rendezvous: Sequence[_Rendezvous],
                 topology: Topology, params: CommParams, mode: str,
                 rank_gpus: Sequence[str]) -> None:
        self.sim = Simulation(0)
        self.env = self.sim.env
        self.comm = Communicator(self.sim, topology, params) if mode == "simulated" else None
        self.gpus = rank_gpus
        self.mode = mode
        self.rank_steps = rank_steps
        self.rendezvous = rendezvous
        for rs in rank_steps:
            for node in rs.ops:
                node.launched = self.env.event()
                node.done = self.env.event()
                if node.launch is None:  # a graph node (replay_graph): no CPU call to wait
                    node.launched.succeed()
        for rv in rendezvous:
            rv.finished = self.env.event()

    def run(self) -> None:
        for rs in self.rank_steps:
            for calls in rs.calls_by_thread.values():
                self.env.process(self._thread(calls))
            streams: dict[int, list[_Node]] = {}
            for node in rs.ops:
                streams.setdefault(node.stream, []).append(node)
            for nodes in streams.values():
                self.env.process(self._stream(nodes, rs.launch_latency_s))
        self.sim.run()
        stuck = [node for rs in self.rank_steps for node in rs.ops if math.isnan(node.sim_end_s)]
        if stuck:
            node = stuck[0]
            raise ConfigError(
                f"replay stalled: {len(stuck)} GPU ops never ran, e.g. rank {node.rank}'s "
                f"{node.kernel.name[:60]!r}",
                hint="a collective's peers did not all reach it; are the traces of one job "
                     "and one step?")

    def _thread(self, calls: Sequence[_Call]) -> Any:
        env = self.env
        previous: _Call | None = None
        for call in calls:
            target = (call.start_s if previous is None
                      else previous.sim_end_s + (call.start_s - previous.end_s))
            if target > env.now:
                yield env.timeout(target - env.now)
            call.sim_start_s = env.now
            for node in call.launches:
                node.launch_s = env.now
                assert node.launched is not None
                node.launched.succeed()
            awaited = call.awaited
            if awaited is not None:
                assert awaited.done is not None
                if not awaited.done.processed:
                    yield awaited.done
                yield env.timeout(call.post_s)
            else:
                yield env.timeout(call.end_s - call.start_s)
            call.sim_end_s = env.now
            previous = call

    def _stream(self, nodes: Sequence[_Node], launch_latency_s: float) -> Any:
        env = self.env
        for node in nodes:
            assert node.launched is not None and node.done is not None
            if not node.launched.processed:
                yield node.launched
            ready = node.launch_s + launch_latency_s
            if node.prev is None and node.prev_fixed_end_s is not None:
                ready = max(ready, node.prev_fixed_end_s)
            for dep in node.deps:
                assert dep.done is not None
                if not dep.done.processed:
                    yield dep.done
                ready = max(ready, dep.sim_end_s)
            ready = max(ready, env.now) + node.delay_s
            if ready > env.now:
                yield env.timeout(ready - env.now)
            node.sim_start_s = env.now
            if node.rendezvous is not None:
                yield from self._collective(node, node.rendezvous)
            else:
                # Compute and copies take their measured time, as does a collective
                # whose peers' calls were not matched.
                yield env.timeout(node.kernel.duration_s)
            node.sim_end_s = env.now
            node.done.succeed()

    def _collective(self, node: _Node, rv: _Rendezvous) -> Any:
        env = self.env
        assert rv.finished is not None
        rv.arrived += 1
        if rv.call.op == SEND and rv.group[0] in rv.members:
            # A graph's send goes when its sender gets there (eager, as ASTRA-sim's
            # network layer and the iteration's pipeline sends); the receiver waits for it.
            starts = node.rank == rv.group[0]
        else:
            starts = rv.arrived == len(rv.members)
        if starts:
            rv.transfer_start_s = env.now
            env.process(self._transfer(rv))
        if not rv.finished.processed:
            yield rv.finished
        node.sim_wait_s = max(0.0, rv.transfer_start_s - node.sim_start_s)

    def _transfer(self, rv: _Rendezvous) -> Any:
        assert rv.finished is not None
        call = rv.call
        if self.comm is not None and rv.simulable:
            assert call.op is not None and call.size_bytes is not None
            group = [self.gpus[r] for r in rv.group]
            if call.op == SEND:  # a graph's point-to-point pair: group is (src, dst)
                # Planned as the iteration plans its pipeline sends (Communicator.pairs_plan).
                plan = self.comm.pairs_plan([(group[0], group[1])], call.size_bytes)
                yield self.comm.run_plan(plan, call.size_bytes)
            else:
                yield self.comm.collective(call.op, group, call.size_bytes,
                                           root=group[0] if call.op in ("broadcast", "reduce")
                                           else None)
        else:
            yield self.env.timeout(rv.measured_transfer_s)
        rv.transfer_end_s = self.env.now
        rv.finished.succeed()


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


def _rank_result(rs: _RankStep, number: int, step_end_sim_s: float) -> RankStepResult:
    start, end = rs.t(rs.step.start_s), rs.t(rs.step.end_s)
    measured = rs.step.duration_s
    gpu_shift = (max(node.sim_end_s for node in rs.ops) - max(node.end_s for node in rs.ops)
                 if rs.ops else 0.0)
    predicted = predicted_step_s(measured, step_end_sim_s - end, gpu_shift)

    def busy(kind: type | None, replayed: bool) -> float:
        """Busy time of ``kind`` ops within the step's window (measured or replayed)."""
        stop = start + (predicted if replayed else measured)
        spans = [(node.sim_start_s, node.sim_end_s) if replayed else (node.start_s, node.end_s)
                 for node in rs.ops if kind is None or isinstance(node.op, kind)]
        return union_length([(max(a, start), min(b, stop)) for a, b in spans
                              if b > start and a < stop])

    measured_wait = 0.0
    for node in rs.ops:
        if node.rendezvous is not None:
            measured_wait += node.kernel.duration_s - node.rendezvous.measured_transfer_s
    return RankStepResult(
        rank=rs.trace.rank or 0, step=number,
        measured_s=measured, predicted_s=predicted,
        measured_compute_s=busy(Compute, False), predicted_compute_s=busy(Compute, True),
        measured_communication_s=busy(Collective, False),
        predicted_communication_s=busy(Collective, True),
        measured_idle_s=max(0.0, measured - busy(None, False)),
        predicted_idle_s=max(0.0, predicted - busy(None, True)),
        measured_comm_wait_s=measured_wait,
        predicted_comm_wait_s=sum(node.sim_wait_s for node in rs.ops if node.rendezvous))


def _step_end_sim(rs: _RankStep) -> float:
    """The replayed end of the rank's ProfilerStep annotation: its measured end moved as
    much as the last runtime call before it moved."""
    end = rs.t(rs.step.end_s)
    last: _Call | None = None
    for calls in rs.calls_by_thread.values():
        for call in calls:
            if call.end_s <= end and (last is None or call.end_s > last.end_s):
                last = call
    return end if last is None else end + (last.sim_end_s - last.end_s)


def place_ranks(topology: Topology, world_size: int,
                ranks_per_node: int | None = None) -> list[str]:
    """The GPU of each rank: ``ranks_per_node`` ranks on each node in order (default: as
    many as the node has GPUs).  Raises :class:`ConfigError` if the cluster is too small."""
    per_node = len(topology.gpus_on_node(0))
    if ranks_per_node is None:
        ranks_per_node = per_node
    if not 1 <= ranks_per_node <= per_node:
        raise ConfigError(f"ranks per node must be 1..{per_node}, got {ranks_per_node}",
                          key="--ranks-per-node",
                          hint=f"the cluster's nodes have {per_node} GPUs")
    nodes_needed = -(-world_size // ranks_per_node)
    if nodes_needed > topology.num_nodes:
        raise ConfigError(
            f"the job has {world_size} ranks, {ranks_per_node} per node, but the cluster "
            f"{topology.name!r} has {topology.num_nodes} nodes", key="--cluster",
            hint=f"give a cluster of at least {nodes_needed} nodes (--nodes {nodes_needed})")
    return [topology.gpus_on_node(r // ranks_per_node)[r % ranks_per_node]
            for r in range(world_size)]


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
    offsets = _clock_offsets(ordered, step_maps, world_size)

    results: list[StepResult] = []
    measured_spans: dict[int, list[Span]] = {}
    predicted_spans: dict[int, list[Span]] = {}
    for number in common:
        base = min(step_maps[r][number].start_s - offsets[r] for r in step_maps)
        rank_steps = [_build_rank_step(t, step_maps[t.rank or 0][number], offsets[t.rank or 0],
                                       base, world_size) for t in ordered]
        rendezvous = _match_collectives(rank_steps, world_size, number, notes)
        _Replay(rank_steps, rendezvous, topology, params, mode, rank_gpus).run()
        ranks = tuple(_rank_result(rs, number, _step_end_sim(rs)) for rs in rank_steps)
        collectives = tuple(_collective_result(rv, number) for rv in rendezvous)
        results.append(StepResult(number, max(r.measured_s for r in ranks),
                                  max(r.predicted_s for r in ranks), ranks, collectives))
        shift = base - min(step_maps[r][common[0]].start_s - offsets[r] for r in step_maps)
        _add_spans(rank_steps, shift, measured_spans, predicted_spans)
    unsized = sum(1 for s in results for c in s.collectives if not c.simulated)
    if unsized and mode == "simulated":
        notes.append(f"{unsized} collectives without a size or known kind in the trace kept "
                     "their measured transfer time")
    return ReplayResult(mode, tuple(sorted(by_rank)), world_size, tuple(results),
                        {r: offsets[r] for r in sorted(offsets)}, tuple(dict.fromkeys(notes)),
                        _by_rank(measured_spans), _by_rank(predicted_spans))


def _traces_by_rank(traces: Sequence[RankTrace]) -> dict[int, RankTrace]:
    """Each trace by the rank it says it is; every rank once."""
    if not traces:
        raise ConfigError("no traces to replay")
    by_rank: dict[int, RankTrace] = {}
    for trace in traces:
        if trace.rank is None:
            raise ConfigError("the trace does not say its rank", source=trace.source,
                              hint="Kineto writes distributedInfo.rank; or name the file "
                                   "rank<N>.json / worker<N>.json")
        if trace.rank in by_rank:
            raise ConfigError(f"two traces of rank {trace.rank}", source=trace.source,
                              hint=f"the other is {by_rank[trace.rank].source}")
        by_rank[trace.rank] = trace
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


def _add_spans(rank_steps: Sequence[_RankStep], shift_s: float,
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


def _match_collectives(rank_steps: Sequence[_RankStep], world_size: int, number: int,
                       notes: list[str]) -> list[_Rendezvous]:
    """Tie each rank's NCCL ops of the step into one rendezvous per (group, index)."""
    table: dict[tuple[tuple[int, ...], int], _Rendezvous] = {}
    present = {rs.trace.rank for rs in rank_steps}
    for rs in rank_steps:
        nodes = {id(node.kernel): node for node in rs.ops}
        for group, index, kernel in _comm_sequence(rs.trace, rs.step, world_size):
            node = nodes.get(id(kernel))
            if node is None or not isinstance(node.op, Collective):
                continue
            rv = table.get((group, index))
            if rv is None:
                rv = table[(group, index)] = _Rendezvous(node.op, group, index)
            rv.members[rs.trace.rank or 0] = node
            node.rendezvous = rv
    result = []
    for rv in table.values():
        expected = present & set(rv.group)
        if set(rv.members) != expected:
            notes.append(f"step {number}: the ranks' collectives do not pair up (group "
                         f"{list(rv.group)}, call {rv.index}); unmatched calls ran alone")
        result.append(rv)
    result.sort(key=lambda rv: (rv.group, rv.index))
    return result


def _collective_result(rv: _Rendezvous, number: int) -> CollectiveResult:
    transfer = rv.measured_transfer_s
    return CollectiveResult(
        step=number, op=rv.call.op or "unknown", group=rv.group, index=rv.index,
        size_bytes=rv.call.size_bytes, simulated=rv.simulable,
        measured_transfer_s=transfer,
        predicted_transfer_s=rv.transfer_end_s - rv.transfer_start_s,
        measured_wait_s={r: node.kernel.duration_s - transfer for r, node in rv.members.items()},
        predicted_wait_s={r: node.sim_wait_s for r, node in rv.members.items()})


# --------------------------------------------------------------------------- dependency graphs


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One op of a rank's dependency graph (an execution trace's node), for
    :func:`replay_graph`.

    ``op`` is :class:`~workloads.ops.Compute` (or ``Memcpy``) of its duration, or a
    :class:`~workloads.ops.Collective` whose ``group`` holds global ranks (``op`` ``"send"``:
    a point-to-point transfer, group ``(src, dst)``; ``op`` or ``size_bytes`` ``None``: it
    takes ``duration_s``).  ``deps``: positions in the rank's list of the nodes it waits
    for.  Nodes of one ``stream`` run one at a time in list order.  ``key`` ties a
    communication node to the same call on its peers: equal keys are one rendezvous.
    """

    op: Op
    stream: int
    deps: tuple[int, ...] = ()
    duration_s: float = 0.0
    key: Any = None


@dataclass(frozen=True, slots=True)
class GraphResult:
    """A graph replay: each rank's finish and busy times, and every node's span."""

    end_s: dict[int, float]
    compute_s: dict[int, float]
    communication_s: dict[int, float]
    spans: tuple[Span, ...]

    @property
    def time_s(self) -> float:
        """When the last rank finished (the iteration's time)."""
        return max(self.end_s.values(), default=0.0)


def _graph_rank_step(rank: int, nodes: Sequence[GraphNode], world_size: int,
                     table: dict[Any, _Rendezvous]) -> _RankStep:
    trace = RankTrace(f"rank {rank}", rank, world_size, None, (), ())
    rs = _RankStep(trace, ProfilerStep(0, 0.0, 0.0), 0.0, 0.0)
    last: dict[int, _Node] = {}
    for graph_node in nodes:
        kind = "communication" if isinstance(graph_node.op, Collective) else "compute"
        kernel = GpuEvent(graph_node.op.label, kind, 0.0, graph_node.duration_s)
        node = _Node(rank, kernel, graph_node.op, graph_node.stream, 0.0,
                     graph_node.duration_s, prev=last.get(graph_node.stream))
        node.deps = [rs.ops[d] for d in graph_node.deps]
        last[graph_node.stream] = node
        rs.ops.append(node)
        if graph_node.key is not None:
            assert isinstance(graph_node.op, Collective)
            rv = table.get(graph_node.key)
            if rv is None:
                group = graph_node.op.group
                assert isinstance(group, tuple)
                rv = table[graph_node.key] = _Rendezvous(graph_node.op, group, len(table))
            rv.members[rank] = node
            node.rendezvous = rv
    return rs


def replay_graph(graphs: dict[int, Sequence[GraphNode]], topology: Topology,
                 params: CommParams | None = None, *, world_size: int | None = None,
                 ranks_per_node: int | None = None) -> GraphResult:
    """Run each rank's dependency graph on ``topology``: compute for its duration,
    communication on the network model, matched across ranks by key (see
    :class:`GraphNode`).  Rank ``r`` runs on the GPU :func:`place_ranks` gives it;
    ``world_size`` (default: the highest rank + 1) counts ranks without a graph too."""
    world_size = max(world_size or 0, max(graphs, default=-1) + 1)
    rank_gpus = place_ranks(topology, world_size, ranks_per_node)
    table: dict[Any, _Rendezvous] = {}
    steps = [_graph_rank_step(rank, graphs[rank], world_size, table) for rank in sorted(graphs)]
    _Replay(steps, list(table.values()), topology, params or CommParams(), "simulated",
            rank_gpus).run()
    spans, end, compute, comm = [], {}, {}, {}
    for rs in steps:
        rank = rs.trace.rank or 0
        end[rank] = max((n.sim_end_s for n in rs.ops), default=0.0)
        compute[rank] = union_length([(n.sim_start_s, n.sim_end_s) for n in rs.ops
                                      if not isinstance(n.op, Collective)])
        comm[rank] = union_length([(n.sim_start_s, n.sim_end_s) for n in rs.ops
                                   if isinstance(n.op, Collective)])
        spans.extend(Span(f"rank {rank}", f"stream {n.stream}", n.op.label, n.sim_start_s,
                          n.sim_end_s) for n in rs.ops)
    return GraphResult(end, compute, comm, tuple(spans))
