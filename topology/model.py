"""The physical cluster as a graph: devices, directed links, and routes between GPUs.

A :class:`Topology` is a :class:`networkx.DiGraph` whose nodes are :class:`Device` names
(node attribute ``device``) and whose edges are directed :class:`Link` s (edge attribute
``link``).  Links are full duplex in hardware, so a cable is two directed edges, each with
the nominal one-direction bandwidth: the flow engine shares each direction separately.

A :class:`Route` is how one GPU's bytes reach another GPU: the directed link ids they
cross and the fraction of the bytes on each (1.0 along a single path; fractions where the
fabric splits them over several paths).  Routing follows what NCCL does on real machines:

* same GPU: nothing to cross (transport ``"local"``);
* same node: over NVLink/NVSwitch when there is an NVLink path, else up the PCIe tree
  (through the CPU root complex and the inter-socket link when the tree requires it); in a
  mesh node (GPUs cabled to each other, no NVSwitch) over the direct link, else through one
  intermediate GPU over NVLink, as NCCL's P2P does, and only then over PCIe;
* different nodes: GPU -> PCIe switch -> NIC (GPUDirect RDMA) -> fabric -> NIC -> PCIe
  switch -> GPU.  Where the fabric offers several shortest paths (the spines of a fat
  tree) the fabric's routing policy (:mod:`topology.routing`, :attr:`Topology.routing`)
  decides: one path by destination (InfiniBand D-mod-K), one hashed path per queue pair
  (Ethernet ECMP), or an even split over all of them (adaptive routing, packet spraying).

Routes are found by breadth-first search restricted to the devices that may carry them
(in-node devices inside a node, fabric switches between nodes; GPUs and NICs are never
transit hops), counting each link's routing cost where a fabric sets one (``Link.cost``:
a dragonfly's global cables), and are cached, so the thousands of routes a collective asks for on a
1024-GPU cluster cost a few dictionary look-ups each after the first.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import index as as_index
from typing import Any

import networkx as nx
from distsim_gpu.simcore.errors import ConfigError, TopologyError, closest
from distsim_gpu.topology.routing import (
    END_TO_END_POLICIES,
    Connection,
    RoutingSpec,
    SwitchGroups,
    Weighted,
    spread,
)

__all__ = [
    "DEVICE_KINDS",
    "LINK_KINDS",
    "TRANSPORTS",
    "Device",
    "Link",
    "Route",
    "Topology",
    "full_duplex",
]

#: Device kinds. ``switch`` is a network (fabric) switch; the others live inside a node.
DEVICE_KINDS = ("gpu", "nvswitch", "pcie_switch", "cpu", "nic", "switch")
#: Link kinds. ``cpu`` is the inter-socket link (xGMI / UPI) between CPU root complexes.
LINK_KINDS = ("nvlink", "pcie", "network", "cpu")
#: NCCL transport classes a route can have.
TRANSPORTS = ("local", "nvlink", "pcie", "net")

# Devices that terminate traffic; a route never passes *through* one of them.
_ENDPOINT_KINDS = frozenset({"gpu", "nic"})
# Routing cost of one hop where degraded links are avoided: above any path's count of
# degraded links, so fewer hops always wins and degraded links only break ties.
_AVOID_SCALE = 1 << 16


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


def _check_rail(rail: object) -> int:
    """``rail`` as a plain int >= 0 (numpy integers accepted; bools and floats are not)."""
    if not isinstance(rail, bool):
        try:
            value = as_index(rail)
        except TypeError:
            pass
        else:
            if value >= 0:
                return value
    raise ConfigError(f"rail must be a non-negative integer, got {rail!r}")


class _TwinDistances(Mapping[str, int]):
    """A distance map that is another's but at a few devices (None there: unreachable).

    :meth:`Topology._dist_map` shares one search among destinations entered from the same
    devices, so the maps of a fabric's 512 leaves cost one search and 511 small patches."""

    __slots__ = ("_base", "_own")

    def __init__(self, base: Mapping[str, int], own: dict[str, int | None]) -> None:
        self._base, self._own = base, own

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._own:
            found = self._own[key]
            return default if found is None else found
        return self._base.get(key, default)

    def __getitem__(self, key: str) -> int:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        yield from (k for k in self._base if k not in self._own)
        yield from (k for k, d in self._own.items() if d is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class Topology:
    """A networkx DiGraph of Devices (node attr 'device') and directed Links (edge attr 'link').

    Built once, then read-only: the graph is frozen (``nx.freeze``) because routes are
    cached against it.  ``gpus`` is the global rank order (node 0's GPUs by index, then
    node 1's, …); ``config`` the fully resolved, JSON-serialisable configuration the
    cluster was built from, so a report can reproduce the run; ``routing`` the fabric's
    routing policy (default: ECMP with one queue pair, as an unmanaged Ethernet fabric).
    """

    def __init__(self, name: str, devices: Iterable[Device], links: Iterable[Link], *,
                 config: Mapping[str, Any] | None = None,
                 routing: RoutingSpec | None = None,
                 avoid: Iterable[tuple[str, str]] = (),
                 lost_nics: Mapping[int, int] | None = None,
                 fault_note: str = "",
                 destination_indices: Mapping[str, int] | None = None) -> None:
        self.name = name
        self.config: dict[str, Any] = dict(config) if config is not None else {}
        self.routing: RoutingSpec = routing if routing is not None else RoutingSpec()
        graph = nx.DiGraph(name=name)
        devs: dict[str, Device] = {}
        for device in devices:
            if device.name in devs:
                raise TopologyError(f"duplicate device name {device.name!r}")
            devs[device.name] = device
            graph.add_node(device.name, device=device)
        succ: dict[str, list[tuple[str, Link]]] = {name_: [] for name_ in devs}
        pred: dict[str, list[tuple[str, Link]]] = {name_: [] for name_ in devs}
        by_id: dict[tuple[str, str], Link] = {}
        for link in links:
            for end in (link.src, link.dst):
                if end not in devs:
                    raise TopologyError(f"link {link.src} -> {link.dst} names unknown device "
                                        f"{end!r}", hint=closest(end, devs))
            if link.id in by_id:
                raise TopologyError(f"duplicate link {link.src} -> {link.dst}")
            by_id[link.id] = link
            graph.add_edge(link.src, link.dst, link=link)
            succ[link.src].append((link.dst, link))
            pred[link.dst].append((link.src, link))
        self.graph: nx.DiGraph = nx.freeze(graph)
        self._devices = devs
        self._links = by_id
        # Some link counts more than one hop (a dragonfly's global cables): weighted search.
        self._costed = any(link.cost != 1 for link in by_id.values())
        self._grouped = self._costed  # costlier links join groups (a dragonfly)
        self._fault_state(avoid, lost_nics, fault_note)
        # Sorted adjacency: the search order, hence every tie-break, is independent of the
        # order the builder happened to add links in.
        self._succ = {k: tuple(sorted(v, key=lambda e: e[0])) for k, v in succ.items()}
        self._pred = {k: tuple(sorted(v, key=lambda e: e[0])) for k, v in pred.items()}

        def order(name_: str) -> tuple[bool, int, int, str]:
            d = devs[name_]
            return (d.node is None, d.node if d.node is not None else 0, d.index, name_)

        gpus = sorted((n for n, d in devs.items() if d.kind == "gpu"), key=order)
        self.gpus: tuple[str, ...] = tuple(gpus)
        self._rank = {gpu: rank for rank, gpu in enumerate(gpus)}
        self._cluster_rank = self._rank  # routing tie-breaks: the same in a job's view
        gpus_by_node: dict[int, list[str]] = {}
        nics_by_node: dict[int, list[str]] = {}
        for n in gpus:
            node = devs[n].node
            if node is not None:
                gpus_by_node.setdefault(node, []).append(n)
        for n in sorted((n for n, d in devs.items() if d.kind == "nic"), key=order):
            node = devs[n].node
            if node is not None:
                nics_by_node.setdefault(node, []).append(n)
        self._gpus_by_node = {k: tuple(v) for k, v in gpus_by_node.items()}
        self._nics_by_node = {k: tuple(v) for k, v in nics_by_node.items()}
        self._nic_by_index = {(devs[n].node, devs[n].index): n
                              for nics in self._nics_by_node.values() for n in nics}
        # Destination indices for D-mod-K, in fabric order as a subnet manager numbers
        # them: edge switch by edge switch in the order the fabric was built, each one's
        # NICs node-major (a fat tree: node-major; rail-optimized: a rail leaf's nodes
        # consecutive).  GPUs by rank (custom clusters whose fabric joins GPUs directly).
        built = {n: i for i, n in enumerate(devs)}

        def edge_switch(nic: str) -> int:
            return min((built[w] for w, _ in pred[nic] if devs[w].node is None),
                       default=len(built))

        fabric_order = sorted((n for nics in self._nics_by_node.values() for n in nics),
                              key=lambda n: (edge_switch(n), order(n)))
        self._dest_index = {n: i for i, n in enumerate(fabric_order)}
        self._dest_index.update(self._rank)
        if destination_indices is not None:
            # A fabric that lost devices keeps its numbering (addresses do not move).
            self._dest_index = {n: i for n, i in destination_indices.items() if n in devs}
        self.num_nodes: int = len({d.node for d in devs.values() if d.node is not None})

        # Caches (per instance: a Topology owns its routes, nothing is module-global).
        self._routes: dict[tuple[str, str, int | None], Route] = {}
        self._in_node_paths: dict[tuple[str, str, bool], tuple[str, ...] | None] = {}
        self._local_nics: dict[str, tuple[str, ...]] = {}
        self._local_rails: dict[str, tuple[int, ...]] = {}
        self._own_rails: dict[str, int | None] = {}
        self._dist_maps: dict[tuple[str, bool], Mapping[str, int]] = {}
        self._twin_targets: dict[tuple[frozenset[str], bool], str] = {}
        self._hops: dict[tuple[str, str, bool], tuple[str, ...]] = {}
        self._preds_in_fabric: dict[str, tuple[str, ...]] = {}
        self._transit_pred_maps: dict[bool, dict[str, tuple[str, ...]]] = {}
        self._sprays: dict[tuple[str, str, bool], Weighted | None] = {}
        self._groups: tuple[SwitchGroups | None] | None = None  # built at first use

    def _fault_state(self, avoid: Iterable[tuple[str, str]], lost_nics: Mapping[int, int] | None,
                     fault_note: str) -> None:
        """What faults left (:mod:`topology.faults`): links an adaptive policy steers around
        where an equal-cost path without them exists (degraded links), NICs lost per node
        (their rails re-map), and a line naming the faults for route errors."""
        self.avoided: frozenset[tuple[str, str]] = frozenset(avoid)
        self._lost_nics: dict[int, int] = dict(lost_nics or {})
        self.fault_note = fault_note
        # Converged adaptive routing avoids a degraded port when it has an equal choice:
        # routing costs become (hops, degraded links crossed) compared in that order.
        self._route_costs: dict[tuple[str, str], int] | None = None
        if self.avoided and self.routing.policy in END_TO_END_POLICIES:
            self._route_costs = {i: link.cost * _AVOID_SCALE + (i in self.avoided)
                                 for i, link in self._links.items()}
            self._costed = True

    def job_view(self, gpus: Sequence[str]) -> Topology:
        """The cluster as a job that owns ``gpus`` sees it: the same devices, links, routes
        (and route caches: a view costs nothing), with :attr:`gpus` and :meth:`rank_of`
        the job's — its GPUs in cluster order, ranked from 0 — so several jobs can share
        one fabric (:mod:`workloads.jobs`)."""
        for gpu in gpus:
            self._require_gpu(gpu)
        ordered = sorted(dict.fromkeys(gpus), key=self._cluster_rank.__getitem__)
        view = copy.copy(self)
        view.gpus = tuple(ordered)
        view._rank = {gpu: rank for rank, gpu in enumerate(ordered)}
        return view

    @property
    def destination_indices(self) -> Mapping[str, int]:
        """Each NIC's (and GPU's) index in fabric order, what D-mod-K divides."""
        return self._dest_index

    # ------------------------------------------------------------------ look-ups

    def __repr__(self) -> str:
        return (f"Topology({self.name!r}, {len(self.gpus)} GPUs, {self.num_nodes} nodes, "
                f"{len(self._devices)} devices, {len(self._links)} links)")

    def device(self, name: str) -> Device:
        """The device called ``name``; TopologyError naming the closest one if none is."""
        try:
            return self._devices[name]
        except KeyError:
            raise TopologyError(f"no device named {name!r} in {self.name!r}",
                                hint=closest(name, self._devices)) from None

    def link(self, src: str, dst: str) -> Link:
        """The directed link ``src -> dst``."""
        try:
            return self._links[(src, dst)]
        except KeyError:
            self.device(src)
            self.device(dst)
            raise TopologyError(f"no link {src} -> {dst} in {self.name!r}") from None

    def links(self) -> Iterator[Link]:
        """Every directed link, in the order the builder added them."""
        return iter(self._links.values())

    def devices(self) -> Iterator[Device]:
        """Every device, in the order the builder added them."""
        return iter(self._devices.values())

    def node_of(self, gpu: str) -> int:
        """The node index of an in-node device (a GPU, usually)."""
        node = self.device(gpu).node
        if node is None:
            raise TopologyError(f"{gpu!r} is a fabric device and belongs to no node")
        return node

    def rank_of(self, gpu: str) -> int:
        """The GPU's global rank: its position in :attr:`gpus`."""
        rank = self._rank.get(gpu)
        if rank is None:
            self._require_gpu(gpu)
            raise TopologyError(f"{gpu!r} has no rank")  # a GPU always has one
        return rank

    def gpus_on_node(self, node: int) -> tuple[str, ...]:
        """The GPUs of ``node`` by index (empty if the node has none)."""
        return self._gpus_by_node.get(node, ())

    def nics_on_node(self, node: int) -> tuple[str, ...]:
        """The NICs of ``node`` in rail order (by NIC index)."""
        return self._nics_by_node.get(node, ())

    def local_nics(self, gpu: str) -> tuple[str, ...]:
        """The NICs GPUDirect-RDMA-close to ``gpu``, ordered by index.

        Those behind the GPU's own PCIe switch; if none is, the nearest ones by hop count
        inside the node (e.g. across the CPU root complex).  Empty when the node has no NIC.
        """
        cached = self._local_nics.get(gpu)
        if cached is not None:
            return cached
        self._require_gpu(gpu)
        node = self.node_of(gpu)
        nics = set(self.nics_on_node(node))
        result: tuple[str, ...] = ()
        if nics:
            hops = self._in_node_hops(gpu, node)
            reachable = {n: hops[n] for n in nics if n in hops}
            if reachable:
                nearest = min(reachable.values())
                result = tuple(sorted((n for n, h in reachable.items() if h == nearest),
                                      key=lambda n: (self._devices[n].index, n)))
        self._local_nics[gpu] = result
        return result

    def local_rails(self, gpu: str) -> tuple[int, ...]:
        """The indices (rails) of :meth:`local_nics` (cached: collectives ask for them at
        every hop of every ring, over a million times for a 16,384-GPU iteration)."""
        cached = self._local_rails.get(gpu)
        if cached is None:
            cached = self._local_rails[gpu] = tuple(self._devices[nic].index
                                                    for nic in self.local_nics(gpu))
        return cached

    def own_rail(self, gpu: str) -> int | None:
        """The NIC rail a GPU sends point-to-point traffic on: its own nearby NIC (None
        without one).  GPUs that share nearby NICs (two GPUs and two NICs behind one PCIe
        switch) take one each, in index order, as NCCL assigns them, instead of all using
        the first.  Cached: every send of every collective plan asks (10,000 sends asked
        107,000 times, each scanning the node's GPUs)."""
        if gpu in self._own_rails:
            return self._own_rails[gpu]
        rails = self.local_rails(gpu)
        rail = None
        if rails:
            sharing = [g for g in self.gpus_on_node(self.node_of(gpu))
                       if self.local_rails(g) == rails]
            rail = rails[sharing.index(gpu) % len(rails)]
        self._own_rails[gpu] = rail
        return rail

    # ------------------------------------------------------------------ routing

    def route(self, src_gpu: str, dst_gpu: str, *, rail: int | None = None) -> Route:
        """The route from ``src_gpu`` to ``dst_gpu`` (see the module docstring for the rules).

        ``rail`` picks NIC ``rail % nics_per_node`` on both ends of an inter-node route;
        without it the source GPU's first local NIC and the same NIC index on the
        destination node are used.  Raises TopologyError naming both GPUs if no route exists.
        """
        if rail is not None and (type(rail) is not int or rail < 0):
            rail = _check_rail(rail)
        key = (src_gpu, dst_gpu, rail)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        self._require_gpu(src_gpu)
        self._require_gpu(dst_gpu)
        route = self._compute_route(src_gpu, dst_gpu, rail)
        self._routes[key] = route
        return route

    def _require_gpu(self, name: str) -> None:
        device = self.device(name)
        if device.kind != "gpu":
            raise TopologyError(f"{name!r} is a {device.kind}, not a GPU")

    def _compute_route(self, src: str, dst: str, rail: int | None) -> Route:
        if src == dst:
            return Route(src, dst, (), 0.0, "local")
        src_node = self._devices[src].node
        dst_node = self._devices[dst].node
        hops: Weighted | None = None
        if src_node is not None and src_node == dst_node:
            # NVLink first: an all-NVLink path beats a PCIe path of the same hop count.
            found = (self._in_node_path(src, dst, nvlink_only=True)
                     or self._nvlink_relay_path(src, dst)
                     or self._in_node_path(src, dst, nvlink_only=False))
            hops = dict.fromkeys(pairwise(found), 1.0) if found else None
        elif (src_node is not None and dst_node is not None
              and self.nics_on_node(src_node) and self.nics_on_node(dst_node)):
            hops = self._inter_node_hops(src, dst, src_node, dst_node, rail)
        if hops is None:
            # Custom clusters that are not shaped like nodes-with-NICs: the routing policy
            # over any shortest paths that do not transit a GPU.
            hops = self._across(src, dst, self._connection(src, dst, rail, dst),
                                fabric_only=False)
        if hops is None:
            raise TopologyError(f"GPU {src!r} cannot reach GPU {dst!r} in {self.name!r}"
                                + (f": {self.fault_note}" if self.fault_note else ""),
                                hint="check that every GPU is linked to the rest of the cluster")
        return self._make_route(src, dst, hops)

    def _make_route(self, src: str, dst: str, hops: Weighted) -> Route:
        ids = tuple(hops)
        weights = tuple(hops.values())
        links = [self._links[i] for i in ids]
        if all(w == 1.0 for w in weights):
            latency = sum(link.latency_s for link in links)
        else:
            # The last byte waits for the slowest path: the longest path through the
            # split, found in one pass because the links come in hop order.
            arrival = {src: 0.0}
            for link in links:
                at = arrival[link.src] + link.latency_s
                if at > arrival.get(link.dst, -1.0):
                    arrival[link.dst] = at
            latency = arrival[dst]
        src_node = self._devices[src].node
        if any(self._devices[d].node != src_node for _, d in ids):
            transport = "net"
        elif all(link.kind == "nvlink" for link in links):
            transport = "nvlink"
        else:
            transport = "pcie"
        return Route(src, dst, ids, latency, transport, weights)

    def _connection(self, src: str, dst: str, rail: int | None, dest: str) -> Connection:
        """The connection ``src -> dst`` on ``rail`` as the routing sees it; ``dest`` is the
        device whose fabric index D-mod-K divides (the destination NIC, or GPU)."""
        return Connection(src, dst, rail, self._dest_index.get(dest, 0))

    def node_legs(self, src_gpu: str, dst_gpu: str, *,
                  rail: int | None = None) -> tuple[tuple[str, str], ...] | None:
        """The links of :meth:`route` ``src_gpu -> dst_gpu`` that lie inside nodes (both
        ends in one node), found without walking the fabric: the whole route inside one
        node, else the legs GPU -> NIC and NIC -> GPU.  None where the route is not shaped
        like that (a cluster without nodes or NICs: ask :meth:`route`).  A question asked
        for every GPU pair of a 16,384-GPU job, where the fabric walk is the cost."""
        self._require_gpu(src_gpu)
        self._require_gpu(dst_gpu)
        src_node, dst_node = self._devices[src_gpu].node, self._devices[dst_gpu].node
        if src_gpu == dst_gpu or (src_node is not None and src_node == dst_node):
            return tuple(link for link in self.route(src_gpu, dst_gpu, rail=rail).links
                         if self.in_node(link))
        if (src_node is None or dst_node is None or not self.nics_on_node(src_node)
                or not self.nics_on_node(dst_node)):
            return None
        legs = self._node_legs(src_gpu, dst_gpu, src_node, dst_node, rail)
        return None if legs is None else (*pairwise(legs[0]), *pairwise(legs[2]))

    def in_node(self, link: tuple[str, str]) -> bool:
        """Whether both ends of ``link`` lie in one node (NVLink, PCIe, GPU -> NIC)."""
        node = self._devices[link[0]].node
        return node is not None and self._devices[link[1]].node == node

    def _node_legs(self, src: str, dst: str, src_node: int, dst_node: int,
                   rail: int | None) -> tuple[tuple[str, ...], str, tuple[str, ...], str] | None:
        """An inter-node route's paths GPU -> NIC and NIC -> GPU and its two NICs (source
        then destination: ``(up, src_nic, down, dst_nic)``), or None."""
        if rail is not None:
            src_nic = self._rail_nic(src, src_node, rail)
            dst_nic = self._rail_nic(dst, dst_node, rail)
        else:
            local = self.local_nics(src)
            if not local:
                return None
            src_nic = local[0]
            dst_nic = self._nic_by_index.get((dst_node, self._devices[src_nic].index), "")
            if not dst_nic:
                dst_local = self.local_nics(dst)
                if not dst_local:
                    return None
                dst_nic = dst_local[0]
        up = self._in_node_path(src, src_nic, nvlink_only=False)
        down = self._in_node_path(dst_nic, dst, nvlink_only=False)
        if up is None or down is None:
            return None
        return up, src_nic, down, dst_nic

    def _inter_node_hops(self, src: str, dst: str, src_node: int, dst_node: int,
                         rail: int | None) -> Weighted | None:
        legs = self._node_legs(src, dst, src_node, dst_node, rail)
        if legs is None:
            return None
        up, src_nic, down, dst_nic = legs
        across = self._across(src_nic, dst_nic, self._connection(src, dst, rail, dst_nic),
                              fabric_only=True)
        if across is None:
            return None
        return {**dict.fromkeys(pairwise(up), 1.0), **across,
                **dict.fromkeys(pairwise(down), 1.0)}

    def _rail_nic(self, gpu: str, node: int, rail: int) -> str:
        """The NIC of ``node`` that carries ``rail``: NIC ``rail % count``; where that NIC
        was lost (a fault), the GPU's nearest surviving NIC, as NCCL re-maps a channel
        whose NIC is gone to the next NIC by PCI distance."""
        nics = self.nics_on_node(node)
        lost = self._lost_nics.get(node, 0)
        if not lost:
            return nics[rail % len(nics)]
        nic = self._nic_by_index.get((node, rail % (len(nics) + lost)))
        if nic is None:
            local = self.local_nics(gpu)
            nic = local[0] if local else nics[rail % len(nics)]
        return nic

    def _across(self, start: str, target: str, conn: Connection, *,
                fabric_only: bool) -> Weighted | None:
        """The weighted links ``start -> target`` under the fabric's routing policy.

        With ``fabric_only`` (NIC to NIC) transit hops are fabric switches only.
        """
        last: Weighted = {}
        if fabric_only:
            if (start, target) in self._links:
                return {(start, target): 1.0}  # NICs cabled back to back
            preds = self._fabric_preds(target)
            if len(preds) == 1:
                # Every path to a single-homed NIC ends at its switch: route to the switch.
                # Next hops are then cached per (device, switch) — tens of switches rather
                # than thousands of NICs — which keeps 1024-GPU fabrics fast.
                last = {(preds[0], target): 1.0}
                target = preds[0]
        policy = self.routing.policy
        if policy in END_TO_END_POLICIES:
            # An even split depends on the two ends only: cache it per (start, target).
            key = (start, target, fabric_only)
            if key not in self._sprays:
                groups = self._switch_groups() if fabric_only else None
                self._sprays[key] = spread(self.routing, self._hop_function(target, fabric_only),
                                           start, target, conn, groups)
            found = self._sprays[key]
        else:
            found = self._per_port(start, target, conn, fabric_only=fabric_only)
        return None if found is None else {**found, **last}

    def _per_port(self, start: str, target: str, conn: Connection, *,
                  fabric_only: bool) -> Weighted | None:
        """A static or hashed route; from a NIC cabled to several switches (a multi-plane
        NIC: one port per plane) the bytes split evenly over its ports, as such a NIC
        spreads its packets over the planes in hardware, and each plane routes its share
        by the policy (each plane its own subnet, its own D-mod-K or hash)."""
        hops = self._hop_function(target, fabric_only)
        ports = hops(start) if fabric_only and self._devices[start].kind == "nic" else ()
        if len(ports) < 2:
            return spread(self.routing, hops, start, target, conn)
        weighted: Weighted = {(start, port): 1.0 / len(ports) for port in ports}
        for port in ports:
            part = spread(self.routing, hops, port, target, conn)
            if part is None:
                return None
            for link, fraction in part.items():
                weighted[link] = weighted.get(link, 0.0) + fraction / len(ports)
        return weighted

    def _switch_groups(self) -> SwitchGroups | None:
        """The fabric's groups for the non-minimal policies: only a fabric with costed links
        (a dragonfly) has more than one (None otherwise); built at first use."""
        if self._groups is None:
            switches = [n for n, d in self._devices.items() if d.kind == "switch"]
            links = [(link.src, link.dst, link.bandwidth_bytes_per_s, link.cost)
                     for link in self._links.values()
                     if self._devices[link.src].kind in ("switch", "nic")
                     and self._devices[link.dst].kind == "switch"]
            self._groups = (SwitchGroups(switches, links) if self._grouped else None,)
        return self._groups[0]

    def _hop_function(self, target: str, fabric_only: bool) -> Callable[[str], tuple[str, ...]]:
        return lambda x: self._next_hops(x, target, fabric_only=fabric_only)

    def _in_node_hops(self, start: str, node: int) -> dict[str, int]:
        """Hop counts from ``start`` to the devices of ``node`` (no transit through GPUs/NICs)."""
        hops = {start: 0}
        queue = deque([start])
        while queue:
            x = queue.popleft()
            for y, _ in self._succ[x]:
                if y in hops:
                    continue
                dy = self._devices[y]
                if dy.node != node:
                    continue
                hops[y] = hops[x] + 1
                if dy.kind not in _ENDPOINT_KINDS:
                    queue.append(y)
        return hops

    def _in_node_path(self, a: str, b: str, *, nvlink_only: bool) -> tuple[str, ...] | None:
        """A shortest path from ``a`` to ``b`` inside their node, or None."""
        key = (a, b, nvlink_only)
        if key in self._in_node_paths:
            return self._in_node_paths[key]
        node = self._devices[a].node
        parent: dict[str, str | None] = {a: None}
        queue = deque([a])
        found = False
        while queue and not found:
            x = queue.popleft()
            for y, link in self._succ[x]:
                if y in parent or (nvlink_only and link.kind != "nvlink"):
                    continue
                dy = self._devices[y]
                if dy.node != node:
                    continue
                parent[y] = x
                if y == b:
                    found = True
                    break
                if dy.kind not in _ENDPOINT_KINDS:
                    queue.append(y)
        result: tuple[str, ...] | None = None
        if found:
            path = [b]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            result = tuple(reversed(path))
        self._in_node_paths[key] = result
        return result

    def gpu_peers(self, gpu: str) -> tuple[tuple[str, float], ...]:
        """The GPUs cabled to ``gpu`` by a direct NVLink (a mesh node: DGX-1 cube-mesh,
        MI300X xGMI), each with that link's bandwidth from ``gpu``, in rank order; empty on
        a node whose GPUs meet at an NVSwitch or talk over PCIe only."""
        self._require_gpu(gpu)
        peers = [(y, link.bandwidth_bytes_per_s) for y, link in self._succ[gpu]
                 if link.kind == "nvlink" and self._devices[y].kind == "gpu"]
        return tuple(sorted(peers, key=lambda peer: self._cluster_rank[peer[0]]))

    def _nvlink_relay_path(self, a: str, b: str) -> tuple[str, ...] | None:
        """``a -> g -> b`` over NVLink through one intermediate GPU ``g``, or None.

        NCCL's path search lets a path transit a GPU only over NVLink and only once (its
        ``PATH_NVB``, "NVLink through an intermediate GPU"; ``src/graph/paths.cc``) and
        prefers that to PCIe; its P2P transport then stages the bytes in the intermediate
        GPU's memory.  Among several intermediates the one with the widest bottleneck is
        taken (NCCL keeps the path of highest bandwidth), ties to the lowest rank.
        """
        best: tuple[float, int, str] | None = None
        for g, bw_ag in self.gpu_peers(a):
            link_gb = self._links.get((g, b))
            if link_gb is None or link_gb.kind != "nvlink":
                continue
            candidate = (-min(bw_ag, link_gb.bandwidth_bytes_per_s), self._cluster_rank[g], g)
            if best is None or candidate < best:
                best = candidate
        return None if best is None else (a, best[2], b)

    def _dist_map(self, target: str, *, fabric_only: bool) -> Mapping[str, int]:
        """Hops from each transit-capable device to ``target`` (reverse BFS, cached; a
        Dijkstra search over link costs where some link costs more than one hop).

        With ``fabric_only`` only fabric devices (node None) may be transit hops.
        """
        key = (target, fabric_only)
        cached = self._dist_maps.get(key)
        if cached is not None:
            return cached
        if self._costed:
            dist = self._cost_map(target, fabric_only=fabric_only)
            self._dist_maps[key] = dist
            return dist
        # Destinations entered from the same transit devices (the leaves under one set of
        # spines, the NICs under one leaf) are as far from every third device: one search
        # serves them all (see _TwinDistances); quadratic in switches otherwise.
        entry = (frozenset(self._transit_preds(fabric_only).get(target, ())), fabric_only)
        twin = self._twin_targets.setdefault(entry, target)
        dist = (self._bfs_map(target, fabric_only) if twin == target
                else self._twin_map(twin, target, fabric_only))
        self._dist_maps[key] = dist
        return dist

    def _bfs_map(self, target: str, fabric_only: bool) -> dict[str, int]:
        """Hops to ``target`` by a reverse breadth-first search (unit link costs)."""
        preds = self._transit_preds(fabric_only)
        dist = {target: 0}
        queue = deque([target])
        while queue:
            v = queue.popleft()
            for u in preds.get(v, ()):
                if u not in dist:
                    dist[u] = dist[v] + 1
                    queue.append(u)
        return dist

    def _twin_map(self, twin: str, target: str, fabric_only: bool) -> _TwinDistances:
        """Hops to ``target`` from ``twin``'s map, where both are entered from the same set
        P of transit devices.  Any path to either ends P -> it, so a device u other than the
        two is 1 + min over p in P of d(u, p) from both.  Only the two ends differ:
        ``target`` is 0, and ``twin`` (if it may transit) is 1 + its best successor's."""
        base = self._dist_map(twin, fabric_only=fabric_only)
        own: int | None = None
        twin_dev = self._devices[twin]
        if twin_dev.kind not in _ENDPOINT_KINDS and not (fabric_only and twin_dev.node is not None):
            ahead = [0 if v == target else base.get(v) for v, _ in self._succ[twin] if v != twin]
            reached = [d for d in ahead if d is not None]
            own = 1 + min(reached) if reached else None
        return _TwinDistances(base, {target: 0, twin: own})

    def _transit_preds(self, fabric_only: bool) -> dict[str, tuple[str, ...]]:
        """Per device, its predecessors that may be transit hops (built once per flag).

        A reverse BFS runs per destination switch; on a 2,048-node SuperPOD a leaf has as
        many NICs below it as switches above, so filtering the NICs out once, not in every
        BFS, halves the work of the 512 leaf maps (about 9 s of the 16k-GPU example)."""
        cached = self._transit_pred_maps.get(fabric_only)
        if cached is None:
            devs = self._devices
            cached = {v: tuple(u for u, _ in edges if devs[u].kind not in _ENDPOINT_KINDS
                               and not (fabric_only and devs[u].node is not None))
                      for v, edges in self._pred.items()}
            self._transit_pred_maps[fabric_only] = cached
        return cached

    def _cost_map(self, target: str, *, fabric_only: bool) -> Mapping[str, int]:
        """:meth:`_dist_map` by Dijkstra: the least summed link cost to ``target``."""
        dist = {target: 0}
        heap = [(0, target)]
        costs = self._route_costs
        while heap:
            d, v = heapq.heappop(heap)
            if d > dist[v]:
                continue
            for u, link in self._pred[v]:
                du = self._devices[u]
                if du.kind in _ENDPOINT_KINDS or (fabric_only and du.node is not None):
                    continue
                cost = link.cost if costs is None else costs[link.id]
                if d + cost < dist.get(u, math.inf):
                    dist[u] = d + cost
                    heapq.heappush(heap, (d + cost, u))
        return dist

    def _distance(self, y: str, dst: str, *, fabric_only: bool) -> float:
        """Hops from ``y`` to ``dst`` through transit-capable devices (inf if none)."""
        if y == dst:
            return 0
        if fabric_only:
            if self._devices[y].node is not None:
                return math.inf
            if self._devices[dst].node is None:  # a switch: its own map
                d = self._dist_map(dst, fabric_only=True).get(y)
                return math.inf if d is None else d
            # A NIC target: 1 + the distance to a switch it hangs from.
            best = math.inf
            for w in self._fabric_preds(dst):
                d = self._dist_map(w, fabric_only=True).get(y)
                cost = self._link_cost(self._links[(w, dst)])
                if d is not None and d + cost < best:
                    best = d + cost
            return best
        d = self._dist_map(dst, fabric_only=False).get(y)
        return math.inf if d is None else d

    def _distance_to(self, dst: str, fabric_only: bool) -> Callable[[str], float]:
        """:meth:`_distance` to ``dst`` as a function of the first device, with the distance
        map looked up once: a D-mod-K walk over a 2,048-node fabric asks it millions of
        times, one successor of a switch at a time."""
        devs = self._devices
        if fabric_only and devs[dst].node is not None:  # a NIC target: the general rule
            return lambda y: self._distance(y, dst, fabric_only=True)
        dist = self._dist_map(dst, fabric_only=fabric_only)
        inf = math.inf
        if fabric_only:
            return lambda y: inf if devs[y].node is not None else dist.get(y, inf)
        return lambda y: dist.get(y, inf)

    def _link_cost(self, link: Link) -> int:
        """What a shortest-path search counts for ``link`` (see ``_route_costs``)."""
        return link.cost if self._route_costs is None else self._route_costs[link.id]

    def _fabric_preds(self, target: str) -> tuple[str, ...]:
        """The fabric devices with a link into ``target`` (cached)."""
        preds = self._preds_in_fabric.get(target)
        if preds is None:
            preds = tuple(w for w, _ in self._pred[target] if self._devices[w].node is None)
            self._preds_in_fabric[target] = preds
        return preds

    def _next_hops(self, x: str, dst: str, *, fabric_only: bool) -> tuple[str, ...]:
        """The successors of ``x`` on a shortest path to ``dst`` (cached; empty if none)."""
        key = (x, dst, fabric_only)
        cached = self._hops.get(key)
        if cached is not None:
            return cached
        if not self._costed and (x, dst) in self._links:
            # Every hop costs 1: the direct link (1) beats any other successor (≥ 2), so a
            # spine need not scan its hundreds of ports to reach a leaf below it (on a
            # 2,048-node fabric that scan grew as spines × leaves × ports).
            self._hops[key] = (dst,)
            return (dst,)
        best = math.inf
        candidates: list[str] = []
        distance = self._distance_to(dst, fabric_only)
        costs = self._route_costs
        for y, link in self._succ[x]:
            d = distance(y) + (link.cost if costs is None else costs[link.id])
            if d < best:
                best, candidates = d, [y]
            elif d == best and d < math.inf:
                candidates.append(y)
        # Port order: by the devices' index in their tier (then name), the same at every
        # switch, which D-mod-K needs to send consecutive destinations up distinct ports.
        devs = self._devices
        result = tuple(sorted(candidates, key=lambda n: (devs[n].index, n)))
        self._hops[key] = result
        return result
