"""Fabrics: how the nodes' NICs are joined by network switches — one registry of kinds.

A fabric kind (``fabric.kind``) is one :class:`FabricKind` entry in :data:`FABRICS`: its
name and doc line, the builder that cables it, the YAML keys it takes besides
:data:`COMMON_KEYS`, the parser of its shape record (:mod:`topology.fabric_spec`), how it
defaults its port bandwidth and whether it has a leaf tier.  The cluster loader, the
builder and the error messages read the table and nothing else, so a new kind is one
module with its builder (and shape parser) plus one :func:`register_fabric` call.

Built-in kinds: see :data:`FABRICS` (each entry's ``doc``); the tree kinds are built in
:mod:`topology.fabric_clos`, the SuperPOD in :mod:`topology.fabric_superpod`, the
dragonfly in :mod:`topology.fabric_dragonfly`.  Cabling and latency conventions are in
:mod:`topology.fabric_spec`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.topology.fabric_clos import (
    build_fat_tree,
    build_multi_plane,
    build_rail_optimized,
    build_single_switch,
    build_three_tier,
    multi_plane_port,
    parse_multi_plane,
    parse_three_tier,
)
from distsim_gpu.topology.fabric_dragonfly import build_dragonfly, parse_dragonfly
from distsim_gpu.topology.fabric_spec import (
    DragonflyShape,
    Fabric,
    FabricSpec,
    MultiPlaneShape,
    SuperPodShape,
    ThreeTierShape,
)
from distsim_gpu.topology.fabric_superpod import build_superpod, parse_superpod, superpod_port
from distsim_gpu.topology.presets import NodePreset

__all__ = [
    "COMMON_KEYS",
    "FABRICS",
    "FABRIC_ALIASES",
    "FABRIC_KINDS",
    "DragonflyShape",
    "Fabric",
    "FabricBuilder",
    "FabricKind",
    "FabricSpec",
    "MultiPlaneShape",
    "SuperPodShape",
    "ThreeTierShape",
    "build_fabric",
    "fabric_aliases",
    "fabric_kind",
    "register_fabric",
    "unregister_fabric",
]


class FabricBuilder(Protocol):
    """Switches and links joining ``nics`` (per node, in rail order) as ``spec`` says."""

    def __call__(self, spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                 nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric: ...


#: Reads a kind's shape record from the ``fabric`` mapping (keys already checked), given
#: the node preset (whose defaults a kind may take) and the source file for errors.
ShapeParser = Callable[[Mapping[Any, Any], NodePreset, str | None], Any]
#: A port's bandwidth unless ``link_bandwidth`` is given, from the shape and the NIC's.
PortDefault = Callable[[Any, float], float]


def _no_shape(mapping: Mapping[Any, Any], preset: NodePreset, source: str | None) -> None:
    return None


def _nic_port(shape: object, nic_bandwidth_bytes_per_s: float) -> float:
    return nic_bandwidth_bytes_per_s


#: Keys every kind takes: its port figures, how it routes (:mod:`topology.routing`) and
#: whether its switches aggregate in the network (``sharp``).
COMMON_KEYS = ("kind", "link_bandwidth", "link_latency", "switch_latency", "technology",
               "routing", "qps_per_connection", "hash_seed", "sharp")
#: The leaf tier's keys of the two-tier kinds (read into :class:`FabricSpec` itself).
_LEAF_TIER = ("oversubscription", "nics_per_leaf", "spines")


@dataclass(frozen=True, slots=True)
class FabricKind:
    """One fabric kind: what it is called, which keys it takes, how it is read and built.

    ``keys`` are the kind's own YAML keys, after :data:`COMMON_KEYS`.  ``leaf_ratio_key``
    names the key of the leaf tier's oversubscription for the tree kinds (whose
    ``nics_per_leaf`` and ``spines`` then fill :class:`FabricSpec`); None: no leaf tier.
    ``tiered``: whether its switches stand in tiers above the NICs; a dragonfly's routers
    are all peers, a router without NICs is no higher than one with them.
    """

    name: str
    doc: str
    build: FabricBuilder
    keys: tuple[str, ...] = ()
    parse_shape: ShapeParser = _no_shape
    port_default: PortDefault = _nic_port
    leaf_ratio_key: str | None = None
    aliases: tuple[str, ...] = ()
    tiered: bool = True

    @property
    def allowed_keys(self) -> tuple[str, ...]:
        """Every key a ``fabric`` mapping of this kind may hold."""
        return (*COMMON_KEYS, *self.keys)


_REGISTRY: dict[str, FabricKind] = {}
#: Fabric kinds by canonical name, in registration order (read-only view).
FABRICS: Mapping[str, FabricKind] = MappingProxyType(_REGISTRY)


def register_fabric(kind: FabricKind) -> FabricKind:
    """Add ``kind`` to :data:`FABRICS`; its name and aliases must be new."""
    taken = set(_REGISTRY) | set(fabric_aliases())
    clash = [name for name in (kind.name, *kind.aliases) if name in taken]
    if clash:
        raise ValueError(f"fabric kind {clash[0]!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def unregister_fabric(name: str) -> None:
    """Remove the kind ``name`` (a test's toy kind, say) from :data:`FABRICS`."""
    del _REGISTRY[name]


def fabric_aliases() -> dict[str, str]:
    """Other accepted names, mapped to the canonical one (a fresh dict)."""
    return {alias: kind.name for kind in _REGISTRY.values() for alias in kind.aliases}


def fabric_kind(value: object, *, key: str, source: str | None = None) -> FabricKind:
    """The registered kind named ``value`` (canonical or alias); an error naming ``key``
    with the closest name otherwise."""
    aliases = fabric_aliases()
    name = check_choice(value, (*_REGISTRY, *aliases), key=key, source=source,
                        what="fabric kind")
    return _REGISTRY[aliases.get(name, name)]


def build_fabric(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                 nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Switches and links joining ``nics`` (per node, in rail order) as ``spec`` says."""
    # The loader checks kinds; this guards programmatic use (canonical names only).
    name = check_choice(spec.kind, tuple(_REGISTRY), key="fabric.kind", what="fabric kind")
    return _REGISTRY[name].build(spec, nics, nic_bandwidth_bytes_per_s=nic_bandwidth_bytes_per_s,
                                 nic_latency_s=nic_latency_s)


for _kind in (
    FabricKind("single-switch", "every NIC on one switch", build_single_switch),
    FabricKind("fat-tree", "a two-tier folded Clos, leaves filled node-major",
               build_fat_tree, _LEAF_TIER, leaf_ratio_key="oversubscription",
               aliases=("leaf-spine",)),
    FabricKind("three-tier", "leaf / spine / core: pods of leaves and spines joined by core "
               "planes", build_three_tier,
               ("nics_per_leaf", "leaf_oversubscription", "spine_oversubscription",
                "leaves_per_pod", "spines_per_pod", "cores_per_plane"),
               parse_three_tier, leaf_ratio_key="leaf_oversubscription",
               aliases=("leaf-spine-core",)),
    FabricKind("rail-optimized", "NIC i of every node on the leaf of rail i, in groups of "
               "nics_per_leaf nodes, joined by spines", build_rail_optimized, _LEAF_TIER,
               leaf_ratio_key="oversubscription"),
    FabricKind("multi-plane", "planes rail-optimized fabrics side by side, each NIC split "
               "into one port per plane", build_multi_plane, (*_LEAF_TIER, "planes"),
               parse_multi_plane, multi_plane_port, leaf_ratio_key="oversubscription",
               aliases=("dual-plane",)),
    FabricKind("superpod", "a DGX SuperPOD compute fabric of scalable units with its "
               "published cabling (generation a100 or h100)", build_superpod,
               ("generation",), parse_superpod, superpod_port),
    FabricKind("dragonfly", "groups of routers, all-to-all inside a group, global cables "
               "between groups (HPE Slingshot)", build_dragonfly,
               ("groups", "routers_per_group", "nics_per_router", "global_links_per_router",
                "local_link_bandwidth", "global_link_bandwidth", "nic_placement"),
               parse_dragonfly, tiered=False),
):
    register_fabric(_kind)
del _kind

#: The built-in fabric kinds, canonical names (:data:`FABRICS` holds any registered since).
FABRIC_KINDS = tuple(_REGISTRY)
#: The built-in kinds' other accepted names, mapped to the canonical one.
FABRIC_ALIASES: Mapping[str, str] = MappingProxyType(fabric_aliases())
