"""Classes of alike units: which data-parallel replicas may stand for each other.

:mod:`workloads.iteration.folding` reads, per flow class, each replica's links off the plans
(capacity, streams and the data-parallel collectives' streams per link, who else crosses
it, latency, the most loaded link), and the links of every flow that spans replicas (each
data-parallel collective of each lane: one flow whose rate the max-min solver sets from
all of its links).  Two units are *alike* when, for every flow class, their links match
one to one in all of that and in *everything else that crosses each link*: the members of
every flow class on it (not only the member's own class), by the classes of their units,
and the spanning flows on it, by their own classes.  That clause is what makes several
simulated units exact together: a unit whose send meets another class's send on a spine
link is not the image of one whose send meets its own class's; a unit whose link in one
flow class also carries other units' traffic of another class is not the image of one
whose link carries none (classing link by link within each flow class missed that: the
folding tests' dp-innermost counterexample and GPT-3 on 336 rail-optimized nodes); and a
unit whose link carries a data-parallel ring held back elsewhere is not the image of one
whose link carries a ring that runs free, even where their own links look the same (no
simulated case in the suite needs this last one yet: it only keeps apart two sets of the
PCIe test's replicas that the full run times alike).

Folded inside expert blocks (:func:`workloads.iteration.folding.fold_plan`), a block's
all-to-all lanes are spanning flows that only its units start and wait for: a unit's
colour then takes in those flows' colours, and a flow's the colours of its units.

The partition is found by colour refinement (the 1-dimensional Weisfeiler-Leman test of
graph symmetry) on the graph of units, spanning flows and the links they cross: start
from one class of units and the spanning flows by what they are, colour each link by who
crosses it with how many streams, split units and spanning flows by the colours of their
links, repeat until nothing splits.  Units an automorphism of that graph maps onto each
other always end in one class (refinement is a necessary condition of symmetry); each
class is then simulated once, its first unit standing for the rest.  A fabric that treats
every replica alike gives one class, and a stage boundary that falls across switches gives
a few.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Member", "SpanningFlow", "alike_classes"]


@dataclass(frozen=True, slots=True)
class Member:
    """One unit's part of one flow class: the unit (its position among the units being
    classed), which of the unit's replicas it is (0 for a class per unit), per link what
    must match on it (its capacity, its streams in each step, the streams the collectives
    that span replicas put on it), and what must match besides the links (latency, the
    most loaded link per step)."""

    unit: int
    slot: int
    links: dict[Any, Hashable]
    fixed: Hashable


@dataclass(frozen=True, slots=True)
class SpanningFlow:
    """A flow over many units that runs in full (one lane's data-parallel collective, or
    of an expert block's all-to-all folded inside the block): per link its streams in
    each step, and what it is (the call, its plan's latency).  ``units``: the units that
    start it and wait for it where only some do (a block's replicas: its start and end
    are theirs, so a unit whose block's lanes run unalike is unlike the others, and a
    lane started by unalike units is unlike the others); empty where every unit does (a
    data-parallel collective: one meeting of all)."""

    links: dict[Any, Hashable]
    fixed: Hashable
    units: tuple[int, ...] = ()


def _relabel(signatures: Sequence[Hashable]) -> list[int]:
    """Each signature replaced by a small integer, equal signatures alike, in first-seen
    order (so labels, and the classes' order, are deterministic)."""
    ids: dict[Hashable, int] = {}
    return [ids.setdefault(signature, len(ids)) for signature in signatures]


def _multiset(items: list[int]) -> tuple[int, ...]:
    """``items`` in a canonical order (most lists here hold one item: no sort needed)."""
    if len(items) > 1:
        items.sort()
    return tuple(items)


def alike_classes(flow_classes: Sequence[Sequence[Member]], units: int,
                  spanning: Sequence[SpanningFlow] = ()) -> list[list[int]]:
    """The classes of alike units (positions ``0 … units-1``), each in order, ordered by
    their first unit."""
    whats: dict[Hashable, int] = {}  # what a crossing puts on a link, as a small integer
    links: dict[Any, int] = {}  # every link crossed, by index
    crossings = [[(links.setdefault(link, len(links)), whats.setdefault(what, len(whats)))
                  for link, what in member.links.items()]
                 for members in flow_classes for member in members]
    routes = [[(links.setdefault(link, len(links)), whats.setdefault(what, len(whats)))
               for link, what in flow.links.items()] for flow in spanning]
    # Per link, who crosses it, as (a constant, an index into the labels of a round):
    # members as (flow class, unit, what), spanning flows as (flow, what), each encoded
    # as one integer (see _Codes) so that a round sorts and hashes integers only.
    wide = max(len(whats), 1)
    flow_base = len(flow_classes) * units * wide  # members' codes lie below it
    on: list[list[tuple[int, int]]] = [[] for _ in links]
    crossed = iter(crossings)
    for k, members in enumerate(flow_classes):
        for member in members:
            for link, what in next(crossed):
                on[link].append((k * units * wide + what, member.unit))
    for s, route in enumerate(routes):
        for link, what in route:
            on[link].append((flow_base + what, units + s))
    # Links crossed alike (the same crossings in the same order) are coloured alike in
    # every round: colour each such group once.
    groups: dict[tuple[tuple[int, int], ...], int] = {}
    group_of = [groups.setdefault(tuple(crossers), len(groups)) for crossers in on]
    fixed = _relabel([(member.slot, member.fixed) for members in flow_classes
                      for member in members])
    owners = [member.unit for members in flow_classes for member in members]
    codes = _Codes(wide, [list(g) for g in groups],
                   [[(group_of[link], what) for link, what in crossing] for crossing in crossings],
                   [[(group_of[link], what) for link, what in route] for route in routes],
                   [list(flow.units) for flow in spanning])
    return _refine(codes, list(zip(owners, fixed)), units,
                   [flow.fixed for flow in spanning])


@dataclass(frozen=True, slots=True)
class _Codes:
    """The structure colour refinement runs on, with every tuple it used to compare
    replaced by an integer that is equal exactly when the tuple is (an injective
    encoding: the partitions, and so the classes, are the same; only faster to sort and
    hash).  ``wide``: the number of distinct ``what`` s.  ``groups``: per group of alike
    links, its crossers as (constant, index) — code ``constant + label[index] · wide``,
    where the labels are the units' then the spanning flows' (a flow's constant is
    offset above every member's).  ``crossings`` and ``routes``: per member and per
    spanning flow, its links as (group, what) — code ``colour[group] · wide + what``.
    ``starters``: per spanning flow, the units that start and wait for it (empty: all)."""

    wide: int
    groups: list[list[tuple[int, int]]]
    crossings: list[list[tuple[int, int]]]
    routes: list[list[tuple[int, int]]]
    starters: list[list[int]]


def _refine(codes: _Codes, members: list[tuple[int, int]], units: int,
            flow_fixed: list[Hashable]) -> list[list[int]]:
    """Colour refinement from one class of units until nothing splits (see the module
    docstring); the classes of units it ends with.  ``members``: per member, its unit
    and what must match besides its links (as a small integer)."""
    wide, groups, crossings, routes = codes.wide, codes.groups, codes.crossings, codes.routes
    label = [0] * units
    flow_label = _relabel(flow_fixed)
    # Per unit, the spanning flows it starts and waits for (where only some units do).
    waits_for: list[list[int]] = [[] for _ in range(units)]
    for s, starters in enumerate(codes.starters):
        for unit in starters:
            waits_for[unit].append(s)
    counts: tuple[int, int, int] | None = None
    while True:
        scaled = [x * wide for x in label] + [x * wide for x in flow_label]
        colour = _relabel([_multiset([base + scaled[i] for base, i in crossers])
                           for crossers in groups])
        spread = [c * wide for c in colour]
        signatures: list[list[Hashable]] = [[x] for x in label]
        for (unit, fixed), crossing in zip(members, crossings):
            signatures[unit].append((fixed, _multiset([spread[g] + what
                                                       for g, what in crossing])))
        for unit, flows in enumerate(waits_for):
            if flows:  # the labels of the flows it waits for (their ends are its ends)
                signatures[unit].append(_multiset([flow_label[s] for s in flows]))
        new_flow_label = _relabel([(flow_label[s], _multiset(
            [spread[g] + what for g, what in route]), _multiset(
            [label[u] for u in codes.starters[s]])) for s, route in enumerate(routes)])
        label = _relabel([tuple(signature) for signature in signatures])
        flow_label = new_flow_label
        # Each new partition refines the last (a signature holds the old label), so the
        # counts only grow: when none does, nothing split.  Once every unit is a class of
        # its own no later round can change the classes (all singletons): stop there.
        now = (max(label, default=-1) + 1, max(flow_label, default=-1) + 1,
               max(colour, default=-1) + 1)
        if now == counts or now[0] == units:
            break
        counts = now
    classes: dict[int, list[int]] = {}
    for unit, class_id in enumerate(label):
        classes.setdefault(class_id, []).append(unit)
    return list(classes.values())
