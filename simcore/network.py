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
part of the network (flows and links reachable from the touched links).  One timer event
waits for the earliest finish; a flow is finished when its remaining bytes are within a
relative tolerance of zero and is then set to exactly zero.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import simpy
from simpy.events import NORMAL, Event

from simcore.errors import SimulationError
from simcore.maxmin import solve_max_min

__all__ = ["Flow", "FlowNetwork"]

LinkId = Hashable

# Processed after every NORMAL (and URGENT) event of an instant: see the module docstring.
_LATE = NORMAL + 1
# A flow is done when at most this fraction of its bytes remains (float rounding only).
_DONE_RTOL = 1e-9


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


class Flow:
    """One transfer: bytes over weighted links after a latency; ``done`` fires at the end.

    Hot object, so ``__slots__`` and plain attributes.  ``links`` are internal link
    indices of the owning network, ``multiplicities`` parallel to them.
    """

    __slots__ = (
        "_finish_s",
        "_updated_s",
        "_version",
        "done",
        "finish_s",
        "id",
        "latency_s",
        "link_ids",
        "links",
        "multiplicities",
        "rate_bytes_per_s",
        "remaining_bytes",
        "size_bytes",
        "start_s",
        "tag",
        "transfer_start_s",
    )

    def __init__(
        self,
        flow_id: int,
        link_ids: tuple[LinkId, ...],
        links: tuple[int, ...],
        multiplicities: tuple[float, ...],
        size_bytes: float,
        latency_s: float,
        start_s: float,
        done: Event,
        tag: Any,
    ) -> None:
        self.id = flow_id
        self.link_ids = link_ids
        self.links = links
        self.multiplicities = multiplicities
        self.size_bytes = size_bytes
        self.remaining_bytes = size_bytes
        self.latency_s = latency_s
        self.start_s = start_s
        self.transfer_start_s: float | None = None
        self.finish_s: float | None = None
        self.rate_bytes_per_s = 0.0
        self.done = done
        self.tag = tag
        self._updated_s = start_s
        self._version = 0
        self._finish_s = float("inf")

    def __repr__(self) -> str:
        return (f"Flow(id={self.id}, size_bytes={self.size_bytes:g}, "
                f"remaining_bytes={self.remaining_bytes:g}, rate={self.rate_bytes_per_s:g})")


RateListener = Callable[[float, list[int], np.ndarray], None]


class FlowNetwork:
    """Capacitated directed links and the flows that share them (max-min fair).

    Link ids are any hashable (the topology uses ``(src, dst)`` device-name pairs).
    ``transfer`` returns a :class:`Flow` whose ``done`` event a SimPy process can yield.
    """

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._index: dict[LinkId, int] = {}
        self._link_ids: list[LinkId] = []
        self._capacity: list[float] = []
        self._link_flows: list[dict[Flow, None]] = []  # insertion-ordered sets
        self._link_bytes: list[float] = []
        self._touched: dict[int, None] = {}
        self._resolve_pending = False
        self._heap: list[tuple[float, int, int, Flow]] = []
        self._timer_at = float("inf")
        self._next_flow_id = 0
        self._heap_seq = 0
        self.active_flows = 0
        self.completed_flows = 0
        self.solves = 0
        self._listeners: list[RateListener] = []

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
        self._link_flows.append({})
        self._link_bytes.append(0.0)
        return self._index[link_id]

    def has_link(self, link_id: LinkId) -> bool:
        return link_id in self._index

    def capacity(self, link_id: LinkId) -> float:
        """Capacity of a link in bytes/s."""
        return self._capacity[self._index[link_id]]

    @property
    def link_ids(self) -> tuple[LinkId, ...]:
        return tuple(self._link_ids)

    def link_load(self, link_id: LinkId) -> float:
        """Current load on a link in bytes/s: Σ multiplicity × rate of its flows."""
        idx = self._index[link_id]
        return sum(f.rate_bytes_per_s * f.multiplicities[f.links.index(idx)]
                   for f in self._link_flows[idx])

    def link_bytes(self, link_id: LinkId) -> float:
        """Bytes carried by a link by finished flows (size × multiplicity, summed)."""
        return self._link_bytes[self._index[link_id]]

    def flows_on(self, link_id: LinkId) -> list[Flow]:
        """Flows transferring over a link now, in the order they started."""
        return list(self._link_flows[self._index[link_id]])

    def add_listener(self, listener: RateListener) -> None:
        """Call ``listener(now, link_indices, loads)`` after every solve (for tracing)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ flows
    def transfer(
        self,
        links: Mapping[LinkId, float] | Iterable[LinkId],
        size_bytes: float,
        latency_s: float = 0.0,
        tag: Any = None,
    ) -> Flow:
        """Start a flow now: ``latency_s`` of delay, then ``size_bytes`` over ``links``.

        ``links`` is a mapping ``{link_id: multiplicity}`` or an iterable of link ids
        (multiplicity 1 each; a repeated id adds up).  Returns the :class:`Flow`; yield
        ``flow.done`` to wait for its last byte.
        """
        if not size_bytes >= 0 or size_bytes == float("inf"):
            raise SimulationError(f"flow size must be finite and >= 0, got {size_bytes!r}")
        if not latency_s >= 0 or latency_s == float("inf"):
            raise SimulationError(f"flow latency must be finite and >= 0, got {latency_s!r}")
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
        env = self.env
        flow = Flow(self._next_flow_id, tuple(weights), indices, tuple(weights.values()),
                    float(size_bytes), float(latency_s), env.now, Event(env), tag)
        self._next_flow_id += 1
        if latency_s > 0:
            env.timeout(latency_s).callbacks.append(lambda _event: self._activate(flow))
        else:
            self._activate(flow)
        return flow

    def _activate(self, flow: Flow) -> None:
        now = self.env.now
        flow.transfer_start_s = now
        flow._updated_s = now
        if flow.size_bytes == 0 or not flow.links:
            # Nothing to share: no bytes, or no link to carry them (same device).
            self._complete(flow)
            return
        self.active_flows += 1
        for idx in flow.links:
            self._link_flows[idx][flow] = None
            self._touched[idx] = None
        self._request_resolve()

    def _complete(self, flow: Flow) -> None:
        flow.remaining_bytes = 0.0
        flow.rate_bytes_per_s = 0.0
        flow.finish_s = self.env.now
        flow._version += 1
        for idx, mult in zip(flow.links, flow.multiplicities):
            self._link_bytes[idx] += flow.size_bytes * mult
        self.completed_flows += 1
        flow.done.succeed(flow)

    def _request_resolve(self) -> None:
        if not self._resolve_pending:
            self._resolve_pending = True
            _LateEvent(self.env, self._resolve)

    # ------------------------------------------------------------------ solving
    def _component(self) -> tuple[list[Flow], list[int]]:
        """Flows and links connected to the touched links (breadth-first)."""
        link_seen: dict[int, None] = dict(self._touched)
        flow_seen: dict[Flow, None] = {}
        frontier = list(self._touched)
        link_flows = self._link_flows
        while frontier:
            next_frontier: list[int] = []
            for idx in frontier:
                for flow in link_flows[idx]:
                    if flow not in flow_seen:
                        flow_seen[flow] = None
                        for other in flow.links:
                            if other not in link_seen:
                                link_seen[other] = None
                                next_frontier.append(other)
            frontier = next_frontier
        return list(flow_seen), list(link_seen)

    def _resolve(self, _event: Event) -> None:
        self._resolve_pending = False
        if not self._touched:
            return
        now = self.env.now
        flows, links = self._component()
        self._touched.clear()
        self.solves += 1
        if flows:
            local = {idx: i for i, idx in enumerate(links)}
            entry_flow: list[int] = []
            entry_link: list[int] = []
            entry_mult: list[float] = []
            for f, flow in enumerate(flows):
                # Settle bytes moved at the old rate before the rate changes.
                if now > flow._updated_s:
                    flow.remaining_bytes -= flow.rate_bytes_per_s * (now - flow._updated_s)
                flow._updated_s = now
                for idx, mult in zip(flow.links, flow.multiplicities):
                    entry_flow.append(f)
                    entry_link.append(local[idx])
                    entry_mult.append(mult)
            capacity = np.fromiter((self._capacity[idx] for idx in links), float, len(links))
            rates = solve_max_min(
                np.asarray(entry_flow, dtype=np.int64),
                np.asarray(entry_link, dtype=np.int64),
                np.asarray(entry_mult, dtype=float),
                capacity,
                len(flows),
            )
            for flow, rate in zip(flows, rates.tolist()):
                flow.rate_bytes_per_s = rate
                flow._version += 1
                remaining = max(flow.remaining_bytes, 0.0)
                finish = now if rate == float("inf") else now + remaining / rate
                flow._finish_s = finish
                self._heap_seq += 1
                heapq.heappush(self._heap, (finish, self._heap_seq, flow._version, flow))
        if self._listeners:
            loads = np.zeros(len(links))
            position = {idx: i for i, idx in enumerate(links)}
            for flow in flows:
                for idx, mult in zip(flow.links, flow.multiplicities):
                    loads[position[idx]] += mult * flow.rate_bytes_per_s
            for listener in self._listeners:
                listener(now, links, loads)
        self._arm_timer()

    def _arm_timer(self) -> None:
        heap = self._heap
        while heap and heap[0][2] != heap[0][3]._version:
            heapq.heappop(heap)  # stale entry: the flow's rate changed since
        if not heap:
            return
        first = heap[0][0]
        if first < self._timer_at:
            self._timer_at = first
            timer = self.env.timeout(max(first - self.env.now, 0.0))
            timer.callbacks.append(self._on_timer)

    def _on_timer(self, _event: Event) -> None:
        now = self.env.now
        if self._timer_at > now:
            return  # an older, later timer; a newer one is armed
        self._timer_at = float("inf")
        heap = self._heap
        finished = False
        while heap and heap[0][0] <= now:
            _, _, version, flow = heapq.heappop(heap)
            if version != flow._version:
                continue
            rate = flow.rate_bytes_per_s
            if rate == float("inf"):
                remaining = 0.0  # only ideal links: the bytes arrive with no delay
            else:
                remaining = flow.remaining_bytes - rate * (now - flow._updated_s)
            if remaining <= _DONE_RTOL * flow.size_bytes or now + remaining / rate <= now:
                self.active_flows -= 1
                for idx in flow.links:
                    del self._link_flows[idx][flow]
                    self._touched[idx] = None
                self._complete(flow)
                finished = True
            else:
                # Rounding left real bytes: settle and wait for them.
                flow.remaining_bytes = remaining
                flow._updated_s = now
                flow._version += 1
                flow._finish_s = now + remaining / flow.rate_bytes_per_s
                self._heap_seq += 1
                heapq.heappush(heap, (flow._finish_s, self._heap_seq, flow._version, flow))
        if finished:
            self._request_resolve()
        self._arm_timer()
