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
1024-GPU cluster cost a few dictionary look-ups each after the first.  The records live in
:mod:`topology.elements` (re-exported here), the searches in :mod:`topology.path_search`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from operator import index as as_index
from typing import Any

import networkx as nx
from distsim_gpu.simcore.errors import ConfigError, TopologyError, closest
from distsim_gpu.topology.elements import (
    DEVICE_KINDS,
    LINK_KINDS,
    TRANSPORTS,
    Device,
    Link,
    Route,
    full_duplex,
)
from distsim_gpu.topology.path_search import PathSearch
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
    "FaultState",
    "Link",
    "Route",
    "Topology",
    "full_duplex",
]

# The rail a route is computed (and cached) on when ``own_nics`` asks each end to use
# its own GPU's nearest NIC: below every real rail, which are >= 0.
_OWN_NICS = -1

# Routing cost of one hop where degraded links are avoided: above any path's count of
# degraded links, so fewer hops always wins and degraded links only break ties.
_AVOID_SCALE = 1 << 16


@dataclass(frozen=True, slots=True)
class FaultState:
    """What faults left a fabric rebuilt without its lost parts (:mod:`topology.faults`).

    ``avoid``: degraded links an adaptive policy steers around where an equal-cost path
    without them exists; ``lost_nics``: NICs lost per node (their rails re-map); ``note``: a
    line naming the faults for route errors; ``destination_indices``: the fabric's D-mod-K
    numbering from before the faults (addresses do not move when devices are lost).
    """

    avoid: frozenset[tuple[str, str]] = frozenset()
    lost_nics: Mapping[int, int] = field(default_factory=dict)
    note: str = ""
    destination_indices: Mapping[str, int] | None = None


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


# A device's links in one direction: (the device at the other end, the link).
_Adjacency = dict[str, list[tuple[str, Link]]]


def _add_devices(graph: nx.DiGraph, devices: Iterable[Device]) -> dict[str, Device]:
    """``devices`` by name, each added to ``graph`` as a node; a repeated name is an error."""
    devs: dict[str, Device] = {}
    for device in devices:
        if device.name in devs:
            raise TopologyError(f"duplicate device name {device.name!r}")
        devs[device.name] = device
        graph.add_node(device.name, device=device)
    return devs


def _add_links(graph: nx.DiGraph, devs: Mapping[str, Device], links: Iterable[Link],
               ) -> tuple[_Adjacency, _Adjacency, dict[tuple[str, str], Link]]:
    """``links`` added to ``graph``: each device's out- and in-links, the links by id."""
    succ: _Adjacency = {name_: [] for name_ in devs}
    pred: _Adjacency = {name_: [] for name_ in devs}
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
    return succ, pred, by_id


class Topology(PathSearch):
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
                 faults: FaultState | None = None) -> None:
        faults = faults if faults is not None else FaultState()
        self.name = name
        self.config: dict[str, Any] = dict(config) if config is not None else {}
        self.routing: RoutingSpec = routing if routing is not None else RoutingSpec()
        graph = nx.DiGraph(name=name)
        devs = _add_devices(graph, devices)
        succ, pred, by_id = _add_links(graph, devs, links)
        self.graph: nx.DiGraph = nx.freeze(graph)
        self._devices = devs
        self._links = by_id
        # Some link counts more than one hop (a dragonfly's global cables): weighted search.
        self._costed = any(link.cost != 1 for link in by_id.values())
        self._grouped = self._costed  # costlier links join groups (a dragonfly)
        self._fault_state(faults)
        # Sorted adjacency: the search order, hence every tie-break, is independent of the
        # order the builder happened to add links in.
        self._succ = {k: tuple(sorted(v, key=lambda e: e[0])) for k, v in succ.items()}
        self._pred = {k: tuple(sorted(v, key=lambda e: e[0])) for k, v in pred.items()}
        self._index_devices(pred, faults)
        self._init_caches()

    def _index_devices(self, pred: _Adjacency, faults: FaultState) -> None:
        """The GPUs' rank order, the GPUs and NICs of each node, and the destination indices."""
        devs = self._devices

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
        self._dest_index = self._destination_order(pred, order, faults)
        self.num_nodes: int = len({d.node for d in devs.values() if d.node is not None})

    def _destination_order(self, pred: _Adjacency, order: Callable[[str], Any],
                           faults: FaultState) -> dict[str, int]:
        """Each NIC's (and GPU's) destination index for D-mod-K (:attr:`destination_indices`)."""
        devs = self._devices
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
        dest_index = {n: i for i, n in enumerate(fabric_order)}
        dest_index.update(self._rank)
        if faults.destination_indices is not None:
            # A fabric that lost devices keeps its numbering (addresses do not move).
            dest_index = {n: i for n, i in faults.destination_indices.items() if n in devs}
        return dest_index

    def _init_caches(self) -> None:
        """Empty route and path caches."""
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

    def _fault_state(self, faults: FaultState) -> None:
        """What faults left (:class:`FaultState`): links an adaptive policy steers around
        where an equal-cost path without them exists (degraded links), NICs lost per node
        (their rails re-map), and a line naming the faults for route errors."""
        self.avoided: frozenset[tuple[str, str]] = frozenset(faults.avoid)
        self._lost_nics: dict[int, int] = dict(faults.lost_nics)
        self.fault_note = faults.note
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
        one fabric (:mod:`workloads.job.jobs`)."""
        for gpu in gpus:
            self._require_gpu(gpu)
        ordered = sorted(dict.fromkeys(gpus), key=self._cluster_rank.__getitem__)
        view = copy.copy(self)
        view.gpus = tuple(ordered)
        view._rank = {gpu: rank for rank, gpu in enumerate(ordered)}
        return view

    @property
    def cluster_gpu_count(self) -> int:
        """The cluster's GPUs, a job's view or not (:attr:`gpus` are a view's own)."""
        return len(self._cluster_rank)

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
        # The dict first: plan building asks millions of times (device() names a typo).
        device = self._devices.get(gpu)
        node = (device if device is not None else self.device(gpu)).node
        if node is None:
            raise TopologyError(f"{gpu!r} is a fabric device and belongs to no node")
        return node

    def has_rank(self, gpu: str) -> bool:
        """Whether ``gpu`` is one of :attr:`gpus` (in a job's view: one of the job's)."""
        return gpu in self._rank

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

    def route(self, src_gpu: str, dst_gpu: str, *, rail: int | None = None,
              own_nics: bool = False) -> Route:
        """The route from ``src_gpu`` to ``dst_gpu`` (see the module docstring for the rules).

        ``rail`` picks NIC ``rail % nics_per_node`` on both ends of an inter-node route;
        without it the source GPU's first local NIC and the same NIC index on the
        destination node are used.  ``own_nics`` (without a rail): each end on its own GPU's
        NIC (:meth:`own_rail`) wherever those sit, the fabric crossing rails between them —
        NCCL's point-to-point send without PXN (the sender posts on its NIC, the receiver
        on its own).  Raises TopologyError naming both GPUs if no route exists.
        """
        if rail is not None and (type(rail) is not int or rail < 0):
            rail = _check_rail(rail)
        if own_nics:
            if rail is not None:
                raise ConfigError("a route takes a rail or its ends' own NICs, not both")
            rail = _OWN_NICS
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
        if rail == _OWN_NICS:
            src_rail, dst_rail = self.own_rail(src), self.own_rail(dst)
            if src_rail is None or dst_rail is None:
                return self._node_legs(src, dst, src_node, dst_node, None)
            src_nic = self._rail_nic(src, src_node, src_rail)
            dst_nic = self._rail_nic(dst, dst_node, dst_rail)
        elif rail is not None:
            src_nic = self._rail_nic(src, src_node, rail)
            dst_nic = self._rail_nic(dst, dst_node, rail)
        else:
            local = self.local_nics(src)
            if not local:
                return None
            src_nic = local[0]
            dst_nic = self._nic_by_index.get((dst_node, self._devices[src_nic].index), "")
            if dst_nic and self._in_node_path(dst_nic, dst, nvlink_only=False) is None:
                dst_nic = ""  # the same rail is another tray's NIC there: take dst's own
            if not dst_nic:
                dst_local = self.local_nics(dst)
                if not dst_local:
                    return None
                dst_nic = dst_local[0]
        up = self._nic_leg(src, src_nic, inbound=False)
        down = self._nic_leg(dst, dst_nic, inbound=True)
        if up is None or down is None:
            # A rail neither GPU can reach through its own host or a GPU of its job: each
            # end uses its own NIC and the fabric crosses rails.
            return None if rail is None else self._node_legs(src, dst, src_node, dst_node,
                                                             None)
        return up, src_nic, down, dst_nic

    def _nic_leg(self, gpu: str, nic: str, *, inbound: bool) -> tuple[str, ...] | None:
        """The path ``gpu -> nic`` (``inbound``: ``nic -> gpu``) inside their node: over
        the host (PCIe, sockets), or, where the host does not join them (a rack's trays
        share no socket), over NVLink through a GPU beside the NIC — NCCL's PXN, the only
        way a GPU reaches another tray's NIC."""
        ends = (nic, gpu) if inbound else (gpu, nic)
        direct = self._in_node_path(*ends, nvlink_only=False)
        if direct is not None:
            return direct
        for peer in self.gpus_on_node(self._devices[gpu].node):
            # Only a GPU of the same job can relay (PXN stages bytes in its memory).
            if self.has_rank(peer) and nic in self.local_nics(peer):
                nvlink = self._in_node_path(gpu, peer, nvlink_only=True)
                host = self._in_node_path(peer, nic, nvlink_only=False)
                if nvlink is not None and host is not None:
                    path = nvlink + host[1:]
                    return tuple(reversed(path)) if inbound else path
        return None

    def _inter_node_hops(self, src: str, dst: str, src_node: int, dst_node: int,
                         rail: int | None) -> Weighted | None:
        legs = self._node_legs(src, dst, src_node, dst_node, rail)
        if legs is None:
            return None
        up, src_nic, down, dst_nic = legs
        # Own NICs hash as the sender's rail does: a send whose ends share a rail keeps
        # the very path (ECMP's too) it had with that rail.
        conn_rail = self.own_rail(src) if rail == _OWN_NICS else rail
        across = self._across(src_nic, dst_nic, self._connection(src, dst, conn_rail, dst_nic),
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
