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
    """A flow over many units that runs in full (one lane's data-parallel collective): per
    link its streams in each step, and what it is (the call, its plan's latency)."""

    links: dict[Any, Hashable]
    fixed: Hashable


def _relabel(signatures: Sequence[Hashable]) -> list[int]:
    """Each signature replaced by a small integer, equal signatures alike, in first-seen
    order (so labels, and the classes' order, are deterministic)."""
    ids: dict[Hashable, int] = {}
    return [ids.setdefault(signature, len(ids)) for signature in signatures]


def _multiset(items: list[Any]) -> tuple[Any, ...]:
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
    # Per link, who crosses it: members as (flow class, unit, what), spanning flows as
    # (flow, what).
    members_on: list[list[tuple[int, int, int]]] = [[] for _ in links]
    crossed = iter(crossings)
    for k, members in enumerate(flow_classes):
        for member in members:
            for link, what in next(crossed):
                members_on[link].append((k, member.unit, what))
    flows_on: list[list[tuple[int, int]]] = [[] for _ in links]
    for s, route in enumerate(routes):
        for link, what in route:
            flows_on[link].append((s, what))
    return _refine(flow_classes, crossings, units, (members_on, flows_on), spanning, routes)


def _refine(flow_classes: Sequence[Sequence[Member]], crossings: list[list[tuple[int, int]]],
            units: int, on: tuple[list[list[tuple[int, int, int]]], list[list[tuple[int, int]]]],
            spanning: Sequence[SpanningFlow], routes: list[list[tuple[int, int]]],
            ) -> list[list[int]]:
    """Colour refinement from one class of units until nothing splits (see the module
    docstring); the classes of units it ends with."""
    members_on, flows_on = on
    label = [0] * units
    flow_label = _relabel([flow.fixed for flow in spanning])
    counts: tuple[int, int, int] | None = None
    while True:
        colour = _relabel([(
            _multiset([(k, label[u], what) for k, u, what in members]),
            _multiset([(flow_label[s], what) for s, what in flows]))
            for members, flows in zip(members_on, flows_on)])
        signatures: list[list[Hashable]] = [[label[u]] for u in range(units)]
        crossed = iter(crossings)
        for members in flow_classes:
            for member in members:
                signatures[member.unit].append((member.slot, member.fixed, _multiset(
                    [(what, colour[link]) for link, what in next(crossed)])))
        label = _relabel([tuple(signature) for signature in signatures])
        flow_label = _relabel([(flow_label[s], _multiset(
            [(what, colour[link]) for link, what in route])) for s, route in enumerate(routes)])
        # Each new partition refines the last (a signature holds the old label), so the
        # counts only grow: when none does, nothing split.
        now = (max(label, default=-1) + 1, max(flow_label, default=-1) + 1,
               max(colour, default=-1) + 1)
        if now == counts:
            break
        counts = now
    classes: dict[int, list[int]] = {}
    for unit, class_id in enumerate(label):
        classes.setdefault(class_id, []).append(unit)
    return list(classes.values())
