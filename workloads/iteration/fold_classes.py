"""Classes of alike units: which data-parallel replicas may stand for each other.

:mod:`workloads.iteration.folding` reads, per flow class, each replica's links off the plans
(capacity, streams and the data-parallel collectives' streams per link, who else crosses
it, latency, the most loaded link).  Two
units are *alike* when, for every flow class, their links match one to one in all of that
and in *which classes* the units sharing each link belong to.  That last clause is what
makes several simulated units exact together: a unit whose send meets another class's
send on a spine link is not the image of one whose send meets its own class's, even where
their own links look the same.  The partition is found by refinement (as colour
refinement does for graph symmetry): start from one class, split by the signature above
under the current classes, repeat until no class splits.  Each class is then simulated
once, its first unit standing for the rest; a fabric that treats every replica alike
gives one class, and a stage boundary that falls across switches gives a few.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Member", "alike_classes"]


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


def alike_classes(flow_classes: Sequence[Sequence[Member]], units: int) -> list[list[int]]:
    """The classes of alike units (positions ``0 … units-1``), each in order, ordered by
    their first unit."""
    # Per flow class and link, the units crossing it (once per crossing member), each
    # with what it puts there: a link two units load unalike tells them apart.
    sharers: list[dict[Any, list[tuple[int, Hashable]]]] = []
    for members in flow_classes:
        on: dict[Any, list[tuple[int, Hashable]]] = {}
        for member in members:
            for link, what in member.links.items():
                on.setdefault(link, []).append((member.unit, what))
        sharers.append(on)
    label = [0] * units
    count = 1
    while True:
        signatures: list[list[Hashable]] = [[label[u]] for u in range(units)]
        for members, on in zip(flow_classes, sharers):
            company = {link: tuple(sorted((label[u], what) for u, what in users))
                       for link, users in on.items()}
            for member in members:
                signatures[member.unit].append((member.slot, member.fixed, tuple(sorted(
                    (what, company[link]) for link, what in member.links.items()))))
        ids: dict[tuple[Hashable, ...], int] = {}
        label = [ids.setdefault(tuple(signature), len(ids)) for signature in signatures]
        if len(ids) == count:
            break
        count = len(ids)
    classes: dict[int, list[int]] = {}
    for unit, class_id in enumerate(label):
        classes.setdefault(class_id, []).append(unit)
    return list(classes.values())
