"""Fabrics: how the nodes' NICs are joined by network switches.

* ``single-switch`` — every NIC on one switch (``leaf0``).
* ``fat-tree`` (alias ``leaf-spine``) — a two-tier folded Clos.  NICs fill leaves in order,
  node-major (node 0's NICs by rail, then node 1's, …), ``nics_per_leaf`` per leaf; every
  leaf is joined to every spine.  With one leaf there are no spines.
* ``rail-optimized`` — NIC *i* of every node on the leaf of rail *i*, so same-rail traffic
  crosses one leaf switch; leaves are joined by spines so cross-rail traffic is possible.
  When there are more nodes than ``nics_per_leaf`` the nodes form groups of
  ``nics_per_leaf`` (a DGX SuperPOD "scalable unit" is 32 nodes); rail *i* of group *g* is
  leaf ``g * nics_per_node + i``, so with a single group leaf *i* is rail *i*.

Capacities.  A leaf has ``nics_per_leaf`` downlink ports of ``link_bandwidth`` (default:
the NIC bandwidth).  Its uplink capacity is ``nics_per_leaf * link_bandwidth /
oversubscription``, spread evenly over ``spines`` spines as one aggregate link per
leaf-spine pair (parallel cables of one pair share one set of flows, so one link models
them exactly for max-min sharing).  Default ``spines`` is the number of uplink ports,
``ceil(nics_per_leaf / oversubscription)``, so each leaf-spine link is one port.  Ports are
sized by design (``nics_per_leaf``), not by how many NICs a partly filled leaf holds —
that is how a real fabric is cabled.  A NIC-to-leaf link runs at the slower of the NIC and
the switch port.

Latencies (directed): a link *into* a switch carries the switch's port-to-port latency
(``switch_latency``) plus ``link_latency`` (cable); a NIC's links carry the NIC latency.
So NIC -> leaf -> NIC costs 2 NIC + 2 cable + 1 switch, and via a spine 3 switches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology.model import Device, Link

__all__ = ["FABRIC_ALIASES", "FABRIC_KINDS", "FabricSpec", "build_fabric"]

#: Fabric kinds, canonical names.
FABRIC_KINDS = ("single-switch", "fat-tree", "rail-optimized")
#: Other accepted names, mapped to the canonical one.
FABRIC_ALIASES = {"leaf-spine": "fat-tree"}


@dataclass(frozen=True, slots=True)
class FabricSpec:
    """A resolved fabric description (SI units).  ``spines`` None means "derive it"."""

    kind: str
    link_bandwidth_bytes_per_s: float
    link_latency_s: float
    switch_latency_s: float
    oversubscription: float = 1.0
    nics_per_leaf: int = 32
    spines: int | None = None


@dataclass(frozen=True, slots=True)
class Fabric:
    """What :func:`build_fabric` made: switches, links, and the tier sizes it chose."""

    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    leaves: int
    spines: int


def build_fabric(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                 nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Switches and links joining ``nics`` (per node, in rail order) as ``spec`` says."""
    # The loader checks kinds; this guards programmatic use.
    check_choice(spec.kind, FABRIC_KINDS, key="fabric.kind", what="fabric kind")
    if spec.kind == "single-switch":
        leaf_of = {nic: 0 for node in nics for nic in node}
        leaves = 1 if leaf_of else 0
    elif spec.kind == "fat-tree":
        ordered = [nic for node in nics for nic in node]
        leaf_of = {nic: k // spec.nics_per_leaf for k, nic in enumerate(ordered)}
        leaves = math.ceil(len(ordered) / spec.nics_per_leaf)
    else:  # rail-optimized
        rails = max((len(node) for node in nics), default=0)
        leaf_of = {nic: (n // spec.nics_per_leaf) * rails + rail
                   for n, node in enumerate(nics) for rail, nic in enumerate(node)}
        leaves = max(leaf_of.values(), default=-1) + 1

    devices = [Device(f"leaf{k}", "switch", None, k) for k in range(leaves)]
    links: list[Link] = []
    port = spec.link_bandwidth_bytes_per_s
    nic_port = min(nic_bandwidth_bytes_per_s, port)
    into_switch = spec.link_latency_s + spec.switch_latency_s
    for nic, k in leaf_of.items():
        leaf = f"leaf{k}"
        links.append(Link(nic, leaf, nic_port, nic_latency_s + into_switch, "network"))
        links.append(Link(leaf, nic, nic_port, spec.link_latency_s + nic_latency_s, "network"))

    spines = 0
    if leaves > 1:
        uplink_total = spec.nics_per_leaf * port / spec.oversubscription
        spines = (spec.spines if spec.spines is not None
                  else math.ceil(spec.nics_per_leaf / spec.oversubscription))
        if spines < 1:
            raise ConfigError(f"{leaves} leaves need at least one spine to join them, got "
                              f"spines={spines}", key="fabric.spines",
                              hint="leave spines out to derive it from nics_per_leaf")
        per_pair = uplink_total / spines
        devices.extend(Device(f"spine{s}", "switch", None, s) for s in range(spines))
        for k in range(leaves):
            for s in range(spines):
                links.append(Link(f"leaf{k}", f"spine{s}", per_pair, into_switch, "network"))
                links.append(Link(f"spine{s}", f"leaf{k}", per_pair, into_switch, "network"))
    return Fabric(tuple(devices), tuple(links), leaves, spines)
