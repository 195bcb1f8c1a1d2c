"""Dragonfly fabrics: groups of routers, all-to-all inside a group, global cables between groups.

The topology of Kim, Dally, Scott and Abts ("Technology-Driven, Highly-Scalable Dragonfly
Topology", ISCA 2008) and of HPE Slingshot systems.  ``groups`` groups of
``routers_per_group`` routers (``g3.r7`` is router 7 of group 3); each router has
``nics_per_router`` endpoint ports, one cable to every other router of its group (local
links, ``local_link_bandwidth``) and ``global_links_per_router`` cables to other groups
(``global_link_bandwidth``).

Where NICs plug in (``nic_placement``): ``rails`` (the default) puts NIC *i* of each block
of ``nics_per_router`` nodes on one router, as a rail-optimized fabric fills its leaves —
a node's NICs on as many different routers, as an HPE Cray EX chassis cables its blades'
NICs to its switch blades (dual or quad injection: each NIC its own injection point; an
EX4000 chassis holds 16 nodes and 4 switch blades, so a 4-NIC node has one NIC on each, an
assumption where HPE's cabling is not published); ``nodes`` fills routers node-major (node
0's NICs by rail, then node 1's, …), like the leaves of a fat tree.

A group's ``routers_per_group * global_links_per_router`` global ports are shared evenly
among the other ``groups - 1`` groups: every pair of groups is joined by ``floor(a * h /
(groups - 1))`` cables (ports left over stay unused). The ``m``-th cable from group *g* to
its ``i``-th peer (peers in group order) uses *g*'s port ``t = m * (groups - 1) + i``, on
router ``t // h``: consecutive ports go to different peers, so the cables to one peer are
spread over the group's routers. Cables between the same two routers form one bundle.
Without ``groups``, the fabric has as many groups as its NICs fill; with it, every group
is built (empty ones carry traffic only for non-minimal routing) and more routers than
``groups * routers_per_group`` is an error.

Minimal routing — a local hop, a global hop, a local hop — is the least-cost path once a
global cable counts as 3 hops (``Link.cost``): by hop count alone a path hopping through a
third group (global, global; or global, local, global) is as short or shorter, which a
dragonfly's minimal routing never takes.  With global cost ``c`` a minimal path costs at
most ``2 + c`` and any path with two global hops at least ``2c``, so any ``c > 2`` makes
least-cost routing minimal; every routing policy of :mod:`topology.routing` then applies
unchanged, spreading over the routers that hold cables to the destination group.

Defaults are HPE Slingshot's Rosetta switch in its largest dragonfly: 64 ports of 200 Gb/s,
16 to endpoints, 31 local (one to each other switch of a 32-switch group), 17 global
(Rosetta as described by De Sensi et al., "An In-Depth Analysis of the Slingshot
Interconnect", SC 2020; 32-switch groups as in HPE Cray EX cabinets, e.g. NERSC's
Perlmutter documentation: "32 switch blades" per group, all-to-all inside it).  CSCS Alps
runs 4 GH200 per node with one 200 Gb/s Slingshot NIC each, so a 32-router group holds 128
nodes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology.fabric_clos import node_major_leaves, rail_leaves
from distsim_gpu.topology.fabric_spec import (
    DragonflyShape,
    Fabric,
    FabricSpec,
    attach_nic,
    cable,
    switches,
)
from distsim_gpu.topology.model import Link
from distsim_gpu.topology.presets import NodePreset
from distsim_gpu.topology.spec_values import read_bandwidth, read_count, read_optional_count

__all__ = ["GLOBAL_CABLE_COST", "NIC_PLACEMENTS", "build_dragonfly", "global_cables",
           "parse_dragonfly"]

#: Where a dragonfly's NICs plug in (see the module docstring).
NIC_PLACEMENTS = ("rails", "nodes")

#: The hops a shortest-path search counts for a global cable (any value > 2 works).
GLOBAL_CABLE_COST = 3


def _groups(shape: DragonflyShape, nic_count: int, routers: int) -> int:
    """The group count: given, or as many as ``routers`` (the routers the NICs fill) need."""
    a = shape.routers_per_group
    groups = shape.groups if shape.groups is not None else max(1, math.ceil(routers / a))
    if groups < 1:
        raise ConfigError(f"a dragonfly needs at least one group, got groups={groups}",
                          key="fabric.groups", hint="leave it out to fit the nodes")
    if routers > groups * a:
        raise ConfigError(
            f"{nic_count} NICs need {routers} routers of {shape.nics_per_router} NIC ports "
            f"(nic_placement {shape.nic_placement}), more than {groups} groups x {a} routers",
            key="fabric.groups", hint=f"at least {math.ceil(routers / a)} groups hold them, "
                                      "or leave groups out")
    ports = shape.routers_per_group * shape.global_links_per_router
    if groups > 1 and ports < groups - 1:
        raise ConfigError(
            f"{groups} groups need {groups - 1} global ports per group to join every pair, "
            f"but a group has routers_per_group x global_links_per_router = {ports}",
            key="fabric.global_links_per_router",
            hint=f"at least {math.ceil((groups - 1) / shape.routers_per_group)} per router")
    return groups


def global_cables(groups: int, routers_per_group: int,
                  global_links_per_router: int) -> dict[tuple[int, int, int, int], int]:
    """``(g, router in g, j, router in j) -> cables``, each group pair listed once (g < j)."""
    if groups < 2:
        return {}
    peers = groups - 1
    per_pair = routers_per_group * global_links_per_router // peers
    cables: dict[tuple[int, int, int, int], int] = {}
    for g in range(groups):
        for j in range(g + 1, groups):
            # j is g's (j - 1)-th peer; g is j's g-th peer (peers skip the group itself).
            for m in range(per_pair):
                rg = (m * peers + j - 1) // global_links_per_router
                rj = (m * peers + g) // global_links_per_router
                key = (g, rg, j, rj)
                cables[key] = cables.get(key, 0) + 1
    return cables


def build_dragonfly(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                    nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Routers, local and global cables, and NICs filling routers node-major."""
    shape = spec.shape if isinstance(spec.shape, DragonflyShape) else DragonflyShape()
    a, p = shape.routers_per_group, shape.nics_per_router
    router_of = (rail_leaves(nics, p) if shape.nic_placement == "rails"
                 else node_major_leaves(nics, p))
    groups = _groups(shape, len(router_of), max(router_of.values(), default=-1) + 1)
    port = spec.link_bandwidth_bytes_per_s
    local = shape.local_link_bandwidth_bytes_per_s or port
    global_ = shape.global_link_bandwidth_bytes_per_s or port

    def router(g: int, r: int) -> str:
        return f"g{g}.r{r}"

    devices = switches(router(g, r) for g in range(groups) for r in range(a))
    links: list[Link] = []
    nic_port = min(nic_bandwidth_bytes_per_s, port)
    for nic, k in router_of.items():
        links.extend(attach_nic(nic, router(*divmod(k, a)), nic_port, nic_latency_s, spec))
    for g in range(groups):
        for r in range(a):
            for s in range(r + 1, a):
                links.extend(cable(router(g, r), router(g, s), local, spec))
    cables = global_cables(groups, a, shape.global_links_per_router)
    for (g, rg, j, rj), count in cables.items():
        links.extend(cable(router(g, rg), router(j, rj), count * global_, spec,
                           cost=GLOBAL_CABLE_COST))
    config = {"groups": groups, "routers_per_group": a, "nics_per_router": p,
              "nic_placement": shape.nic_placement,
              "global_links_per_router": shape.global_links_per_router,
              "local_link_bandwidth": local, "global_link_bandwidth": global_}
    return Fabric(tuple(devices), tuple(links), config)


def parse_dragonfly(mapping: Mapping[Any, Any], preset: NodePreset,
                    source: str | None) -> DragonflyShape:
    """A dragonfly's groups, routers, ports and cable bandwidths (defaults where not given)."""
    default = DragonflyShape()

    def bandwidth(name: str) -> float | None:
        value = mapping.get(name)
        return None if value is None else read_bandwidth(value, f"fabric.{name}", source)

    return DragonflyShape(
        groups=read_optional_count(mapping, "groups", source, minimum=1),
        routers_per_group=read_count(mapping.get("routers_per_group", default.routers_per_group),
                                     "fabric.routers_per_group", source, minimum=1),
        nics_per_router=read_count(mapping.get("nics_per_router", default.nics_per_router),
                                   "fabric.nics_per_router", source, minimum=1),
        global_links_per_router=read_count(
            mapping.get("global_links_per_router", default.global_links_per_router),
            "fabric.global_links_per_router", source, minimum=0),
        local_link_bandwidth_bytes_per_s=bandwidth("local_link_bandwidth"),
        global_link_bandwidth_bytes_per_s=bandwidth("global_link_bandwidth"),
        nic_placement=check_choice(mapping.get("nic_placement", default.nic_placement),
                                   NIC_PLACEMENTS, key="fabric.nic_placement", source=source,
                                   what="NIC placement"))
