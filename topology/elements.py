"""The parts a cluster graph is made of: devices, directed links, and routes between GPUs.

A :class:`Device` is one GPU, NVSwitch, PCIe switch, CPU, NIC or fabric switch; a
:class:`Link` one direction of a cable (full duplex in hardware: a cable is two links,
:func:`full_duplex`); a :class:`Route` the links one GPU's bytes cross to reach another,
with the fraction of the bytes on each.  Records only: the graph that holds them and
chooses routes is :class:`topology.model.Topology`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from distsim_gpu.simcore.errors import TopologyError, closest

__all__ = [
    "DEVICE_KINDS",
    "LINK_KINDS",
    "TRANSPORTS",
    "Device",
    "Link",
    "Route",
    "full_duplex",
]

#: Device kinds. ``switch`` is a network (fabric) switch; the others live inside a node.
DEVICE_KINDS = ("gpu", "nvswitch", "pcie_switch", "cpu", "nic", "switch")
#: Link kinds. ``cpu`` is the inter-socket link (xGMI / UPI) between CPU root complexes.
LINK_KINDS = ("nvlink", "pcie", "network", "cpu")
#: NCCL transport classes a route can have.
TRANSPORTS = ("local", "nvlink", "pcie", "net")


@dataclass(frozen=True, slots=True)
class Device:
    """One device of the cluster.

    ``name`` is unique (``"n0.gpu3"``, ``"n1.nic2"``, ``"leaf0"``); ``node`` is the node
    index of an in-node device and ``None`` for a fabric switch; ``index`` numbers the
    device within its node and kind (GPU 0..7, NIC 0..7 = rail) or within its fabric tier.
    ``sharp`` marks a switch that reduces data in flight (NVIDIA SHARP): an NVSwitch with
    NVLink SHARP (multimem, HGX H100/H200) or an InfiniBand switch with SHARP aggregation;
    collectives use it for the NVLS and CollNet algorithms.
    """

    name: str
    kind: str
    node: int | None
    index: int
    sharp: bool = False

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise TopologyError(f"device {self.name!r} has unknown kind {self.kind!r}",
                                hint=closest(self.kind, DEVICE_KINDS))
        if self.sharp and self.kind not in ("nvswitch", "switch"):
            raise TopologyError(f"device {self.name!r} is a {self.kind}: only switches "
                                f"(nvswitch, switch) can reduce in the network (sharp)")


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a link: ``bandwidth_bytes_per_s`` nominal, ``latency_s`` per crossing.

    ``cost`` is what a shortest-path search counts for the link (1: one hop).  A fabric
    raises it where fewest hops is not what its routing calls minimal: a dragonfly's global
    cables count 3, so that a minimal route takes one of them at most (local, global,
    local) rather than hopping through a third group in as many hops.
    """

    src: str
    dst: str
    bandwidth_bytes_per_s: float
    latency_s: float
    kind: str
    cost: int = 1

    def __post_init__(self) -> None:
        where = f"link {self.src} -> {self.dst}"
        if self.kind not in LINK_KINDS:
            raise TopologyError(f"{where} has unknown kind {self.kind!r}",
                                hint=closest(self.kind, LINK_KINDS))
        if self.src == self.dst:
            raise TopologyError(f"{where} joins a device to itself")
        if not (math.isfinite(self.bandwidth_bytes_per_s) and self.bandwidth_bytes_per_s > 0):
            raise TopologyError(f"{where}: bandwidth must be positive and finite, "
                                f"got {self.bandwidth_bytes_per_s!r} B/s")
        if not (math.isfinite(self.latency_s) and self.latency_s >= 0):
            raise TopologyError(f"{where}: latency must be zero or positive and finite, "
                                f"got {self.latency_s!r} s")
        if type(self.cost) is not int or self.cost < 1:
            raise TopologyError(f"{where}: routing cost must be a whole number >= 1, "
                                f"got {self.cost!r}")

    @property
    def id(self) -> tuple[str, str]:
        """The directed link id ``(src, dst)`` the flow engine keys capacities by."""
        return (self.src, self.dst)


@dataclass(frozen=True, slots=True)
class Route:
    """The directed links from ``src`` to ``dst`` in hop order, the fraction of the bytes
    on each, and the latency of the last byte.

    ``weights[i]`` is the fraction of the route's bytes that crosses ``links[i]``: 1.0 on a
    single path (the default), fractions where the fabric splits the bytes over several
    paths (a multipath route; the fractions of one hop add up to 1).  A consumer that loads
    links must weigh each by its fraction.  ``latency_s`` is the slowest path's latency
    (the last byte waits for it; equal-cost paths have equal hop counts anyway), the plain
    sum along a single path.  ``transport`` is NCCL's transport class: ``"local"`` (same
    GPU), ``"net"`` if the route leaves the node, else ``"nvlink"`` if every link is
    NVLink, else ``"pcie"``.
    """

    src: str
    dst: str
    links: tuple[tuple[str, str], ...]
    latency_s: float
    transport: str
    weights: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if not self.weights:
            object.__setattr__(self, "weights", (1.0,) * len(self.links))
        elif len(self.weights) != len(self.links):
            raise TopologyError(f"route {self.src} -> {self.dst}: {len(self.weights)} weights "
                                f"for {len(self.links)} links")

    @property
    def multipath(self) -> bool:
        """Whether the bytes split over several paths (some link carries a fraction)."""
        return any(w != 1.0 for w in self.weights)

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices along the route, ``src`` and ``dst`` included, in hop order (a
        multipath route lists each device once, level by level)."""
        if not self.links:
            return (self.src,)
        return tuple(dict.fromkeys((self.links[0][0], *(dst for _, dst in self.links))))


def full_duplex(a: str, b: str, bandwidth_bytes_per_s: float, latency_s: float,
                kind: str) -> tuple[Link, Link]:
    """A full-duplex cable as its two directed links, each with the full bandwidth."""
    return (Link(a, b, bandwidth_bytes_per_s, latency_s, kind),
            Link(b, a, bandwidth_bytes_per_s, latency_s, kind))
