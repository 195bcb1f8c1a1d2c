"""Max-min fair rates kept up to date as flows come and go, re-solving only what changes.

:func:`~simcore.maxmin.solve_max_min` fills a whole connected component from zero.  When
thousands of flows share a fabric (random pairs over an oversubscribed spine) every
finish re-solves all of them, and the run costs O(flows² × levels).  This solver keeps the
last allocation and, per change, re-solves a *subset* ``S`` of the flows with the rest held
at their rates, then checks the result by the bottleneck characterisation of max-min
fairness (Bertsekas & Gallager, *Data Networks*, §6.5.2): a feasible allocation is the
max-min fair one exactly when every flow has a *bottleneck* — a saturated link on which
no flow is faster than it.  Where a flow lacks one, ``S`` grows (that flow, and the flows
at least as fast on its links) and the subset is solved again; a subset that stops growing
falls back to solving every flow.  So the answer is the from-scratch one whatever ``S``
was; choosing ``S`` well only saves work:

* a flow that ends frees its links only for flows as fast as it or faster: progressive
  filling freezes every flow below its rate before any of its links could saturate, so
  those flows keep their rates;
* a new flow is solved with the flows it will likely slow: on each of its links whose
  spare capacity its guaranteed share (the link's capacity split evenly) would fill, those
  faster than that share; the check pulls in any others.

Before a subset is solved, a look-ahead follows the cascade hop by hop: the flows that
join ``S`` will speed up or slow down the flows bottlenecked on their saturated links.

Only the links whose load changed (those of ``S`` and of ended flows) can leave a flow
without its bottleneck, so a check looks at the flows crossing them, and a held flow whose
recorded bottleneck is elsewhere passes without looking.  The incidence lives in
persistent arrays with one slot per flow (entries of ended flows are blanked and
compacted from time to time) and a link index (the entries sorted by link, rebuilt when
many were added since), and a round works on the entries of the changed links only, with
positions local to them.  Subsets are filled by local minima
(:func:`~simcore.maxmin._fill_local_minima`: every link no neighbour undercuts freezes in
the same round), which gives progressive filling's rates in fewer rounds.  So a change
costs numpy passes over the entries near it, not Python loops over the flows.

Pure arrays, no SimPy: :class:`~simcore.network.FlowNetwork` switches to it when many
flows transfer at once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from distsim_gpu.simcore.maxmin import _TIE_RTOL, _fill, _fill_local_minima

__all__ = ["IncrementalMaxMin"]

# A link counts as saturated, and a flow as the fastest on a link, within this relative
# distance: the tolerance progressive filling freezes ties with (float sums of loads
# differ from the capacity by rounding only).
_CHECK_RTOL = 4 * _TIE_RTOL
# Entries of ended flows are compacted away once they are this many and half of all.
_COMPACT_MIN = 4096
_LOOKAHEAD = 8  # hops of look-ahead per growth step (see _look_ahead)
# Entries added since the link index was built are scanned one by one; the index is
# rebuilt (a sort of all entries) once they are this many and an eighth of all.
_UNINDEXED_MAX = 2048


class _Near(NamedTuple):
    """A round's view of the links whose load may change: the entries on them."""

    entries: np.ndarray
    flow: np.ndarray  # per entry: its flow's slot
    mult: np.ndarray  # per entry: its multiplicity
    links: np.ndarray  # the changed links (ids, sorted)
    link: np.ndarray  # per entry: its link's position in ``links``


class IncrementalMaxMin:
    """Flows (weighted link sets) added and removed over time; :meth:`solve` brings their
    max-min fair rates up to date and says which rates it set.

    ``capacity`` (bytes/s per link, ``inf`` for ideal links) may grow with
    :meth:`set_capacity` as links are added.  Handles are small ints, reused after
    :meth:`remove`.
    """

    def __init__(self, capacity: np.ndarray) -> None:
        self._capacity = np.zeros(0)
        self._saturated_at = np.zeros(0)  # load from which a link counts as saturated
        # Per-link scratch, back to all False / inf between uses.
        self._link_mark = np.zeros(0, bool)
        self._link_floor = np.zeros(0)
        self._link_pos = np.zeros(0, np.int64)  # read only where just written
        # Load per link as last checked (a link no check saw reads 0): only to skip
        # links that cannot be a bottleneck when looking ahead.
        self._load = np.zeros(0)
        # Multiplicity of the flows on each link, summed (only for the new flows' guess).
        self._weight = np.zeros(0)
        # The link index (so a change looks only near it): the entries below
        # ``_indexed`` sorted by link, link l's at ``_by_link[_link_start[l]:
        # _link_start[l + 1]]``.  Entries blanked since are skipped when read; later
        # entries are scanned.
        self._by_link = np.zeros(0, np.int64)
        self._link_start = np.zeros(1, np.int64)
        self._indexed = 0
        self.set_capacity(capacity)
        # Per slot (slot 0 is the blank that ended flows' entries point at).
        self._rate = np.zeros(1)
        self._bottleneck = np.full(1, -1, np.int64)
        self._live = np.zeros(1, bool)
        self._start = np.zeros(1, np.int64)
        self._count = np.zeros(1, np.int64)
        self._free: list[int] = []
        # Per-slot scratch: membership of the subset being solved, a flag (all False
        # between uses) and a slot's position in the subset.
        self._in_s = np.zeros(1, bool)
        self._flag = np.zeros(1, bool)
        self._slot_pos = np.zeros(1, np.int64)
        # Entries: slot, link, multiplicity; the first ``_used`` are in use.
        self._e_flow = np.zeros(64, np.int64)
        self._e_link = np.zeros(64, np.int64)
        self._e_mult = np.zeros(64)
        self._used = 0
        self._blank = 0
        self._new: dict[int, None] = {}
        self._ended: list[tuple[np.ndarray, float]] = []
        self.rounds = 0  # subset solves run (for benchmarks)

    # ------------------------------------------------------------------ state
    def set_capacity(self, capacity: np.ndarray) -> None:
        """Link capacities; one more (ideal) link at the end stands for blank entries."""
        self._capacity = np.append(np.asarray(capacity, float), np.inf)
        self._sentinel = self._capacity.size - 1
        self._saturated_at = self._capacity * (1.0 - _CHECK_RTOL)
        grow = self._capacity.size - self._load.size
        self._load = np.append(self._load, np.zeros(grow))
        self._weight = np.append(self._weight, np.zeros(grow))
        self._link_mark = np.append(self._link_mark, np.zeros(grow, bool))
        self._link_floor = np.append(self._link_floor, np.full(grow, np.inf))
        self._link_pos = np.append(self._link_pos, np.zeros(grow, np.int64))
        self._indexed = 0  # the index has a row per link: rebuilt before its next use
        if getattr(self, "_used", 0):
            used = slice(0, self._used)
            blank = self._e_flow[used] == 0
            self._e_link[used][blank] = self._sentinel

    def rate(self, handle: int) -> float:
        """The rate set by the last :meth:`solve` (nan before the first that saw it)."""
        return float(self._rate[handle])

    def __len__(self) -> int:
        return int(self._live.sum())

    def add(self, links: np.ndarray, mults: np.ndarray) -> int:
        """A new flow over ``links`` (each once) with multiplicities ``mults > 0``."""
        slot = self._free.pop() if self._free else self._grow_slots()
        n = links.size
        while self._used + n > self._e_flow.size:
            size = 2 * self._e_flow.size
            self._e_flow = np.resize(self._e_flow, size)
            self._e_link = np.resize(self._e_link, size)
            self._e_mult = np.resize(self._e_mult, size)
        at = self._used
        self._e_flow[at:at + n] = slot
        self._e_link[at:at + n] = links
        self._e_mult[at:at + n] = mults
        self._weight[links] += mults
        self._used += n
        self._start[slot], self._count[slot] = at, n
        self._live[slot] = True
        self._rate[slot] = np.nan
        self._bottleneck[slot] = -1
        self._new[slot] = None
        return slot

    def remove(self, handle: int) -> None:
        """End a flow: its links are freed at the next :meth:`solve`."""
        at, n = self._start[handle], self._count[handle]
        span = slice(at, at + n)
        self._weight[self._e_link[span]] -= self._e_mult[span]
        if handle in self._new:
            del self._new[handle]  # never solved: its links carried nothing yet
        else:
            self._ended.append((self._e_link[span].copy(), float(self._rate[handle])))
        self._e_flow[span] = 0
        self._e_link[span] = self._sentinel
        self._e_mult[span] = 0.0
        self._live[handle] = False
        self._rate[handle] = 0.0
        self._free.append(handle)
        self._blank += n
        if self._blank >= _COMPACT_MIN and 2 * self._blank >= self._used:
            self._compact()

    def _grow_slots(self) -> int:
        slot = self._rate.size
        grow = max(slot, 16)
        self._rate = np.append(self._rate, np.zeros(grow))
        self._bottleneck = np.append(self._bottleneck, np.full(grow, -1, np.int64))
        self._live = np.append(self._live, np.zeros(grow, bool))
        self._start = np.append(self._start, np.zeros(grow, np.int64))
        self._count = np.append(self._count, np.zeros(grow, np.int64))
        self._in_s = np.append(self._in_s, np.zeros(grow, bool))
        self._flag = np.append(self._flag, np.zeros(grow, bool))
        self._slot_pos = np.append(self._slot_pos, np.zeros(grow, np.int64))
        self._free.extend(range(slot + grow - 1, slot, -1))
        return slot

    def _compact(self) -> None:
        """Drop blank entries; each live flow's entries stay contiguous."""
        used = self._used
        keep = self._e_flow[:used] != 0
        position = np.cumsum(keep) - 1
        live = np.flatnonzero(self._live)
        self._start[live] = position[self._start[live]]
        n = int(keep.sum())
        for name in ("_e_flow", "_e_link", "_e_mult"):
            arr = getattr(self, name)
            kept = arr[:used][keep]
            arr[:n] = kept
        self._used = n
        self._blank = 0
        self._indexed = 0  # entries moved: the index is rebuilt before its next use

    # ------------------------------------------------------------------ solving
    def solve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Bring the rates up to date after the adds and removes since the last solve.

        Returns ``(handles, rates, links, loads)``: the flows whose rate was solved (the
        others kept theirs) and their rates, and the links whose load may have changed
        with their loads now (bytes/s).
        """
        if not self._new and not self._ended:
            empty = np.zeros(0, np.int64)
            return empty, np.zeros(0), empty, np.zeros(0)
        in_s = self._in_s  # S, the subset solved; cleared before returning
        new = np.fromiter(self._new, np.int64, len(self._new))
        self._new.clear()
        in_s[new] = True
        ended_links = np.zeros(0, np.int64)
        moved = np.concatenate([new, self._add(in_s, self._slowed_by(new))]) if new.size \
            else new
        if self._ended:
            ended_links = np.concatenate([links for links, _ in self._ended])
            rates = np.concatenate([np.full(links.size, rate) for links, rate in self._ended])
            self._ended.clear()
            # Only a saturated link is anyone's bottleneck.
            saturated = self._load[ended_links] >= self._saturated_at[ended_links]
            pulled = self._add(in_s, self._bottlenecked_on(ended_links[saturated],
                                                           rates[saturated]))
            moved = np.concatenate([moved, pulled])
        size = moved.size + self._look_ahead(in_s, moved)
        while True:
            self.rounds += 1
            members = np.flatnonzero(in_s)
            changed = self._changed_links(members, ended_links)
            entries = self._entries_on(changed)
            near = _Near(entries, self._e_flow[entries], self._e_mult[entries], changed,
                         self._local_links(changed, self._e_link[entries]))
            self._solve_subset(in_s, members, near)
            load, saturated = self._check_loads(near)
            violators = self._violators(in_s, near, saturated)
            if not violators.size:
                break
            grown = self._grow(in_s, violators, near, saturated)
            size += grown.size
            if grown.size:
                size += self._look_ahead(in_s, grown)
            if not grown.size or size >= len(self):
                # The subset would not grow, or holds every flow: solve everything.
                in_s.fill(False)
                return self._solve_all(ended_links)
        in_s[members] = False
        return members, self._rate[members], changed, load

    def _add(self, in_s: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Put ``slots`` in S; returns those that were not in it yet (each once)."""
        fresh = slots[~in_s[slots]]
        if fresh.size > 1:
            fresh = _distinct(fresh, self._slot_pos)
        in_s[fresh] = True
        return fresh

    def _look_ahead(self, in_s: np.ndarray, moved: np.ndarray) -> int:
        """Pull in the flows that the flows ``moved`` (slots) will slow down once they
        speed up: those held at or above their rates on their saturated links, where
        that link is their bottleneck; and so on, hop by hop (saves rounds of checking
        in most cascades).  Returns how many flows joined S."""
        joined = 0
        for _ in range(_LOOKAHEAD):
            if not moved.size:
                break
            mine = self._entries_of(moved)
            link = self._e_link[mine]
            saturated = self._load[link] >= self._saturated_at[link]
            if not saturated.any():
                break
            # A new flow (no rate yet, nan) may take a share of any flow bottlenecked on
            # its links.
            rate = np.fmax(self._rate[self._e_flow[mine[saturated]]], 0.0)
            moved = self._add(in_s, self._bottlenecked_on(link[saturated], rate))
            joined += moved.size
        return joined

    def _slowed_by(self, new: np.ndarray) -> np.ndarray:
        """The flows that new flows will likely slow down (a guess: the check finds the
        others).  A new flow's rate is at least its share of each link it crosses were
        all the link's flows equal (its bottleneck is saturated and it is the fastest
        there), and at least what a link has spare; a link whose spare capacity that
        rate fills will cut the flows on it that are faster than the new one."""
        mine = self._entries_of(new)
        mine = mine[self._capacity[self._e_link[mine]] < np.inf]  # ideal links never fill
        link, mult = self._e_link[mine], self._e_mult[mine]
        capacity = self._capacity[link]
        spare = np.maximum(capacity - self._load[link], 0.0)
        share = np.maximum(spare, capacity * mult / self._weight[link]) / mult
        local = self._slot_pos
        local[new] = np.arange(new.size)
        slot = local[self._e_flow[mine]]
        guess = np.full(new.size, np.inf)
        np.minimum.at(guess, slot, share)
        rate = guess[slot]
        fills = spare <= mult * rate * (1.0 + _CHECK_RTOL)
        return self._bottlenecked_on(link[fills], rate[fills], any_bottleneck=True)

    def _bottlenecked_on(self, links: np.ndarray, floors: np.ndarray,
                         any_bottleneck: bool = False) -> np.ndarray:
        """The flows whose recorded bottleneck is one of ``links`` (repeats allowed) and
        whose rate is at least that link's lowest ``floors`` value, less a tolerance:
        the flows a change at that level may move first (a check finds the others).
        ``any_bottleneck``: every flow crossing the link at that rate."""
        if not links.size:
            return links
        floor = self._link_floor
        np.minimum.at(floor, links, floors)
        distinct = _distinct(links, self._link_pos)
        entries = self._entries_on(distinct)
        flow, link = self._e_flow[entries], self._e_link[entries]
        # nan (a new flow's rate) compares False: it is in S already.
        fast = self._rate[flow] >= floor[link] * (1.0 - _CHECK_RTOL)
        floor[distinct] = np.inf
        if any_bottleneck:
            return flow[fast]
        return flow[fast & (self._bottleneck[flow] == link)]

    def _entries_of(self, slots: np.ndarray) -> np.ndarray:
        """The entry indices of flows ``slots`` (each flow's entries are contiguous)."""
        return _ranges(self._start[slots], self._count[slots])

    def _index_links(self) -> None:
        """Sort the entries by link (see ``_by_link``) when many are not indexed."""
        used = self._used
        if used - self._indexed <= max(_UNINDEXED_MAX, used // 8):
            return
        links = self._e_link[:used]
        self._by_link = np.argsort(links, kind="stable")
        start = np.zeros(self._capacity.size + 1, np.int64)
        np.cumsum(np.bincount(links, minlength=self._capacity.size), out=start[1:])
        self._link_start = start
        self._indexed = used

    def _entries_on(self, links: np.ndarray) -> np.ndarray:
        """Every entry on one of ``links`` (distinct link ids): grouped by link, then
        the unindexed ones."""
        self._index_links()
        if self._indexed:
            starts = self._link_start[links]
            entries = self._by_link[_ranges(starts, self._link_start[links + 1] - starts)]
        else:
            entries = np.zeros(0, np.int64)
        if self._indexed < self._used:
            entries = np.concatenate([entries, np.arange(self._indexed, self._used)])
        else:
            return entries[self._e_flow[entries] != 0]  # blanked since indexed
        # Blanked entries point at the sentinel link, never among ``links``.
        mark = self._link_mark
        mark[links] = True
        entries = entries[mark[self._e_link[entries]]]
        mark[links] = False
        return entries

    def _changed_links(self, members: np.ndarray, ended_links: np.ndarray) -> np.ndarray:
        """The links whose load may change (sorted): those of S and of ended flows."""
        mark = self._link_mark
        mark[self._e_link[self._entries_of(members)]] = True
        mark[ended_links] = True
        mark[self._sentinel] = False
        changed = np.flatnonzero(mark)
        mark[changed] = False
        return changed

    def _local_links(self, changed: np.ndarray, links: np.ndarray) -> np.ndarray:
        """``links`` (all among ``changed``) as positions in ``changed``."""
        position = self._link_pos
        position[changed] = np.arange(changed.size)
        return position[links]

    def _solve_subset(self, in_s: np.ndarray, members: np.ndarray, near: _Near) -> None:
        """Fill S (``members``) on what the held flows leave of its links' capacity."""
        flow, link, mult = near.flow, near.link, near.mult
        mine = in_s[flow]
        held = ~mine
        capacity = self._capacity[near.links]
        load = np.bincount(link[held], weights=mult[held] * self._rate[flow[held]],
                           minlength=near.links.size)
        ideal = capacity == np.inf
        load[ideal] = 0.0  # an ideal link stays ideal (and inf - inf is no number)
        residual = np.maximum(capacity - load, 0.0)
        local = self._slot_pos
        local[members] = np.arange(members.size)
        rates, bottleneck = _fill_local_minima(local[flow[mine]], link[mine], mult[mine],
                                               residual, members.size)
        self._rate[members] = rates
        self._bottleneck[members] = np.where(bottleneck >= 0, near.links[bottleneck], -1)

    def _check_loads(self, near: _Near) -> tuple[np.ndarray, np.ndarray]:
        """The loads of the changed links now (recorded), and which are saturated."""
        load = np.bincount(near.link, weights=near.mult * self._rate[near.flow],
                           minlength=near.links.size)
        self._load[near.links] = load
        return load, load >= self._saturated_at[near.links]

    def _violators(self, in_s: np.ndarray, near: _Near,
                   saturated: np.ndarray) -> np.ndarray:
        """Flows crossing a changed link that lack a bottleneck (slots, distinct): no
        saturated link on which no flow is faster.  A held flow whose recorded
        bottleneck did not change passes."""
        flow, link = near.flow, near.link
        rate = self._rate[flow]
        fastest = np.zeros(near.links.size)
        np.maximum.at(fastest, link, rate)
        good = saturated[link] & (rate >= fastest[link] * (1.0 - _CHECK_RTOL))
        ok = self._flag
        ok[flow[good]] = True
        self._bottleneck[flow[good]] = near.links[link[good]]
        lacking = ~ok[flow] & np.isfinite(rate)
        ok[flow[good]] = False
        mine = in_s[flow]
        bad = flow[lacking & mine]
        suspect = flow[lacking & ~mine]  # held: fine while its bottleneck did not change
        if suspect.size:
            recorded = self._bottleneck[suspect]
            mark = self._link_mark
            mark[near.links] = True
            suspect = suspect[(recorded < 0) | mark[recorded]]
            mark[near.links] = False
            bad = np.concatenate([bad, suspect])
        return np.unique(bad)

    def _grow(self, in_s: np.ndarray, violators: np.ndarray, near: _Near,
              saturated: np.ndarray) -> np.ndarray:
        """A flow without a bottleneck moves, and with it the flows at least as fast on
        its saturated links: put them in S; returns those that were not in it."""
        flow, link = near.flow, near.link
        rate = self._rate[flow]
        is_bad = self._flag
        is_bad[violators] = True
        on = is_bad[flow] & saturated[link]
        is_bad[violators] = False
        floor = np.full(near.links.size, np.inf)
        np.minimum.at(floor, link[on], rate[on])
        fast = rate >= floor[link] * (1.0 - _CHECK_RTOL)
        return self._add(in_s, np.concatenate([violators, flow[fast]]))

    def _solve_all(self, ended_links: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                          np.ndarray, np.ndarray]:
        """Solve every flow from scratch; returns what :meth:`solve` does."""
        used = self._used
        flow, link, mult = self._e_flow[:used], self._e_link[:used], self._e_mult[:used]
        live = flow != 0
        flow, link, mult = flow[live], link[live], mult[live]
        slots = np.flatnonzero(self._live)
        local = self._slot_pos
        local[slots] = np.arange(slots.size)
        rates, bottleneck = _fill(local[flow], link, mult, self._capacity, slots.size)
        self._rate[slots] = rates
        self._bottleneck[slots] = bottleneck
        load = np.bincount(link, weights=mult * self._rate[flow],
                           minlength=self._capacity.size)
        mark = self._link_mark
        mark[link] = True
        mark[ended_links] = True
        mark[self._sentinel] = False
        changed = np.flatnonzero(mark)
        mark[changed] = False
        self._load[changed] = load[changed]
        return slots, self._rate[slots], changed, load[changed]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The integers ``start .. start + count - 1`` of each pair, concatenated."""
    ends = np.cumsum(counts)
    return np.arange(ends[-1] if ends.size else 0) + np.repeat(starts - ends + counts, counts)


def _distinct(values: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """``values`` (indices into ``scratch``) each once, without sorting: the last
    occurrence of each keeps its place.  ``scratch`` is overwritten where indexed."""
    order = np.arange(values.size)
    scratch[values] = order
    return values[scratch[values] == order]
