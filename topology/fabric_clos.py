"""Folded-Clos fabrics: leaves, spines and cores, filled node-major or by rail.

* ``single-switch`` — every NIC on one switch (``leaf0``).
* ``fat-tree`` — two tiers.  NICs fill leaves in order, node-major (node 0's NICs by rail,
  then node 1's, …), ``nics_per_leaf`` per leaf; every leaf is joined to every spine.
  With one leaf there are no spines.
* ``three-tier`` — leaf / spine / core.  Leaves are filled as in ``fat-tree`` and grouped
  into pods of ``leaves_per_pod``; each pod has its own ``spines_per_pod`` spines, each
  joined to every leaf of its pod.  Spine *s* of every pod belongs to core plane *s*, and
  joins every core of that plane (``cores_per_plane`` cores; the cores of a plane join the
  pods, as in the k-ary fat tree of Al-Fares et al., SIGCOMM 2008).  With one pod there is
  no core tier.
* ``rail-optimized`` — NIC *i* of every node on the leaf of rail *i*, so same-rail traffic
  crosses one leaf switch; leaves are joined by spines so cross-rail traffic is possible.
  With more nodes than ``nics_per_leaf`` the nodes form groups of ``nics_per_leaf`` (a DGX
  SuperPOD "scalable unit"); rail *i* of group *g* is leaf ``g * nics_per_node + i``.
* ``multi-plane`` (alias ``dual-plane``) — ``planes`` (default 2) rail-optimized fabrics
  side by side, each with its own leaves and spines (``plane0.leaf3``, ``plane1.spine0``):
  every NIC splits its bandwidth into one port per plane, as in NVIDIA's multi-plane
  designs (the DGX SuperPOD B300 reference architecture's "twin-planar" Spectrum-X fabric:
  each GPU has 2 x 400 GbE through two planes; ConnectX-8 SuperNICs split 800 Gb/s into
  planes).  A connection's bytes split evenly over the planes, as a multi-plane NIC
  sprays its packets over them in hardware, and each plane routes its share by the
  fabric's policy (:meth:`topology.model.Topology.route`).

Capacities. A leaf has ``nics_per_leaf`` downlink ports of the fabric's port bandwidth
(``link_bandwidth``; default the NIC's, per plane for ``multi-plane``). Its uplink
capacity is ``nics_per_leaf * port / oversubscription`` (for ``three-tier``,
``leaf_oversubscription``), spread evenly over its spines as one bundle per leaf-spine
pair (with more spines than uplink ports, one whole port to each of as many spines, the
leaves taking turns round them). Default spines (per pod) = the leaf's uplink ports,
``ceil(nics_per_leaf / oversubscription)``: one port per pair. A three-tier spine has
``leaves_per_pod`` bundles down, and ``1 / spine_oversubscription`` of that capacity up,
spread over the cores of its plane; default cores per plane = the spine's uplink ports.
Ports are sized by design (``nics_per_leaf``, ``leaves_per_pod``), not by how many NICs a
partly filled leaf or pod holds: that is how a real fabric is cabled (NVIDIA's SuperPOD
guides: build the full scalable unit's switches and cables and leave the missing nodes'
ports empty). A NIC's link runs at the slower of the NIC and the switch port. So a
non-blocking tree carries every NIC at full speed across its bisection, and an
oversubscribed tier divides the cross-tier capacity by its ratio.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology.fabric_spec import (
    Fabric,
    FabricSpec,
    MultiPlaneShape,
    ThreeTierShape,
    attach_nic,
    cable,
    switches,
)
from distsim_gpu.topology.model import Device, Link
from distsim_gpu.topology.presets import NodePreset
from distsim_gpu.topology.spec_values import read_count, read_optional_count, read_ratio

__all__ = [
    "MAX_PLANES",
    "TreePlan",
    "build_fat_tree",
    "build_multi_plane",
    "build_rail_optimized",
    "build_single_switch",
    "build_three_tier",
    "build_tree",
    "multi_plane_port",
    "node_major_leaves",
    "parse_multi_plane",
    "parse_three_tier",
    "rail_leaves",
]

#: Planes a multi-plane fabric may have: NICs split into at most this many ports.
MAX_PLANES = 16


@dataclass(frozen=True, slots=True)
class TreePlan:
    """The switch tiers of one folded Clos, in port units of ``port_bytes_per_s``.

    ``leaves_per_pod`` None means one pod holding every leaf (a two-tier tree); ``spines``
    is per pod; None values are derived (see the module docstring).  ``keys`` name the
    configuration keys errors point at (spines, cores).
    """

    leaves: int
    nics_per_leaf: int
    port_bytes_per_s: float
    leaf_oversubscription: float = 1.0
    spines: int | None = None
    leaves_per_pod: int | None = None
    spine_oversubscription: float = 1.0
    cores_per_plane: int | None = None
    prefix: str = ""
    spines_key: str = "fabric.spines"
    cores_key: str = "fabric.cores_per_plane"


@dataclass(frozen=True, slots=True)
class Tree:
    """What :func:`build_tree` made: switches and links, and the tier sizes it chose
    (``spines`` per pod, ``cores_per_plane``; 0 where a tier is not needed)."""

    devices: list[Device]
    links: list[Link]
    pods: int
    spines: int
    cores_per_plane: int


def build_tree(plan: TreePlan, spec: FabricSpec) -> Tree:
    """The leaves, spines and cores of ``plan`` and the bundles joining them."""
    p = plan.prefix
    devices = switches(f"{p}leaf{k}" for k in range(plan.leaves))
    links: list[Link] = []
    if plan.leaves <= 1:
        return Tree(devices, links, plan.leaves, 0, 0)
    up_ports = plan.nics_per_leaf / plan.leaf_oversubscription
    spines = plan.spines if plan.spines is not None else math.ceil(up_ports)
    pod_leaves = plan.leaves_per_pod or plan.leaves
    pods = math.ceil(plan.leaves / pod_leaves)
    if spines < 1:
        what = "leaves" if pods == 1 else "leaves of a pod"
        raise ConfigError(f"{min(plan.leaves, pod_leaves)} {what} need at least one spine to "
                          f"join them, got spines={spines}", key=plan.spines_key,
                          hint="leave it out to derive it from nics_per_leaf")
    spine_names = [f"{p}spine{q * spines + s}" for q in range(pods) for s in range(spines)]
    devices.extend(Device(name, "switch", None, i) for i, name in enumerate(spine_names))
    for k in range(plan.leaves):
        q = k // pod_leaves
        for s, bandwidth in _leaf_uplinks(k, up_ports, spines, plan.port_bytes_per_s):
            links.extend(cable(f"{p}leaf{k}", spine_names[q * spines + s], bandwidth, spec))
    if pods == 1:
        return Tree(devices, links, 1, spines, 0)
    cores = _core_tier(plan, spec, spine_names, pods, spines, up_ports, devices, links)
    return Tree(devices, links, pods, spines, cores)


def _leaf_uplinks(leaf: int, up_ports: float, spines: int,
                  port: float) -> list[tuple[int, float]]:
    """``(spine, bandwidth)`` of one leaf's uplink bundles.

    The uplink capacity spreads evenly over every spine, as one bundle per pair — unless
    there are more spines than the leaf has uplink ports: then each port is one cable to
    its own spine (a bundle of less than a port would cap a single flow below the port
    speed), the leaves taking turns round the spines so that every spine gets as many
    ports as the next (NVIDIA's A100 SuperPOD at 6-7 SUs: 20 uplinks, 24-28 spines).  Only
    where any two leaves still share a spine (2 x ports > spines); otherwise the even
    spread stands.
    """
    whole = int(up_ports)
    if spines <= up_ports or whole != up_ports or 2 * whole <= spines:
        return [(s, up_ports * port / spines) for s in range(spines)]
    return sorted(((leaf * whole + j) % spines, port) for j in range(whole))


def _core_tier(plan: TreePlan, spec: FabricSpec, spine_names: Sequence[str], pods: int,
               spines: int, up_ports: float, devices: list[Device], links: list[Link]) -> int:
    """Adds the core planes joining ``pods`` pods; returns the cores per plane."""
    assert plan.leaves_per_pod is not None  # several pods only when pods were asked for
    spine_up_ports = plan.leaves_per_pod * up_ports / spines / plan.spine_oversubscription
    cores = (plan.cores_per_plane if plan.cores_per_plane is not None
             else math.ceil(spine_up_ports))
    if cores < 1:
        raise ConfigError(f"{pods} pods need at least one core switch per plane to join them, "
                          f"got cores_per_plane={cores}", key=plan.cores_key,
                          hint="leave it out to derive it from the spines' uplink ports")
    per_spine_core = spine_up_ports * plan.port_bytes_per_s / cores
    core_names = [f"{plan.prefix}core{plane * cores + c}"
                  for plane in range(spines) for c in range(cores)]
    devices.extend(Device(name, "switch", None, i) for i, name in enumerate(core_names))
    for q in range(pods):
        for s in range(spines):
            for c in range(cores):
                links.extend(cable(spine_names[q * spines + s], core_names[s * cores + c],
                                   per_spine_core, spec))
    return cores


# --------------------------------------------------------------------------- leaf filling


def node_major_leaves(nics: Sequence[Sequence[str]], nics_per_leaf: int) -> dict[str, int]:
    """NIC -> leaf, filling leaves in order: node 0's NICs by rail, then node 1's, …"""
    ordered = [nic for node in nics for nic in node]
    return {nic: k // nics_per_leaf for k, nic in enumerate(ordered)}


def rail_leaves(nics: Sequence[Sequence[str]], nodes_per_group: int) -> dict[str, int]:
    """NIC -> leaf, rail-optimized: rail *i* of node group *g* on leaf ``g * rails + i``."""
    rails = max((len(node) for node in nics), default=0)
    return {nic: (n // nodes_per_group) * rails + rail
            for n, node in enumerate(nics) for rail, nic in enumerate(node)}


def _attach(leaf_of: Mapping[str, int], prefix: str, port: float, spec: FabricSpec,
            nic_latency_s: float) -> list[Link]:
    links: list[Link] = []
    for nic, k in leaf_of.items():
        links.extend(attach_nic(nic, f"{prefix}leaf{k}", port, nic_latency_s, spec))
    return links


def _leaf_count(leaf_of: Mapping[str, int]) -> int:
    return max(leaf_of.values(), default=-1) + 1


# --------------------------------------------------------------------------- kinds


def build_single_switch(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                        nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Every NIC on ``leaf0``."""
    leaf_of = {nic: 0 for node in nics for nic in node}
    port = min(nic_bandwidth_bytes_per_s, spec.link_bandwidth_bytes_per_s)
    devices = switches(["leaf0"]) if leaf_of else []
    return Fabric(tuple(devices), tuple(_attach(leaf_of, "", port, spec, nic_latency_s)))


def _two_tier(spec: FabricSpec, leaf_of: Mapping[str, int], *, nic_bandwidth_bytes_per_s: float,
              nic_latency_s: float) -> Fabric:
    plan = TreePlan(_leaf_count(leaf_of), spec.nics_per_leaf, spec.link_bandwidth_bytes_per_s,
                    spec.oversubscription, spec.spines)
    tree = build_tree(plan, spec)
    port = min(nic_bandwidth_bytes_per_s, spec.link_bandwidth_bytes_per_s)
    links = [*_attach(leaf_of, "", port, spec, nic_latency_s), *tree.links]
    config = {"oversubscription": spec.oversubscription, "nics_per_leaf": spec.nics_per_leaf,
              "spines": tree.spines}
    return Fabric(tuple(tree.devices), tuple(links), config)


def build_fat_tree(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                   nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Two tiers, leaves filled node-major."""
    return _two_tier(spec, node_major_leaves(nics, spec.nics_per_leaf),
                     nic_bandwidth_bytes_per_s=nic_bandwidth_bytes_per_s,
                     nic_latency_s=nic_latency_s)


def build_rail_optimized(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                         nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Two tiers, rail *i* of each group of ``nics_per_leaf`` nodes on one leaf."""
    return _two_tier(spec, rail_leaves(nics, spec.nics_per_leaf),
                     nic_bandwidth_bytes_per_s=nic_bandwidth_bytes_per_s,
                     nic_latency_s=nic_latency_s)


def build_three_tier(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                     nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Leaf / spine / core, leaves filled node-major and grouped into pods."""
    shape = spec.shape if isinstance(spec.shape, ThreeTierShape) else ThreeTierShape()
    leaf_of = node_major_leaves(nics, spec.nics_per_leaf)
    leaves_per_pod = shape.leaves_per_pod or spec.nics_per_leaf
    plan = TreePlan(_leaf_count(leaf_of), spec.nics_per_leaf, spec.link_bandwidth_bytes_per_s,
                    spec.oversubscription, shape.spines_per_pod, leaves_per_pod,
                    shape.spine_oversubscription, shape.cores_per_plane,
                    spines_key="fabric.spines_per_pod")
    tree = build_tree(plan, spec)
    port = min(nic_bandwidth_bytes_per_s, spec.link_bandwidth_bytes_per_s)
    links = [*_attach(leaf_of, "", port, spec, nic_latency_s), *tree.links]
    config = {"nics_per_leaf": spec.nics_per_leaf,
              "leaf_oversubscription": spec.oversubscription,
              "spine_oversubscription": shape.spine_oversubscription,
              "leaves_per_pod": leaves_per_pod, "spines_per_pod": tree.spines,
              "cores_per_plane": tree.cores_per_plane}
    return Fabric(tuple(tree.devices), tuple(links), config)


def build_multi_plane(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                      nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """``planes`` rail-optimized fabrics; each NIC has one port of 1/planes on each."""
    shape = spec.shape if isinstance(spec.shape, MultiPlaneShape) else MultiPlaneShape()
    leaf_of = rail_leaves(nics, spec.nics_per_leaf)
    port = min(nic_bandwidth_bytes_per_s / shape.planes, spec.link_bandwidth_bytes_per_s)
    devices: list[Device] = []
    links: list[Link] = []
    spines = 0
    for plane in range(shape.planes):
        prefix = f"plane{plane}."
        plan = TreePlan(_leaf_count(leaf_of), spec.nics_per_leaf,
                        spec.link_bandwidth_bytes_per_s, spec.oversubscription, spec.spines,
                        prefix=prefix)
        tree = build_tree(plan, spec)
        spines = tree.spines
        devices.extend(tree.devices)
        links.extend(_attach(leaf_of, prefix, port, spec, nic_latency_s))
        links.extend(tree.links)
    config = {"planes": shape.planes, "oversubscription": spec.oversubscription,
              "nics_per_leaf": spec.nics_per_leaf, "spines": spines}
    return Fabric(tuple(devices), tuple(links), config)


# --------------------------------------------------------------------------- shapes


def parse_three_tier(mapping: Mapping[Any, Any], preset: NodePreset,
                     source: str | None) -> ThreeTierShape:
    """A three-tier fabric's figures above the leaf tier (None: derive them)."""
    return ThreeTierShape(
        read_ratio(mapping.get("spine_oversubscription", 1.0), "fabric.spine_oversubscription",
                   source),
        leaves_per_pod=read_optional_count(mapping, "leaves_per_pod", source, minimum=1),
        spines_per_pod=read_optional_count(mapping, "spines_per_pod", source, minimum=0),
        cores_per_plane=read_optional_count(mapping, "cores_per_plane", source, minimum=0))


def parse_multi_plane(mapping: Mapping[Any, Any], preset: NodePreset,
                      source: str | None) -> MultiPlaneShape:
    """A multi-plane fabric's plane count."""
    planes = read_count(mapping.get("planes", 2), "fabric.planes", source, minimum=1)
    if planes > MAX_PLANES:  # each plane is a whole fabric: bound what a file can ask
        raise ConfigError(f"{planes} planes is more than a NIC has ports for "
                          f"(at most {MAX_PLANES})", key="fabric.planes", source=source,
                          hint="multi-plane designs use 2 to 8 planes")
    return MultiPlaneShape(planes)


def multi_plane_port(shape: object, nic_bandwidth_bytes_per_s: float) -> float:
    """A plane's port bandwidth unless given: the NIC's split over the planes."""
    assert isinstance(shape, MultiPlaneShape)
    return nic_bandwidth_bytes_per_s / shape.planes
