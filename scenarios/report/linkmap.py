"""Link utilisation over the topology: link classes × where they sit, as a heat map.

A cluster has thousands of links; a person reads them by class and place.  A link's
*class* is the tiers it joins and its kind, one direction: ``gpu→nvswitch (nvlink)``,
``nic→leaf (network)``, ``spine→leaf (network)``.  A tier is a device's kind inside a node
(gpu, nvswitch, pcie_switch, cpu, nic) and, for a fabric switch, its name without its
number (``leaf``, ``spine``, ``core``).  A link's *place* is the node of its in-node end,
or for a switch-to-switch link the index of its source switch in its tier.

:func:`link_map` bins every link the run could load into a :class:`LinkMap`: per class
and place, the highest utilisation of its links (bytes carried over capacity × iteration
time: the hottest link is what a person looks for), their mean and their count.  Places
beyond ``max_columns`` are binned in runs of consecutive places, so the map of a 2,048-node
cluster stays a picture.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.iteration.simulator import IterationResult

__all__ = ["LinkMap", "bin_links", "link_class", "link_map"]

_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True, slots=True)
class LinkMap:
    """``peak[i][j]`` / ``mean[i][j]`` / ``count[i][j]``: the utilisation (a fraction) of
    class ``classes[i]``'s links at places ``columns[j]`` (a place number such as ``3``, or
    a run of them, ``0–15``); a cell without links has count 0 and NaN utilisations."""

    classes: tuple[str, ...]
    columns: tuple[str, ...]
    peak: tuple[tuple[float, ...], ...]
    mean: tuple[tuple[float, ...], ...]
    count: tuple[tuple[int, ...], ...]


def _tier(topology: Topology, name: str) -> tuple[str, int | None, int]:
    device = topology.device(name)
    if device.node is not None:
        return device.kind, device.node, device.index
    return _DIGITS.sub("", name).strip(".") or device.kind, None, device.index


def link_class(topology: Topology, src: str, dst: str) -> tuple[str, str, int]:
    """A link's class, its place's kind (``node`` or the source switch's tier) and its
    place's number."""
    kind = topology.link(src, dst).kind
    src_tier, src_node, src_index = _tier(topology, src)
    dst_tier, dst_node, _ = _tier(topology, dst)
    label = f"{src_tier}→{dst_tier} ({kind})"
    node = src_node if src_node is not None else dst_node
    if node is not None:
        return label, "node", node
    return label, src_tier, src_index


def link_map(result: IterationResult, max_columns: int = 128) -> LinkMap | None:
    """The run's links binned by class and place (see the module docstring); None when
    the result has no topology."""
    topo = result.topology
    if topo is None:
        return None
    ids, capacity, carried, _busy, _saturated = result.simulation.network.link_stat_arrays()
    t = result.iteration_time_s
    with np.errstate(divide="ignore", invalid="ignore"):
        utilisation = np.where(np.isfinite(capacity) & (capacity > 0) & (t > 0),
                               carried / (capacity * t), 0.0)
    return bin_links(topo, ids, utilisation, max_columns)


def bin_links(topology: Topology, ids: Sequence[Any], utilisation: Sequence[float],
              max_columns: int = 128) -> LinkMap:
    """Links ``ids`` (``(src, dst)``; others are skipped) with their ``utilisation``
    binned by class and place, at most ``max_columns`` places across."""
    cells: dict[tuple[str, int], list[float]] = {}
    place_kind: dict[str, str] = {}
    for link_id, value in zip(ids, utilisation):
        if not (isinstance(link_id, tuple) and len(link_id) == 2):
            continue
        try:
            label, where, number = link_class(topology, *link_id)
        except DistsimError:  # a flow network link that is no topology link
            continue
        cells.setdefault((label, number), []).append(float(value))
        place_kind.setdefault(label, where)
    if not cells:
        return LinkMap((), (), (), (), ())
    classes = tuple(sorted(place_kind, key=lambda c: (place_kind[c] != "node", c)))
    width = max(number for _, number in cells) + 1
    per = max(1, math.ceil(width / max_columns))
    columns = tuple(_column(j * per, min((j + 1) * per, width) - 1)
                    for j in range(math.ceil(width / per)))
    peak = np.full((len(classes), len(columns)), np.nan)
    total = np.zeros_like(peak)
    count = np.zeros(peak.shape, dtype=int)
    row = {c: i for i, c in enumerate(classes)}
    for (label, number), values in cells.items():
        i, j = row[label], number // per
        peak[i, j] = np.fmax(peak[i, j], max(values))
        total[i, j] += sum(values)
        count[i, j] += len(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return LinkMap(classes, columns, _rows(peak), _rows(mean),
                   tuple(tuple(int(v) for v in r) for r in count))


def _column(first: int, last: int) -> str:
    return f"{first}" if first == last else f"{first}–{last}"


def _rows(matrix: np.ndarray) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in r) for r in matrix)
