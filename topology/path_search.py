"""Shortest paths inside a cluster graph: the searches a :class:`~topology.model.Topology`
routes with.

Two kinds of search, both cached per topology:

* inside a node, breadth-first from a device over the node's own devices, never through a
  GPU or a NIC (they terminate traffic): the hop counts and paths of in-node routes;
* across the fabric, a reverse search from each destination giving every transit-capable
  device its distance (hops, or summed link costs where a fabric sets costs or faults
  degrade links), from which the next hops on shortest paths are read.  The routing
  policies (:mod:`topology.routing`) walk those next hops.

:class:`PathSearch` holds the searches; :class:`~topology.model.Topology` supplies the graph
(its adjacency, devices, links and caches) and decides which routes to ask for.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from distsim_gpu.topology.elements import Device, Link

__all__ = ["ENDPOINT_KINDS", "PathSearch"]

# Devices that terminate traffic; a route never passes *through* one of them.
ENDPOINT_KINDS = frozenset({"gpu", "nic"})


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



class PathSearch:
    """Hop counts, distances and next hops over a frozen cluster graph (a base of
    :class:`~topology.model.Topology`, which builds the graph and the caches below)."""

    # The graph, by device name: devices, links by id, sorted adjacency both ways.
    _devices: dict[str, Device]
    _links: dict[tuple[str, str], Link]
    _succ: dict[str, tuple[tuple[str, Link], ...]]
    _pred: dict[str, tuple[tuple[str, Link], ...]]
    # Whether some link counts more than one hop, and the costs faults set (None: Link.cost).
    _costed: bool
    _route_costs: dict[tuple[str, str], int] | None
    # Caches, per topology.
    _in_node_paths: dict[tuple[str, str, bool], tuple[str, ...] | None]
    _dist_maps: dict[tuple[str, bool], Mapping[str, int]]
    _twin_targets: dict[tuple[frozenset[str], bool], str]
    _hops: dict[tuple[str, str, bool], tuple[str, ...]]
    _preds_in_fabric: dict[str, tuple[str, ...]]
    _transit_pred_maps: dict[bool, dict[str, tuple[str, ...]]]

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
                if dy.kind not in ENDPOINT_KINDS:
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
                if dy.kind not in ENDPOINT_KINDS:
                    queue.append(y)
        result: tuple[str, ...] | None = None
        if found:
            path = [b]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            result = tuple(reversed(path))
        self._in_node_paths[key] = result
        return result

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
        if twin_dev.kind not in ENDPOINT_KINDS and not (fabric_only and twin_dev.node is not None):
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
            cached = {v: tuple(u for u, _ in edges if devs[u].kind not in ENDPOINT_KINDS
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
                if du.kind in ENDPOINT_KINDS or (fabric_only and du.node is not None):
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
