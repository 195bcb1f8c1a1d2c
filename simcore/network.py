"""The flow network: links with capacities, flows sharing them max-min fairly over time.

A :class:`Flow` moves ``size_bytes`` over a weighted set of links after a fixed
``latency_s``.  While it transfers, its rate is the max-min fair share
(:mod:`simcore.maxmin`) of the links it crosses; rates change only when the set of
transferring flows changes, so between changes each flow's remaining bytes fall linearly
(processor-sharing arithmetic) and its finish time is known exactly.

How it sits in SimPy (see DESIGN.md, "How SimPy is used"): the network owns no process.
Starting or finishing a flow marks the links it crosses as touched and asks for one
re-solve at the current instant; that request is an event scheduled with a priority
*after* every normal event of the instant, so all flows that start or end at the same
simulated time are batched into a single solve.  The solve covers only the connected
part of the network (flows and links reachable from the touched links); from
``_INCREMENTAL_FROM`` transferring flows on, :class:`~simcore.maxmin_incremental.IncrementalMaxMin`
re-solves only the flows whose rates the change can move, with the same result; meanwhile
the flows' rates, bytes left and finish times live in arrays by solver handle, so a solve
reschedules the flows it moved in a few array operations.  One timer event waits for the
earliest finish; when a rate change brings the finish earlier, the timer armed for the old
finish is retired (:class:`FinishTimer`): it does nothing when it comes, and an environment
that honours the mark (:class:`~simcore.simulation.CountingEnvironment`, every
:class:`~simcore.simulation.Simulation`'s) drops it without moving the clock, so a run ends
at its last real event, not at a finish time that no longer holds.  A flow is finished
when its remaining bytes are within a relative tolerance of zero and is then set to exactly zero.

Link statistics (:class:`LinkStats`) count every byte a link carried, also for transfers
that were never flows: a caller that times a transfer by its closed form because nothing
else can use its links meanwhile (the iteration's folded tensor-parallel collectives)
records what that transfer did to them as a :class:`LinkUsage` — computed by the same
arithmetic as a flow alone on its links (:meth:`FlowNetwork.solo_usage`) — so the bytes,
busy and saturated seconds come out as if it had run as a flow.

Flows and link sets are :mod:`~distsim_gpu.simcore.flows`; the link statistics and usages
:mod:`~distsim_gpu.simcore.link_stats`; this module moves the flows and solves their rates.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from operator import attrgetter
from typing import Any

import numpy as np
import simpy
from distsim_gpu.simcore.errors import SimulationError
from distsim_gpu.simcore.flows import Flow, LinkId, LinkSet
from distsim_gpu.simcore.link_stats import (
    LinkStatistics,
    LinkStats,
    LinkUsage,
    saturation_at,
)
from distsim_gpu.simcore.maxmin import solve_max_min
from distsim_gpu.simcore.maxmin_incremental import IncrementalMaxMin
from simpy.events import NORMAL, Event

__all__ = ["FinishTimer", "Flow", "FlowNetwork", "LinkSet", "LinkStats", "LinkUsage"]

# Processed after every NORMAL (and URGENT) event of an instant: see the module docstring.
_LATE = NORMAL + 1
# A flow is done when at most this fraction of its bytes remains (float rounding only).
_DONE_RTOL = 1e-9
# From this many transferring flows on, solves are incremental (IncrementalMaxMin): below
# it a component solved afresh is cheap, and the examples' arithmetic stays as it was.
_INCREMENTAL_FROM = 256
_INF = float("inf")
# The float spacing at 1, looked up once (np.finfo is a call; the value is the same).
_EPS = np.finfo(float).eps
# Finished flows whose bytes are added to the link statistics in one batch (np.add.at, in
# finishing order: each link's sum is the same sequence of additions as one flow at a time).
_DONE_BATCH = 4096
# Solves kept by the link sets of their flows (:meth:`FlowNetwork._solve_rates`): a run
# repeats a few hundred shapes of component tens of thousands of times (Grok-1 on 512
# H100: 288 distinct in 81,365 solves).  Started over when full.
_SOLVED_MAX = 4096


class _LateEvent(Event):
    """An already-triggered event processed after all normal events of the current instant.

    Written like simpy's own ``Timeout``/``Initialize``: it is born triggered and schedules
    itself.
    """

    def __init__(self, env: simpy.Environment, callback: Callable[[Event], None]) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        self.callbacks.append(callback)
        env.schedule(self, _LATE)


class FinishTimer(simpy.Timeout):
    """The network's wake-up for its earliest finish.  SimPy cannot take an event off its
    queue, so a timer an earlier one replaced is marked ``retired`` instead: its callback
    returns at once, and an environment that checks the mark discards it unprocessed."""

    retired = False


RateListener = Callable[[float, list[int], np.ndarray], None]


class FlowNetwork(LinkStatistics):
    """Capacitated directed links and the flows that share them (max-min fair).

    Link ids are any hashable (the topology uses ``(src, dst)`` device-name pairs).
    ``transfer`` returns a :class:`Flow` whose ``done`` event a SimPy process can yield.
    What the links did over the run (:meth:`link_stats`, recorded usages) is
    :class:`~.link_stats.LinkStatistics`'.
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._index: dict[LinkId, int] = {}
        self._link_ids: list[LinkId] = []
        self._capacity: list[float] = []
        self._capacity_array = np.zeros(0)
        self._link_count = np.zeros(0, np.int64)  # transferring flows, per link
        # The link arrays of flows started and finished since _link_count was last brought
        # up to date (_counted_links): counted in one batch when a solve needs the counts
        # (and not at all while the incremental solver runs, which reads none).
        self._count_up: list[np.ndarray] = []
        self._count_down: list[np.ndarray] = []
        self._init_link_statistics()
        # What the next solve starts from: flows that began transferring, and the links
        # of flows that finished.
        self._seed_flows: dict[Flow, None] = {}
        self._seed_links: list[np.ndarray] = []
        self._freed_mask = 0  # the links of the flows that finished, as a bit set
        # Per-link scratch for assembling a solve (all False / stale between uses).
        self._scratch_mark = np.zeros(0, bool)
        self._scratch_position = np.zeros(0, np.int64)
        # Flows transferring now, in the order they started.
        self._transferring: dict[Flow, None] = {}
        self._resolve_pending = False
        self._idle_links = np.zeros(0, np.int64)
        self._heap: list[tuple[float, int, int, Flow]] = []
        self._timer_at = float("inf")
        self._timer: FinishTimer | None = None
        self._next_flow_id = 0
        self._heap_seq = 0
        self.active_flows = 0
        self.completed_flows = 0
        self.solves = 0
        self._listeners: list[RateListener] = []
        # While many flows transfer: the incremental solver and its flows by handle.
        self._incremental: IncrementalMaxMin | None = None
        self._by_handle: dict[int, Flow] = {}
        # Their finish times, rates, bytes left and when those were settled, by handle
        # (the Flow objects' own fields are stale meanwhile): the next finish is one min,
        # not a heap of hundreds of thousands of stale entries, and a solve reschedules
        # the flows it moved in a few array operations.
        self._finish_at = np.zeros(0)
        self._h_rate = np.zeros(0)
        self._h_remaining = np.zeros(0)
        self._h_updated = np.zeros(0)
        # Solved components by their flows' link sets, in order (see _solve_rates).
        self._solved: dict[tuple[LinkSet, ...], _Solved] = {}

    # ------------------------------------------------------------------ links
    def add_link(self, link_id: LinkId, capacity_bytes_per_s: float) -> int:
        """Register a directed link; returns its internal index.  ``inf`` = ideal."""
        if link_id in self._index:
            raise SimulationError(f"link {link_id!r} is already in the network")
        if not capacity_bytes_per_s > 0:
            raise SimulationError(
                f"link {link_id!r}: capacity must be positive, got {capacity_bytes_per_s!r}")
        self._index[link_id] = len(self._link_ids)
        self._link_ids.append(link_id)
        self._capacity.append(float(capacity_bytes_per_s))
        return self._index[link_id]

    def has_link(self, link_id: LinkId) -> bool:
        return link_id in self._index

    def capacity(self, link_id: LinkId) -> float:
        """Capacity of a link in bytes/s."""
        return self._capacity[self._index[link_id]]

    def set_capacity(self, link_id: LinkId, capacity_bytes_per_s: float) -> None:
        """Change a link's capacity now (a fault or a repair, :mod:`topology.faults`): the
        flows crossing it settle their bytes at the old rates and are re-solved at this
        instant with everything that shares links with them."""
        idx = self._index.get(link_id)
        if idx is None:
            raise SimulationError(f"no link {link_id!r} in the network")
        if not capacity_bytes_per_s > 0:
            raise SimulationError(
                f"link {link_id!r}: capacity must be positive, got {capacity_bytes_per_s!r}")
        self._ensure_arrays()
        self._capacity[idx] = float(capacity_bytes_per_s)
        self._solved.clear()  # every kept solve read the old capacities
        cap = self._capacity_array = np.asarray(self._capacity, dtype=float)
        self._saturation_at = saturation_at(cap)
        if self._incremental is not None:
            self._incremental.set_capacity(cap)
            for flow in self._flows_on(idx):
                # Entered again, a flow is solved afresh; _track carries its state over to
                # the new handle, and the old one goes as a finished flow's does.
                old = flow._handle
                self._track(flow)
                self._finish_at[old] = np.inf
                self._incremental.remove(old)
                del self._by_handle[old]
        self._seed_links.append(np.array([idx], np.int64))
        self._freed_mask |= 1 << idx
        self._request_resolve()

    @property
    def link_ids(self) -> tuple[LinkId, ...]:
        return tuple(self._link_ids)

    def link_load(self, link_id: LinkId) -> float:
        """Current load on a link in bytes/s: Σ multiplicity × rate of its flows."""
        idx = self._index[link_id]
        return sum(f.rate_bytes_per_s * f.multiplicities[f.links.index(idx)]
                   for f in self._flows_on(idx))

    def flows_on(self, link_id: LinkId) -> list[Flow]:
        """Flows transferring over a link now, in the order they started."""
        return self._flows_on(self._index[link_id])

    def _flows_on(self, idx: int) -> list[Flow]:
        bit = 1 << idx
        return [flow for flow in self._transferring if flow._mask & bit]

    def add_listener(self, listener: RateListener) -> None:
        """Call ``listener(now, link_indices, loads)`` after every solve (for tracing)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ flows
    def link_set(self, links: Mapping[LinkId, float] | Iterable[LinkId]) -> LinkSet:
        """Resolve link ids and multiplicities once, for flows that reuse them.

        ``links`` is a mapping ``{link_id: multiplicity}`` or an iterable of link ids
        (multiplicity 1 each; a repeated id adds up).
        """
        weights: dict[LinkId, float] = {}
        if isinstance(links, Mapping):
            for link_id, mult in links.items():
                if not mult > 0:
                    raise SimulationError(
                        f"multiplicity on link {link_id!r} must be positive, got {mult!r}")
                weights[link_id] = weights.get(link_id, 0.0) + float(mult)
        else:
            for link_id in links:
                weights[link_id] = weights.get(link_id, 0.0) + 1.0
        try:
            indices = tuple(self._index[link_id] for link_id in weights)
        except KeyError as missing:
            raise SimulationError(f"flow crosses unknown link {missing.args[0]!r}") from None
        return LinkSet(tuple(weights), indices, tuple(weights.values()))

    def transfer(
        self,
        links: LinkSet | Mapping[LinkId, float] | Iterable[LinkId],
        size_bytes: float,
        latency_s: float = 0.0,
        tag: Any = None,
    ) -> Flow:
        """Start a flow now: ``latency_s`` of delay, then ``size_bytes`` over ``links``.

        ``links`` is a :class:`LinkSet` from :meth:`link_set`, or what it accepts.
        Returns the :class:`Flow`; yield ``flow.done`` to wait for its last byte.
        """
        if not size_bytes >= 0 or size_bytes == _INF:
            raise SimulationError(f"flow size must be finite and >= 0, got {size_bytes!r}")
        if not latency_s >= 0 or latency_s == _INF:
            raise SimulationError(f"flow latency must be finite and >= 0, got {latency_s!r}")
        if not isinstance(links, LinkSet):
            links = self.link_set(links)
        env = self.env
        flow = Flow(self._next_flow_id, links, float(size_bytes), float(latency_s), env._now,
                    Event(env), tag, self)
        self._next_flow_id += 1
        if latency_s > 0:
            # A partial, not a lambda: one Python frame less per flow.
            env.timeout(latency_s).callbacks.append(partial(self._activate, flow))
        else:
            self._activate(flow)
        return flow

    def _activate(self, flow: Flow, _event: Event | None = None) -> None:
        """Start moving ``flow``'s bytes now (called at once, or by its latency's timeout)."""
        now = self.env._now
        flow.transfer_start_s = now
        flow._updated_s = now
        if flow.size_bytes == 0 or not flow.links:
            # Nothing to share: no bytes, or no link to carry them (same device).
            self._complete(flow)
            return
        self.active_flows += 1
        if self._link_count.size != len(self._capacity):
            self._ensure_arrays()  # links were added since (rare: a call here is not)
        self._seed_flows[flow] = None
        self._transferring[flow] = None
        if self._incremental is not None:
            self._track(flow)
        else:
            self._count_up.append(flow._link_array)  # into _link_count when it is read
        self._request_resolve()

    def _track(self, flow: Flow) -> None:
        """Hand a flow to the incremental solver; its state moves into the arrays by
        handle, and its finish time stands until its rate changes."""
        if flow._handle >= 0:
            self._untrack(flow)  # entered again (set_capacity): from its old handle
        handle = self._incremental.add(flow._link_array, flow._mult_array)
        flow._handle = handle
        self._by_handle[handle] = flow
        if handle >= self._finish_at.size:
            size = max(2 * self._finish_at.size, handle + 1, 64)
            for name in ("_finish_at", "_h_rate", "_h_remaining", "_h_updated"):
                old = getattr(self, name)
                grown = np.full(size, np.inf)
                grown[:old.size] = old
                setattr(self, name, grown)
        self._finish_at[handle] = flow._finish_s
        self._h_rate[handle] = flow._rate
        self._h_remaining[handle] = flow._remaining
        self._h_updated[handle] = flow._updated_s
        flow._version += 1  # its heap entry, if any, is stale: the array holds its finish

    def _untrack(self, flow: Flow) -> None:
        """Copy a tracked flow's state back into the Flow (it keeps its handle)."""
        handle = flow._handle
        flow._finish_s = float(self._finish_at[handle])
        flow._rate = float(self._h_rate[handle])
        flow._remaining = float(self._h_remaining[handle])
        flow._updated_s = float(self._h_updated[handle])

    def _retire(self, flow: Flow) -> None:
        """Take a finishing flow off its links; the links still shared seed the next solve."""
        self.active_flows -= 1
        if self._incremental is None:
            self._count_down.append(flow._link_array)  # (see _activate)
        self._seed_flows.pop(flow, None)
        self._seed_links.append(flow._link_array)
        self._freed_mask |= flow._mask
        del self._transferring[flow]
        if flow._handle >= 0:
            self._untrack(flow)
            self._finish_at[flow._handle] = np.inf
            self._incremental.remove(flow._handle)
            del self._by_handle[flow._handle]
            flow._handle = -1

    def _complete(self, flow: Flow) -> None:
        flow._remaining = 0.0
        flow._rate = 0.0
        flow.finish_s = self.env._now
        flow._version += 1
        # Its bytes go into the link statistics with the next batch (_flush_done).
        done = self._done_flows
        done.append(flow)
        if len(done) >= _DONE_BATCH:
            self._flush_done()
        self.completed_flows += 1
        flow._done.succeed(flow)
        flow.release_done()  # no flow <-> event cycle left for the garbage collector

    def _ensure_arrays(self) -> None:
        """Grow the per-link arrays after links were added."""
        grow = len(self._capacity) - self._link_count.size
        if grow > 0:
            self._link_count = np.concatenate([self._link_count, np.zeros(grow, np.int64)])
            self._capacity_array = np.asarray(self._capacity, dtype=float)
            self._solved.clear()  # (it would hold: no kept solve crosses a new link)
            self._scratch_mark = np.zeros(len(self._capacity), bool)
            self._scratch_position = np.zeros(len(self._capacity), np.int64)
            self._grow_link_statistics(grow)
            if self._incremental is not None:
                self._incremental.set_capacity(self._capacity_array)

    def _request_resolve(self) -> None:
        if not self._resolve_pending:
            self._resolve_pending = True
            _LateEvent(self.env, self._resolve)

    # ------------------------------------------------------------------ solving
    def _component(self) -> tuple[list[Flow], np.ndarray]:
        """Flows connected to the flows that started and the links that were freed, in
        the order they started (by id).

        Two flows are connected when they share a link.  Each flow's links are a bit set
        (:attr:`LinkSet.mask`), so the component grows by one ``&`` per transferring flow
        and pass: start from the links of the new flows and the freed links, add every
        flow that touches them (and its links), until a pass adds none.  A flow touching
        a freed link still uses it; a flow touching a new flow's link shares it — the
        same component as a breadth-first search over shared links, found without a
        Python loop over links (a coflow may hold hundreds).
        """
        seed_links = self._seed_links
        if len(seed_links) == 1:
            freed = seed_links[0]  # one finished flow's links (read, never written)
        else:
            freed = np.concatenate(seed_links) if seed_links else np.zeros(0, np.int64)
        # Freed links nobody uses any more: their load drops to zero (link statistics; a
        # link logged twice at one instant integrates the same as once).
        self._idle_links = freed[self._counted_links()[freed] == 0] if freed.size else freed
        # Only finished flows' links, none of them used any more: no flow can touch one,
        # so the component is empty without a pass over the transferring flows (half the
        # solves of a large run: a flow finishing alone on its links).
        alone = not self._seed_flows and self._idle_links.size == freed.size
        if self._listeners:
            freed = np.unique(freed)
        if alone:
            return [], freed
        members: dict[Flow, None] = dict(self._seed_flows)
        reach = self._freed_mask
        for flow in members:
            reach |= flow._mask
        rest = [flow for flow in self._transferring if flow not in members]
        grew = bool(reach)
        while grew and rest:
            grew = False
            left: list[Flow] = []
            for flow in rest:
                if flow._mask & reach:
                    reach |= flow._mask
                    members[flow] = None
                    grew = True
                else:
                    left.append(flow)
            rest = left
        return sorted(members, key=_flow_id), freed

    def _counted_links(self) -> np.ndarray:
        """The transferring flows per link, brought up to date: the flows started and
        finished since are added and taken off in one ``np.add.at`` each (whole numbers,
        so the order of the additions cannot matter).  One fancy-indexed update per flow
        and per finish was about 5 % of a 256-GPU MoE run's CPU."""
        count = self._link_count
        if self._count_up:
            np.add.at(count, np.concatenate(self._count_up), 1)
            self._count_up.clear()
        if self._count_down:
            np.subtract.at(count, np.concatenate(self._count_down), 1)
            self._count_down.clear()
        return count

    def _resolve(self, _event: Event) -> None:
        self._resolve_pending = False
        if not self._seed_flows and not self._seed_links:
            return
        if self._incremental is None and self.active_flows >= _INCREMENTAL_FROM:
            self._incremental = IncrementalMaxMin(self._capacity_array)
            for flow in self._transferring:
                self._track(flow)
        if self._incremental is not None:
            self._resolve_incremental()
            return
        now = self.env.now
        flows, freed = self._component()
        self._seed_flows.clear()
        self._seed_links.clear()
        self._freed_mask = 0
        self.solves += 1
        if not flows:
            if self._idle_links.size:
                self._account(now, self._idle_links, None)
            if self._listeners:
                self._notify(now, freed.tolist(), np.zeros(0), [])
            self._arm_timer()
            return
        for flow in flows:
            # Settle bytes moved at the old rate before the rate changes.
            if now > flow._updated_s:
                flow._remaining -= flow._rate * (now - flow._updated_s)
                flow._updated_s = now
        rates, component_links, loads, states = self._solve_rates(flows)
        if self._idle_links.size:
            self._account(now, self._idle_links, None)
        self._account_states(now, component_links, loads, states)
        self._schedule_finishes(now, flows, rates)
        if self._listeners:
            touched = list(dict.fromkeys([*component_links.tolist(), *freed.tolist()]))
            self._notify(now, touched, loads, component_links.tolist())
        self._arm_timer()

    def _solve_rates(self, flows: list[Flow]) -> _Solved:
        """The flows' max-min fair rates, the links they cross, each link's load and state
        (:meth:`_load_states`).

        All four are pure functions of the flows' link sets, in order, and the capacities,
        so they are kept by the tuple of link sets (which holds them alive: no id is
        reused) until a capacity changes; a kept solve is the same arrays, read-only.
        """
        key = tuple([flow._link_set for flow in flows])
        solved = self._solved.get(key)
        if solved is None:
            if len(self._solved) >= _SOLVED_MAX:
                self._solved.clear()
            rates, component_links, loads = self._solve_afresh(flows)
            states = self._load_states(component_links, loads)
            for array in (component_links, loads, states):
                array.flags.writeable = False
            solved = self._solved[key] = (rates.tolist(), component_links, loads, states)
        return solved

    def _solve_afresh(self, flows: list[Flow]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_solve_rates`' rates, links and loads, solved."""
        if len(flows) == 1:
            # Alone on its links (the common case): its bottleneck, no filling needed.
            flow = flows[0]
            fair = self._capacity_array[flow._link_array] / flow._mult_array
            rates = np.array([np.minimum.reduce(fair)])  # fair.min(), minus a wrapper
            component_links = flow._link_array.copy()  # its own, to be made read-only
            loads = flow._mult_array * rates[0]  # a link set holds each link once
            return rates, component_links, loads
        counts = np.fromiter((len(f.links) for f in flows), np.int64, len(flows))
        global_links = np.concatenate([f._link_array for f in flows])
        entry_mult = np.concatenate([f._mult_array for f in flows])
        entry_flow = np.repeat(np.arange(len(flows)), counts)
        # The sorted distinct links and each entry's position among them (what
        # np.unique(..., return_inverse=True) gives) by marking, without sorting.
        marked = self._scratch_mark
        marked[global_links] = True
        component_links = np.flatnonzero(marked)
        marked[component_links] = False
        position = self._scratch_position
        position[component_links] = np.arange(component_links.size)
        entry_link = position[global_links]
        rates = solve_max_min(entry_flow, entry_link, entry_mult,
                              self._capacity_array[component_links], len(flows))
        loads = np.bincount(entry_link, weights=entry_mult * rates[entry_flow],
                            minlength=component_links.size)
        return rates, component_links, loads

    def _schedule_finishes(self, now: float, flows: list[Flow], rates: list[float]) -> None:
        """Give each flow its new rate and push its finish time at that rate on the heap."""
        heap = self._heap
        for flow, rate in zip(flows, rates):
            flow._rate = rate
            flow._version += 1
            remaining = flow._remaining if flow._remaining > 0 else 0.0
            finish = now if rate == _INF else now + remaining / rate
            flow._finish_s = finish
            self._heap_seq += 1
            heapq.heappush(heap, (finish, self._heap_seq, flow._version, flow))

    def _resolve_incremental(self) -> None:
        """Solve with :class:`IncrementalMaxMin`: only flows whose rate may change are
        re-solved and rescheduled; the others keep their rates and finish times."""
        now = self.env.now
        self._seed_flows.clear()
        self._seed_links.clear()
        self._freed_mask = 0
        self.solves += 1
        handles, rates, links, loads = self._incremental.solve()
        if handles.size:
            self._reschedule(now, handles, rates)
        if links.size:
            self._account(now, links, loads)
        if self._listeners:
            self._notify(now, links.tolist(), loads, links.tolist())
        if not self.active_flows:
            self._incremental = None  # quiet again: small solves from scratch
            # Nothing transfers: every count is 0 (those of flows that started or finished
            # while the incremental solver ran, which reads none, were not kept).
            self._link_count.fill(0)
            self._count_up.clear()
            self._count_down.clear()
            self._by_handle.clear()
            for name in ("_finish_at", "_h_rate", "_h_remaining", "_h_updated"):
                setattr(self, name, np.zeros(0))
        self._arm_timer()

    def _reschedule(self, now: float, handles: np.ndarray, rates: np.ndarray) -> None:
        """New rates for tracked flows: settle the bytes each moved at its old rate, then
        its finish time at the new one — the arithmetic of the scalar path, elementwise.
        A flow whose rate did not change keeps its finish time."""
        old = self._h_rate[handles]
        moved = (rates != old) | (self._finish_at[handles] == np.inf)
        if not moved.all():
            handles, rates, old = handles[moved], rates[moved], old[moved]
        elapsed = now - self._h_updated[handles]
        later = elapsed > 0
        remaining = self._h_remaining[handles]
        # Only where time passed (an infinite old rate times no time is no number).
        remaining[later] -= old[later] * elapsed[later]
        self._h_remaining[handles] = remaining
        self._h_updated[handles] = now
        self._h_rate[handles] = rates
        # A rate of inf (ideal links only) finishes now: bytes / inf is 0.
        self._finish_at[handles] = now + np.maximum(remaining, 0.0) / rates

    def _notify(self, now: float, links: list[int], loads: np.ndarray,
                loaded: list[int]) -> None:
        """Tell listeners the load of every link of the solved part (0 where none is left)."""
        if not self._listeners:
            return
        load_of = dict(zip(loaded, loads.tolist()))
        values = np.array([load_of.get(idx, 0.0) for idx in links])
        for listener in self._listeners:
            listener(now, links, values)

    def _arm_timer(self) -> None:
        heap = self._heap
        while heap and heap[0][2] != heap[0][3]._version:
            heapq.heappop(heap)  # stale entry: the flow's rate changed since
        first = heap[0][0] if heap else float("inf")
        if self._incremental is not None and self._finish_at.size:
            first = min(first, float(self._finish_at.min()))
        if first < self._timer_at:
            if self._timer is not None:
                # Its finish time no longer holds: left armed, it would move the clock
                # to a time when nothing happens (and cost an event at scale).
                self._timer.retired = True
            self._timer_at = first
            self._timer = FinishTimer(self.env, max(first - self.env.now, 0.0))
            self._timer.callbacks.append(self._on_timer)

    def _on_timer(self, event: Event) -> None:
        now = self.env.now
        if getattr(event, "retired", False):
            return  # replaced by an earlier timer (an environment that kept it)
        if self._timer_at > now + 4 * abs(now) * _EPS:
            return  # an older, later timer; a newer one is armed
        self._timer_at = float("inf")
        self._timer = None
        heap = self._heap
        finished = False
        # A timer may land an ulp or so before the finish time it was armed for (time
        # arithmetic rounds); finishes that close count as now.
        due = now + 4 * abs(now) * _EPS
        while heap and heap[0][0] <= due:
            _, _, version, flow = heapq.heappop(heap)
            if version != flow._version:
                continue
            if self._finish_or_settle(flow, now, due):
                finished = True
            else:
                self._heap_seq += 1
                heapq.heappush(heap, (flow._finish_s, self._heap_seq, flow._version, flow))
        if self._incremental is not None:
            finished |= self._on_due_handles(now, due)
        if finished:
            self._request_resolve()
        self._arm_timer()

    def _finish_or_settle(self, flow: Flow, now: float, due: float) -> bool:
        """A flow whose finish time came: complete it (True), or, where rounding left
        real bytes, settle them and set its new ``_finish_s`` (False)."""
        rate = flow._rate
        # At an infinite rate (only ideal links) the bytes arrive with no delay.
        remaining = 0.0 if rate == _INF else flow._remaining - rate * (now - flow._updated_s)
        # Done when the bytes left are rounding, or would take no representable time.
        if remaining <= _DONE_RTOL * flow.size_bytes or now + remaining / rate <= due:
            self._retire(flow)
            self._complete(flow)
            return True
        flow._remaining = remaining
        flow._updated_s = now
        flow._version += 1
        flow._finish_s = now + remaining / rate
        return False

    def _on_due_handles(self, now: float, due: float) -> bool:
        """The flows of the incremental solver whose finish time came, in order of
        finish time (then handle); True if any completed."""
        finish_at = self._finish_at
        handles = np.flatnonzero(finish_at <= due)
        if not handles.size:
            return False
        handles = handles[np.argsort(finish_at[handles], kind="stable")]
        finished = False
        by_handle = self._by_handle
        for handle in handles.tolist():
            flow = by_handle[handle]
            self._untrack(flow)  # its state into the Flow for the shared arithmetic
            if self._finish_or_settle(flow, now, due):
                finished = True
            else:
                finish_at[handle] = flow._finish_s
                self._h_remaining[handle] = flow._remaining
                self._h_updated[handle] = now
        return finished


# A solved component: its flows' rates, its links, their loads and states (read-only).
_Solved = tuple[list[float], np.ndarray, np.ndarray, np.ndarray]


# A flow's id, the order of a component's flows (a C getter: a solve sorts its flows).
_flow_id = attrgetter("id")
