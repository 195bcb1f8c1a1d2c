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
earliest finish; a flow is finished when its remaining bytes are within a relative
tolerance of zero and is then set to exactly zero.

Link statistics (:class:`LinkStats`) count every byte a link carried, also for transfers
that were never flows: a caller that times a transfer by its closed form because nothing
else can use its links meanwhile (the iteration's folded tensor-parallel collectives)
records what that transfer did to them as a :class:`LinkUsage` — computed by the same
arithmetic as a flow alone on its links (:meth:`FlowNetwork.solo_usage`) — so the bytes,
busy and saturated seconds come out as if it had run as a flow.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy
from distsim_gpu.simcore.errors import SimulationError
from distsim_gpu.simcore.maxmin import solve_max_min
from distsim_gpu.simcore.maxmin_incremental import IncrementalMaxMin
from simpy.events import NORMAL, Event

__all__ = ["Flow", "FlowNetwork", "LinkSet", "LinkStats", "LinkUsage"]

LinkId = Hashable

# Processed after every NORMAL (and URGENT) event of an instant: see the module docstring.
_LATE = NORMAL + 1
# A flow is done when at most this fraction of its bytes remains (float rounding only).
_DONE_RTOL = 1e-9
# A link is saturated while its load is at least this fraction of its capacity.
_SATURATED = 1.0 - 1e-9
# Load changes logged before they are integrated into the link statistics in one batch:
# at most this many solves, and at most this many (link, load) entries in all — on a large
# fabric one solve logs thousands of links, and the batch's arrays are what peak memory is.
_STATS_BATCH = 4096
_STATS_BATCH_ENTRIES = 1 << 19
# From this many transferring flows on, solves are incremental (IncrementalMaxMin): below
# it a component solved afresh is cheap, and the examples' arithmetic stays as it was.
_INCREMENTAL_FROM = 256


@dataclass(frozen=True, slots=True)
class LinkStats:
    """What one link did over a run: ``bytes`` carried by finished flows (size ×
    multiplicity) and recorded usages (:class:`LinkUsage`), ``busy_s`` with any load on
    it, ``saturated_s`` with its load at its capacity (within 1e-9), and ``bytes_by_tag``:
    the bytes split by the flows' tags (only flows with a ``str`` tag are counted there)."""

    bytes: float
    busy_s: float
    saturated_s: float
    bytes_by_tag: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, eq=False)
class LinkUsage:
    """What transfers that had their links to themselves did to them, in the terms of
    :class:`LinkStats`: per link (``indices``: network link indices, each once) the bytes
    carried, busy and saturated seconds, and the bytes per ``str`` tag.

    Made by :meth:`FlowNetwork.solo_usage` — one transfer alone on its links, which also
    knows the constant ``loads`` (bytes/s per link) it put on them for ``duration_s`` —
    or by :meth:`total`, a weighted sum of usages (``loads`` None).  Counted into the
    statistics by :meth:`FlowNetwork.record_usage`.  Compared by identity: one usage
    recorded many times is one dictionary entry.
    """

    indices: np.ndarray
    bytes: np.ndarray
    busy_s: np.ndarray
    saturated_s: np.ndarray
    bytes_by_tag: Mapping[str, np.ndarray] = field(default_factory=dict)
    loads: np.ndarray | None = None
    duration_s: float = 0.0

    @staticmethod
    def total(parts: Iterable[tuple[LinkUsage, float]]) -> LinkUsage:
        """The sum of ``(usage, times)`` pairs: what ``times`` runs of each did together
        (their busy seconds add up: the transfers ran one after another)."""
        pairs = [(usage, float(times)) for usage, times in parts]
        if not pairs:
            empty = np.zeros(0)
            return LinkUsage(np.zeros(0, np.int64), empty, empty, empty)
        links, inverse = np.unique(np.concatenate([u.indices for u, _ in pairs]),
                                   return_inverse=True)

        def summed(values: list[np.ndarray]) -> np.ndarray:
            weighted = np.concatenate([v * times for v, (_, times) in zip(values, pairs)])
            return np.bincount(inverse, weights=weighted, minlength=links.size)

        tags = dict.fromkeys(tag for usage, _ in pairs for tag in usage.bytes_by_tag)
        by_tag = {tag: summed([u.bytes_by_tag.get(tag, np.zeros(u.indices.size))
                               for u, _ in pairs]) for tag in tags}
        return LinkUsage(links, summed([u.bytes for u, _ in pairs]),
                         summed([u.busy_s for u, _ in pairs]),
                         summed([u.saturated_s for u, _ in pairs]), by_tag)


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


class LinkSet:
    """Links a flow crosses with their multiplicities, resolved to network indices once.

    Made by :meth:`FlowNetwork.link_set`; a collective that sends the same shape of flow
    many times (one per algorithm step, one per call of a sweep) resolves it once.
    """

    __slots__ = ("ids", "index_array", "indices", "mask", "mult_array", "multiplicities")

    def __init__(self, ids: tuple[LinkId, ...], indices: tuple[int, ...],
                 multiplicities: tuple[float, ...]) -> None:
        self.ids = ids
        self.indices = indices
        self.multiplicities = multiplicities
        self.index_array = np.fromiter(indices, np.int64, len(indices))
        self.mult_array = np.fromiter(multiplicities, float, len(multiplicities))
        # The links as a bit set (bit i: link index i), so that whether two flows share
        # a link is one ``&`` of two ints (see FlowNetwork._component).
        if indices:
            bits = np.zeros(max(indices) + 1, bool)
            bits[self.index_array] = True
            self.mask = int.from_bytes(np.packbits(bits, bitorder="little").tobytes(),
                                       "little")
        else:
            self.mask = 0

    def __len__(self) -> int:
        return len(self.indices)


class Flow:
    """One transfer: bytes over weighted links after a latency; ``done`` fires at the end.

    Hot object, so ``__slots__`` and plain attributes.  ``links`` are internal link
    indices of the owning network, ``multiplicities`` parallel to them; ``link_ids`` the
    ids they were given by.  ``rate_bytes_per_s`` and ``remaining_bytes`` (the bytes left
    when its rate last changed) are read through: while the incremental solver runs, the
    network keeps them in arrays by solver handle and updates many at once.
    """

    __slots__ = (
        "_finish_s",
        "_handle",
        "_link_array",
        "_mask",
        "_mult_array",
        "_net",
        "_rate",
        "_remaining",
        "_updated_s",
        "_version",
        "done",
        "finish_s",
        "id",
        "latency_s",
        "link_ids",
        "links",
        "multiplicities",
        "size_bytes",
        "start_s",
        "tag",
        "transfer_start_s",
    )

    def __init__(self, flow_id: int, links: LinkSet, size_bytes: float, latency_s: float,
                 start_s: float, done: Event, tag: Any, net: FlowNetwork) -> None:
        self.id = flow_id
        self._net = net
        self.link_ids = links.ids
        self.links = links.indices
        self.multiplicities = links.multiplicities
        # The same incidence as arrays, for assembling a solve without a Python loop.
        self._link_array = links.index_array
        self._mult_array = links.mult_array
        self._mask = links.mask
        self.size_bytes = size_bytes
        self._remaining = size_bytes
        self.latency_s = latency_s
        self.start_s = start_s
        self.transfer_start_s: float | None = None
        self.finish_s: float | None = None
        self._rate = 0.0
        self.done = done
        self.tag = tag
        self._updated_s = start_s
        self._version = 0
        self._finish_s = float("inf")
        self._handle = -1  # its slot in the incremental solver, if one runs

    @property
    def rate_bytes_per_s(self) -> float:
        """Its max-min fair rate now (0 before it transfers and once it finished)."""
        if self._handle >= 0:
            return float(self._net._h_rate[self._handle])
        return self._rate

    @property
    def remaining_bytes(self) -> float:
        """Bytes left when its rate last changed (0 once it finished)."""
        if self._handle >= 0:
            return float(self._net._h_remaining[self._handle])
        return self._remaining

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
        self._capacity_array = np.zeros(0)
        self._link_bytes = np.zeros(0)  # bytes carried by finished flows, per link
        self._link_count = np.zeros(0, np.int64)  # transferring flows, per link
        # Link statistics, integrated as loads change (see _account): the load since the
        # last solve that touched the link, when that was, busy and saturated seconds.
        self._link_load = np.zeros(0)
        self._link_since = np.zeros(0)
        self._link_busy = np.zeros(0)
        self._link_saturated = np.zeros(0)
        self._saturation_at = np.zeros(0)  # load at which a link counts as saturated
        self._tag_bytes: dict[str, np.ndarray] = {}  # bytes per link, per str tag
        # Recorded usages not yet added to the statistics, with how often each ran.
        self._pending_usage: dict[LinkUsage, float] = {}
        # Load changes not yet integrated: (time, link indices, new loads or None for 0).
        self._stats_log: list[tuple[float, Any, np.ndarray | None]] = []
        self._stats_entries = 0  # (link, load) entries in the log
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
        cap = self._capacity_array = np.asarray(self._capacity, dtype=float)
        self._saturation_at = np.where(np.isfinite(cap), cap * _SATURATED, np.nan)
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

    def link_bytes(self, link_id: LinkId) -> float:
        """Bytes carried by a link by finished flows (size × multiplicity, summed) and
        recorded usages."""
        self._flush_usage()
        return float(self._link_bytes[self._index[link_id]])

    def flows_on(self, link_id: LinkId) -> list[Flow]:
        """Flows transferring over a link now, in the order they started."""
        return self._flows_on(self._index[link_id])

    def _flows_on(self, idx: int) -> list[Flow]:
        bit = 1 << idx
        return [flow for flow in self._transferring if flow._mask & bit]

    def link_stats(self) -> dict[LinkId, LinkStats]:
        """Per link: bytes carried, busy and saturated seconds up to now (see
        :class:`LinkStats`).  Loads in force now count up to ``env.now``."""
        ids, _capacity, carried_a, busy_a, saturated_a = self.link_stat_arrays()
        carried, busy, saturated = carried_a.tolist(), busy_a.tolist(), saturated_a.tolist()
        by_tag = {tag: arr.tolist() for tag, arr in self._tag_bytes.items()}
        return {link_id: LinkStats(carried[i], busy[i], saturated[i],
                                   {tag: b[i] for tag, b in by_tag.items() if b[i] > 0})
                for i, link_id in enumerate(ids)}

    def link_stat_arrays(self) -> tuple[tuple[LinkId, ...], np.ndarray, np.ndarray,
                                        np.ndarray, np.ndarray]:
        """The statistics of :meth:`link_stats` as arrays parallel to :attr:`link_ids`:
        ``(ids, capacity B/s, bytes, busy_s, saturated_s)`` — for ranking many links."""
        self._flush_usage()
        self._integrate()
        dt = self.env.now - self._link_since
        load = self._link_load
        busy = self._link_busy + np.where(load > 0, dt, 0.0)
        saturated = self._link_saturated + np.where(load >= self._saturation_at, dt, 0.0)
        return (self.link_ids, self._capacity_array.copy(), self._link_bytes.copy(), busy,
                saturated)

    def link_bytes_by_tag(self, link_id: LinkId) -> dict[str, float]:
        """Bytes a link carried for finished flows and recorded usages, per ``str`` tag
        (untagged: absent)."""
        self._flush_usage()
        idx = self._index[link_id]
        return {tag: float(arr[idx]) for tag, arr in self._tag_bytes.items() if arr[idx] > 0}

    def add_listener(self, listener: RateListener) -> None:
        """Call ``listener(now, link_indices, loads)`` after every solve (for tracing)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ usages
    def solo_usage(self, links: LinkSet | Mapping[LinkId, float] | Iterable[LinkId],
                   size_bytes: float, tag: Any = None) -> LinkUsage:
        """What a flow of ``size_bytes`` over ``links`` (as :meth:`transfer` takes them)
        does to its links when it has them to itself: it moves at its bottleneck rate
        ``r = min capacity/multiplicity``, for ``size_bytes / r`` seconds, loading each
        link with ``multiplicity × r`` — the arithmetic of a solve with one flow, so a
        recorded usage counts exactly as the flow would have (its latency comes before
        and loads nothing)."""
        if not size_bytes >= 0 or size_bytes == float("inf"):
            raise SimulationError(f"flow size must be finite and >= 0, got {size_bytes!r}")
        if not isinstance(links, LinkSet):
            links = self.link_set(links)
        self._ensure_arrays()
        index, mult = links.index_array, links.mult_array
        carried = float(size_bytes) * mult
        by_tag = {tag: carried} if isinstance(tag, str) else {}
        if size_bytes == 0 or not links:
            zeros = np.zeros(index.size)
            return LinkUsage(index, carried, zeros, zeros, by_tag, zeros, 0.0)
        rate = (self._capacity_array[index] / mult).min()
        duration = 0.0 if rate == float("inf") else float(size_bytes) / rate
        loads = mult * rate
        busy = np.full(index.size, duration)
        saturated = np.where(loads >= self._saturation_at[index], duration, 0.0)
        return LinkUsage(index, carried, busy, saturated, by_tag, loads, duration)

    def record_usage(self, usage: LinkUsage, times: float = 1.0) -> None:
        """Count ``usage`` (``times`` over) into the link statistics, as if its transfers
        had run as flows.  The caller vouches that nothing else loaded those links while
        they ran: their busy and saturated seconds are added, not merged.  Cheap (one
        dictionary update); the sums are formed when statistics are read."""
        pending = self._pending_usage
        pending[usage] = pending.get(usage, 0.0) + times

    def show_usage(self, usage: LinkUsage, start_s: float) -> None:
        """Tell the listeners (:meth:`add_listener`) that a solo usage loaded its links
        from ``start_s`` for its ``duration_s``, then nothing (trace counter tracks)."""
        if usage.loads is None:
            raise SimulationError("only a solo usage (FlowNetwork.solo_usage) has loads "
                                  "over time to show")
        if not self._listeners or usage.duration_s == 0:
            return
        links = usage.indices.tolist()
        idle = np.zeros(len(links))
        for listener in self._listeners:
            listener(start_s, links, usage.loads)
            listener(start_s + usage.duration_s, links, idle)

    def _flush_usage(self) -> None:
        """Add the recorded usages to the per-link statistics."""
        self._ensure_arrays()
        pending = self._pending_usage
        if not pending:
            return
        self._pending_usage = {}
        for usage, times in pending.items():
            index = usage.indices  # each link once: fancy-index += is exact
            self._link_bytes[index] += usage.bytes * times
            self._link_busy[index] += usage.busy_s * times
            self._link_saturated[index] += usage.saturated_s * times
            for tag, carried in usage.bytes_by_tag.items():
                self._tag_array(tag)[index] += carried * times

    def _tag_array(self, tag: str) -> np.ndarray:
        """The bytes per link of one tag (created at zero)."""
        per_tag = self._tag_bytes.get(tag)
        if per_tag is None:
            per_tag = self._tag_bytes[tag] = np.zeros(self._link_bytes.size)
        return per_tag

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
        if not size_bytes >= 0 or size_bytes == float("inf"):
            raise SimulationError(f"flow size must be finite and >= 0, got {size_bytes!r}")
        if not latency_s >= 0 or latency_s == float("inf"):
            raise SimulationError(f"flow latency must be finite and >= 0, got {latency_s!r}")
        if not isinstance(links, LinkSet):
            links = self.link_set(links)
        env = self.env
        flow = Flow(self._next_flow_id, links, float(size_bytes), float(latency_s), env.now,
                    Event(env), tag, self)
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
        self._ensure_arrays()
        self._link_count[flow._link_array] += 1
        self._seed_flows[flow] = None
        self._transferring[flow] = None
        if self._incremental is not None:
            self._track(flow)
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
        self._link_count[flow._link_array] -= 1
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
        flow.finish_s = self.env.now
        flow._version += 1
        self._ensure_arrays()
        carried = flow.size_bytes * flow._mult_array
        self._link_bytes[flow._link_array] += carried
        tag = flow.tag
        if isinstance(tag, str):
            self._tag_array(tag)[flow._link_array] += carried
        self.completed_flows += 1
        flow.done.succeed(flow)

    def _ensure_arrays(self) -> None:
        """Grow the per-link arrays after links were added."""
        grow = len(self._capacity) - self._link_count.size
        if grow > 0:
            self._link_count = np.concatenate([self._link_count, np.zeros(grow, np.int64)])
            self._link_bytes = np.concatenate([self._link_bytes, np.zeros(grow)])
            self._capacity_array = np.asarray(self._capacity, dtype=float)
            self._scratch_mark = np.zeros(len(self._capacity), bool)
            self._scratch_position = np.zeros(len(self._capacity), np.int64)
            zeros = np.zeros(grow)
            self._link_load = np.concatenate([self._link_load, zeros])
            self._link_since = np.concatenate([self._link_since, zeros + self.env.now])
            self._link_busy = np.concatenate([self._link_busy, zeros])
            self._link_saturated = np.concatenate([self._link_saturated, zeros])
            cap = self._capacity_array
            # An ideal (infinite) link is never saturated.
            self._saturation_at = np.where(np.isfinite(cap), cap * _SATURATED, np.nan)
            for tag, arr in self._tag_bytes.items():
                self._tag_bytes[tag] = np.concatenate([arr, zeros])
            if self._incremental is not None:
                self._incremental.set_capacity(cap)

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
        freed = (np.concatenate(self._seed_links) if self._seed_links
                 else np.zeros(0, np.int64))
        # Freed links nobody uses any more: their load drops to zero (link statistics; a
        # link logged twice at one instant integrates the same as once).
        self._idle_links = freed[self._link_count[freed] == 0] if freed.size else freed
        if self._listeners:
            freed = np.unique(freed)
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
            self._notify(now, freed.tolist(), np.zeros(0), [])
            self._arm_timer()
            return
        for flow in flows:
            # Settle bytes moved at the old rate before the rate changes.
            if now > flow._updated_s:
                flow._remaining -= flow._rate * (now - flow._updated_s)
                flow._updated_s = now
        if len(flows) == 1:
            # Alone on its links (the common case): its bottleneck, no filling needed.
            flow = flows[0]
            fair = self._capacity_array[flow._link_array] / flow._mult_array
            rates = np.array([fair.min()])
            component_links, entry_link = flow._link_array, np.arange(len(flow.links))
            entry_mult, entry_flow = flow._mult_array, np.zeros(len(flow.links), np.int64)
            loads = entry_mult * rates[0]  # a link set holds each link once
        else:
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
        if self._idle_links.size:
            self._account(now, self._idle_links, None)
        self._account(now, component_links, loads)
        heap = self._heap
        for flow, rate in zip(flows, rates.tolist()):
            flow._rate = rate
            flow._version += 1
            remaining = flow._remaining if flow._remaining > 0 else 0.0
            finish = now if rate == float("inf") else now + remaining / rate
            flow._finish_s = finish
            self._heap_seq += 1
            heapq.heappush(heap, (finish, self._heap_seq, flow._version, flow))
        if self._listeners:
            touched = list(dict.fromkeys([*component_links.tolist(), *freed.tolist()]))
            self._notify(now, touched, loads, component_links.tolist())
        self._arm_timer()

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

    def _account(self, now: float, links: Any, loads: np.ndarray | None) -> None:
        """Log that ``links`` carry ``loads`` (None: nothing) from ``now`` on.  Loads are
        piecewise constant between solves; the log is integrated into busy and saturated
        time in batches (:meth:`_integrate`), so a solve pays one append, not a pass over
        its links, and links no solve touched cost nothing."""
        log = self._stats_log
        log.append((now, links, loads))
        self._stats_entries += len(links)
        if len(log) >= _STATS_BATCH or self._stats_entries >= _STATS_BATCH_ENTRIES:
            self._integrate()

    def _integrate(self) -> None:
        """Fold the logged load changes into the per-link statistics, vectorised: per link
        in time order, each logged load holds from its time to the link's next change."""
        log = self._stats_log
        if not log:
            return
        self._stats_log = []
        self._stats_entries = 0
        counts = np.fromiter((len(links) for _, links, _ in log), np.int64, len(log))
        idx = np.concatenate([np.asarray(links, np.int64) for _, links, _ in log])
        value = np.concatenate([np.zeros(len(links)) if loads is None else loads
                                for _, links, loads in log])
        when = np.repeat(np.fromiter((t for t, _, _ in log), float, len(log)), counts)
        order = np.argsort(idx, kind="stable")  # per link, in log (= time) order
        idx, value, when = idx[order], value[order], when[order]
        first = np.ones(idx.size, bool)
        first[1:] = idx[1:] != idx[:-1]
        prev_value = np.empty_like(value)
        prev_value[1:] = value[:-1]
        prev_value[first] = self._link_load[idx[first]]
        prev_when = np.empty_like(when)
        prev_when[1:] = when[:-1]
        prev_when[first] = self._link_since[idx[first]]
        dt = when - prev_when
        n = self._link_load.size
        self._link_busy += np.bincount(idx, weights=dt * (prev_value > 0), minlength=n)
        self._link_saturated += np.bincount(
            idx, weights=dt * (prev_value >= self._saturation_at[idx]), minlength=n)
        last = np.ones(idx.size, bool)
        last[:-1] = first[1:]
        self._link_load[idx[last]] = value[last]
        self._link_since[idx[last]] = when[last]

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
            self._timer_at = first
            timer = self.env.timeout(max(first - self.env.now, 0.0))
            timer.callbacks.append(self._on_timer)

    def _on_timer(self, _event: Event) -> None:
        now = self.env.now
        if self._timer_at > now + 4 * abs(now) * np.finfo(float).eps:
            return  # an older, later timer; a newer one is armed
        self._timer_at = float("inf")
        heap = self._heap
        finished = False
        # A timer may land an ulp or so before the finish time it was armed for (time
        # arithmetic rounds); finishes that close count as now.
        due = now + 4 * abs(now) * np.finfo(float).eps
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
        if rate == float("inf"):
            remaining = 0.0  # only ideal links: the bytes arrive with no delay
        else:
            remaining = flow._remaining - rate * (now - flow._updated_s)
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


def _flow_id(flow: Flow) -> int:
    return flow.id
