"""A simulated iteration as per-rank dependency graphs, to write as Chakra ETs.

The iteration (:mod:`workloads.iteration`) runs one op stream per pipeline stage for every
rank group; here each GPU of each rank group gets that stream as a graph of
:class:`~workloads.traces.replay.GraphNode` s with the iteration's semantics spelled out:

* the **main stream** (compute, blocking collectives, receives, waits) is one stream, each
  node depending on the one before it;
* a **tensor-parallel** collective is one call over the rank group's GPUs; a collective
  among rank groups (data-parallel, expert-parallel, tied embedding) one call per tensor
  lane — the ``t``-th GPU of every member, as the iteration runs it;
* an **asynchronous** data-parallel collective runs on its own stream (one for gathers,
  one for reductions: each starts after the previous one of its stream), and an overlapped
  expert all-to-all (or PyTorch's asynchronous context-parallel K/V all-gather) on a
  third, launched when the main stream reaches it; a ``Wait`` is a zero-time node
  depending on what it waits for;
* a **context-parallel ring step** (``parallelism.cp_comm_type`` p2p, a2a+p2p,
  torch_alltoall, and torch_allgather's backward dK/dV: :mod:`workloads.cost.context_parallel`)
  is, on each tensor lane of each GPU, a send of the step's K/V (dK/dV) to the next rank of
  its ring and a receive from the one before (the rings of
  :func:`~workloads.strategy.dimensions.cp_lanes`: under a2a+p2p, the same a2a rank of
  the next group), each a ``COMM_SEND``/``COMM_RECV`` node on a stream of its own launched
  where the main stream is (the iteration queues ring steps on no stream: PyTorch's
  backward has a K/V and a dK/dV step in flight at once); the step's ``Wait`` depends on
  both;
* a **pipeline send** starts when the main stream reaches it, on a stream of its own (sends
  do not wait for each other); the receive blocks the receiver's main stream until the
  bytes are in (a hand-off within one stage, between interleaved chunks, is free);
* the **barrier** before the optimizer is a zero-time meeting of every rank;
* compute takes its time times the GPU's own straggler factor — a straggler's
  tensor-parallel peer computes at its own pace and waits for it in their next
  collective, as the per-GPU breakdown counts it (the replay waits there too); the host's
  offloaded optimizer step keeps its time — and its time alone: the SMs
  overlapped NCCL collectives take from it in the iteration
  (:mod:`workloads.iteration.nccl_sms`) are not in the graph, as a measured trace's kernel
  times already hold them.  Collectives the iteration times by their closed form
  (exclusive tensor-parallel ones) are ordinary collectives here: alone on their links,
  the flows give the same time.

Running the graphs (:func:`workloads.traces.replay.replay_graph`, or written out and read back
with :mod:`workloads.traces.chakra`) reproduces the iteration's time where every tensor lane of a
collective among rank groups takes as long as the others (the iteration waits for all
lanes; a rank here for its own) and pipeline sends between two groups take as long one by
one as together — true on symmetric clusters — with ``communication.nccl_sms: 0``.  So for
a ring step: the iteration starts its sends (every lane's, as one plan) when the whole CP
block has reached it and each member waits for all of them; here a send goes when its
sender gets there and a rank waits for its own send and receive.  On a symmetric cluster
the block's ranks, running one stream at one pace, reach it at the same time and each
send takes as long alone as the step's sends together, so every ``cp_comm_type`` exports
exactly (the round-trip tests, with and without a pipeline, within and across nodes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.iteration.ops import (
    Barrier,
    Collective,
    Compute,
    Fused,
    Op,
    Recv,
    Send,
    Wait,
)
from distsim_gpu.workloads.iteration.simulator import IterationSimulator, IterationSpec
from distsim_gpu.workloads.iteration.timeline import RankGroup
from distsim_gpu.workloads.strategy.dimensions import (
    PeerGroup,
    Peering,
    block_layout,
    peer_degrees,
    peer_group,
    stage_sets,
)
from distsim_gpu.workloads.strategy.schedule import mirror_pair, stage_of
from distsim_gpu.workloads.traces.replay import SEND, GraphNode, place_ranks

__all__ = ["MAIN_STREAM", "iter_rank_graphs", "iteration_graphs"]

MAIN_STREAM, REDUCE_STREAM, GATHER_STREAM, EXPERT_STREAM, FIRST_SEND_STREAM = 1, 3, 4, 5, 16


class _Exporter:
    """Appends each rank group's ops to its GPUs' graphs."""

    def __init__(self, sim: IterationSimulator, rank_of: dict[str, int]) -> None:
        self.sim = sim
        self.rank_of = rank_of
        # Each block communicator's size in this run (looked up once, not per call).
        self.block_sizes = peer_degrees(sim.spec.parallel)
        self.graphs: dict[int, list[GraphNode]] = {r: [] for r in rank_of.values()}
        self.main: dict[int, int] = {}  # each rank's last main-stream node
        self.keys: dict[Any, int] = {}  # calls per rendezvous group (ring: per pair), per rank
        self.sends = 0
        self.handles: dict[tuple[int, str], tuple[int, ...]] = {}  # what a Wait waits for
        self.pending: dict[int, list[int]] = {}
        self.senders = _senders(sim)

    def _add(self, rank: int, op: Op, stream: int, duration_s: float = 0.0,
             deps: Sequence[int] = (), key: Any = None, main: bool = True) -> int:
        graph = self.graphs[rank]
        before = (self.main[rank],) if rank in self.main else ()
        graph.append(GraphNode(op, stream, (*before, *deps), duration_s, key))
        if main:
            self.main[rank] = len(graph) - 1
        return len(graph) - 1

    def _call(self, rank: int, group: tuple[int, ...], op: Collective, stream: int,
              duration_s: float = 0.0, main: bool = True) -> int:
        """A collective over ``group`` (global ranks): the k-th such call on this rank."""
        count = self.keys.get((rank, group), 0)
        self.keys[(rank, group)] = count + 1
        call = Collective(op.op, op.size_bytes, op.label, group=group)
        return self._add(rank, call, stream, duration_s, key=("coll", group, count), main=main)

    def _ranks(self, group: RankGroup) -> list[int]:
        return [self.rank_of[gpu] for gpu in group.gpus]

    def _lanes(self, members: list[RankGroup]) -> list[tuple[int, ...]]:
        return [tuple(self.rank_of[m.gpus[t]] for m in members)
                for t in range(self.sim.spec.parallel.tp)]

    def _lanes_of(self, group: RankGroup, members: list[RankGroup],
                  peer: PeerGroup) -> list[tuple[int, ...]]:
        """Per tensor rank of ``group``, the ranks of the communicator it calls among
        ``members``: a block's layout's (expert groups may cross tensor ranks)."""
        if peer.peering is not Peering.BLOCK:
            return self._lanes(members)
        offset = members.index(group)
        mine: dict[int, tuple[int, ...]] = {}
        for lane in block_layout(peer, self.sim.spec.parallel)[1]:
            ranks = tuple(self.rank_of[members[r].gpus[t]] for r, t in lane)
            mine.update((t, ranks) for r, t in lane if r == offset)
        return [mine[t] for t in range(self.sim.spec.parallel.tp)]

    def done(self, group: RankGroup) -> list[tuple[int, list[GraphNode]]]:
        """The graphs of ``group``'s GPUs, complete once its stream is through: handed
        over and forgotten, so only one rank group's graphs are held at a time."""
        ranks = self._ranks(group)
        for rank in ranks:
            self.main.pop(rank, None)
            self.pending.pop(rank, None)
        return [(rank, self.graphs.pop(rank)) for rank in ranks]

    def group(self, group: RankGroup, stream: list[Op]) -> None:
        for op in stream:
            if isinstance(op, Fused):
                self._fused(group, op)
            elif isinstance(op, Collective):
                self._collective(group, op)
            elif isinstance(op, Send):
                self._send(group, op)
            elif isinstance(op, Recv):
                self._recv(group, op)
            elif isinstance(op, Wait):
                self._wait(group, op)
            elif isinstance(op, Barrier):
                everyone = tuple(sorted(self.rank_of.values()))
                for rank in self._ranks(group):
                    self._call(rank, everyone, Collective(None, None, op.label), MAIN_STREAM)
            else:  # the iteration's own handlers are the complete list
                raise ConfigError(f"cannot export a {type(op).__name__} op to Chakra")

    def _fused(self, group: RankGroup, op: Fused) -> None:
        ranks = tuple(self._ranks(group))
        for step, duration in zip(op.steps, op.durations_s):
            for rank, share in zip(ranks, group.paces):
                if isinstance(step, Compute):  # the host's work (Compute.host): unslowed
                    pace = 1.0 if step.host else group.slowdown * share
                    self._add(rank, step, MAIN_STREAM, duration * pace)
                else:
                    self._call(rank, ranks, step, MAIN_STREAM)

    def _collective(self, group: RankGroup, op: Collective) -> None:
        peer = peer_group(op.group)
        if peer.peering is Peering.OWN:
            ranks = tuple(self._ranks(group))
            # a 2-D/3-D mesh step: one call per sub-group
            for sub in ([tuple(ranks[i] for i in members) for members in op.subgroups or ()]
                        or [ranks]):
                for rank in sub:
                    self._call(rank, sub, op, MAIN_STREAM)
            return
        if peer.ring:
            self._ring(group, op, peer)
            return
        members = self._members(group, peer)
        lanes = self._lanes_of(group, members, peer)
        if op.subgroups:  # a narrower layer group's gradients: a ring per shard, as run
            for sub in op.subgroups:
                merged = tuple(lanes[t][r] for r in range(len(members)) for t in sub)
                for t in sub:
                    lanes[t] = merged
        stream = MAIN_STREAM if op.blocking else (
            EXPERT_STREAM if peer.peering is Peering.BLOCK
            else GATHER_STREAM if op.op == "all_gather" else REDUCE_STREAM)
        for t, rank in enumerate(self._ranks(group)):
            node = self._call(rank, lanes[t], op, stream, main=op.blocking)
            if not op.blocking and op.handle is not None:
                self.handles[(rank, op.handle)] = (node,)
            elif not op.blocking:
                self.pending.setdefault(rank, []).append(node)

    def _ring(self, group: RankGroup, op: Collective, peer: PeerGroup) -> None:
        """One ring step (context parallelism's): on every tensor lane, each GPU's send to
        the next rank of its ring and its receive from the one before, each on a stream of
        its own from where the main stream is; the step's ``Wait`` waits for both."""
        lanes = self._lanes_of(group, self._members(group, peer), peer)  # cp_lanes' rings
        handle = op.handle or op.label
        for t, rank in enumerate(self._ranks(group)):
            ring, nodes = lanes[t], []
            at = ring.index(rank)
            for src, dst, what in ((rank, ring[(at + 1) % len(ring)], "send"),
                                   (ring[at - 1], rank, "recv")):
                # The k-th ring step between a pair is its tag (a pair of one stage:
                # never a pipeline hand-off's).
                count = self.keys.get((rank, src, dst), 0)
                self.keys[(rank, src, dst)] = count + 1
                self.sends += 1
                nodes.append(self._add(rank, Collective(SEND, op.size_bytes,
                                                        f"{op.label} {what}", group=(src, dst)),
                                       FIRST_SEND_STREAM + self.sends,
                                       key=("p2p", src, dst, count, 0), main=False))
            self.handles[(rank, handle)] = tuple(nodes)
        if op.blocking:  # (every ring step has a handle: workloads.cost.context_parallel)
            self._wait(group, Wait(handle))

    def _members(self, group: RankGroup, peer: PeerGroup) -> list[RankGroup]:
        """Every rank group of ``group``'s communicator among ``peer`` (unfolded)."""
        sim, par = self.sim, self.sim.spec.parallel
        if peer.peering is Peering.ENDS:  # the stage and its mirror
            return [sim.groups[s][group.replica] for s in mirror_pair(group.stage, par.pp)]
        stage_groups = sim.groups[group.stage]
        if peer.peering is Peering.BLOCK:
            size = self.block_sizes[peer.name]
            block = group.replica // size * size
            return stage_groups[block:block + size]
        if peer.replica_sets is not None:  # HSDP's shard or replicate group
            mine = next(s for s in stage_sets(peer, par) if group.replica in s)
            return [stage_groups[r] for r in mine]
        return stage_groups

    def _wait(self, group: RankGroup, op: Wait) -> None:
        for rank in self._ranks(group):
            awaited = (self.handles.pop((rank, op.handle)) if op.handle is not None
                       else self.pending.pop(rank, []))
            self._add(rank, Compute(0.0, f"wait {op.handle or 'all'}"), MAIN_STREAM,
                      deps=awaited)

    def _send(self, group: RankGroup, op: Send) -> None:
        par = self.sim.spec.parallel
        target = self.sim.groups[stage_of(op.virtual_stage, par.pp, par.schedule)][
            group.replica]
        if target is group:
            return  # the next chunk lives on this stage: nothing moves
        tag = _tag(op.pass_name, group.replica, op.microbatch, op.virtual_stage)
        for src, dst in zip(self._ranks(group), self._ranks(target)):
            self.sends += 1
            self._add(src, Collective(SEND, op.size_bytes, f"send {op.pass_name} "
                                      f"mb{op.microbatch}", group=(src, dst)),
                      FIRST_SEND_STREAM + self.sends, key=("p2p", src, dst, tag, 0),
                      main=False)

    def _recv(self, group: RankGroup, op: Recv) -> None:
        source_stage, size = self.senders[(op.pass_name, op.microbatch, op.virtual_stage)]
        sender = self.sim.groups[source_stage][group.replica]
        if sender is group:
            return
        tag = _tag(op.pass_name, group.replica, op.microbatch, op.virtual_stage)
        for src, dst in zip(self._ranks(sender), self._ranks(group)):
            self._add(dst, Collective(SEND, size, op.label, group=(src, dst)), MAIN_STREAM,
                      key=("p2p", src, dst, tag, 0))


def _tag(pass_name: str, replica: int, microbatch: int, virtual_stage: int) -> int:
    """One number per hand-off (Chakra's comm_tag is an integer)."""
    return ((microbatch * 4096 + virtual_stage) * 65536 + replica) * 2 + (pass_name == "B")


def _senders(sim: IterationSimulator) -> dict[tuple[str, int, int], tuple[int, float]]:
    """Which stage sends each hand-off ``(pass, microbatch, virtual stage)``, and its size."""
    senders = {}
    for stage, stream in enumerate(sim.streams):
        for op in stream:
            if isinstance(op, Send):
                senders[(op.pass_name, op.microbatch, op.virtual_stage)] = (stage,
                                                                            op.size_bytes)
    return senders


def iter_rank_graphs(spec: IterationSpec) -> Iterator[tuple[int, list[GraphNode]]]:
    """Each rank's graph of one iteration (module docstring), rank group by rank group;
    rank ``r`` is the GPU :func:`~workloads.traces.replay.place_ranks` puts rank ``r`` on."""
    if spec.parallel.tp_comm_overlap:  # chunks pipelined with a GEMM: no ET node says it
        raise ConfigError("exporting TP communication overlapped with the GEMMs to Chakra "
                          "is not supported", key="parallelism.tp_comm_overlap",
                          hint="set parallelism.tp_comm_overlap: false to export")
    sim = IterationSimulator(spec)  # the rank groups and streams the iteration runs
    gpus = place_ranks(spec.topology, len(spec.topology.gpus))
    exporter = _Exporter(sim, {gpu: rank for rank, gpu in enumerate(gpus)})
    for stage, stage_groups in enumerate(sim.groups):
        for group in stage_groups:
            exporter.group(group, sim.streams[stage])
            yield from exporter.done(group)


def iteration_graphs(spec: IterationSpec) -> tuple[dict[int, list[GraphNode]], int]:
    """Every rank's graph (:func:`iter_rank_graphs`) at once, and the world size."""
    return dict(iter_rank_graphs(spec)), len(spec.topology.gpus)
