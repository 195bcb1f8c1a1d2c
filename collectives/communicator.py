"""The communicator: runs collectives on a simulated cluster as flows.

A :class:`Communicator` ties a :class:`~simcore.Simulation` to a
:class:`~topology.Topology`: it registers every topology link in the flow network with its
achievable capacity (nominal bandwidth × link efficiency), builds plans
(:mod:`collectives.catalog`: ring, tree, NVLS, NVLS-tree, CollNet, PXN) and caches them,
resolves ``auto`` algorithm/protocol the way NCCL's tuner does — among the algorithms the
hardware offers, the candidate with the least predicted time for this size on this
topology — and runs a call as one flow (``coflow``) or a flow per step (``step``).
A call is a SimPy process whose value is a :class:`CollectiveRecord`.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import simpy
from distsim_gpu.collectives.algorithms import OPS, PlanDrafts
from distsim_gpu.collectives.alltoall_hier import alltoall_plans
from distsim_gpu.collectives.catalog import ALGORITHM_PROTOCOLS, candidates, drafted_plan
from distsim_gpu.collectives.deepep import deepep_plans, sm_bound_factor
from distsim_gpu.collectives.params import ALGORITHMS, FIDELITIES, PROTOCOLS, CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.collectives.sharp import fabric_reduces
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.network import LinkSet, LinkUsage
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from simpy.events import URGENT

__all__ = ["CollectiveRecord", "Communicator"]

LinkId = Hashable


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One finished call: what ran, how, when (seconds)."""

    op: str
    algorithm: str
    protocol: str
    fidelity: str
    num_ranks: int
    channels: int
    size_bytes: float
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class Communicator:
    """Collectives and point-to-point transfers of one simulation on one topology."""

    def __init__(self, sim: Simulation, topology: Topology,
                 params: CommParams | None = None) -> None:
        self.sim = sim
        self.topology = topology
        self.params = params or CommParams()
        self.capacity: dict[LinkId, float] = {}
        network = sim.network
        for link in topology.links():
            if network.has_link(link.id):
                # Another job's communicator on the same fabric (workloads.job.jobs) put it in.
                capacity = network.capacity(link.id)
            else:
                capacity = link.bandwidth_bytes_per_s * self.params.efficiency_of(link.kind)
                network.add_link(link.id, capacity)
            self.capacity[link.id] = capacity
        self._plans: dict[tuple[Any, ...], CollectivePlan] = {}
        # Ring and tree plans before their protocol, so that weighing ll, ll128 and simple
        # builds each plan's routes and streams once (collectives.algorithms.PlanDraft).
        self._drafts = PlanDrafts(topology, self.params)
        self._alltoall_plans: dict[tuple[Any, ...], list[CollectivePlan]] = {}
        self._deepep_factors: dict[float, float] = {}
        # Network link sets of plan steps, resolved once (keyed by the step object, which
        # the plan cache keeps alive).
        self._link_sets: dict[int, tuple[StepShape, LinkSet]] = {}
        # Bottleneck seconds per byte of each plan's steps (keyed like the link sets).
        self._bottlenecks: dict[int, tuple[CollectivePlan, tuple[float, ...]]] = {}
        # What ``choose`` and ``pairs_plan`` picked per call shape: a training iteration
        # repeats the same few calls many thousand times.
        self._chosen: dict[tuple[Any, ...], CollectivePlan] = {}
        self._candidates: dict[tuple[Any, ...], tuple[str, ...]] = {}
        # A call's single flow at coflow fidelity per (plan id, size): its link set, wire
        # bytes and latency (pure functions of the frozen plan and the size, which a
        # training run repeats by the million; the plan is kept to check the id).
        self._coflows: dict[tuple[int, float], tuple[CollectivePlan, LinkSet, float, float]] = {}
        self._fabric_sharp: bool | None = None  # every fabric switch aggregates (SHARP)

    # ------------------------------------------------------------------ planning
    def plan(self, op: str, group: Sequence[str], *, algorithm: str, protocol: str,
             root: str | None = None, peer: str | None = None) -> CollectivePlan:
        """The (cached) plan for a concrete algorithm and protocol."""
        key = (op, tuple(group), algorithm, protocol, root, peer)
        cached = self._plans.get(key)
        if cached is None:
            cached = drafted_plan(self._drafts, group, op, algorithm=algorithm,
                                  protocol=protocol, root=root, peer=peer)
            self._plans[key] = cached
        return cached

    def choose(self, op: str, group: Sequence[str], size_bytes: float, *,
               algorithm: str | None = None, protocol: str | None = None,
               root: str | None = None, peer: str | None = None) -> CollectivePlan:
        """The plan to run: ``auto`` picks the least predicted uncontended time."""
        key = (op, tuple(group), size_bytes, algorithm, protocol, root, peer)
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = self._choose(op, group, size_bytes, algorithm,
                                                      protocol, root, peer)
        return chosen

    def _choose(self, op: str, group: Sequence[str], size_bytes: float,
                algorithm: str | None, protocol: str | None, root: str | None,
                peer: str | None) -> CollectivePlan:
        algorithm = check_choice(algorithm or self.params.algorithm, ALGORITHMS,
                                 key="algorithm")
        protocol = check_choice(protocol or self.params.protocol, PROTOCOLS, key="protocol")
        check_choice(op, OPS, key="op", what="collective")
        if op == "alltoall" and (self.params.all_to_all != "flat"
                                 or len(self.params.alltoall_weights) == len(group) > 1):
            return self._choose_alltoall(group, size_bytes, protocol)
        algorithms = [algorithm]
        if algorithm == "auto":
            algorithms = list(self.candidates(op, group, peer=peer))
            if protocol != "auto":
                # An algorithm that cannot run the protocol asked for is no candidate.
                algorithms = [a for a in algorithms if protocol in ALGORITHM_PROTOCOLS[a]]
        best: tuple[float, CollectivePlan] | None = None
        for algo in algorithms:
            protocols = [protocol] if protocol != "auto" else ALGORITHM_PROTOCOLS[algo]
            for proto in protocols:
                candidate = self.plan(op, group, algorithm=algo, protocol=proto, root=root,
                                      peer=peer)
                time_s = self.time_s(candidate, size_bytes)
                if best is None or time_s < best[0]:
                    best = (time_s, candidate)
        assert best is not None  # algorithms and protocols are never empty
        return best[1]

    def _choose_alltoall(self, group: Sequence[str], size_bytes: float,
                         protocol: str) -> CollectivePlan:
        """A skewed or hierarchical all-to-all (``params.all_to_all``,
        :mod:`collectives.alltoall_hier`): of the plans it weighs, the least predicted
        uncontended time."""
        protocols = [protocol] if protocol != "auto" else ALGORITHM_PROTOCOLS["pxn"]
        best: tuple[float, CollectivePlan] | None = None
        # DeepEP's SMs spend a time per token: its plan is the token size's (a dispatch's
        # and a combine's differ under FP8; collectives.deepep) through the factor by which
        # the SMs slow its NVLink copies, so sizes of the same factor share a plan.
        deepep = self.params.all_to_all == "deepep"
        token_bytes = self.params.token_bytes(size_bytes) if deepep else 0.0
        factor = self._deepep_factor(token_bytes) if deepep else 1.0
        for proto in protocols:
            key = ("alltoall_hier", tuple(group), proto, factor)
            plans = self._alltoall_plans.get(key)
            if plans is None:
                plans = self._alltoall_plans[key] = (
                    deepep_plans(self.topology, group, self.params, proto, token_bytes)
                    if deepep else alltoall_plans(self.topology, group, self.params, proto))
            for plan in plans:
                time_s = self.time_s(plan, size_bytes)
                if best is None or time_s < best[0]:
                    best = (time_s, plan)
        assert best is not None  # a mode gives at least one plan
        return best[1]

    def _deepep_factor(self, token_bytes: float) -> float:
        """:func:`collectives.deepep.sm_bound_factor` of tokens of ``token_bytes``
        (cached: it sums the NVLink ports of the cluster's first GPU)."""
        found = self._deepep_factors.get(token_bytes)
        if found is None:
            found = self._deepep_factors[token_bytes] = sm_bound_factor(
                self.topology, self.params, token_bytes)
        return found

    def candidates(self, op: str, group: Sequence[str], *,
                   peer: str | None = None) -> tuple[str, ...]:
        """The algorithms ``auto`` weighs for ``op`` over ``group`` (cached; see
        :func:`collectives.catalog.candidates`)."""
        key = ("candidates", op, tuple(group), peer)
        found = self._candidates.get(key)
        if found is None:
            if self._fabric_sharp is None:
                self._fabric_sharp = fabric_reduces(self.topology)
            found = self._candidates[key] = candidates(self.topology, group, op, self.params,
                                                       peer=peer,
                                                       fabric_sharp=self._fabric_sharp)
        return found

    def algorithms_chosen(self, op: str) -> dict[str, int]:
        """How many call shapes (group and size) of ``op`` ran each algorithm ``choose``
        picked, in the order first picked: what ``auto`` made of this run."""
        counts: dict[str, int] = {}
        for key, plan in self._chosen.items():
            if key[0] == op:
                counts[plan.algorithm] = counts.get(plan.algorithm, 0) + 1
        return counts

    def estimate_s(self, op: str, group: Sequence[str], size_bytes: float,
                   **choices: Any) -> float:
        """Closed-form time of a call alone on the network (no simulation)."""
        return self.time_s(self.choose(op, group, size_bytes, **choices), size_bytes)

    def time_s(self, plan: CollectivePlan, size_bytes: float) -> float:
        """Closed-form uncontended time of ``plan`` at ``size_bytes`` (bottlenecks cached)."""
        cached = self._bottlenecks.get(id(plan))
        if cached is None or cached[0] is not plan:
            cached = (plan, plan.seconds_per_byte(self.capacity))
            self._bottlenecks[id(plan)] = cached
        return plan.uncontended_time_s(size_bytes, self.capacity, seconds_per_byte=cached[1])

    def _link_set(self, step: StepShape) -> LinkSet:
        cached = self._link_sets.get(id(step))
        if cached is None or cached[0] is not step:
            cached = (step, self.sim.network.link_set(step.link_streams))
            self._link_sets[id(step)] = cached
        return cached[1]

    def _fidelity(self, fidelity: str | None) -> str:
        """``fidelity`` or the configured one, checked: :func:`check_choice`'s answer,
        without its call where the value is valid (every call of a run checks it)."""
        value = fidelity or self.params.fidelity
        if value.__class__ is str and value in FIDELITIES:
            return value
        return check_choice(value, FIDELITIES, key="fidelity")

    # ------------------------------------------------------------------ running
    def collective(self, op: str, group: Sequence[str], size_bytes: float, *,
                   algorithm: str | None = None, protocol: str | None = None,
                   fidelity: str | None = None, root: str | None = None,
                   tag: Any = None) -> simpy.Process:
        """Start a collective now; the process's value is its :class:`CollectiveRecord`.

        ``size_bytes`` follows nccl-tests: the buffer each rank reduces for all_reduce,
        the full gathered buffer for all_gather/reduce_scatter, each rank's send buffer
        for alltoall, the message for broadcast/reduce/sendrecv.
        """
        fidelity = self._fidelity(fidelity)
        if not size_bytes >= 0:
            raise ConfigError(f"size must be >= 0 bytes, got {size_bytes!r}")
        plan = self.choose(op, group, size_bytes, algorithm=algorithm, protocol=protocol,
                           root=root)
        return self.sim.env.process(self._run(plan, float(size_bytes), fidelity, tag))

    def start(self, plan: CollectivePlan, size_bytes: float, *, fidelity: str | None = None,
              tag: Any = None) -> simpy.Event:
        """Start a call of ``plan`` (from :meth:`choose`) now: :meth:`collective` for a
        caller that holds the plan already (the iteration's tensor-parallel calls, which
        repeat the same few by the million); the event's value is its
        :class:`CollectiveRecord`.  A coflow is a :class:`_CoflowCall`, the same events as
        the process :meth:`collective` starts, without the process."""
        fidelity = self._fidelity(fidelity)
        if not size_bytes >= 0:
            raise ConfigError(f"size must be >= 0 bytes, got {size_bytes!r}")
        if fidelity == "coflow":
            return _CoflowCall(self, plan, float(size_bytes), tag)
        return self.sim.env.process(self._run(plan, float(size_bytes), fidelity, tag))

    def send(self, src: str, dst: str, size_bytes: float, *, protocol: str | None = None,
             fidelity: str | None = None, tag: Any = None) -> simpy.Process:
        """Point-to-point transfer ``src`` → ``dst`` (pipeline activations, …)."""
        fidelity = self._fidelity(fidelity)
        # Not the configured algorithm (an all-reduce's): a send goes straight or by PXN.
        plan = self.choose("p2p", [src], size_bytes, algorithm="auto", protocol=protocol,
                           peer=dst)
        return self.sim.env.process(self._run(plan, float(size_bytes), fidelity, tag))

    def pairs_plan(self, pairs: Sequence[tuple[str, str]], size_bytes: float, *,
                   protocol: str | None = None) -> CollectivePlan:
        """The plan of simultaneous sends ``src → dst`` of ``size_bytes`` each."""
        key = ("pairs", tuple(pairs), size_bytes, protocol)
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = self._pairs_plan(pairs, size_bytes, protocol)
        return chosen

    def _pairs_plan(self, pairs: Sequence[tuple[str, str]], size_bytes: float,
                    protocol: str | None) -> CollectivePlan:
        protocol = check_choice(protocol or self.params.protocol, PROTOCOLS, key="protocol")
        protocols = [protocol] if protocol != "auto" else ["ll", "ll128", "simple"]
        best: tuple[float, CollectivePlan] | None = None
        for proto in protocols:
            key = ("pairs", tuple(pairs), proto)
            plan = self._plans.get(key)
            if plan is None:
                plan = self._drafts.pairs_plan(pairs, protocol=proto)
                self._plans[key] = plan
            time_s = self.time_s(plan, size_bytes)
            if best is None or time_s < best[0]:
                best = (time_s, plan)
        assert best is not None
        return best[1]

    def run_plan(self, plan: CollectivePlan, size_bytes: float, *,
                 fidelity: str | None = None, tag: Any = None) -> simpy.Event:
        """Run a plan from :meth:`choose` or :meth:`pairs_plan` now, as flows.

        Returns an event that fires when the call is done: the flow's own ``done`` for a
        one-step coflow (no process needed), else a process.
        """
        fidelity = self._fidelity(fidelity)
        if fidelity == "coflow" and len(plan.steps) == 1:
            links, wire_bytes, latency_s = self._coflow_call(plan, size_bytes)
            return self.sim.network.transfer(links, wire_bytes, latency_s, tag).done
        return self.sim.env.process(self._run(plan, float(size_bytes), fidelity, tag))

    def plan_links(self, plan: CollectivePlan) -> set[LinkId]:
        """Every link a plan's streams cross."""
        return {link for step in plan.steps for link in step.link_streams}

    def solo_usages(self, plan: CollectivePlan, size_bytes: float, *,
                    fidelity: str | None = None, tag: Any = None,
                    ) -> tuple[tuple[float, LinkUsage], ...]:
        """The flows :meth:`run_plan` would start for ``plan``, had they the network to
        themselves: per flow, when its bytes start moving (seconds after the call began,
        its latency paid) and what it does to its links (:meth:`FlowNetwork.solo_usage`).

        For the link statistics of a call timed by its closed form instead of run
        (:meth:`FlowNetwork.record_usage`); mirrors :meth:`_run` step for step.
        """
        fidelity = self._fidelity(fidelity)
        network = self.sim.network
        if fidelity == "coflow":
            links, wire_bytes = self._coflow(plan, size_bytes)
            return ((plan.latency_s, network.solo_usage(links, wire_bytes, tag)),)
        flows: list[tuple[float, LinkUsage]] = []
        at = plan.base_latency_s
        wire = size_bytes / plan.protocol_efficiency
        for step in plan.steps:
            usage = network.solo_usage(self._link_set(step),
                                       step.stream_bytes(wire, plan.chunk_bytes), tag)
            for _ in range(step.repeat):
                at += step.latency_s
                flows.append((at, usage))
                at += usage.duration_s
        return tuple(flows)

    def _coflow(self, plan: CollectivePlan, size_bytes: float
                ) -> tuple[LinkSet | dict[LinkId, float], float]:
        """The single flow of a call at coflow fidelity: its weighted links and wire bytes."""
        if len(plan.steps) == 1:
            # One step: the coflow crosses exactly that step's links, resolved once.
            return self._link_set(plan.steps[0]), plan.coflow_bytes(size_bytes)
        wire_bytes, links = plan.coflow(size_bytes)
        return links, wire_bytes

    def _coflow_call(self, plan: CollectivePlan, size_bytes: float,
                     ) -> tuple[LinkSet, float, float]:
        """:meth:`_coflow`'s links (resolved to a link set, as ``transfer`` would resolve
        them), wire bytes and the plan's latency, once per plan and size: a run repeats
        each call shape thousands of times, and a plan is frozen."""
        key = (id(plan), size_bytes)
        cached = self._coflows.get(key)
        if cached is None or cached[0] is not plan:
            links, wire_bytes = self._coflow(plan, size_bytes)
            if not isinstance(links, LinkSet):
                links = self.sim.network.link_set(links)
            cached = self._coflows[key] = (plan, links, wire_bytes, plan.latency_s)
        return cached[1], cached[2], cached[3]

    def _run(self, plan: CollectivePlan, size_bytes: float, fidelity: str,
             tag: Any) -> Generator[simpy.Event, Any, CollectiveRecord]:
        env = self.sim.env
        network = self.sim.network
        start = env.now
        if fidelity == "coflow":
            links, wire_bytes, latency_s = self._coflow_call(plan, size_bytes)
            yield network.transfer(links, wire_bytes, latency_s, tag).done
        else:
            pending_latency = plan.base_latency_s
            wire = size_bytes / plan.protocol_efficiency
            for step in plan.steps:
                step_bytes = step.stream_bytes(wire, plan.chunk_bytes)
                links = self._link_set(step)
                for _ in range(step.repeat):
                    flow = network.transfer(links, step_bytes,
                                            step.latency_s + pending_latency, tag)
                    pending_latency = 0.0
                    yield flow.done
            if pending_latency > 0:
                yield env.timeout(pending_latency)
        return CollectiveRecord(plan.op, plan.algorithm, plan.protocol, fidelity,
                                plan.num_ranks, plan.channels, size_bytes, start, env.now)


class _CoflowCall(simpy.Event):
    """A call at coflow fidelity as :meth:`Communicator._run`'s process runs it, event for
    event, without the process: an urgent start now (the process's ``Initialize``), which
    starts the flow; when the flow is done, this event succeeds with the call's record (the
    process ending).  The same events are scheduled in the same order at the same
    priorities, so a run is the same to the last bit; a million tensor-parallel calls save
    a generator, two resumptions and a ``StopIteration`` each."""

    def __init__(self, comm: Communicator, plan: CollectivePlan, size_bytes: float,
                 tag: Any) -> None:
        env = comm.sim.env
        super().__init__(env)
        self._call = (comm, plan, size_bytes, tag)
        self._start_s = 0.0
        begin = simpy.Event(env)  # born triggered, scheduled urgent: as Initialize is
        begin._ok = True
        begin._value = None
        begin.callbacks.append(self._begin)
        env.schedule(begin, URGENT)

    def _begin(self, _event: simpy.Event) -> None:
        comm, plan, size_bytes, tag = self._call
        self._start_s = self.env.now
        links, wire_bytes, latency_s = comm._coflow_call(plan, size_bytes)
        flow = comm.sim.network.transfer(links, wire_bytes, latency_s, tag)
        flow.done.callbacks.append(self._end)

    def _end(self, _event: simpy.Event) -> None:
        _comm, plan, size_bytes, _tag = self._call
        self.succeed(CollectiveRecord(plan.op, plan.algorithm, plan.protocol, "coflow",
                                      plan.num_ranks, plan.channels, size_bytes,
                                      self._start_s, self.env.now))
