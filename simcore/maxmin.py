"""Max-min fair rates by progressive filling — the bandwidth-sharing model of distsim.

Every flow crosses a set of links, each with a multiplicity ``m`` (a coflow such as a
ring all-reduce may put several of its bytes-streams over one link).  A flow of rate
``r`` loads link ``l`` with ``m·r``.  Progressive filling raises the rate of every
unfrozen flow together; when a link's load reaches its capacity the flows crossing it are
frozen at the current level.  The result is the max-min fair allocation: no flow can get
faster without slowing a flow that is no faster than it, and every flow has a saturated
bottleneck link on which it is among the fastest (Bertsekas & Gallager, *Data Networks*,
§6.5.2; the model SimGrid validated for flow-level network simulation).

This module is pure: arrays in, rates out, no SimPy.  The :class:`~simcore.network.FlowNetwork`
calls :func:`solve_max_min` on the part of the network a change touched.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np

__all__ = ["max_min_fair", "solve_max_min"]

# A link counts as saturated at the current level when its fill level is within this
# relative distance of the minimum: links that tie up to rounding freeze together.
_TIE_RTOL = 1e-9


def solve_max_min(
    entry_flow: np.ndarray,
    entry_link: np.ndarray,
    entry_mult: np.ndarray,
    capacity: np.ndarray,
    num_flows: int,
) -> np.ndarray:
    """Max-min fair rates (bytes/s) for ``num_flows`` flows.

    The incidence is given as parallel arrays of entries: entry ``k`` says flow
    ``entry_flow[k]`` crosses link ``entry_link[k]`` with multiplicity ``entry_mult[k] > 0``
    (a flow/link pair appears at most once).  ``capacity[l]`` is link ``l``'s capacity in
    bytes/s (``inf`` for an ideal link).  A flow with no entries, or whose links are all
    ideal, gets ``inf``.
    """
    return _fill(entry_flow, entry_link, entry_mult, capacity, num_flows)[0]


def _fill(
    entry_flow: np.ndarray,
    entry_link: np.ndarray,
    entry_mult: np.ndarray,
    capacity: np.ndarray,
    num_flows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Progressive filling: the rates of :func:`solve_max_min` and, per flow, the link
    that froze it (its bottleneck; -1 where none: no entries or only ideal links)."""
    rates = np.full(num_flows, np.inf)
    bottleneck = np.full(num_flows, -1, np.int64)
    if num_flows == 0 or entry_flow.size == 0:
        return rates, bottleneck
    num_links = capacity.size
    residual = capacity.astype(float, copy=True)
    # Only the entries of flows not yet frozen are kept; each round drops the entries of
    # the flows it freezes, so the work shrinks as the filling proceeds.
    flows, links, mults = entry_flow, entry_link, entry_mult.astype(float, copy=False)
    while flows.size:
        weight = np.bincount(links, weights=mults, minlength=num_links)
        loaded = weight > 0
        level = np.full(num_links, np.inf)
        np.divide(residual, weight, out=level, where=loaded)
        best = np.minimum.reduce(level)  # level.min() without its Python wrapper
        if not np.isfinite(best):
            break  # every remaining flow crosses only ideal links
        best = max(best, 0.0)
        saturated = level <= best * (1.0 + _TIE_RTOL) + 1e-300
        # Every flow crossing a saturated link freezes at the current level.
        flows, links, mults = _freeze(rates, bottleneck, residual, (flows, links, mults),
                                      saturated[links], best)
    return rates, bottleneck


def _fill_local_minima(
    entry_flow: np.ndarray,
    entry_link: np.ndarray,
    entry_mult: np.ndarray,
    capacity: np.ndarray,
    num_flows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The allocation of :func:`_fill` in fewer rounds: each round freezes every link
    whose fill level is the lowest among the links it shares an unfrozen flow with, not
    only the globally lowest.

    Why that is exact: a link's level (residual over the weight of its unfrozen flows)
    only rises when a flow crossing it freezes below it, and flows freeze at levels no
    higher than their links' levels; a link no neighbour undercuts therefore keeps its
    level until progressive filling reaches it, and freezes there.  A flow is frozen at
    the lowest level among its links (within the tie tolerance of the link that froze
    it), so no link is ever loaded above its capacity.  On a fat-tree the levels of
    unrelated parts of the fabric freeze together: the incremental solver's subsets
    need about a third of the rounds (measured on the 10,000-flow benchmark).
    """
    rates = np.full(num_flows, np.inf)
    bottleneck = np.full(num_flows, -1, np.int64)
    if num_flows == 0 or entry_flow.size == 0:
        return rates, bottleneck
    num_links = capacity.size
    residual = capacity.astype(float, copy=True)
    # Ideal links freeze nobody: leave their entries out (a flow with only those keeps inf).
    finite = np.isfinite(residual[entry_link])
    flows, links = entry_flow[finite], entry_link[finite]
    mults = entry_mult[finite].astype(float, copy=False)
    lowest_of_flow = np.empty(num_flows)
    lowest_near_link = np.empty(num_links)
    with np.errstate(divide="ignore", invalid="ignore"):
        while flows.size:
            # Every link in ``links`` has weight > 0; the others' levels are not read.
            # Residuals are clipped at 0, so levels are >= 0.
            level = residual / np.bincount(links, weights=mults, minlength=num_links)
            entry_level = level[links]
            lowest_of_flow.fill(np.inf)
            np.minimum.at(lowest_of_flow, flows, entry_level)
            lowest_near_link.fill(np.inf)
            np.minimum.at(lowest_near_link, links, lowest_of_flow[flows])
            lowest_near_link *= 1.0 + _TIE_RTOL
            hit = entry_level <= lowest_near_link[links]
            frozen = flows[hit]
            if not frozen.size:
                break  # cannot happen (the lowest level is a local minimum) but for nan
            flows, links, mults = _freeze(rates, bottleneck, residual, (flows, links, mults),
                                          hit, lowest_of_flow[frozen])
    return rates, bottleneck


_Entries = tuple[np.ndarray, np.ndarray, np.ndarray]  # (flow, link, multiplicity) per entry


def _freeze(rates: np.ndarray, bottleneck: np.ndarray, residual: np.ndarray,
            entries: _Entries, hit: np.ndarray, level: float | np.ndarray) -> _Entries:
    """One round of filling ends: the flows of the ``hit`` entries freeze at ``level`` (one
    for all, or one per hit entry) with that entry's link as their bottleneck, their load
    comes off every link they cross (``residual``, clipped at 0: rounding must not leave
    a link below empty), and the entries left are those of the flows still unfrozen.

    Every flow among ``entries`` is unfrozen (rate ``inf``) when called, so the rates
    below ``inf`` afterwards are exactly this round's.
    """
    flows, links, mults = entries
    frozen = flows[hit]
    rates[frozen] = level
    bottleneck[frozen] = links[hit]
    leaving = rates[flows] < np.inf
    residual -= np.bincount(links[leaving], weights=mults[leaving] * rates[flows[leaving]],
                            minlength=residual.size)
    np.maximum(residual, 0.0, out=residual)
    keep = ~leaving
    return flows[keep], links[keep], mults[keep]


def max_min_fair(
    flows: Sequence[Mapping[Hashable, float]],
    capacities: Mapping[Hashable, float],
) -> list[float]:
    """Convenience form: each flow a ``{link: multiplicity}`` map; returns rates in order.

    >>> max_min_fair([{"a": 1}, {"a": 1, "b": 1}, {"b": 1}], {"a": 10.0, "b": 4.0})
    [8.0, 2.0, 2.0]
    """
    index = {link: i for i, link in enumerate(capacities)}
    entry_flow, entry_link, entry_mult = [], [], []
    for f, links in enumerate(flows):
        for link, mult in links.items():
            if mult <= 0:
                raise ValueError(f"flow {f}: multiplicity on {link!r} must be positive")
            entry_flow.append(f)
            entry_link.append(index[link])
            entry_mult.append(float(mult))
    rates = solve_max_min(
        np.asarray(entry_flow, dtype=np.int64),
        np.asarray(entry_link, dtype=np.int64),
        np.asarray(entry_mult, dtype=float),
        np.asarray([float(c) for c in capacities.values()], dtype=float),
        len(flows),
    )
    return [float(r) for r in rates]
