"""The replay graph of a measured job, built from its Kineto profiler traces.

The job each rank ran is rebuilt as a dependency graph from its Kineto trace
(:mod:`distsim_gpu.measured.kineto`), one profiler step at a time, for the replay engine
(:mod:`workloads.traces.replay`) to run; :mod:`workloads.traces.kineto_replay` drives it:

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
  timeline.  A kernel that started in the step without a launching call in the trace (the
  profiler lost it) is the step's work too: it follows its stream's op before it at its
  measured gap, or, first on its stream, starts when it was measured to.
* **What each GPU op is** is a typed op (:mod:`workloads.iteration.ops`), as in the simulated
  iteration: a kernel is :class:`~workloads.iteration.ops.Compute` and a copy or a set
  :class:`~workloads.iteration.ops.Memcpy`, both taking their measured durations; an NCCL kernel is
  a :class:`~workloads.iteration.ops.Collective` of its process group.  The graph's state (launch,
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
import statistics
from collections.abc import Sequence

from distsim_gpu.measured.records import CpuEvent, GpuEvent, ProfilerStep, RankTrace
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Memcpy, Op
from distsim_gpu.workloads.traces.replay import RankStep, Rendezvous, ReplayNode, RuntimeCall

__all__ = ["build_rank_step", "clock_offsets", "communicator_op", "match_collectives"]

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


def _unlaunched_in_step(kernel: GpuEvent, step: ProfilerStep) -> bool:
    """A kernel the trace has no launching call for (the profiler dropped it) that started
    in ``step``: it is the step's work all the same, replayed behind its stream at its
    measured gap (or its measured start, first on its stream)."""
    return kernel.launch_s is None and _in_step(kernel, step)


def clock_offsets(traces: Sequence[RankTrace], steps: dict[int, dict[int, ProfilerStep]],
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


def build_rank_step(trace: RankTrace, step: ProfilerStep, offset_s: float, base_s: float,
                     world_size: int | None = None) -> RankStep:
    """The replay graph of one rank's step (every time aligned and from the base);
    ``world_size``: the job's (default: as the trace says, at least its rank + 1)."""
    rs = RankStep(trace, step, offset_s, base_s)
    if world_size is None:
        world_size = max(trace.world_size or 0, (trace.rank or 0) + 1)
    _add_nodes(rs, _runtime_calls(rs), world_size)
    ends = sorted(rs.ops, key=lambda o: o.end_s)
    _tie_blocking_calls(rs, ends)
    _explicit_waits(rs)
    _inferred_waits(rs, ends)
    return rs


def _runtime_calls(rs: RankStep) -> dict[int, RuntimeCall]:
    """The step's CUDA runtime calls, per thread into ``rs``; returned by correlation."""
    step = rs.step
    calls: dict[int, RuntimeCall] = {}
    for event in rs.trace.cpu_events:
        if event.category not in ("cuda_runtime", "cuda_driver"):
            continue
        if not step.start_s <= event.start_s < step.end_s:
            continue
        call = RuntimeCall(event, rs.t(event.start_s), rs.t(event.end_s))
        rs.calls_by_thread.setdefault(event.tid, []).append(call)
        if event.correlation is not None:
            calls[event.correlation] = call
    return calls


def _add_nodes(rs: RankStep, calls: dict[int, RuntimeCall], world_size: int) -> None:
    """The ops launched in the step, in stream order, and the rank's launch latency; every
    GPU op of the trace stays a stream-order constraint."""
    by_stream: dict[int, list[GpuEvent]] = {}
    for kernel in rs.trace.gpu_events:
        by_stream.setdefault(kernel.stream if kernel.stream is not None else -1,
                             []).append(kernel)
    latencies = []
    for stream, kernels in by_stream.items():
        previous: ReplayNode | None = None
        previous_end: float | None = None
        for kernel in kernels:
            call = calls.get(kernel.correlation) if kernel.correlation is not None else None
            if call is None and not _unlaunched_in_step(kernel, rs.step):
                # Not launched in this step: a fixed constraint for what follows it.
                if previous_end is None or rs.t(kernel.end_s) > previous_end:
                    previous_end = rs.t(kernel.end_s)
                previous = None
                continue
            node = ReplayNode(rs.trace.rank or 0, kernel, _op_of(kernel, world_size), stream,
                         rs.t(kernel.start_s), rs.t(kernel.end_s), launch=call, prev=previous,
                         prev_fixed_end_s=previous_end if previous is None else None)
            if call is not None:
                call.launches.append(node)
                latencies.append(node.start_s - call.start_s)
            rs.ops.append(node)
            previous, previous_end = node, node.end_s
    rs.launch_latency_s = max(0.0, min(latencies)) if latencies else 0.0


def _tie_blocking_calls(rs: RankStep, ends: list[ReplayNode]) -> None:
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


def _inferred_waits(rs: RankStep, ends: list[ReplayNode]) -> None:
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


def _explicit_waits(rs: RankStep) -> None:
    """Cross-stream dependencies from ``cudaEventRecord`` / ``cudaStreamWaitEvent`` pairs
    on one thread (module docstring); each kept only if the measured times satisfy it."""
    for calls in rs.calls_by_thread.values():
        last_launched: ReplayNode | None = None
        recorded: ReplayNode | None = None
        waiting: list[ReplayNode] = []
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


def _measured_ready(node: ReplayNode, launch_latency_s: float) -> float:
    # An op without a launching call is released at the replay's start, as the engine does.
    ready = (node.launch.start_s if node.launch is not None else 0.0) + launch_latency_s
    if node.prev is not None:
        ready = max(ready, node.prev.end_s)
    elif node.prev_fixed_end_s is not None:
        ready = max(ready, node.prev_fixed_end_s)
    return ready


def match_collectives(rank_steps: Sequence[RankStep], world_size: int, number: int,
                       notes: list[str]) -> list[Rendezvous]:
    """Tie each rank's NCCL ops of the step into one rendezvous per (group, index)."""
    table: dict[tuple[tuple[int, ...], int], Rendezvous] = {}
    present = {rs.trace.rank for rs in rank_steps}
    for rs in rank_steps:
        nodes = {id(node.kernel): node for node in rs.ops}
        for group, index, kernel in _comm_sequence(rs.trace, rs.step, world_size):
            node = nodes.get(id(kernel))
            if node is None or not isinstance(node.op, Collective):
                continue
            rv = table.get((group, index))
            if rv is None:
                rv = table[(group, index)] = Rendezvous(node.op, group, index)
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


