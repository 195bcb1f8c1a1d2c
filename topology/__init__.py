"""topology — the physical cluster: GPUs, NVLink/NVSwitch, PCIe, NICs, switches, routes.

A :class:`Topology` is a directed graph of :class:`Device` s and full-duplex
:class:`Link` s (two directed edges per cable) with :class:`Route` s between GPUs, chosen
the way NCCL and the fabric's switches would.  :func:`build_cluster` / :func:`load_cluster`
make one from a node preset x node count x fabric (:class:`FabricSpec`: single switch,
two- and three-tier fat trees, rail-optimized, multi-plane, DGX SuperPOD, dragonfly; see
:mod:`topology.fabrics`) routed by a :class:`RoutingSpec` (D-mod-K, adaptive, ECMP,
spraying; see :mod:`topology.routing`) or from a custom device list; :func:`apply_overrides` applies
``--set`` style edits; :func:`apply_faults` takes links, NICs and switches down or degrades
them (:class:`Fault`, :mod:`topology.faults`).  Knows nothing of collectives; depends
only on ``simcore``.
"""

from distsim_gpu.topology.cluster import apply_overrides, build_cluster, list_presets, load_cluster
from distsim_gpu.topology.fabrics import FabricSpec
from distsim_gpu.topology.faults import Fault, apply_faults
from distsim_gpu.topology.model import Device, Link, Route, Topology
from distsim_gpu.topology.routing import RoutingSpec

__all__ = [
    "Device",
    "FabricSpec",
    "Fault",
    "Link",
    "Route",
    "RoutingSpec",
    "Topology",
    "apply_faults",
    "apply_overrides",
    "build_cluster",
    "list_presets",
    "load_cluster",
]
