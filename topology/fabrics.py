"""Fabrics: how the nodes' NICs are joined by network switches.

Kinds (``fabric.kind``), each built by its family's module:

* ``single-switch`` — every NIC on one switch (:mod:`topology.fabric_clos`).
* ``fat-tree`` (alias ``leaf-spine``) — a two-tier folded Clos, leaves filled node-major,
  with ``oversubscription``, ``nics_per_leaf``, ``spines`` (:mod:`topology.fabric_clos`).
* ``three-tier`` (alias ``leaf-spine-core``) — leaf / spine / core: pods of leaves and
  spines joined by core planes, with ``leaf_oversubscription`` and
  ``spine_oversubscription`` (:mod:`topology.fabric_clos`).
* ``rail-optimized`` — NIC *i* of every node on the leaf of rail *i*, in groups of
  ``nics_per_leaf`` nodes, joined by spines (:mod:`topology.fabric_clos`).
* ``multi-plane`` (alias ``dual-plane``) — ``planes`` rail-optimized fabrics side by side,
  each NIC split into one port per plane (:mod:`topology.fabric_clos`).
* ``superpod`` — a DGX SuperPOD compute fabric of scalable units with its published
  cabling, generation ``a100`` (20 nodes per SU, HDR) or ``h100`` (32 per SU, NDR)
  (:mod:`topology.fabric_superpod`).
* ``dragonfly`` — groups of routers, all-to-all inside a group, global cables between
  groups: HPE Slingshot systems (:mod:`topology.fabric_dragonfly`).

Cabling and latency conventions are in :mod:`topology.fabric_spec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.topology.fabric_clos import (
    build_fat_tree,
    build_multi_plane,
    build_rail_optimized,
    build_single_switch,
    build_three_tier,
)
from distsim_gpu.topology.fabric_dragonfly import build_dragonfly
from distsim_gpu.topology.fabric_spec import (
    DragonflyShape,
    Fabric,
    FabricSpec,
    MultiPlaneShape,
    SuperPodShape,
    ThreeTierShape,
)
from distsim_gpu.topology.fabric_superpod import build_superpod

__all__ = [
    "FABRIC_ALIASES",
    "FABRIC_KINDS",
    "DragonflyShape",
    "Fabric",
    "FabricSpec",
    "MultiPlaneShape",
    "SuperPodShape",
    "ThreeTierShape",
    "build_fabric",
]

Builder = Callable[..., Fabric]

_BUILDERS: Mapping[str, Builder] = MappingProxyType({
    "single-switch": build_single_switch,
    "fat-tree": build_fat_tree,
    "three-tier": build_three_tier,
    "rail-optimized": build_rail_optimized,
    "multi-plane": build_multi_plane,
    "superpod": build_superpod,
    "dragonfly": build_dragonfly,
})
#: Fabric kinds, canonical names.
FABRIC_KINDS = tuple(_BUILDERS)
#: Other accepted names, mapped to the canonical one.
FABRIC_ALIASES: Mapping[str, str] = MappingProxyType({
    "leaf-spine": "fat-tree", "leaf-spine-core": "three-tier", "dual-plane": "multi-plane"})


def build_fabric(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                 nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Switches and links joining ``nics`` (per node, in rail order) as ``spec`` says."""
    # The loader checks kinds; this guards programmatic use.
    kind = check_choice(spec.kind, FABRIC_KINDS, key="fabric.kind", what="fabric kind")
    return _BUILDERS[kind](spec, nics, nic_bandwidth_bytes_per_s=nic_bandwidth_bytes_per_s,
                           nic_latency_s=nic_latency_s)
