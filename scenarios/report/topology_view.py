"""A cluster at a glance: a summary table and a drawing of its devices and links.

The summary counts GPUs, nodes and devices by kind, and the links by class (kind and
speed: the cables of one class are interchangeable), both directions of a cable counted
once; for a cluster of several nodes it gives the bisection bandwidth between its first
and its second half of nodes: the maximum flow, one way, from the first half's GPUs to the
second's (networkx's max-flow, on clusters of up to ``MAX_BISECTION_NODES`` nodes), and the
fabric tier by tier: a switch's tier is its hops from the nearest NIC over network links
(1 the leaves, 2 the spines, 3 the cores; a dragonfly's routers are all tier 1), with per
tier its switches, the cables and capacity from the tier below and to the tier above, and
their ratio (down:up, the oversubscription as cabled: a leaf only partly filled counts the
NICs it holds), which a designer otherwise reads out of ``fabric.*`` keys and closed forms.
The drawing (matplotlib, the ``plot`` extra) places each node's devices in layers —
NVSwitch below its GPUs, PCIe switches, CPUs and NICs above — side by side, and the
fabric's switches above them by tier (hops from the NICs); a link's colour is its class
and its width grows with its speed.  Clusters of many nodes draw the first
``MAX_DRAWN_NODES`` and the fabric switches they reach, and say so.
"""

from __future__ import annotations

import io
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
from distsim_gpu.scenarios.report.plots import PlotsUnavailable
from distsim_gpu.simcore.fileio import atomic_write_bytes
from distsim_gpu.simcore.units import format_bandwidth
from distsim_gpu.topology import Topology
from distsim_gpu.topology.fabrics import FABRICS
from distsim_gpu.topology.preset_registry import NODE_PRESETS

__all__ = ["FabricTier", "LinkClass", "TopologySummary", "draw_topology", "fabric_tiers",
           "format_summary", "summarise"]

MAX_DRAWN_NODES = 8
MAX_BISECTION_NODES = 128
_LAYER = {"nvswitch": -1.0, "gpu": 0.0, "pcie_switch": 1.0, "cpu": 2.0, "nic": 3.0}
_COLOURS = {"nvlink": "#76b900", "pcie": "#1f77b4", "cpu": "#9467bd", "network": "#d62728"}


@dataclass(frozen=True, slots=True)
class LinkClass:
    """Links of one kind and speed: ``cables`` full-duplex pairs, ``one_way`` the rest.

    ``joins`` names the device kinds at the ends of its links (``"gpu-pcie_switch"``,
    sorted): a kind's speeds then say what they are, e.g. a Grace-Blackwell GPU's
    NVLink-C2C to its host, which the cluster models as the GPU's ``pcie`` hop.
    """

    kind: str
    bandwidth_bytes_per_s: float
    cables: int
    one_way: int
    joins: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FabricTier:
    """The fabric switches ``tier`` hops above the NICs: ``switches`` of them,
    ``down_cables`` cables (``down_bytes_per_s`` of one-way capacity) from the tier below
    (the NICs for tier 1), ``up_cables`` (``up_bytes_per_s``) to the tier above, and
    ``within_cables`` between two switches of this tier (a dragonfly's local and global
    cables).  A cable is one full-duplex pair of links, counted by its upward link."""

    tier: int
    switches: int
    down_cables: int
    down_bytes_per_s: float
    up_cables: int
    up_bytes_per_s: float
    within_cables: int

    @property
    def oversubscription(self) -> float | None:
        """Capacity from below over capacity above; None for the top tier."""
        return self.down_bytes_per_s / self.up_bytes_per_s if self.up_bytes_per_s else None

    def to_dict(self) -> dict[str, Any]:
        return {"tier": self.tier, "switches": self.switches,
                "down_cables": self.down_cables, "down_bytes_per_s": self.down_bytes_per_s,
                "up_cables": self.up_cables, "up_bytes_per_s": self.up_bytes_per_s,
                "within_cables": self.within_cables,
                "oversubscription": self.oversubscription}


@dataclass(frozen=True, slots=True)
class TopologySummary:
    name: str
    gpus: int
    nodes: int
    devices: dict[str, int]
    links: tuple[LinkClass, ...]
    bisection_bytes_per_s: float | None = None
    # One node's (NVLink domain's) first half of GPUs to its second, one way, over NVLink.
    nvlink_bisection_bytes_per_s: float | None = None
    # A rack-scale preset's physical counts per NVLink domain (NvlinkInventory.counts).
    rack: dict[str, int] | None = None
    # The fabric's switches tier by tier (empty without fabric switches).
    tiers: tuple[FabricTier, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpus": self.gpus, "nodes": self.nodes,
                "devices": self.devices, "bisection_bytes_per_s": self.bisection_bytes_per_s,
                "nvlink_bisection_bytes_per_s": self.nvlink_bisection_bytes_per_s,
                "rack": self.rack, "tiers": [tier.to_dict() for tier in self.tiers],
                "links": [{"kind": c.kind, "bandwidth_bytes_per_s": c.bandwidth_bytes_per_s,
                           "cables": c.cables, "one_way": c.one_way, "joins": list(c.joins)}
                          for c in self.links]}


def summarise(topology: Topology) -> TopologySummary:
    """Counts of the cluster's devices by kind and links by class."""
    links = {(link.src, link.dst): link for link in topology.links()}
    classes: Counter[tuple[str, float, bool]] = Counter()
    for (src, dst), link in links.items():
        back = links.get((dst, src))
        duplex = back is not None and back.bandwidth_bytes_per_s == link.bandwidth_bytes_per_s
        if duplex and src > dst:
            continue  # the cable is counted from its other end
        classes[(link.kind, link.bandwidth_bytes_per_s, duplex)] += 1
    merged: dict[tuple[str, float], list[int]] = {}
    for (kind, bandwidth, duplex), count in classes.items():
        merged.setdefault((kind, bandwidth), [0, 0])[0 if duplex else 1] += count
    joins: dict[tuple[str, float], set[str]] = {}
    for link in links.values():
        ends = sorted((topology.device(link.src).kind, topology.device(link.dst).kind))
        joins.setdefault((link.kind, link.bandwidth_bytes_per_s), set()).add("-".join(ends))
    return TopologySummary(
        topology.name, len(topology.gpus), topology.num_nodes,
        dict(sorted(Counter(d.kind for d in topology.devices()).items())),
        tuple(LinkClass(k, b, c, o, tuple(sorted(joins[(k, b)])))
              for (k, b), (c, o) in sorted(merged.items())),
        bisection_bytes_per_s(topology), nvlink_bisection_bytes_per_s(topology),
        rack_counts(topology), fabric_tiers(topology))


def _switch_tiers(topology: Topology) -> dict[str, int]:
    """Each fabric switch's hops from the nearest NIC over network links (NICs are 0);
    in a fabric without tiers (a dragonfly: :attr:`FabricKind.tiered`) every switch 1."""
    fabric = topology.config.get("fabric")
    kind = FABRICS.get(str(fabric.get("kind"))) if isinstance(fabric, dict) else None
    if kind is not None and not kind.tiered:
        tier = {d.name: 0 for d in topology.devices() if d.kind == "nic"}
        return tier | {d.name: 1 for d in topology.devices()
                       if d.kind == "switch" and d.node is None}
    up: dict[str, list[str]] = {}
    for link in topology.links():
        if link.kind == "network":
            up.setdefault(link.src, []).append(link.dst)
    tier = {d.name: 0 for d in topology.devices() if d.kind == "nic"}
    frontier, hops = list(tier), 0
    while frontier:
        hops += 1
        reached = {dst for src in frontier for dst in up.get(src, ())
                   if dst not in tier and topology.device(dst).kind == "switch"}
        tier.update(dict.fromkeys(reached, hops))
        frontier = sorted(reached)
    return tier


def fabric_tiers(topology: Topology) -> tuple[FabricTier, ...]:
    """The fabric tier by tier (:class:`FabricTier`), lowest first."""
    tier = _switch_tiers(topology)
    top = max(tier.values(), default=0)
    count = Counter(t for t in tier.values() if t > 0)
    down = [[0, 0.0] for _ in range(top + 2)]  # per tier: cables, bytes/s from below
    within = [0] * (top + 1)
    for link in topology.links():
        low, high = tier.get(link.src), tier.get(link.dst)
        if link.kind != "network" or low is None or high is None:
            continue
        if high == low + 1:  # a cable's upward link stands for it
            down[high][0] += 1
            down[high][1] += link.bandwidth_bytes_per_s
        elif high == low and low > 0 and link.src < link.dst:
            within[low] += 1
    return tuple(FabricTier(t, count[t], int(down[t][0]), float(down[t][1]),
                            int(down[t + 1][0]), float(down[t + 1][1]), within[t])
                 for t in range(1, top + 1))


def rack_counts(topology: Topology) -> dict[str, int] | None:
    """Per NVLink domain, what a rack-scale preset physically holds (its logical switch
    stands for switch trays of chips and cables), or None for other clusters."""
    preset = NODE_PRESETS.get(str(topology.config.get("preset", "")))
    if preset is None or preset.inventory is None:
        return None
    domain = int(topology.config.get("nvlink_domain", preset.gpus))
    kinds = Counter(d.kind for d in topology.devices() if d.node == 0)
    return {"gpus": domain, "cpus": kinds["cpu"], "nics": kinds["nic"],
            **preset.inventory.counts(domain)}


def nvlink_bisection_bytes_per_s(topology: Topology) -> float | None:
    """The most bytes per second node 0's first half of GPUs can send to its second half
    over NVLink at once (max-flow over its NVLink links); None without NVLink."""
    gpus = sorted((d.index, d.name) for d in topology.devices()
                  if d.kind == "gpu" and d.node == 0)
    graph = nx.DiGraph()
    for link in topology.links():
        if link.kind == "nvlink" and topology.node_of(link.src) == 0 == topology.node_of(
                link.dst):
            graph.add_edge(link.src, link.dst, capacity=link.bandwidth_bytes_per_s)
    if len(gpus) < 2 or graph.number_of_edges() == 0:
        return None
    half = len(gpus) // 2
    for position, (_index, gpu) in enumerate(gpus):
        if gpu in graph:
            graph.add_edge(*(("source", gpu) if position < half else (gpu, "sink")))
    if "source" not in graph or "sink" not in graph:
        return None
    value, _flows = nx.maximum_flow(graph, "source", "sink")
    return float(value)


def bisection_bytes_per_s(topology: Topology) -> float | None:
    """The most bytes per second the first half of the nodes' GPUs can send to the second
    half's at once (a max-flow over the links' capacities); None for one node or more than
    MAX_BISECTION_NODES."""
    nodes = topology.num_nodes
    if not 2 <= nodes <= MAX_BISECTION_NODES:
        return None
    graph = nx.DiGraph()
    for link in topology.links():
        graph.add_edge(link.src, link.dst, capacity=link.bandwidth_bytes_per_s)
    for gpu in topology.gpus:  # a source and a sink of unlimited capacity
        side = ("source", gpu) if topology.node_of(gpu) < nodes // 2 else (gpu, "sink")
        graph.add_edge(*side)
    value, _flows = nx.maximum_flow(graph, "source", "sink")
    return float(value)


def format_summary(summary: TopologySummary) -> str:
    lines = [f"cluster {summary.name}: {summary.gpus} GPUs on {summary.nodes} node(s)",
             "devices: " + ", ".join(f"{n} {k}" for k, n in summary.devices.items())]
    if summary.bisection_bytes_per_s is not None:
        lines.append("bisection (first half of the nodes to the second, one way): "
                     + format_bandwidth(summary.bisection_bytes_per_s))
    elif summary.nodes > MAX_BISECTION_NODES:
        lines.append(f"bisection: not computed above {MAX_BISECTION_NODES} nodes (a max-flow "
                     "over every link of the cluster)")
    if summary.nvlink_bisection_bytes_per_s is not None:
        lines.append("NVLink bisection of one node (half its GPUs to the other half, one "
                     "way): " + format_bandwidth(summary.nvlink_bisection_bytes_per_s))
    if summary.rack is not None:
        r = summary.rack
        lines.append(
            f"each NVLink domain as built: {r['compute_trays']} compute trays ({r['cpus']} "
            f"CPUs, {r['gpus']} GPUs, {r['nics']} NICs), {r['switch_trays']} NVLink switch "
            f"trays ({r['nvswitch_chips']} NVSwitch chips), {r['nvlink_links']:,} NVLink "
            "links (drawn as one switch)")
    lines += _tier_lines(summary.tiers)
    lines += ["", f"{'link class':<10} {'speed (one way)':>16} {'cables':>8} {'one-way':>8}"
              "  joins"]
    for c in summary.links:
        lines.append(f"{c.kind:<10} {format_bandwidth(c.bandwidth_bytes_per_s):>16} "
                     f"{c.cables:>8} {c.one_way:>8}  {', '.join(c.joins)}")
    return "\n".join(lines) + "\n"


def _tier_lines(tiers: tuple[FabricTier, ...]) -> list[str]:
    """The fabric's tiers as a table (nothing without fabric switches)."""
    if not tiers:
        return []
    lines = ["", "fabric tier  switches  cables down  capacity down  cables up  capacity up"
             "  down:up  cables within"]
    for t in tiers:
        ratio = t.oversubscription
        shown = "-" if ratio is None else f"{ratio:.3g}:1"
        lines.append(f"{t.tier:>11} {t.switches:>9} {t.down_cables:>12} "
                     f"{format_bandwidth(t.down_bytes_per_s):>14} {t.up_cables:>10} "
                     f"{format_bandwidth(t.up_bytes_per_s) if t.up_cables else '-':>12} "
                     f"{shown:>8} {t.within_cables:>14}")
    return lines


def _positions(topology: Topology, nodes: int) -> dict[str, tuple[float, float]]:
    """x, y of every drawn device: nodes side by side, fabric tiers above."""
    width = 1.0 + max((d.index for d in topology.devices() if d.node is not None),
                      default=0)
    pos: dict[str, tuple[float, float]] = {}
    for d in topology.devices():
        if d.node is not None and d.node < nodes:
            count = sum(1 for e in topology.devices() if e.node == d.node and e.kind == d.kind)
            x = d.node * (width + 1) + (d.index + 0.5) * width / max(count, 1)
            pos[d.name] = (x, _LAYER.get(d.kind, 0.0))
    # A fabric switch's tier is its hops from the nearest NIC, any node's; drawn are those
    # the drawn NICs reach going up a tier at each hop (an undrawn node's NICs and GPUs,
    # and the leaves only undrawn nodes use, stay out).
    links = [link for link in topology.links() if topology.device(link.dst).node is None]
    tier = {d.name: 0 for d in topology.devices() if d.kind == "nic"}
    frontier, hops = set(tier), 0
    while frontier:
        hops += 1
        frontier = {link.dst for link in links if link.src in frontier
                    and link.dst not in tier}
        tier.update(dict.fromkeys(frontier, hops))
    drawn = {n for n in pos if topology.device(n).kind == "nic"}
    frontier = set(drawn)
    while frontier:
        frontier = {link.dst for link in links if link.src in frontier
                    and link.dst not in drawn and tier.get(link.dst) == tier[link.src] + 1}
        drawn |= frontier
    tier = {name: t for name, t in tier.items() if name in drawn}
    by_tier: dict[int, list[str]] = {}
    for name, t in tier.items():
        if t > 0:
            by_tier.setdefault(t, []).append(name)
    span = nodes * (width + 1)
    for t, names in by_tier.items():
        for i, name in enumerate(sorted(names)):
            pos[name] = ((i + 0.5) * span / len(names), _LAYER["nic"] + 1.5 * t)
    return pos


def draw_topology(topology: Topology, path: str | Path) -> None:
    """Draw the cluster to ``path`` (.png or .svg, by its suffix)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsUnavailable("matplotlib is not installed (pip install 'distsim-gpu[plot]')"
                               ) from None
    nodes = min(topology.num_nodes, MAX_DRAWN_NODES)
    pos = _positions(topology, nodes)
    figure = Figure(figsize=(min(4 + 3 * nodes, 30), 6), dpi=110, layout="constrained")
    axes = figure.add_subplot()
    seen: set[tuple[str, float]] = set()
    for link in topology.links():
        if link.src not in pos or link.dst not in pos or link.src > link.dst:
            continue
        (x0, y0), (x1, y1) = pos[link.src], pos[link.dst]
        key = (link.kind, link.bandwidth_bytes_per_s)
        axes.plot([x0, x1], [y0, y1], color=_COLOURS.get(link.kind, "grey"),
                  linewidth=0.5 + math.log10(max(link.bandwidth_bytes_per_s, 1e9) / 1e9),
                  label=None if key in seen else
                  f"{link.kind} {format_bandwidth(link.bandwidth_bytes_per_s)}", zorder=1)
        seen.add(key)
    for name, (x, y) in pos.items():
        kind = topology.device(name).kind
        axes.scatter([x], [y], s=60 if kind == "gpu" else 35, zorder=2,
                     marker="s" if kind == "gpu" else "o", color="black")
    title = f"{topology.name}: {len(topology.gpus)} GPUs, {topology.num_nodes} node(s)"
    if nodes < topology.num_nodes:
        title += f" (first {nodes} drawn)"
    axes.set_title(title)
    axes.set_yticks([*_LAYER.values()], [*_LAYER.keys()])
    axes.set_xticks([])
    axes.legend(loc="upper right", fontsize="small")
    # Drawn in memory, then written whole: a path that cannot be written is a clear error
    # (matplotlib's own write raised a traceback) and no half-written file is left.
    buffer = io.BytesIO()
    figure.savefig(buffer, format=Path(path).suffix.lstrip(".").lower() or "png")
    atomic_write_bytes(path, buffer.getvalue())
