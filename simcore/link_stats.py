"""Link statistics: what every link of a :class:`~.network.FlowNetwork` did over a run.

Per link: the bytes carried (also per ``str`` tag), the seconds it had any load and the
seconds its load was at its capacity.  Loads are piecewise constant between solves: each
solve logs the loads it set (:meth:`LinkStatistics._account`), and the log is integrated
in batches.  Transfers timed by their closed form, never flows, are counted too, as a
:class:`LinkUsage` (:meth:`LinkStatistics.solo_usage`, :meth:`LinkStatistics.record_usage`),
so their bytes, busy and saturated seconds come out as if they had run as flows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy
from distsim_gpu.simcore.errors import SimulationError
from distsim_gpu.simcore.flows import Flow, LinkId, LinkSet

__all__ = ["LinkStatistics", "LinkStats", "LinkUsage", "saturation_at"]

# A link is saturated while its load is at least this fraction of its capacity.
_SATURATED = 1.0 - 1e-9
# Load changes logged before they are integrated into the link statistics in one batch:
# at most this many solves, and at most this many (link, load) entries in all — on a large
# fabric one solve logs thousands of links, and the batch's arrays are what peak memory is.
_STATS_BATCH = 4096
_STATS_BATCH_ENTRIES = 1 << 19


def _sort_keys(index: np.ndarray, num_links: int) -> np.ndarray:
    """Link indices as keys for a stable sort per link, in log (= time) order: 16-bit
    while every index fits, which numpy sorts by radix (about 5x faster than 64-bit keys
    on half a million entries).  Equal keys are equal links either way, and a stable
    sort's permutation is fixed by the keys, so the order is the same."""
    return index.astype(np.uint16) if num_links <= 1 << 16 else index


def saturation_at(capacity: np.ndarray) -> np.ndarray:
    """The load at which each link counts as saturated (an ideal, infinite link never)."""
    return np.where(np.isfinite(capacity), capacity * _SATURATED, np.nan)


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


class LinkStatistics:
    """The link statistics of a flow network (a base of :class:`~.network.FlowNetwork`,
    which owns the links, calls :meth:`_init_link_statistics` and
    :meth:`_grow_link_statistics`, and logs every solve's loads with :meth:`_account`)."""

    # Of the network: its clock, links and listeners.
    env: simpy.Environment
    _index: dict[LinkId, int]
    _capacity_array: np.ndarray
    _listeners: list[Callable[[float, list[int], np.ndarray], None]]

    @property
    def link_ids(self) -> tuple[LinkId, ...]:
        raise NotImplementedError

    def link_set(self, links: Mapping[LinkId, float] | Iterable[LinkId]) -> LinkSet:
        raise NotImplementedError

    def _ensure_arrays(self) -> None:
        raise NotImplementedError

    def _init_link_statistics(self) -> None:
        self._link_bytes = np.zeros(0)  # bytes carried by finished flows, per link
        # Link statistics, integrated as loads change (see _account): the load since the
        # last solve that touched the link, when that was, busy and saturated seconds.
        self._link_load = np.zeros(0)
        self._link_since = np.zeros(0)
        # Per link, what the statistics see of its last logged load: 0 idle, 1 busy,
        # 2 busy and saturated.  A solve logs only the links whose state it changes.
        self._link_state = np.zeros(0, np.int8)
        self._link_busy = np.zeros(0)
        self._link_saturated = np.zeros(0)
        self._saturation_at = np.zeros(0)  # load at which a link counts as saturated
        self._tag_bytes: dict[str, np.ndarray] = {}  # bytes per link, per str tag
        # Finished flows whose bytes are not yet in the link statistics (_flush_done).
        self._done_flows: list[Flow] = []
        # Recorded usages not yet added to the statistics, with how often each ran.
        self._pending_usage: dict[LinkUsage, float] = {}
        # Load changes not yet integrated: (time, link indices, new loads or None for 0).
        self._stats_log: list[tuple[float, Any, np.ndarray | None]] = []
        self._stats_entries = 0  # (link, load) entries in the log

    def _grow_link_statistics(self, grow: int) -> None:
        """``grow`` links were added (``_capacity_array`` holds them already)."""
        self._link_bytes = np.concatenate([self._link_bytes, np.zeros(grow)])
        zeros = np.zeros(grow)
        self._link_load = np.concatenate([self._link_load, zeros])
        self._link_since = np.concatenate([self._link_since, zeros + self.env.now])
        self._link_state = np.concatenate([self._link_state, np.zeros(grow, np.int8)])
        self._link_busy = np.concatenate([self._link_busy, zeros])
        self._link_saturated = np.concatenate([self._link_saturated, zeros])
        self._saturation_at = saturation_at(self._capacity_array)
        for tag, arr in self._tag_bytes.items():
            self._tag_bytes[tag] = np.concatenate([arr, zeros])

    def link_bytes(self, link_id: LinkId) -> float:
        """Bytes carried by a link by finished flows (size × multiplicity, summed) and
        recorded usages."""
        self._flush_usage()
        return float(self._link_bytes[self._index[link_id]])

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

    def _flush_done(self) -> None:
        """Add the finished flows' bytes (size × multiplicity) to their links and tags, as
        the network's ``_complete`` did one flow at a time: the products are the same elementwise
        ones, and ``np.add.at`` adds them in finishing order, so every link's sum is the
        same sequence of additions; tags' arrays are made in the order tags first finish.
        Runs before recorded usages are flushed (:meth:`_flush_usage`), as it did."""
        done = self._done_flows
        if not done:
            return
        self._done_flows = []
        self._ensure_arrays()
        counts = np.fromiter((f._link_array.size for f in done), np.int64, len(done))
        index = np.concatenate([f._link_array for f in done])
        carried = (np.repeat(np.fromiter((f.size_bytes for f in done), float, len(done)),
                             counts) * np.concatenate([f._mult_array for f in done]))
        np.add.at(self._link_bytes, index, carried)
        tags = [f.tag if isinstance(f.tag, str) else None for f in done]
        named = dict.fromkeys(tag for tag in tags if tag is not None)
        if not named:
            return
        entry_flow = np.repeat(np.arange(len(done)), counts)
        for tag in named:  # in the order each tag first finished
            mine = np.fromiter((t == tag for t in tags), bool, len(tags))[entry_flow]
            np.add.at(self._tag_array(tag), index[mine], carried[mine])

    def _flush_usage(self) -> None:
        """Add the recorded usages to the per-link statistics."""
        self._flush_done()  # finished flows first, as they were counted before
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

    def _account(self, now: float, links: Any, loads: np.ndarray | None) -> None:
        """Log that ``links`` carry ``loads`` (None: nothing) from ``now`` on.  Loads are
        piecewise constant between solves; the log is integrated into busy and saturated
        time in batches (:meth:`_integrate`), so a solve pays one append, not a pass over
        its links, and links no solve touched cost nothing.  Only links whose state (idle,
        busy, saturated) changes are logged: busy and saturated seconds depend on nothing
        else, and a solve over a folded flow's thousands of links changes few of them."""
        index = np.asarray(links, np.int64)
        self._account_states(now, index, loads, self._load_states(index, loads))

    def _load_states(self, index: np.ndarray, loads: np.ndarray | None) -> np.ndarray:
        """Each link's state under ``loads``: 0 idle, 1 busy, 2 saturated (a pure function
        of the loads and the capacities, so a caller that repeats a solve may keep it)."""
        if loads is None:
            return np.zeros(index.size, np.int8)
        return (loads > 0).astype(np.int8) + (loads >= self._saturation_at[index])

    def _account_states(self, now: float, index: np.ndarray, loads: np.ndarray | None,
                        state: np.ndarray) -> None:
        """:meth:`_account` with the links' states (:meth:`_load_states`) known."""
        changed = self._link_state[index] != state
        count = np.count_nonzero(changed)  # one C call for .all() and .any()
        if count != changed.size:
            if not count:
                return
            index, state = index[changed], state[changed]
            loads = None if loads is None else loads[changed]
        self._link_state[index] = state
        log = self._stats_log
        log.append((now, index, loads))
        self._stats_entries += index.size
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
        order = np.argsort(_sort_keys(idx, self._link_bytes.size), kind="stable")
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
        # Per-link sums over the sorted runs: work in the log's entries, not the fabric's
        # links (a bincount over every link per batch dominated 8k-GPU runs).
        starts = np.flatnonzero(first)
        links = idx[starts]
        self._link_busy[links] += np.add.reduceat(dt * (prev_value > 0), starts)
        self._link_saturated[links] += np.add.reduceat(
            dt * (prev_value >= self._saturation_at[idx]), starts)
        last = np.ones(idx.size, bool)
        last[:-1] = first[1:]
        self._link_load[idx[last]] = value[last]
        self._link_since[idx[last]] = when[last]
