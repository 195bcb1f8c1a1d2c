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
* a new flow is solved with its links' other flows held; the check pulls in the ones it
  slows down.

Only the links whose load changed (those of ``S`` and of ended flows) can leave a flow
without its bottleneck, so a check looks at the flows crossing them, and a held flow whose
recorded bottleneck is elsewhere passes without looking.  The incidence lives in
persistent arrays with one slot per flow (entries of ended flows are blanked and
compacted from time to time), so a change costs numpy passes over the entries, not Python
loops over the flows.

Pure arrays, no SimPy: :class:`~simcore.network.FlowNetwork` switches to it when many
flows transfer at once.
"""

from __future__ import annotations

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


class IncrementalMaxMin:
    """Flows (weighted link sets) added and removed over time; :meth:`solve` brings their
    max-min fair rates up to date and says which rates it set.

    ``capacity`` (bytes/s per link, ``inf`` for ideal links) may grow with
    :meth:`set_capacity` as links are added.  Handles are small ints, reused after
    :meth:`remove`.
    """

    def __init__(self, capacity: np.ndarray) -> None:
        self._capacity = np.zeros(0)
        # Load per link as last checked (a link no check saw reads 0): only to skip
        # links that cannot be a bottleneck when looking ahead.
        self._load = np.zeros(0)
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
        grow = self._capacity.size - self._load.size
        self._load = np.append(self._load, np.zeros(grow))
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
        in_s = np.zeros(self._rate.size, bool)
        in_s[list(self._new)] = True
        self._new.clear()
        ended_links = np.zeros(0, np.int64)
        floor = np.full(self._capacity.size, np.inf)
        if self._ended:
            ended_links = np.concatenate([links for links, _ in self._ended])
            rates = np.concatenate([np.full(links.size, rate) for links, rate in self._ended])
            np.minimum.at(floor, ended_links, rates)
            # Only a saturated link is anyone's bottleneck.
            floor[self._load < self._capacity * (1.0 - _CHECK_RTOL)] = np.inf
            self._ended.clear()
        first = True
        while True:
            self.rounds += 1
            self._pull_in(in_s, floor, bottlenecked=first)
            if first:
                self._look_ahead(in_s, in_s.copy())
            first = False
            changed = self._changed_links(in_s, ended_links)
            entries = self._entries_on(changed)
            self._solve_subset(in_s, entries)
            violators, load = self._check(in_s, changed, entries)
            if not violators.size:
                break
            # A flow without a bottleneck moves, and with it the flows at least as fast
            # on its saturated links.
            floor = np.full(self._capacity.size, np.inf)
            np.minimum.at(floor, self._e_link[entries], self._violator_rates(entries,
                                                                              violators))
            floor[load < self._capacity * (1.0 - _CHECK_RTOL)] = np.inf
            was_in = in_s.copy()
            in_s[violators] = True
            self._pull_in(in_s, floor)
            self._look_ahead(in_s, in_s & ~was_in)
            if int(in_s.sum()) == int(was_in.sum()) or in_s.sum() >= self._live.sum():
                self._solve_all()  # the subset would not grow: solve everything
                in_s = self._live.copy()
                changed = self._changed_links(in_s, ended_links)
                load = self._loads(self._entries_on(changed))
                self._load[changed] = load[changed]
                break
        handles = np.flatnonzero(in_s & self._live)
        links = np.flatnonzero(changed)
        return handles, self._rate[handles], links, load[links]

    def _look_ahead(self, in_s: np.ndarray, moved: np.ndarray) -> None:
        """Pull in the flows that the flows ``moved`` (slots mask) will slow down once
        they speed up: those held at or above their rates on their saturated links,
        where that link is their bottleneck; and so on, hop by hop (saves rounds of
        checking in most cascades)."""
        for _ in range(_LOOKAHEAD):
            mine = self._entries_of(np.flatnonzero(moved))
            ahead = np.full(self._capacity.size, np.inf)
            # A new flow (no rate yet) may take a share of any flow bottlenecked on
            # its links.
            rate = np.nan_to_num(self._rate[self._e_flow[mine]], nan=0.0)
            np.minimum.at(ahead, self._e_link[mine], rate)
            ahead[self._load < self._capacity * (1.0 - _CHECK_RTOL)] = np.inf
            before = in_s.copy()
            self._pull_in(in_s, ahead, bottlenecked=True)
            moved = in_s & ~before
            if not moved.any():
                break

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

    def _entries_on(self, mask: np.ndarray) -> np.ndarray:
        """Every entry on a link of ``mask`` (grouped by link, then the unindexed)."""
        self._index_links()
        e_link = self._e_link
        links = np.flatnonzero(mask)
        if self._indexed:
            starts = self._link_start[links]
            entries = self._by_link[_ranges(starts, self._link_start[links + 1] - starts)]
        else:
            entries = np.zeros(0, np.int64)
        if self._indexed < self._used:
            late = np.arange(self._indexed, self._used)
            entries = np.concatenate([entries, late])
        # Blanked entries now point at the sentinel link, never in ``mask``.
        return entries[mask[e_link[entries]]]

    def _pull_in(self, in_s: np.ndarray, floor: np.ndarray, bottlenecked: bool = False) -> None:
        """Add to ``S`` every flow crossing a link ``l`` at a rate of at least
        ``floor[l]`` (less a tolerance): the flows a change at that level may move.
        ``bottlenecked``: only those whose recorded bottleneck is ``l`` (the flows an
        ended flow's freed capacity goes to first; the check finds the others)."""
        if bottlenecked:
            # One pass over the slots: a flow's recorded bottleneck is one of its links
            # (-1, none, reads the blank link's floor: inf).
            rate = self._rate[:in_s.size]
            with np.errstate(invalid="ignore"):  # nan: a new flow, in S already
                fast = rate >= floor[self._bottleneck[:in_s.size]] * (1.0 - _CHECK_RTOL)
            in_s |= fast & self._live[:in_s.size]
            in_s[0] = False
            return
        marked = np.isfinite(floor)
        if not marked.any():
            return
        entries = self._entries_on(marked)
        flow = self._e_flow[entries]
        fast = self._rate[flow] >= floor[self._e_link[entries]] * (1.0 - _CHECK_RTOL)
        in_s[flow[fast]] = True
        in_s[0] = False

    def _changed_links(self, in_s: np.ndarray, ended_links: np.ndarray) -> np.ndarray:
        """Mask of the links whose load may change: those of ``S`` and of ended flows."""
        changed = np.zeros(self._capacity.size, bool)
        changed[self._e_link[self._entries_of(np.flatnonzero(in_s))]] = True
        changed[ended_links] = True
        changed[self._sentinel] = False
        return changed

    def _solve_subset(self, in_s: np.ndarray, entries: np.ndarray) -> None:
        """Fill ``S`` on what the held flows leave of its links' capacity.  ``entries``:
        every entry on a changed link (which holds all of ``S``'s entries)."""
        flow, link = self._e_flow[entries], self._e_link[entries]
        mult = self._e_mult[entries]
        mine = in_s[flow]
        held = np.bincount(link[~mine], weights=mult[~mine] * self._rate[flow[~mine]],
                           minlength=self._capacity.size)
        with np.errstate(invalid="ignore"):  # inf - inf on ideal links: they stay ideal
            residual = np.maximum(self._capacity - held, 0.0)
        residual[np.isinf(self._capacity)] = np.inf
        s_flow, s_link, s_mult = flow[mine], link[mine], mult[mine]
        slots = np.flatnonzero(in_s)
        local = np.zeros(self._rate.size, np.int64)
        local[slots] = np.arange(slots.size)
        position = np.zeros(self._capacity.size, np.int64)
        position[s_link] = 1
        links = np.flatnonzero(position)  # S's links, sorted, without sorting
        position[links] = np.arange(links.size)
        rates, bottleneck = _fill_local_minima(local[s_flow], position[s_link], s_mult,
                                               residual[links], slots.size)
        self._rate[slots] = rates
        self._bottleneck[slots] = np.where(bottleneck >= 0, links[bottleneck], -1)

    def _loads(self, entries: np.ndarray) -> np.ndarray:
        flow = self._e_flow[entries]
        return np.bincount(self._e_link[entries],
                           weights=self._e_mult[entries] * self._rate[flow],
                           minlength=self._capacity.size)

    def _check(self, in_s: np.ndarray, changed: np.ndarray,
               entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flows crossing a changed link that lack a bottleneck (slots), and the loads
        per link.  A held flow whose recorded bottleneck did not change passes."""
        flow, link = self._e_flow[entries], self._e_link[entries]
        rate = self._rate[flow]
        load = self._loads(entries)
        saturated = load >= self._capacity * (1.0 - _CHECK_RTOL)
        self._load[changed] = load[changed]
        fastest = np.zeros(self._capacity.size)
        np.maximum.at(fastest, link, rate)
        good = saturated[link] & (rate >= fastest[link] * (1.0 - _CHECK_RTOL))
        ok = np.zeros(self._rate.size, bool)
        ok[flow[good]] = True
        self._bottleneck[flow[good]] = link[good]
        crossing = np.zeros(self._rate.size, bool)
        crossing[flow] = True
        recorded = self._bottleneck
        kept = ~in_s & (recorded >= 0) & ~changed[recorded]
        bad = crossing & ~ok & ~kept & np.isfinite(self._rate)
        bad[0] = False
        return np.flatnonzero(bad), load

    def _violator_rates(self, entries: np.ndarray, violators: np.ndarray) -> np.ndarray:
        """Per changed-link entry: its flow's rate if a violator, else inf."""
        is_bad = np.zeros(self._rate.size, bool)
        is_bad[violators] = True
        flow = self._e_flow[entries]
        return np.where(is_bad[flow], self._rate[flow], np.inf)

    def _solve_all(self) -> None:
        used = self._used
        flow, link = self._e_flow[:used], self._e_link[:used]
        live = flow != 0
        slots = np.flatnonzero(self._live)
        local = np.zeros(self._rate.size, np.int64)
        local[slots] = np.arange(slots.size)
        rates, bottleneck = _fill(local[flow[live]], link[live], self._e_mult[:used][live],
                                  self._capacity, slots.size)
        self._rate[slots] = rates
        self._bottleneck[slots] = bottleneck



def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The integers ``start .. start + count - 1`` of each pair, concatenated."""
    ends = np.cumsum(counts)
    return np.arange(ends[-1] if ends.size else 0) + np.repeat(starts - ends + counts, counts)
