"""Chakra execution traces as a workload: each rank's graph run on the cluster, and back.

Read with :mod:`measured.chakra`, each rank's ET becomes a dependency graph that the trace
replay runs (:func:`workloads.traces.replay.replay_graph`, the engine that replays profiler traces):

* ``COMP_NODE``: compute for its duration; a node that gives only FLOPs (``num_ops``)
  takes them at ``flops_per_s`` (the GPU's peak, or what the caller says).
* ``COMM_COLL_NODE``: the collective ``comm_type`` of ``comm_size`` bytes over its process
  group (``pg_ranks`` where distsim wrote it, else every rank), on the cluster's network;
  a rank's ``k``-th call on a group meets the other ranks' ``k``-th.  Without a size or
  kind (a BARRIER, or a trace that does not say) it takes its recorded duration.  A
  communication node marked ``is_cpu_op`` is the CPU side of the call (``c10d::…``): it
  takes its duration on the CPU.
* ``COMM_SEND_NODE`` / ``COMM_RECV_NODE``: a point-to-point transfer of ``comm_size`` from
  ``comm_src`` to ``comm_dst``, matched by the pair, ``comm_tag`` and order.
* ``MEM_LOAD_NODE`` / ``MEM_STORE_NODE`` / ``METADATA_NODE``: their duration.
* dependencies: a node starts when its data dependencies are done — the edges Chakra's
  ET feeder resolves; control dependencies (the PyTorch converter's parent-op links, which
  in real traces point at ops the file leaves out, at the node itself, or backwards into
  cycles) are kept in the trace and waited for only with ``ctrl_deps=True``, then minus
  those on absent nodes or the node itself (counted in the notes).  A data dependency on a
  missing node or on the node itself, and a cycle, are errors.

Resources: where the trace records a node's CPU thread or GPU stream (the ``tid``
attribute of Chakra's PyTorch converter: the forward and autograd threads, the compute
and NCCL streams), each thread and each stream runs its ops one at a time; otherwise, as
ASTRA-sim's hardware model has it, a rank runs one CPU op, one GPU compute op and one
communication op at a time (three streams).  A node with a ``stream`` attribute (distsim
writes one on every node) runs on that stream.  Each stream takes its
ready nodes in one fixed topological order (smallest id first among those whose
dependencies are in).  A send starts when its sender reaches it (eager, as ASTRA-sim's
network layer has it); the receive completes when the bytes are in.

:func:`export_chakra` writes graphs back as ETs (one per rank, ``name.<rank>.et``), with
the exact durations as a ``duration_s`` attribute, so export -> import -> run reproduces a
run to the last bit.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.chakra import (
    COLLECTIVES,
    ChakraNode,
    ChakraTrace,
    write_et,
)
from distsim_gpu.simcore.errors import ConfigError, ParseError
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.traces.chakra_calls import Call, check_calls
from distsim_gpu.workloads.traces.replay import SEND, GraphNode, GraphResult, replay_graph

__all__ = ["ChakraRun", "chakra_graphs", "export_chakra", "file_stem", "recorded_world",
           "run_chakra", "world_of"]

CPU_STREAM, COMPUTE_STREAM, COMM_STREAM = 0, 1, 2
# Streams of recorded threads and GPU streams (``tid``) are numbered from here.
_FIRST_TID_STREAM = 1000
_COMP, _SEND, _RECV, _COLL = 4, 5, 6, 7
_OTHER = (1, 2, 3)  # METADATA, MEM_LOAD, MEM_STORE
_COMM_TYPE_OF = {op: number for number, op in reversed(COLLECTIVES.items()) if op}


@dataclass(frozen=True, slots=True)
class ChakraRun:
    """A run of Chakra ETs: the replay's result and what was assumed on the way."""

    result: GraphResult
    ranks: tuple[int, ...]
    world_size: int
    nodes: int
    notes: tuple[str, ...]

    @property
    def time_s(self) -> float:
        return self.result.time_s


def _deps(node: ChakraNode, ctrl_deps: bool) -> tuple[int, ...]:
    return node.deps if ctrl_deps else node.data_deps


def _order(trace: ChakraTrace, notes: list[str], ctrl_deps: bool) -> list[ChakraNode]:
    """The nodes in the fixed topological order (smallest ready id first)."""
    by_id: dict[int, ChakraNode] = {}
    for node in trace.nodes:
        if node.id in by_id:
            raise ParseError(f"node id {node.id} appears twice", source=trace.source)
        by_id[node.id] = node
    waiting: dict[int, int] = {}
    children: dict[int, list[int]] = {}
    dropped = 0
    for node in trace.nodes:
        for dep in node.data_deps:
            if dep not in by_id:
                raise ParseError(f"node {node.id} ({node.name[:40]!r}) depends on node {dep}, "
                                 "which the trace does not hold", source=trace.source,
                                 key=f"node {node.id}.data_deps")
        if node.id in node.data_deps:
            raise ParseError(f"node {node.id} needs its own data", source=trace.source,
                             key=f"node {node.id}.data_deps")
        deps = [d for d in _deps(node, ctrl_deps) if d in by_id and d != node.id]
        dropped += len(_deps(node, ctrl_deps)) - len(deps)
        waiting[node.id] = len(deps)
        for dep in deps:
            children.setdefault(dep, []).append(node.id)
    if dropped:
        notes.append(f"{trace.source}: {dropped} control dependencies on nodes the trace "
                     "does not hold (or on the node itself) were dropped")
    ready = [i for i, n in waiting.items() if n == 0]
    heapq.heapify(ready)
    order: list[ChakraNode] = []
    while ready:
        ident = heapq.heappop(ready)
        order.append(by_id[ident])
        for child in children.get(ident, ()):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    if len(order) < len(by_id):
        stuck = min(i for i, n in waiting.items() if n > 0)
        raise ParseError(f"the dependencies form a cycle (node {stuck} never becomes ready)",
                         source=trace.source, key=f"node {stuck}")
    return order


def _brief(values: list[int]) -> str:
    text = repr(values)
    return text if len(text) <= 80 else text[:77] + "..."


def _int_attr(node: ChakraNode, name: str, source: str) -> int | None:
    value = node.attrs.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ParseError(f"node {node.id}: {name} must be a whole number >= 0, got {value!r}",
                         source=source, key=f"node {node.id}.{name}")
    return value


class _Builder:
    """One rank's graph nodes from its ordered ET nodes."""

    def __init__(self, trace: ChakraTrace, rank: int, world_size: int,
                 flops_per_s: float | None) -> None:
        self.trace, self.rank, self.world = trace, rank, world_size
        self.flops_per_s = flops_per_s
        self.calls: dict[object, int] = {}
        self.streams: dict[tuple[bool, int], int] = {}  # (CPU op?, tid) -> stream

    def _index(self, key: object) -> int:
        index = self.calls.get(key, 0)
        self.calls[key] = index + 1
        return index

    def _duration(self, node: ChakraNode) -> float:
        flops = _int_attr(node, "num_ops", self.trace.source)
        if node.duration_s > 0 or not flops:
            return node.duration_s
        if self.flops_per_s is None:
            raise ConfigError(f"node {node.id} gives FLOPs (num_ops) but no duration",
                              source=self.trace.source,
                              hint="say the GPU's speed (flops_per_s / --flops)")
        return flops / self.flops_per_s

    def node(self, node: ChakraNode, deps: tuple[int, ...]) -> GraphNode:
        graph_node = self._node(node, deps)
        stream = _int_attr(node, "stream", self.trace.source)
        tid = _int_attr(node, "tid", self.trace.source)
        if stream is None and tid is not None:  # the recorded CPU thread or GPU stream
            stream = self.streams.setdefault((node.is_cpu_op, tid),
                                             _FIRST_TID_STREAM + len(self.streams))
        return graph_node if stream is None else replace(graph_node, stream=stream)

    def _node(self, node: ChakraNode, deps: tuple[int, ...]) -> GraphNode:
        source = self.trace.source
        if node.type == _COMP or node.type in _OTHER or (node.is_cpu_op and node.type in (
                _SEND, _RECV, _COLL)):
            stream = CPU_STREAM if node.is_cpu_op else COMPUTE_STREAM
            return GraphNode(Compute(self._duration(node), node.name), stream, deps,
                             self._duration(node))
        if node.type == _COLL:
            return self._collective(node, deps)
        if node.type in (_SEND, _RECV):
            return self._p2p(node, deps)
        raise ParseError(f"node {node.id} has type {node.type_name}", source=source,
                         key=f"node {node.id}.type",
                         hint="valid: COMP, COMM_COLL, COMM_SEND, COMM_RECV, MEM_LOAD, "
                              "MEM_STORE, METADATA")

    def _collective(self, node: ChakraNode, deps: tuple[int, ...]) -> GraphNode:
        source = self.trace.source
        kind = _int_attr(node, "comm_type", source)
        if kind is not None and kind not in COLLECTIVES:
            raise ParseError(f"node {node.id}: unknown comm_type {kind}", source=source,
                             key=f"node {node.id}.comm_type", hint="valid: 0..9")
        ranks = node.attrs.get("pg_ranks")
        group = tuple(ranks) if ranks else tuple(range(self.world))
        if self.rank not in group:
            raise ParseError(f"node {node.id}: rank {self.rank} is not in its group "
                             f"{_brief(list(group))}", source=source,
                             key=f"node {node.id}.pg_ranks")
        if max(group) >= self.world or len(set(group)) < len(group):
            raise ParseError(f"node {node.id}: pg_ranks must be distinct ranks "
                             f"0..{self.world - 1}, got {_brief(list(group))}", source=source,
                             key=f"node {node.id}.pg_ranks",
                             hint="a larger --world-size if the job had more ranks")
        op = COLLECTIVES.get(kind) if kind is not None else None
        size = _int_attr(node, "comm_size", source)
        key = ("coll", group, self._index(("coll", group)))
        return GraphNode(Collective(op, size if op else None, node.name, group=group),
                         COMM_STREAM, deps, node.duration_s, key)

    def _p2p(self, node: ChakraNode, deps: tuple[int, ...]) -> GraphNode:
        source = self.trace.source
        send = node.type == _SEND
        peer = _int_attr(node, "comm_dst" if send else "comm_src", source)
        if peer is None or peer >= self.world or peer == self.rank:
            raise ParseError(f"node {node.id}: {'comm_dst' if send else 'comm_src'} must be "
                             f"another rank 0..{self.world - 1}, got {peer!r}", source=source,
                             key=f"node {node.id}")
        src, dst = (self.rank, peer) if send else (peer, self.rank)
        tag = node.attrs.get("comm_tag", 0)
        key = ("p2p", src, dst, tag, self._index(("p2p", src, dst, tag)))
        size = _int_attr(node, "comm_size", source)
        return GraphNode(Collective(SEND if size is not None else None, size, node.name,
                                    group=(src, dst)), COMM_STREAM, deps, node.duration_s, key)


# The metadata keys that give the job's GPU count: Chakra's JSON samples write ``ngpus``,
# a PyTorch ET's distributed info ``world_size``.
_RECORDED_WORLD_KEYS = ("ngpus", "world_size")


def recorded_world(traces: Sequence[ChakraTrace]) -> tuple[int | None, list[str]]:
    """The largest GPU count the traces' metadata records (None: none does) and notes on
    counts that are not positive integers or that disagree between traces."""
    counts: dict[int, str] = {}
    notes: list[str] = []
    for trace in traces:
        for key in _RECORDED_WORLD_KEYS:
            value = trace.metadata.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                notes.append(f"{trace.source}: metadata {key} {value!r} is not a GPU count "
                             "(a positive integer); left out")
                continue
            counts.setdefault(value, f"{trace.source}'s {key}")
    if len(counts) > 1:
        notes.append("the traces' metadata disagree on the job's GPUs ("
                     + ", ".join(f"{n} in {where}" for n, where in sorted(counts.items()))
                     + f"); the largest, {max(counts)}, is taken")
    return (max(counts) if counts else None), notes


def world_of(traces: Sequence[ChakraTrace], world_size: int | None = None) -> int:
    """The job's ranks: ``world_size``, else the GPU count the traces' metadata records
    (:func:`recorded_world`); more where a trace's rank is higher."""
    if not traces:
        raise ConfigError("no Chakra traces to run")
    ranks = [t.rank if t.rank is not None else i for i, t in enumerate(traces)]
    if world_size is None:
        world_size = recorded_world(traces)[0]
    return max(world_size or 0, max(ranks) + 1)


def _world_notes(traces: Sequence[ChakraTrace], world_size: int | None,
                 world: int) -> list[str]:
    """What a run of ``world`` ranks assumed about the job's size."""
    recorded, notes = recorded_world(traces)
    if recorded is not None and world_size is None and recorded > len(traces):
        notes.append(f"the traces' metadata records a job of {recorded} GPUs: it runs as "
                     f"{world} ranks (--world-size N to run another count)")
    elif recorded is not None and world_size is not None and recorded != world:
        notes.append(f"the traces' metadata records a job of {recorded} GPUs; it runs as "
                     f"--world-size gives it, {world} rank{'s' if world != 1 else ''}")
    if world > len(traces):
        notes.append(f"{world - len(traces)} of {world} ranks have no trace: they are taken "
                     "to reach each collective with the last present rank")
    return notes


def chakra_graphs(traces: Sequence[ChakraTrace], *, world_size: int | None = None,
                  flops_per_s: float | None = None, ctrl_deps: bool = False
                  ) -> tuple[dict[int, list[GraphNode]], int, list[str]]:
    """Each rank's graph (see the module docstring), the world size and the notes.
    Raises :class:`ParseError` where the ranks' calls do not meet
    (:func:`~workloads.traces.chakra_calls.check_calls`)."""
    world = world_of(traces, world_size)
    ranks = [t.rank if t.rank is not None else i for i, t in enumerate(traces)]
    notes = _world_notes(traces, world_size, world)
    graphs: dict[int, list[GraphNode]] = {}
    calls: list[Call] = []
    for rank, trace in zip(ranks, traces):
        builder = _Builder(trace, rank, world, flops_per_s)
        order = _order(trace, notes, ctrl_deps)
        position = {node.id: i for i, node in enumerate(order)}
        graphs[rank] = [builder.node(node, tuple(position[d] for d in _deps(node, ctrl_deps)
                                                 if d in position and d != node.id))
                        for node in order]
        calls.extend(Call(rank, trace.source, node, graph_node)
                     for node, graph_node in zip(order, graphs[rank])
                     if graph_node.key is not None)
    check_calls(calls, set(graphs))
    return graphs, world, notes


def run_chakra(traces: Sequence[ChakraTrace], topology: Topology,
               params: CommParams | None = None, *, world_size: int | None = None,
               flops_per_s: float | None = None, ctrl_deps: bool = False,
               ranks_per_node: int | None = None) -> ChakraRun:
    """Run Chakra ETs (one per rank) on ``topology``; rank ``r`` on the GPU
    :func:`~workloads.traces.replay.place_ranks` gives it."""
    # Before the graphs: a group without pg_ranks spans every rank, so a world of 10**8
    # would allocate a tuple that large per collective.
    world = world_of(traces, world_size)
    if world > len(topology.gpus):
        recorded = world_size is None and world == recorded_world(traces)[0]
        raise ConfigError(f"the traces have {world:,} ranks"
                          + (" (the GPU count their metadata records)" if recorded else "")
                          + f", the cluster {len(topology.gpus):,} GPUs", key="--cluster",
                          hint="give a larger cluster (--nodes)" + (
                              ", or --world-size to run fewer ranks" if recorded else ""))
    graphs, world, notes = chakra_graphs(traces, world_size=world_size,
                                         flops_per_s=flops_per_s, ctrl_deps=ctrl_deps)
    result = replay_graph(graphs, topology, params, world_size=world,
                          ranks_per_node=ranks_per_node)
    return ChakraRun(result, tuple(sorted(graphs)), world, sum(map(len, graphs.values())),
                     tuple(dict.fromkeys(notes)))


# --------------------------------------------------------------------------- export


def _export_node(index: int, node: GraphNode, rank: int) -> ChakraNode:
    attrs: dict[str, object] = {"duration_s": node.duration_s, "stream": node.stream}
    op = node.op
    if isinstance(op, Collective):
        assert isinstance(op.group, tuple)
        if op.size_bytes is not None:
            attrs["comm_size"] = int(op.size_bytes)
        if op.op == SEND or (op.op is None and len(op.group) == 2 and node.key
                             and node.key[0] == "p2p"):
            src, dst = op.group
            kind = 5 if rank == src else 6
            attrs["comm_dst" if kind == 5 else "comm_src"] = dst if kind == 5 else src
            attrs["comm_tag"] = node.key[3] if node.key and node.key[0] == "p2p" else 0
        else:
            kind = 7
            if op.op is not None:
                attrs["comm_type"] = _COMM_TYPE_OF[op.op]
            attrs["pg_ranks"] = list(op.group)
    else:
        kind = 4
        attrs["is_cpu_op"] = node.stream == CPU_STREAM
    return ChakraNode(index, op.label, kind, data_deps=node.deps,
                      duration_micros=round(node.duration_s * 1e6), attrs=attrs)


def file_stem(name: str) -> str:
    """``name`` (a model's, from the scenario) as a file name that stays inside the output
    directory: letters, digits, ``.``, ``_`` and ``-`` kept, anything else (a ``/``, a
    ``..``) made ``_``, no leading dot, at most 100 characters; "distsim" if nothing is
    left."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", str(name)).lstrip(".")[:100]
    return stem if stem.strip("._-") else "distsim"


def export_chakra(graphs: Mapping[int, Sequence[GraphNode]]
                  | Iterable[tuple[int, Sequence[GraphNode]]],
                  directory: str | os.PathLike[str], *, name: str = "distsim") -> list[str]:
    """Write each rank's graph (a mapping, or ``(rank, graph)`` pairs written as they
    come) as ``<directory>/<name>.<rank>.et``; the paths written.

    Node ids are positions, so a graph in topological order reads back in the same order.
    ``directory`` may be new, empty or an earlier export's (``.et`` files only): the ETs
    this export does not rewrite are removed after it, so the directory holds one export
    whole — a reader of every ``.et`` there would meet the earlier run's extra ranks.
    """
    _check_export_directory(directory)
    paths = []
    pairs = sorted(graphs.items()) if isinstance(graphs, Mapping) else graphs
    stem = file_stem(name)
    for rank, nodes in pairs:
        path = os.path.join(os.fspath(directory), f"{stem}.{rank}.et")
        trace = ChakraTrace(path, rank, "1.0.1", {"schema": "1.0.1", "generator": "distsim"},
                            tuple(_export_node(i, n, rank) for i, n in enumerate(nodes)))
        try:
            write_et(trace, path)
        except OSError as error:
            raise ConfigError(f"cannot write: {error.strerror or error}", source=path,
                              hint="give a directory distsim can write to") from None
        paths.append(path)
    written = {os.path.basename(path) for path in paths}
    for stale in Path(directory).glob("*.et"):
        if stale.name not in written:
            stale.unlink()
    return paths


def _check_export_directory(directory: str | os.PathLike[str]) -> None:
    """A ConfigError unless ``directory`` is new, empty or holds ETs alone."""
    target = Path(directory)
    if not target.exists():
        return
    others = [] if not target.is_dir() else [p.name for p in target.iterdir()
                                             if p.suffix != ".et" or not p.is_file()]
    if not target.is_dir() or others:
        raise ConfigError("exists and is not an empty directory or an earlier export's",
                          source=os.fspath(directory),
                          hint="give a new or empty directory (one holding only .et files, "
                               "an earlier export, is replaced)" + (
                                   f"; it holds {', '.join(sorted(others)[:3])}"
                                   if others else ""))
