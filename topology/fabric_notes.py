"""What a cluster's network settings cannot do on this cluster, said as notes.

A fabric's oversubscription thins the links from its leaves to its spines.  A cluster
whose NICs all fit on one leaf has no spine (``spines: 0`` in its resolved fabric): its
traffic never leaves that leaf, so an oversubscription set for a what-if changes nothing,
and a run that silently ignored it would read as "oversubscription costs nothing here".

A rail-optimized fabric whose nodes fill one rail group (no more nodes than a leaf has
ports) keeps each rail on one leaf, and NCCL keeps its traffic between nodes on the
rails (its rings, and PXN's sends), so the ratio acts only on sends between rails
without PXN (``communication.pxn: false``; :meth:`Topology.route`'s ``own_nics``).

A switch with more ports than any made (a two-tier tree of thousands of NICs, every
leaf cabled to every spine) is an extrapolation the run must say.

A NIC faster than the PCIe link it sits on (an 800 Gb/s NIC in a Gen5 x16 slot) carries
no more than that link: GPUDirect RDMA's bytes cross it.  "Twice the InfiniBand" then
buys a fraction of what its label says, which the run must say — where a NIC carries
anything: a run whose every job sits on one node sends nothing through its NICs, so the
slot caps nothing there and the note would blame a figure the run never used.

Routing knobs that act on one policy or one fabric only: ``qps_per_connection`` splits a
connection over queue pairs that ``ecmp`` hashes apart (static D-mod-K and the even
splits hash nothing), and ``valiant`` / ``ugal`` detour through a dragonfly's groups (a
tree has none: they are ``adaptive``'s even split there).  A what-if that set them on
another fabric would otherwise read as "this knob is worth nothing".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.units import format_bandwidth
from distsim_gpu.topology.model import Topology

__all__ = ["fabric_notes", "nic_slot_notes", "spans_nodes"]

_RAIL_KINDS = ("rail-optimized", "multi-plane", "dual-plane")
#: The most ports a fabric switch has today: NVIDIA's Quantum-X800 (Q3400), 144 ports of
#: 800 Gb/s; its Quantum-2 has 64 of 400 Gb/s.
MAX_SWITCH_PORTS = 144


def fabric_notes(topology: Topology, *, within: str = "",
                 nics_carry: bool = True) -> list[RunNote]:
    """Every note of this module for ``topology`` (its links read in one pass); ``within``
    is where the cluster's keys sit in the configuration the user wrote (``"cluster."`` in
    a scenario, ``""`` in a cluster file), so each note names the key as it is set;
    ``nics_carry``: whether the run sends anything between nodes (else no NIC's slot note)."""
    tally = _tally(topology)
    slots = (_slot_notes(tally, within, custom="links" in topology.config) if nics_carry
             else [])
    return [*_one_leaf_notes(topology, within), *_one_rail_group_notes(topology, within),
            *_radix_notes(topology, tally.switch_out, within), *slots,
            *_routing_notes(topology, within)]


def _routing_notes(topology: Topology, within: str) -> list[RunNote]:
    """``ignored`` notes for routing knobs this cluster's policy or fabric never reads."""
    fabric = topology.config.get("fabric")
    if isinstance(fabric, Mapping):
        policy, qps, kind = fabric.get("routing"), fabric.get("qps_per_connection", 1), \
            str(fabric.get("kind", ""))
        at = f"{within}fabric."
    else:  # a custom cluster: routing {policy, qps_per_connection, hash_seed}
        routing = topology.config.get("routing")
        if not isinstance(routing, Mapping):
            return []
        policy, qps, kind = routing.get("policy"), routing.get("qps_per_connection", 1), ""
        at = f"{within}routing."
    notes = []
    if int(qps or 1) > 1 and policy != "ecmp":
        notes.append(RunNote("ignored", f"qps_per_connection {qps} changes nothing under "
                             f"{policy} routing: only ecmp hashes a connection's queue pairs "
                             "onto different paths", f"{at}qps_per_connection"))
    if policy in ("valiant", "ugal") and kind != "dragonfly":
        where = f"a {kind} fabric" if kind else "a custom cluster"
        notes.append(RunNote("ignored", f"routing {policy} detours through a dragonfly's "
                             f"groups; {where} has none, so it is adaptive's even split over "
                             "the equal-cost paths",
                             f"{at}routing" if kind else f"{at}policy"))
    return notes


def spans_nodes(topology: Topology) -> bool:
    """Whether ``topology``'s GPUs (a job's, in a job view) sit on more than one node, so
    that its traffic can cross a NIC."""
    return len({topology.node_of(gpu) for gpu in topology.gpus}) > 1


@dataclass(slots=True)
class _LinkTally:
    """What the notes read of every link, gathered in one pass (a 10k-GPU cluster has
    about 100k links): each switch's outgoing bandwidth, each NIC's fastest network link
    and slowest PCIe link."""

    switch_out: dict[str, float] = field(default_factory=dict)
    nic_wire: dict[str, float] = field(default_factory=dict)
    nic_slot: dict[str, float] = field(default_factory=dict)


def _tally(topology: Topology) -> _LinkTally:
    kinds = {device.name: device.kind for device in topology.devices()}
    tally = _LinkTally()
    for link in topology.links():
        kind, rate = kinds.get(link.src), link.bandwidth_bytes_per_s
        if kind == "switch":
            tally.switch_out[link.src] = tally.switch_out.get(link.src, 0.0) + rate
        elif kind == "nic" and link.kind == "network":
            tally.nic_wire[link.src] = max(tally.nic_wire.get(link.src, 0.0), rate)
        elif kind == "nic" and link.kind == "pcie":
            tally.nic_slot[link.src] = min(tally.nic_slot.get(link.src, math.inf), rate)
    return tally


def _one_leaf_notes(topology: Topology, within: str) -> list[RunNote]:
    """An ``ignored`` note when ``topology``'s fabric is oversubscribed on one leaf."""
    fabric = topology.config.get("fabric")
    if not isinstance(fabric, Mapping) or fabric.get("spines", 1) != 0:
        return []
    ratio = float(fabric.get("oversubscription", 1.0) or 1.0)
    if ratio <= 1.0:
        return []
    nics = sum(1 for device in topology.devices() if device.kind == "nic")
    return [RunNote("ignored", f"oversubscription {ratio:g} changes nothing: the cluster's "
                    f"{nics} NICs fit on one leaf (nics_per_leaf {fabric.get('nics_per_leaf')})"
                    f", so no traffic reaches a spine; set {within}fabric.nics_per_leaf below "
                    f"{nics} for the what-if", f"{within}fabric.oversubscription")]


def _one_rail_group_notes(topology: Topology, within: str) -> list[RunNote]:
    """An ``ignored`` note when a rail-optimized fabric's nodes fill one rail group: each
    rail is one leaf, so only traffic between rails climbs to the oversubscribed spines."""
    fabric = topology.config.get("fabric")
    if not isinstance(fabric, Mapping) or fabric.get("kind") not in _RAIL_KINDS:
        return []
    ratio = float(fabric.get("oversubscription", 1.0) or 1.0)
    per_leaf = int(fabric.get("nics_per_leaf", 0) or 0)
    if ratio <= 1.0 or not 0 < topology.num_nodes <= per_leaf:
        return []
    return [RunNote("ignored", f"oversubscription {ratio:g} acts only between rails: the "
                    f"cluster's {topology.num_nodes} nodes fill one rail group (nics_per_leaf "
                    f"{per_leaf}), so each rail is one leaf, and NCCL keeps its traffic on "
                    "the rails (rings, PXN's sends); only sends between rails without PXN "
                    f"(communication.pxn false) reach a spine; set {within}fabric.nics_per_leaf "
                    f"below {topology.num_nodes} for the what-if",
                    f"{within}fabric.oversubscription")]


def _radix_notes(topology: Topology, switch_out: dict[str, float],
                 within: str) -> list[RunNote]:
    """An ``extrapolated`` note when a fabric switch has more ports (its links' bandwidth,
    ``switch_out``, over a port's) than any switch sold: a two-tier tree of thousands of
    NICs joins every leaf to every spine, which real clusters of that size do with a third
    tier."""
    fabric = topology.config.get("fabric")
    port = float(fabric.get("link_bandwidth", 0.0) or 0.0) if isinstance(fabric, Mapping) \
        else 0.0
    if port <= 0 or not switch_out:
        return []
    widest = max(switch_out, key=switch_out.__getitem__)
    ports = round(switch_out[widest] / port)
    if ports <= MAX_SWITCH_PORTS:
        return []
    return [RunNote("extrapolated", f"switch {widest} has {ports} ports of "
                    f"{format_bandwidth(port)}, more than any switch made "
                    f"({MAX_SWITCH_PORTS}: NVIDIA Quantum-X800); a cluster this size adds a "
                    f"tier, e.g. {within}fabric.kind three-tier or superpod",
                    f"{within}fabric.kind")]


def nic_slot_notes(topology: Topology) -> list[RunNote]:
    """An ``ignored`` note when NICs are faster than the PCIe links they sit on: GPUDirect
    RDMA's bytes cross that link, so the NIC's extra speed never carries traffic (an
    800 Gb/s NIC in a Gen5 x16 slot runs at the slot's 63 GB/s)."""
    return _slot_notes(_tally(topology), "", custom="links" in topology.config)


def _slot_notes(tally: _LinkTally, within: str, *, custom: bool = False) -> list[RunNote]:
    """``custom``: the cluster is written out link by link, so the note names its links
    (it has no ``pcie.bandwidth`` or ``nic.bandwidth`` key to set)."""
    capped: dict[tuple[float, float], int] = {}
    for nic, rate in tally.nic_wire.items():
        slot = tally.nic_slot.get(nic, math.inf)
        if rate > slot:
            capped[(rate, slot)] = capped.get((rate, slot), 0) + 1
    setting = ("the bandwidth of those NICs' pcie links" if custom
               else f"{within}pcie.bandwidth")
    return [RunNote("ignored", f"{count} NIC{'s' if count > 1 else ''} of "
                    f"{format_bandwidth(rate)} sit{'' if count > 1 else 's'} on PCIe links "
                    f"of {format_bandwidth(pcie)}: GPUDirect RDMA crosses that link, so no "
                    f"NIC carries more than {format_bandwidth(pcie)}; raise {setting} (PCIe "
                    "Gen6 x16: 126 GB/s) for the what-if",
                    f"{within}links" if custom else f"{within}nic.bandwidth")
            for (rate, pcie), count in sorted(capped.items())]
