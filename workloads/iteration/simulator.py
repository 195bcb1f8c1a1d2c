"""One training iteration, simulated: per-GPU op streams composed by the parallel strategy.

The unit of simulation is a **rank group**: the ``tp`` GPUs of one pipeline stage of one
data-parallel replica, which meet in a collective after every block and so move in
lockstep; one SimPy process walks their shared op stream (a straggler slows them all).
The streams are typed ops (:mod:`workloads.iteration.ops`), one per pipeline stage, built
by :mod:`workloads.iteration.streams`; this module runs them, each op type by its own
handler, with :mod:`workloads.iteration.timeline`'s accounting.  Everything between rank
groups is simulated explicitly:

* **pipeline** — each stage runs its schedule (:mod:`workloads.strategy.schedule`); an
  activation or its gradient goes to the neighbour as point-to-point flows, one per TP
  rank, on the real route; sends are asynchronous, receives block (Megatron-LM's).
* **data parallel** — gradients are reduced in buckets as the last micro-batch's backward
  produces them (all-reduce, or reduce-scatter with ZeRO ≥ 1) on a stream of their own;
  the optimizer step waits for all; ZeRO ≥ 1 all-gathers the updated parameters after it
  (``overlap_param_gather``: by bucket during the next forward, docs/overlaps.md).
  ZeRO-3/FSDP gathers each layer's parameters before its forward and backward
  (prefetching the next) and reduce-scatters its gradients after, every micro-batch.
* **expert parallel** — a MoE layer's two all-to-alls a pass (on their own stream when
  overlapped).  Compute overlapped with a collective on a stream of its own runs on the
  SMs its NCCL kernel leaves (:mod:`workloads.iteration.nccl_sms`).  **Iteration end** —
  tied embeddings' gradients all-reduced between the first and last stage, the
  gradient-norm reduction, then the optimizer.

Collectives are :class:`~collectives.Communicator` flows that contend for links with
everything else.  A tensor-parallel collective is timed by its closed form instead, folded
with the surrounding compute into one event, when nothing else can be on its links: no
pipeline send can cross them and its stage's data-parallel collectives have not started
(exact).  The link statistics still count a folded collective's bytes and busy seconds
on its links (:meth:`~collectives.Communicator.solo_usages`).

**Symmetry folding.**  Data-parallel replicas that run the same schedule on the same view
of the fabric are simulated once (:mod:`workloads.iteration.folding`): the unit's flows are
entered with its images', collectives spanning replicas run in full, and the images' GPUs
get their unit's accounting (:attr:`IterationResult.folding` says which ran and why).

Time on a rank group's main stream is split into **compute**, **exposed communication**
(blocked in a collective, or waiting for activations already in flight), **bubble**
(waiting for a pipeline neighbour that has not sent yet, and for the slowest stage at the
end) and **idle** (waiting for late data-parallel or expert peers, and the rest).
**Communication** is the time any collective of the group was in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import simpy
from distsim_gpu.collectives import Communicator
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.simcore.errors import SimulationError
from distsim_gpu.simcore.gc_batch import young_collections_batched
from distsim_gpu.simcore.network import LinkUsage
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.workloads.cost.traffic import seq_len_of
from distsim_gpu.workloads.iteration.call_plans import CallPlans, joint_coflow
from distsim_gpu.workloads.iteration.folding import dp_apart_from_tp as dp_apart
from distsim_gpu.workloads.iteration.folding import exclusive_tp, fold_plan, unit_rows
from distsim_gpu.workloads.iteration.nccl_sms import NcclSmShare
from distsim_gpu.workloads.iteration.offload_step import OffloadStep, offload_streams
from distsim_gpu.workloads.iteration.ops import (
    Barrier,
    Collective,
    Fused,
    Op,
    Recv,
    Send,
    TpOverlap,
    Wait,
)
from distsim_gpu.workloads.iteration.rank_groups import (
    call_lanes,
    check_memory,
    check_stragglers,
    make_group,
    stage_lanes,
    stage_memory,
)
from distsim_gpu.workloads.iteration.records import (
    GpuTimes,
    IterationResult,
    IterationSpec,
    per_gpu_times,
)
from distsim_gpu.workloads.iteration.run_hints import RunHints
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.iteration.timeline import (
    CRITICAL_KINDS,
    Meeting,
    Meetings,
    PathEntry,
    RankGroup,
    critical_path,
    started,
)
from distsim_gpu.workloads.iteration.tp_overlap_run import run_tp_overlap
from distsim_gpu.workloads.iteration.tracing import record_link_counters, trace_metadata
from distsim_gpu.workloads.strategy.dimensions import (
    PeerGroup,
    Peering,
    block_layout,
    peer_degrees,
    peer_group,
    peer_groups,
    stage_sets,
)
from distsim_gpu.workloads.strategy.parallel import Placement, check_strategy
from distsim_gpu.workloads.strategy.schedule import mirror_pair, stage_of

__all__ = ["CRITICAL_KINDS", "GpuTimes", "IterationResult", "IterationSpec", "PathEntry",
           "simulate_iteration"]

# Tensor parallelism's communicator: its calls run in the fast paths below (fused into the
# compute stream, or timed in closed form on links nobody else uses).
_TP = peer_group("tp")
# What runs an op on a rank group's main stream: a generator to wait on, or None when the
# op only launches something (a send, an asynchronous collective).
_Handler = Callable[[RankGroup, Any], Generator[simpy.Event, Any, None] | None]
# The flows one collective call stands for: (start after the call began, link usage) each.
_SoloFlows = tuple[tuple[float, LinkUsage], ...]


class IterationSimulator:
    """Runs every rank group's op stream (:mod:`workloads.iteration.streams`) on one simulation.

    ``sim``: the simulation to run on (several jobs share one, :mod:`workloads.job.jobs`);
    by default its own, seeded from the spec.  :meth:`run` is :meth:`start`, the
    simulation's run and :meth:`finish` (a caller that shares ``sim`` calls the three)."""

    def __init__(self, spec: IterationSpec, sim: Simulation | None = None) -> None:
        self.spec = spec
        model, par, train = spec.model, spec.parallel, spec.training
        topo = spec.topology
        self.microbatches = spec.microbatches or check_strategy(
            model, par, train, num_gpus=len(topo.gpus), source=spec.source,
            seq_len=seq_len_of(model, train))
        self.seq_len = seq_len_of(model, train)
        check_stragglers(spec)
        self.sim = sim if sim is not None else Simulation(spec.seed, trace=spec.trace)
        self.env = self.sim.env
        self.comm = Communicator(self.sim, topo, spec.comm)
        self._sm_share = NcclSmShare(spec.costs, spec.comm, par)
        placement = Placement(par)
        # A replica is one (cp, dp) pair: a stage's dp·cp rank groups reduce together.
        self.groups = [[make_group(spec, placement, s, d) for d in range(par.dp_cp)]
                       for s in range(par.pp)]
        self.everyone = [g for stage_groups in self.groups for g in stage_groups]
        self._stage_lanes = {name: [stage_lanes(row, par.tp, stage_sets(peer, par))  # HSDP's
                                    for row in self.groups]  # sets, or every replica's
                             for name, peer in peer_groups().items()
                             if peer.peering is Peering.STAGE}
        self.memory = [stage_memory(spec, s, self.seq_len, self.microbatches)
                       for s in range(par.pp)]
        if not spec.allow_oom:
            check_memory(spec, self.memory, self.groups)
        self.meetings = Meetings(self.env)
        self._init_lookups()
        self._build_streams(spec)
        self._fold(spec)
        self._handlers: dict[type, _Handler] = {
            Fused: self._run_fused, Collective: self._run_collective, Send: self._send,
            Recv: self._receive, Wait: self._run_wait, Barrier: self._barrier,
            TpOverlap: partial(run_tp_overlap, self.env, self._tp_call, self.sim.tracer)}

    def _init_lookups(self) -> None:
        """Who takes part in each collective and the caches of its plans and flows."""
        par = self.spec.parallel
        self._p2p: dict[Any, simpy.Event] = {}
        self._p2p_sent: dict[Any, tuple[float, tuple[RankGroup, int]]] = {}
        self._tp_time: dict[tuple[str, float, tuple[str, ...]], float] = {}
        self._send_plans: dict[tuple[RankGroup, RankGroup], CollectivePlan] = {}
        self._tp_joint: dict[tuple[RankGroup, str, float], Any] = {}
        self._calls = CallPlans(self.comm, self.env)  # plans by call shape, chosen once
        # A collective's peers by its op's group name (workloads.strategy.dimensions).
        self._peer_groups = peer_groups()
        self._block = peer_degrees(par)
        self._layouts = {name: block_layout(group, par)[1] for name, group in
                         self._peer_groups.items() if group.peering is Peering.BLOCK}
        self._own = frozenset(name for name, peer in self._peer_groups.items()
                              if peer.peering is Peering.OWN)
        # A ring communicator's (context parallelism's) plan per (stage, block, size).
        self._ring_plans: dict[tuple[int, int, float], CollectivePlan] = {}
        self._block_lanes: dict[tuple[Any, ...], tuple[list[list[str]], int]] = {}
        # A folded op's TP link usage per (group, op id); a call's flows per (plan id, size).
        self._fold_usage: dict[tuple[RankGroup, int], LinkUsage | None] = {}
        self._usage_by_shape: dict[tuple[RankGroup, tuple[Any, ...]], LinkUsage | None] = {}
        self._fold_flows: dict[tuple[int, float], tuple[CollectivePlan, _SoloFlows]] = {}

    def _build_streams(self, spec: IterationSpec) -> None:
        """Each stage's op stream, with the host's optimizer step where it is offloaded."""
        model, par, train = spec.model, spec.parallel, spec.training
        exclusive = spec.fold_exclusive_tp and exclusive_tp(self.comm, self.groups, par)
        hints = RunHints(exclusive_tp=exclusive, tp_time_s=self._tp_analytic_s,
                         dp_apart=exclusive and dp_apart(self.comm, self.groups, par),
                         all_to_all=spec.comm.all_to_all)
        builder = StreamBuilder(model, par, train, spec.costs, microbatches=self.microbatches,
                                hints=hints)
        self.streams = [builder.stage_stream(s) for s in range(par.pp)]
        self.offload: tuple[OffloadStep, ...] = ()
        if par.offload.enabled:  # the step on the host (workloads.iteration.offload_step)
            self.streams, steps = offload_streams(spec.topology, model, par, self.streams,
                                                  microbatches=self.microbatches,
                                                  source=spec.source)
            self.offload = tuple(steps)

    def _fold(self, spec: IterationSpec) -> None:
        """Folding: replicas cut into units of ``unit`` (an expert-parallel block, a CP
        ring: their traffic stays inside; else one replica, or one ring inside an expert
        block); each simulated unit stands for ``stands_for``'s (itself first); unfolded,
        every replica stands for itself."""
        # ``sources``: folded inside expert blocks, the blocks each one's calls run (fold_plan).
        self.unit, self.stands_for, self.folding, self.sources = fold_plan(
            spec, self.comm, self.groups, self.streams)
        self.folded = bool(self.stands_for)
        if not self.folded:
            self.unit, self.stands_for = spec.parallel.dp_cp, {0: (0,)}
        # Per stage, the rank groups that run (simulated units, in replica order).
        self.rows = unit_rows(self.groups, sorted(self.stands_for), self.unit)
        self.active = [g for row in self.rows for g in row]

    def _tp_analytic_s(self, kind: str, size: float, stage: int) -> float:
        return self._analytic_s(kind, size, tuple(self.groups[stage][0].gpus))

    def _analytic_s(self, kind: str, size: float, gpus: tuple[str, ...]) -> float:
        """A call's closed-form time alone on the network (cached)."""
        key = (kind, size, gpus)
        if key not in self._tp_time:
            self._tp_time[key] = self.comm.estimate_s(kind, list(gpus), size)
        return self._tp_time[key]

    def _member_lanes(self, members: list[RankGroup], peer: PeerGroup,
                      ) -> tuple[list[list[str]], int]:
        """A call among ``members``: its communicators, folded with their images', and how
        many are the members' own (:func:`~workloads.iteration.rank_groups.call_lanes`),
        built once: every call of a block (each member's, each layer's) is alike."""
        key = (peer.name, members[0].stage, members[0].replica, len(members))
        lanes = self._block_lanes.get(key)
        if lanes is None:
            size, row = self._block.get(peer.name, 0), self.groups[members[0].stage]
            images = ([row[b * size:b * size + size]  # the blocks this one stands for
                       for b in self.sources[members[0].replica // size]]
                      if self.sources is not None and peer.peering is Peering.BLOCK
                      else self._image_members(members))
            lanes = self._block_lanes[key] = call_lanes(
                images, self._layouts.get(peer.name), self.spec.parallel.tp)
        return lanes

    # ----------------------------------------------------------------- running
    def run(self) -> IterationResult:
        self.start()
        self.sim.run()
        return self.finish()

    def start(self) -> list[simpy.Process]:
        """Start the process of every simulated rank group; the processes."""
        return [self.env.process(self._rank_group(group, self.streams[stage]))
                for stage, row in enumerate(self.rows) for group in row]

    def finish(self) -> IterationResult:
        """The result, once the simulation has run; an error if some group never ended."""
        if self.meetings.unfinished() or self._p2p:
            raise SimulationError("the iteration deadlocked: some rank groups wait for "
                                  "peers that never came (a bug in the schedule)",
                                  source=self.spec.source)
        return _result(self)

    def _rank_group(self, group: RankGroup, stream: list[Op],
                    ) -> Generator[simpy.Event, Any, None]:
        handlers = self._handlers
        for op in stream:
            waiting = handlers[type(op)](group, op)
            if waiting is not None:
                yield from waiting
        group.end_s = self.env.now

    def _run_fused(self, group: RankGroup, op: Fused) -> Generator[simpy.Event, Any, None]:
        """Compute, then its closed-form TP collectives; compute slows on a straggler."""
        env, tracer = self.env, self.sim.tracer
        start, key = env.now, (group, id(op))  # the op object lives as long as the streams
        slowdown = group.slowdown
        op = op.slowed(slowdown) if op.pairs else op  # a straggler hides less of them
        busy = self._sm_share.busy(group.streams)  # NCCL calls in flight take SMs
        if busy:
            computed = yield from self._sm_share.run_beside(env, busy, op, slowdown)
        else:  # NcclSmShare.run's quiet case, without a generator of its own
            computed = op.slowed_compute_s(slowdown)
            yield env.timeout(computed + op.comm_s)
        scale = op.gpu_scale(computed, slowdown)  # on the GPU's steps; the host's keep theirs
        group.add_fused(start, env.now, op, computed)  # compute, host and exposed
        usage = self._fold_usage.get(key, False)
        if usage is False:
            usage = self._fold_usage[key] = self._folded_usage(group, op)
        if usage is not None:  # its collectives' bytes and busy time, as flows' would
            self.sim.network.record_usage(usage)
        spans = group.compute_intervals  # where a faster member splits them (RankGroup)
        if not (op.comm_s or tracer.enabled or spans is not None):
            return  # no interval to record, no span to draw
        offset = 0.0
        for step, duration in zip(op.steps, op.durations_s):
            is_comm = isinstance(step, Collective)
            length = duration if is_comm or step.host else duration * scale
            if is_comm:
                group.comm_intervals.append((start + offset, start + offset + length))
                if tracer.enabled:
                    for at, flow in self._fold_flows_of(group, step):
                        self.sim.network.show_usage(flow, start + offset + at)
            elif spans is not None and not step.host:  # the host's wait is no compute
                spans.extend((start + offset, start + offset + length))
            if tracer.enabled:
                args = {"collective": step.op} if is_comm else step.trace_args()
                thread = _TP.comm_kind if is_comm else "host" if step.host else "compute"
                tracer.span(group.name, thread, step.label, start + offset,
                            start + offset + length, **args)
            offset += length

    def _folded_usage(self, group: RankGroup, op: Fused) -> LinkUsage | None:
        """The total link usage of ``op``'s collectives on ``group``'s links (None: none);
        alike for ops with the same collectives, so worked out once per group and (op,
        size) sequence — not per op: at 16,384 GPUs each is a sum over 256 images."""
        shape = tuple((step.op, step.size_bytes) for step in op.steps
                      if isinstance(step, Collective))
        if (group, shape) not in self._usage_by_shape:
            self._usage_by_shape[(group, shape)] = self._sum_usage(group, op)
        return self._usage_by_shape[(group, shape)]

    def _sum_usage(self, group: RankGroup, op: Fused) -> LinkUsage | None:
        times: dict[LinkUsage, float] = {}
        for image in self._images(group):  # a folded replica's on its images' links too
            for step in op.steps:
                if isinstance(step, Collective):
                    for _at, flow in self._fold_flows_of(image, step):
                        times[flow] = times.get(flow, 0.0) + 1.0
        return LinkUsage.total(times.items()) if times else None

    def _fold_flows_of(self, group: RankGroup, op: Collective) -> _SoloFlows:
        """The flows a folded collective stands for on ``group``'s own links: the plan
        that would have run it (as :meth:`_tp_flows` would choose it), alone on them."""
        size = op.size_bytes or 0.0
        plan = self.comm.choose(op.op or "", list(group.gpus), size)
        cached = self._fold_flows.get((id(plan), size))
        if cached is None or cached[0] is not plan:
            cached = (plan, self.comm.solo_usages(plan, size, tag=_TP.tag))
            self._fold_flows[(id(plan), size)] = cached
        return cached[1]

    def _run_collective(self, group: RankGroup, op: Collective,
                        ) -> Generator[simpy.Event, Any, None] | None:
        if not op.blocking:
            self._launch_async(group, op)
            return None
        return self._tp_flows(group, op) if op.group in self._own else self._join(group, op)

    def _tp_flows(self, group: RankGroup, op: Collective) -> Generator[simpy.Event, Any, None]:
        """A tensor-parallel collective that may share links: simulated as flows."""
        env, start = self.env, self.env.now
        yield (self._tp_mesh_call(group, op) if op.subgroups
               else self._tp_call(group, op.op or "", op.size_bytes or 0.0))
        now = env.now
        group.path.append((start, now, _TP.comm_kind, op.label, None))
        group.exposed_s += now - start
        group.comm_intervals.append((start, now))
        tracer = self.sim.tracer
        if tracer.enabled:  # a disabled tracer's span records nothing
            tracer.span(group.name, _TP.comm_kind, op.label, start, now, collective=op.op)

    def _tp_call(self, group: RankGroup, op: str, size: float) -> simpy.Event:
        """Start a TP collective of ``group`` and, folded, its images' (they end when it
        does, by symmetry): one coflow over all of them where the call is one coflow."""
        if len(self._images(group)) == 1:  # as Communicator.collective would run it
            return self.comm.start(self._calls.tp_plan(group, op, size), size, tag=_TP.tag)
        key = (group, op, size)
        joint = self._tp_joint.get(key, False)
        if joint is False:
            joint = self._tp_joint[key] = self._joint_coflow(group, op, size)
        if joint is not None:
            links, wire_bytes, latency_s = joint
            return self.sim.network.transfer(links, wire_bytes, latency_s, _TP.tag).done
        events = [self.comm.run_plan(self.comm.choose(op, list(image.gpus), size), size,
                                     tag=_TP.tag) for image in self._images(group)]
        return events[0]

    def _tp_mesh_call(self, group: RankGroup, op: Collective) -> simpy.Event:
        """A 2-D/2.5-D/3-D TP step (:mod:`workloads.strategy.tp_nd`): the call on every
        sub-group of ``group``'s mesh and its images' (folded replicas); done when all are."""
        events = []
        for image in self._images(group):
            for members in op.subgroups or ():
                gpus = [image.gpus[i] for i in members]
                events.append(self.comm.collective(op.op or "", gpus, op.size_bytes or 0.0,
                                                   tag=_TP.tag))
        return self.env.all_of(events)

    def _joint_coflow(self, group: RankGroup, op: str, size: float) -> Any:
        """The coflow of ``group``'s call and its images' (multiplicities summed), as
        ``(links, wire bytes, latency)``; None where the calls do not run as one coflow
        each, or differ in bytes or latency."""
        if self.comm.params.fidelity != "coflow":
            return None
        plans = [self.comm.choose(op, list(image.gpus), size) for image in self._images(group)]
        return joint_coflow(self.sim.network, plans, size)

    def _join(self, group: RankGroup, op: Collective) -> Generator[simpy.Event, Any, None]:
        """A blocking collective among rank groups (expert all-to-all, tied embedding,
        ZeRO parameter gather): it starts when the last member arrives."""
        env, peer = self.env, self._peer(op.group)
        key, members = self._peers(group, peer)
        start = env.now
        if peer.peering is Peering.STAGE:  # over every replica, folded or not
            lanes, wait = self._stage_lanes[peer.name][group.stage], None
        else:  # every image's call beside the simulated one's, done when that is
            lanes, wait = self._member_lanes(members, peer)
        meeting = self.meetings.meet(key, group, members, lambda: self.env.timeout(
            self._analytic_s(op.op, op.size_bytes, tuple(lanes[0]))) if op.latency_bound
            else self._calls.run_lanes(lanes, op.op, op.size_bytes, peer.tag, wait=wait))
        # Between the first and the last stage, waiting for the other is the flush.
        yield from self.meetings.wait(group, meeting, kind=peer.comm_kind, label=op.label,
                                      flush=peer.peering is Peering.ENDS)
        # The span is the collective itself, as the GPU's communication time counts it;
        # waiting for late peers before it is idle time.
        self.sim.tracer.span(group.name, peer.comm_kind, op.label, started(meeting, start), env.now,
                             collective=op.op)

    def _peer(self, name: Any) -> PeerGroup:
        """The communicator an op's ``group`` names (an error naming the valid ones)."""
        return self._peer_groups.get(name) or peer_group(name)

    def _peers(self, group: RankGroup, peer: PeerGroup) -> tuple[Any, list[RankGroup]]:
        """The meeting key and the members of a collective among ``peer`` of ``group``
        (see :class:`~workloads.strategy.dimensions.Peering`)."""
        name, peering = peer.name, peer.peering
        if peering is Peering.ENDS:  # the stage and its mirror (the first and the last)
            pair = mirror_pair(group.stage, self.spec.parallel.pp)
            return ((name, group.replica, pair[0]),
                    [self.groups[s][group.replica] for s in pair])
        calls = group.calls.get(name, 0)
        group.calls[name] = calls + 1
        if peering is Peering.STAGE:
            return (name, group.stage, calls), self.rows[group.stage]
        if peering is Peering.BLOCK:  # consecutive replicas (workloads.strategy.parallel)
            size = self._block[name]
            block = group.replica // size * size
            members = self.groups[group.stage][block:block + size]
            if self.sources is not None and not peer.ring:  # folded inside: simulated ones
                members = [m for m in members if m.replica // self.unit in self.stands_for]
            return (name, group.stage, block, calls), members
        raise SimulationError(f"no collective among {name!r} in an iteration")

    def _launch_async(self, group: RankGroup, op: Collective) -> None:
        """A collective on a communication stream (data-parallel, or among a block); the
        main stream goes on."""
        peer = self._peer(op.group)
        if peer.peering is Peering.BLOCK:
            self._launch_block(group, op, peer)
            return
        if peer.peering is not Peering.STAGE:
            raise SimulationError(f"no asynchronous collective among {peer.name!r}")
        key, members = self._peers(group, peer)
        meeting = self.meetings.get(key)
        meeting.label = op.label
        meeting.kind = peer.comm_kind
        # Over every replica, folded or not: the simulated members stand for the rest.
        lanes = (self._calls.layer_group_lanes(self.groups[group.stage], group.stage,
                                               op.subgroups)
                 if op.subgroups else self._stage_lanes[peer.name][group.stage])
        launch = partial(self._calls.run_lanes, lanes, op.op, op.size_bytes, peer.tag)
        self._on_stream("gather" if op.op == "all_gather" else "reduce", group, meeting,
                        (key, members, launch))
        if op.handle is None:
            group.pending.append(meeting)
        else:
            group.handles[op.handle] = meeting
        if self.sim.tracer.enabled:
            self._trace_async(group, meeting, op.label, op.op or "")

    def _launch_block(self, group: RankGroup, op: Collective, peer: PeerGroup) -> None:
        """An asynchronous call among ``group``'s block (:attr:`Peering.BLOCK`): one step
        of a context-parallel ring (workloads.cost.context_parallel: every rank sends its
        block to the next, on every tensor lane) or an expert all-to-all on its own stream
        (``moe_overlap``, ``fb_overlap``; as ``_join`` runs it, after the one before it) —
        over the block's lanes and, folded, its images', starting when the block has
        arrived; the rank's compute goes on."""
        key, members = self._peers(group, peer)
        meeting = self.meetings.get(key)
        meeting.label = op.label
        meeting.kind = peer.comm_kind
        if peer.ring:
            size = op.size_bytes or 0.0
            plan = self._ring_plan(group.stage, key[2], members, size)
            launch = partial(self.comm.run_plan, plan, size, tag=peer.tag)
        else:
            lanes, wait = self._member_lanes(members, peer)
            launch = partial(self._calls.run_lanes, lanes, op.op, op.size_bytes, peer.tag,
                             wait=wait)
        if peer.ring:
            self.meetings.arrive(meeting, key, group, members, launch)
        else:  # expert all-to-alls: one communication stream (NCCL's, DeepEP's)
            self._on_stream(peer.name, group, meeting, (key, members, launch))
        group.handles[op.handle or op.label] = meeting
        if self.sim.tracer.enabled:
            self._trace_async(group, meeting, op.label, op.op or "")

    def _on_stream(self, stream: str, group: RankGroup, meeting: Meeting,
                   call: tuple[Any, list[RankGroup], Any]) -> None:
        """Join ``meeting`` once the previous call on ``group``'s ``stream`` is done: one
        NCCL stream per kind, a collective after the one before it (DDP's bucket
        all-reduces, FSDP's gathers and reductions, the expert all-to-alls)."""
        key, members, launch = call
        previous = group.streams.get(stream)
        group.streams[stream] = meeting
        if previous is None or previous.done.triggered:
            self.meetings.arrive(meeting, key, group, members, launch)
        else:
            previous.done.callbacks.append(
                lambda _e, m=meeting, k=key, ms=members, f=launch, p=previous:
                self.meetings.arrive(m, k, group, ms, f, cause=p))

    def _ring_plan(self, stage: int, block: int, members: list[RankGroup],
                   size: float) -> CollectivePlan:
        """One ring step's sends — every member's to the next, on every tensor lane — and,
        folded, the images' rings beside it, as one plan."""
        ring = (stage, block, size)
        plan = self._ring_plans.get(ring)
        if plan is None:
            lanes, _own = call_lanes(self._image_members(members), self._layouts.get("cp"),
                                     self.spec.parallel.tp)  # dimensions.cp_lanes
            pairs = [(lane[i], lane[(i + 1) % len(lane)]) for lane in lanes
                     for i in range(len(lane))]
            plan = self._ring_plans[ring] = self.comm.pairs_plan(pairs, size)
        return plan

    def _trace_async(self, group: RankGroup, meeting: Meeting, label: str, op: str) -> None:
        kind = meeting.kind

        def record(_event: simpy.Event) -> None:
            start = meeting.start_s if meeting.start_s is not None else self.env.now
            self.sim.tracer.span(group.name, kind, label, start, self.env.now,
                                 collective=op)

        meeting.done.callbacks.append(record)

    def _run_wait(self, group: RankGroup, op: Wait) -> Generator[simpy.Event, Any, None]:
        if op.handle is not None:
            meeting = group.handles.pop(op.handle)
            return self.meetings.wait(group, meeting, kind=meeting.kind, label=meeting.label)
        return self._wait_pending(group)

    def _wait_pending(self, group: RankGroup) -> Generator[simpy.Event, Any, None]:
        while group.pending:
            pending = group.pending.pop(0)
            yield from self.meetings.wait(group, pending, kind="dp comm", label=pending.label)

    def _barrier(self, group: RankGroup, op: Barrier) -> Generator[simpy.Event, Any, None]:
        """Every rank meets (the gradient norm); a late stage is the pipeline's flush."""
        env = self.env
        began = env.now
        meeting = self.meetings.meet(("barrier", op.label), group, self.active,
                             lambda: env.timeout(0))
        if not meeting.done.triggered:
            yield meeting.done
        if self.spec.parallel.pp > 1:
            group.bubble_s += env.now - began
        else:
            group.idle_s += env.now - began
        self.meetings.record_wait(group, meeting, began, "bubble wait", op.label)

    # ----------------------------------------------------------------- pipeline
    def _receive(self, group: RankGroup, op: Recv) -> Generator[simpy.Event, Any, None]:
        key = (op.pass_name, group.replica, op.microbatch, op.virtual_stage)
        began = self.env.now
        arrived = self._p2p.pop(key, None)
        if arrived is None:
            arrived = self._p2p[key] = self.env.event()
        if not arrived.triggered:
            yield arrived
        self._p2p.pop(key, None)
        sent, sender = self._p2p_sent.pop(key, (began, None))
        now = self.env.now
        waiting_for_sender = max(min(sent, now) - began, 0.0)
        group.bubble_s += waiting_for_sender
        group.exposed_s += now - began - waiting_for_sender
        if sender is not None and sent > began:
            group.path.append((sent, now, "pp transfer", op, sender))
        elif now > began:
            group.path.append((began, now, "pp transfer", op, None))

    def _send(self, group: RankGroup, op: Send) -> None:
        key = (op.pass_name, group.replica, op.microbatch, op.virtual_stage)
        par = self.spec.parallel
        target = self.groups[stage_of(op.virtual_stage, par.pp, par.schedule)][group.replica]
        self._p2p_sent[key] = (self.env.now, (group, len(group.path)))
        waiting = self._p2p.get(key)  # the receiver's event, where it is there already
        start = self.env.now
        if target is group:  # the next chunk lives on this stage: nothing to move
            if waiting is None:
                waiting = self._p2p[key] = self.env.event()
            waiting.succeed()
            return
        plan = self._send_plans.get((group, target))
        if plan is None:
            plan = self._send_plans[(group, target)] = self._send_plan(group, target,
                                                                       op.size_bytes)
        process = self.comm.run_plan(plan, op.size_bytes, tag="pp")

        def arrive(_event: simpy.Event) -> None:
            for member in (group, target):
                member.comm_intervals.append((start, self.env.now))
            # ``to``: the receiver's GPUs are busy with the transfer too.
            self.sim.tracer.span(group.name, "pp send", f"{op.pass_name} mb{op.microbatch}",
                                 start, self.env.now, collective="send", to=target.name)
            if waiting is not None:
                waiting.succeed()

        process.callbacks.append(arrive)
        if waiting is None:
            # The receiver is not there yet: it will wait on the transfer itself, after
            # the accounting above (the callback before its own): one event fewer.
            self._p2p[key] = process

    def _send_plan(self, group: RankGroup, target: RankGroup, size: float) -> CollectivePlan:
        """The sends ``group`` → ``target``, folded: with their images', as one flow.  Its
        protocol is the one a replica's sends alone would take (images that share links
        would make the joint estimate slower than any replica's)."""
        own = self.comm.pairs_plan(list(zip(group.gpus, target.gpus)), size)
        if len(self._images(group)) == 1:
            return own
        pairs = [pair for source, sink in zip(self._images(group), self._images(target))
                 for pair in zip(source.gpus, sink.gpus)]
        return self.comm.pairs_plan(pairs, size, protocol=own.protocol)

    # ----------------------------------------------------------------- folding
    def _images(self, group: RankGroup) -> list[RankGroup]:
        """The rank groups ``group`` stands for: itself first, then its images."""
        if not self.folded:
            return [group]
        row = self.groups[group.stage]
        simulated, offset = divmod(group.replica, self.unit)
        return [row[u * self.unit + offset] for u in self.stands_for[simulated]]

    def _image_members(self, members: list[RankGroup]) -> list[list[RankGroup]]:
        """A collective's members and, folded, their images' (simulated ones first)."""
        images = [self._images(m) for m in members]  # as many each: one unit's groups
        return [list(column) for column in zip(*images, strict=True)]

    def _unfold(self) -> None:
        """Give every image its simulated group's accounting (they ran alike)."""
        for group in self.active:
            for image in self._images(group)[1:]:
                image.compute_s, image.exposed_s = group.compute_s, group.exposed_s
                image.host_s = group.host_s
                image.bubble_s, image.idle_s = group.bubble_s, group.idle_s
                image.end_s = group.end_s
                image.comm_intervals = group.comm_intervals  # shared: the run is over
                image.compute_intervals = group.compute_intervals


# --------------------------------------------------------------------------- results


def _result(simulator: IterationSimulator) -> IterationResult:
    spec = simulator.spec
    simulator._unfold()
    groups = simulator.everyone
    training_s = max(g.end_s for g in groups)
    loader = spec.training.data_loader
    samples = spec.training.global_batch // spec.parallel.dp
    iteration = training_s if loader is None else loader.iteration_s(training_s, samples)
    per_gpu = per_gpu_times(groups, simulator.memory, training_s, spec.parallel.pp,
                             spec.topology, data_wait_s=iteration - training_s)
    flops = spec.model.model_flops_per_iteration(spec.training.global_batch,
                                                 simulator.seq_len)
    # Folded, one group walks what its images did too: the full run's bound on the walk.
    path = critical_path(simulator.active, training_s,
                         [len(simulator._images(g)) for g in simulator.active])
    if iteration > training_s:  # the GPUs wait for the data loader (module docstring)
        last = max(simulator.active, key=lambda g: g.end_s)
        path += (PathEntry(training_s, iteration, "data loading", "waiting for the data "
                           "loader", last.name, last.gpus[0]),)
    return IterationResult(iteration, simulator.microbatches, per_gpu, flops,
                           simulator.env.events_processed, simulator.sim.network.completed_flows,
                           simulator.sim, path, spec.topology, simulator.folding,
                           tuple((g, tuple(simulator._images(g))) for g in simulator.active),
                           simulator.offload,
                           0.0 if loader is None else loader.loading_s(samples),
                           simulator.comm.algorithms_chosen("alltoall"))


def simulate_iteration(spec: IterationSpec) -> IterationResult:
    """Simulate one training iteration of ``spec``; see the module docstring."""
    with young_collections_batched():
        simulator = IterationSimulator(spec)
        if spec.trace:
            record_link_counters(simulator.sim)
        result = simulator.run()
    if spec.trace:
        simulator.sim.tracer.metadata["distsim"] = trace_metadata(
            spec, simulator.everyone, simulator.seq_len, result)
    return result
