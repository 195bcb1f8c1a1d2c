"""The replay engine: per-rank graphs of GPU ops run as SimPy processes on one network.

A rank's work is a :class:`RankStep`: the CUDA runtime calls of its CPU threads
(:class:`RuntimeCall`, kept at their measured gaps) and the GPU ops they launch
(:class:`ReplayNode`, each a typed op of :mod:`workloads.iteration.ops` with its stream
predecessor, its cross-stream dependencies and a fixed delay).  :class:`Replay` runs every
rank's threads and streams together: an op starts when it is launched, its stream is free
and its dependencies are done; a communication op meets its peers at a
:class:`Rendezvous` and its transfer runs on the cluster's network model
(:mod:`collectives`, contention-aware flows, the real group), or takes its measured time.

The engine knows nothing of where the graph came from.  Two builders feed it: Kineto
profiler traces (:mod:`workloads.traces.kineto_graph`, driven by
:mod:`workloads.traces.kineto_replay`) and dependency graphs such as Chakra execution traces
(:class:`GraphNode`, :func:`replay_graph`; :mod:`workloads.traces.chakra`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.measured.records import CpuEvent, GpuEvent, ProfilerStep, RankTrace
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.intervals import union_length
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.simcore.trace import Span
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.iteration.ops import Collective, Op

__all__ = [
    "SEND",
    "GraphNode",
    "GraphResult",
    "RankStep",
    "Rendezvous",
    "Replay",
    "ReplayNode",
    "RuntimeCall",
    "place_ranks",
    "replay_graph",
]

# The op of a dependency graph's point-to-point transfer (replay_graph), group (src, dst).
SEND = "send"


# --------------------------------------------------------------------------- the graph


@dataclass(eq=False, slots=True)
class ReplayNode:
    """One GPU op of a rank's step in the replay graph: what it is (``op``), what the trace
    measured (``kernel``; ``start_s``/``end_s`` aligned, from the base), what it waits for
    and, once replayed, when it ran."""

    rank: int
    kernel: GpuEvent
    op: Op
    stream: int
    start_s: float  # measured, aligned, from the base
    end_s: float
    launch: RuntimeCall | None = None
    prev: ReplayNode | None = None  # previous replayed op on the stream
    prev_fixed_end_s: float | None = None  # ... or the end of one that is not replayed
    deps: list[ReplayNode] = field(default_factory=list)
    delay_s: float = 0.0
    rendezvous: Rendezvous | None = None  # a collective's call, matched across ranks
    launched: simpy.Event | None = None
    done: simpy.Event | None = None
    launch_s: float = 0.0  # replayed
    sim_start_s: float = math.nan
    sim_end_s: float = math.nan
    sim_wait_s: float = 0.0


@dataclass(eq=False, slots=True)
class RuntimeCall:
    """One CUDA runtime call of a CPU thread: when it ran (measured, then replayed), the
    GPU ops it launched and the op it blocked on (``awaited``; it ends ``post_s`` after
    that op does)."""

    event: CpuEvent
    start_s: float  # measured, aligned, from the base
    end_s: float
    launches: list[ReplayNode] = field(default_factory=list)
    awaited: ReplayNode | None = None
    post_s: float = 0.0
    sim_start_s: float = math.nan
    sim_end_s: float = math.nan


@dataclass(eq=False, slots=True)
class Rendezvous:
    """One collective call (the ``index``-th of ``group`` in the step), as the first rank's
    trace gives it, and its ranks' nodes."""

    call: Collective
    group: tuple[int, ...]
    index: int
    members: dict[int, ReplayNode] = field(default_factory=dict)
    arrived: int = 0
    finished: simpy.Event | None = None
    transfer_start_s: float = math.nan
    transfer_end_s: float = math.nan

    @property
    def measured_transfer_s(self) -> float:
        """The shortest kernel of the present ranks: the last to arrive barely waits."""
        return min(node.kernel.duration_s for node in self.members.values())

    @property
    def simulable(self) -> bool:
        """Whether the network model can run it: a known kind and size, and peers."""
        return (self.call.op is not None and self.call.size_bytes is not None
                and len(self.group) > 1)


@dataclass(slots=True)
class RankStep:
    """One rank's graph for one step: its threads' calls and the GPU ops they launch, with
    the rank's clock offset and launch latency (every time in it aligned, from the base)."""

    trace: RankTrace
    step: ProfilerStep
    offset_s: float
    base_s: float
    ops: list[ReplayNode] = field(default_factory=list)  # the GPU ops launched in the step
    calls_by_thread: dict[Any, list[RuntimeCall]] = field(default_factory=dict)
    launch_latency_s: float = 0.0

    def t(self, trace_time_s: float) -> float:
        """A trace time as replay time: clock offset removed, from the replay's base."""
        return trace_time_s - self.offset_s - self.base_s


# --------------------------------------------------------------------------- the replay


class Replay:
    """One step of the job as SimPy processes on one simulated network."""

    def __init__(self, rank_steps: Sequence[RankStep], rendezvous: Sequence[Rendezvous],
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
            streams: dict[int, list[ReplayNode]] = {}
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

    def _thread(self, calls: Sequence[RuntimeCall]) -> Any:
        env = self.env
        previous: RuntimeCall | None = None
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

    def _stream(self, nodes: Sequence[ReplayNode], launch_latency_s: float) -> Any:
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

    def _collective(self, node: ReplayNode, rv: Rendezvous) -> Any:
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

    def _transfer(self, rv: Rendezvous) -> Any:
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

# --------------------------------------------------------------------------- dependency graphs


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One op of a rank's dependency graph (an execution trace's node), for
    :func:`replay_graph`.

    ``op`` is :class:`~workloads.iteration.ops.Compute` (or ``Memcpy``) of its duration, or a
    :class:`~workloads.iteration.ops.Collective` whose ``group`` holds global ranks (``op``
    ``"send"``: a point-to-point transfer, group ``(src, dst)``; ``op`` or ``size_bytes`` ``None``:
    it takes ``duration_s``).  ``deps``: positions in the rank's list of the nodes it waits for.
    Nodes of one ``stream`` run one at a time in list order.  ``key`` ties a
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
                     table: dict[Any, Rendezvous]) -> RankStep:
    trace = RankTrace(f"rank {rank}", rank, world_size, None, (), ())
    rs = RankStep(trace, ProfilerStep(0, 0.0, 0.0), 0.0, 0.0)
    last: dict[int, ReplayNode] = {}
    for graph_node in nodes:
        kind = "communication" if isinstance(graph_node.op, Collective) else "compute"
        kernel = GpuEvent(graph_node.op.label, kind, 0.0, graph_node.duration_s)
        node = ReplayNode(rank, kernel, graph_node.op, graph_node.stream, 0.0,
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
                rv = table[graph_node.key] = Rendezvous(graph_node.op, group, len(table))
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
    table: dict[Any, Rendezvous] = {}
    steps = [_graph_rank_step(rank, graphs[rank], world_size, table) for rank in sorted(graphs)]
    Replay(steps, list(table.values()), topology, params or CommParams(), "simulated",
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
