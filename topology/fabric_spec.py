"""What a fabric is asked to be, what was built, and the cabling conventions every fabric shares.

A :class:`FabricSpec` is a resolved fabric description in SI units: the kind, the port
figures every kind has (switch port bandwidth, cable and switch latency), the leaf-tier
figures of the tree kinds (``oversubscription``, ``nics_per_leaf``, ``spines``) and, for
the kinds that need more, one shape record (:class:`ThreeTierShape`,
:class:`MultiPlaneShape`, :class:`SuperPodShape`, :class:`DragonflyShape`).  A builder
returns a :class:`Fabric`: its switches, its directed links and ``config``, the figures it
derived (``spines: 32``), which the cluster records so the same fabric can be built again.

Cabling conventions (shared so that every kind charges a hop the same way):

* a cable is full duplex: two directed links, each with the one-direction bandwidth;
* a link *into* a switch carries the cable latency plus the switch's port-to-port latency;
  a link into a NIC carries the cable latency plus the NIC's latency, and a NIC's link out
  the NIC latency too.  So NIC -> leaf -> NIC costs 2 NIC + 2 cable + 1 switch;
* parallel cables between the same two switches stand as one link with their summed
  bandwidth: under max-min sharing the flows crossing a bundle share it as they would share
  its cables when spread evenly (what adaptive routing and D-mod-K over a bundle do), and
  one link keeps the graph small.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from distsim_gpu.topology.model import Device, Link

__all__ = [
    "DragonflyShape",
    "Fabric",
    "FabricSpec",
    "MultiPlaneShape",
    "SuperPodShape",
    "ThreeTierShape",
    "attach_nic",
    "cable",
    "switches",
]


@dataclass(frozen=True, slots=True)
class ThreeTierShape:
    """Pods of leaves and spines, joined by a core tier (see :mod:`topology.fabric_clos`).

    ``None`` means "derive it": ``leaves_per_pod`` from ``nics_per_leaf`` (a spine with as
    many down ports as a leaf), ``spines_per_pod`` from the leaf's uplink ports,
    ``cores_per_plane`` from the spine's uplink ports.
    """

    spine_oversubscription: float = 1.0
    leaves_per_pod: int | None = None
    spines_per_pod: int | None = None
    cores_per_plane: int | None = None


@dataclass(frozen=True, slots=True)
class MultiPlaneShape:
    """``planes`` identical rail-optimized fabrics; each NIC has one port on each."""

    planes: int = 2


@dataclass(frozen=True, slots=True)
class SuperPodShape:
    """A DGX SuperPOD compute fabric of one generation (``a100`` or ``h100``)."""

    generation: str


@dataclass(frozen=True, slots=True)
class DragonflyShape:
    """Groups of routers, all-to-all inside a group, global cables between groups.

    ``groups`` None means "as many as the NICs need"; link bandwidths None mean the
    fabric's port bandwidth; ``nic_placement`` is ``rails`` or ``nodes``
    (:mod:`topology.fabric_dragonfly`).
    """

    groups: int | None = None
    routers_per_group: int = 32
    nics_per_router: int = 16
    global_links_per_router: int = 17
    local_link_bandwidth_bytes_per_s: float | None = None
    global_link_bandwidth_bytes_per_s: float | None = None
    nic_placement: str = "rails"


@dataclass(frozen=True, slots=True)
class FabricSpec:
    """A resolved fabric description (SI units).  ``spines`` None means "derive it".

    ``oversubscription``, ``nics_per_leaf`` and ``spines`` describe the leaf tier of the
    tree kinds (for ``multi-plane``, of each plane); ``shape`` holds the figures of the
    kinds that need more: the record its kind's shape parser made (a built-in one below,
    or a registered kind's own), which only that kind's builder reads.
    """

    kind: str
    link_bandwidth_bytes_per_s: float
    link_latency_s: float
    switch_latency_s: float
    oversubscription: float = 1.0
    nics_per_leaf: int = 32
    spines: int | None = None
    shape: object = None


@dataclass(frozen=True, slots=True)
class Fabric:
    """What a builder made: switches, directed links, and the figures it derived
    (``config``: fabric keys and values, e.g. ``{"spines": 32}``)."""

    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    config: Mapping[str, Any] = field(default_factory=dict)


def switches(names: Iterable[str]) -> list[Device]:
    """Fabric switches (node None), indexed in the order given."""
    return [Device(name, "switch", None, i) for i, name in enumerate(names)]


def cable(a: str, b: str, bandwidth_bytes_per_s: float, spec: FabricSpec, *,
          cost: int = 1) -> tuple[Link, Link]:
    """A switch-to-switch cable (or bundle): both directions enter a switch.  ``cost`` is
    the hops a shortest-path search counts for it (:class:`~topology.model.Link`)."""
    latency = spec.link_latency_s + spec.switch_latency_s
    return (Link(a, b, bandwidth_bytes_per_s, latency, "network", cost),
            Link(b, a, bandwidth_bytes_per_s, latency, "network", cost))


def attach_nic(nic: str, switch: str, bandwidth_bytes_per_s: float, nic_latency_s: float,
               spec: FabricSpec) -> tuple[Link, Link]:
    """A NIC port cabled to a switch port (the port bandwidth given: the slower end)."""
    return (Link(nic, switch, bandwidth_bytes_per_s,
                 nic_latency_s + spec.link_latency_s + spec.switch_latency_s, "network"),
            Link(switch, nic, bandwidth_bytes_per_s, spec.link_latency_s + nic_latency_s,
                 "network"))
