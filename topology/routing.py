"""Routing policies: how a fabric spreads one connection's bytes over its equal-cost paths.

Routing is a property of the fabric, as in real networks.  Between two NICs a fabric of
switches usually offers several shortest paths (a fat tree: one per spine); the policy says
which of them a connection's bytes take, and in what fractions:

* ``dmodk`` — destination-based static routing, as InfiniBand subnet managers program it
  (OpenSM's ``ftree`` and ``updn`` engines, D-mod-K up-port selection).  At every hop with
  ``k`` equal-cost next hops the route takes choice ``(d // divisor) % k``, where ``d`` is
  the destination's index in fabric order and ``divisor`` starts at 1 and is multiplied by
  ``k`` at each such hop (so the second tier of up-ports uses the next digit of ``d``).
  Consecutive destinations leave a switch on consecutive ports, which makes shift
  permutations — ring neighbours — contention-free on a non-blocking tree
  (Zahavi, "D-Mod-K routing providing non-blocking traffic for shift permutations on real
  life fat trees", 2010).
* ``adaptive`` — InfiniBand adaptive routing (NVIDIA Quantum AR): packets of one flow are
  spread over every equal-cost next hop, so at each branching the flow's bytes split evenly.
* ``ecmp`` — Ethernet/RoCE equal-cost multipath: each switch hashes a queue pair's header
  onto one next hop, so a queue pair's bytes follow one path and different queue pairs
  collide at random.  NCCL opens ``qps_per_connection`` queue pairs per connection
  (``NCCL_IB_QPS_PER_CONNECTION``, default 1) and stripes each channel's bytes over them:
  each carries ``1/q`` of the bytes on its own hashed path.  ``hash_seed`` changes every
  hash, as a different switch hash seed (or different UDP source ports) would.
* ``spray`` — packet-spraying Ethernet (NVIDIA Spectrum-X, Slingshot-class adaptive
  routing): the even split of ``adaptive``.
* ``valiant`` — non-minimal routing for fabrics made of groups (a dragonfly): each packet
  goes minimally to a random intermediate group, then minimally to its destination
  (Valiant and Brebner, 1981; the dragonfly's "VAL" in Kim et al., ISCA 2008).  As a flow
  its bytes split evenly over every group but the two ends, each share sprayed over that
  detour's least-cost paths.  It doubles the global cables a byte crosses and in return
  spreads any group-to-group pattern over all of them.
* ``ugal`` — UGAL-like adaptive routing (Kim et al.; Slingshot's adaptive routing is of
  this family): a packet takes the minimal path unless its queues are longer than a
  detour's.  With no queues in a flow model, the policy takes the split such routing
  settles to when the connections have the group pair's cables to themselves and load
  them to saturation: every group-level path — the direct cables and the detour through
  each other group — in proportion to its bottleneck capacity.  That is right for few
  heavy connections between groups (a ring's neighbours); for traffic already spread over
  all group pairs UGAL stays minimal — use ``adaptive`` or ``spray`` there.

On a fabric without groups (switches joined by unit-cost links only) ``valiant`` and
``ugal`` are the even split of ``adaptive``, as is a connection inside one group.

A policy turns one connection into *weighted links*: the directed links its bytes cross and
the fraction of the bytes on each (1.0 where there is one path, fractions where it splits),
in hop order.  Under max-min sharing a flow split over paths with fixed fractions that
finish together is exactly a coflow whose multiplicities are those fractions, so the flow
network needs nothing more.  Policies see the fabric only through ``next_hops(x)``: the
neighbours of ``x`` on a shortest (least-cost) path to the target, in a fixed port order —
so they work on any fabric made of switches (multi-tier trees, rail groups, planes,
dragonflies) without knowing its shape.

The default policy follows the fabric's technology: ``infiniband`` -> ``dmodk``,
``ethernet`` -> ``ecmp``.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from distsim_gpu.simcore.config import check_choice, check_whole
from distsim_gpu.simcore.errors import ConfigError

__all__ = [
    "DEFAULT_POLICY",
    "END_TO_END_POLICIES",
    "FOLDING_POLICIES",
    "POLICIES",
    "TECHNOLOGIES",
    "Connection",
    "RoutingSpec",
    "SwitchGroups",
    "check_technology",
    "spread",
]

#: Routing policies, by name.
POLICIES = ("dmodk", "adaptive", "ecmp", "spray", "valiant", "ugal")
#: Policies whose split depends on the connection's two ends only (a route can be cached).
END_TO_END_POLICIES = ("adaptive", "spray", "valiant", "ugal")
#: Policies under which replicas alike in the fabric are routed alike: the route depends on
#: a connection's ends only, and on nothing random or load-driven (see
#: :attr:`RoutingSpec.folds_replicas`).
FOLDING_POLICIES = ("dmodk", "adaptive", "spray")
#: Fabric technologies and the routing each uses unless told otherwise.
TECHNOLOGIES = ("infiniband", "ethernet")
DEFAULT_POLICY = {"infiniband": "dmodk", "ethernet": "ecmp"}
#: What a designer may write for a technology, and how to write it here (refused with the
#: hint: one spelling in every resolved config).
_TECHNOLOGY_NAMES = {"roce": "ethernet", "rocev2": "ethernet", "roce2": "ethernet",
                     "spectrum-x": "ethernet", "ib": "infiniband", "quantum": "infiniband",
                     "ndr": "infiniband", "xdr": "infiniband"}


def check_technology(value: object, *, key: str, source: str | None) -> str:
    """A fabric technology of :data:`TECHNOLOGIES`; a clear error otherwise, which names
    the technology a product or protocol name (RoCE, Spectrum-X, NDR) means here."""
    meant = _TECHNOLOGY_NAMES.get(str(value).lower())
    if meant is not None:
        raise ConfigError(f"unknown fabric technology {value!r}", key=key, source=source,
                          hint=f"write {meant}: {value} is an {meant} fabric here "
                          f"(technologies: {', '.join(TECHNOLOGIES)})")
    return check_choice(value, TECHNOLOGIES, key=key, source=source, what="fabric technology")

LinkId = tuple[str, str]
#: The next hops from a device towards the (fixed) target, on shortest paths, in port order.
NextHops = Callable[[str], Sequence[str]]
#: Links in hop order with the fraction of the connection's bytes on each.
Weighted = dict[LinkId, float]


@dataclass(frozen=True, slots=True)
class RoutingSpec:
    """A fabric's routing: the policy and its knobs (``qps_per_connection`` and
    ``hash_seed`` matter to ``ecmp`` only; static and adaptive routing ignore them, as an
    InfiniBand fabric sends every queue pair of a destination the same way)."""

    policy: str = "ecmp"
    qps_per_connection: int = 1
    hash_seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.policy, POLICIES, key="fabric.routing", what="routing policy")
        check_whole(self.qps_per_connection, key="fabric.qps_per_connection", minimum=1)
        check_whole(self.hash_seed, key="fabric.hash_seed", minimum=0)

    @property
    def folds_replicas(self) -> bool:
        """Whether identical data-parallel replicas may be simulated once under this policy.

        Folding needs every replica's routes to be the image of the simulated one's, so
        the route must depend on the two ends only: D-mod-K's destination digits and the
        even split of adaptive routing and spraying do.  ECMP hashes each queue pair's
        header, so two replicas' routes collide at random; Valiant and UGAL pick
        intermediate groups at random or by load.  Those run the full simulation.
        """
        return self.policy in FOLDING_POLICIES


@dataclass(frozen=True, slots=True)
class Connection:
    """What identifies one connection to the routing: the GPU pair and rail (the header
    ECMP hashes) and ``dest_index``, the destination's index in fabric order (what D-mod-K
    divides)."""

    src: str
    dst: str
    rail: int | None
    dest_index: int


def stable_hash(seed: bytes, hop: int) -> int:
    """A well-mixed 64-bit hash of ``seed`` and ``hop``, the same in every process.

    Not hash(): Python salts str hashes per process (PYTHONHASHSEED), and routes must be
    identical in every run.  Not a bare CRC either: CRC is linear, so names differing in
    one character (``rail 0`` vs ``rail 1``) can land on the same spine modulo a power of
    two.  BLAKE2b mixes fully and costs ~1 us, paid once per route (routes are cached).
    """
    digest = hashlib.blake2b(seed + hop.to_bytes(4, "little"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _hash_key(spec: RoutingSpec, conn: Connection, qp: int) -> bytes:
    """The header bytes queue pair ``qp`` of ``conn`` is hashed from.  Queue pair 0 with
    seed 0 hashes exactly what distsim hashed before policies existed, so ECMP routes of
    earlier runs are reproduced."""
    key = f"{conn.src}|{conn.dst}|{'-' if conn.rail is None else conn.rail}"
    if qp:
        key += f"|qp{qp}"
    if spec.hash_seed:
        key += f"|seed{spec.hash_seed}"
    return key.encode()


def _walk(next_hops: NextHops, start: str, target: str,
          choose: Callable[[int, int], int]) -> list[str] | None:
    """One path ``start -> target``; ``choose(hop, k)`` picks among ``k`` next hops at a
    hop that offers a choice, ``hop`` counting every hop from ``start`` (from 0)."""
    path = [start]
    x = start
    hop = 0
    while x != target:
        candidates = next_hops(x)
        if not candidates:
            return None
        x = candidates[choose(hop, len(candidates)) if len(candidates) > 1 else 0]
        path.append(x)
        hop += 1
    return path


def _dmodk(next_hops: NextHops, start: str, target: str, conn: Connection) -> Weighted | None:
    divisor = 1

    def choose(_hop: int, k: int) -> int:
        nonlocal divisor
        choice = (conn.dest_index // divisor) % k
        divisor *= k
        return choice

    path = _walk(next_hops, start, target, choose)
    return None if path is None else dict.fromkeys(pairwise(path), 1.0)


def _ecmp(next_hops: NextHops, start: str, target: str, conn: Connection,
          spec: RoutingSpec) -> Weighted | None:
    q = spec.qps_per_connection
    weighted: Weighted = {}
    for qp in range(q):
        key = _hash_key(spec, conn, qp)
        path = _walk(next_hops, start, target, lambda hop, k, key=key: stable_hash(key, hop) % k)
        if path is None:
            return None
        for link in pairwise(path):
            weighted[link] = weighted.get(link, 0.0) + 1.0 / q
    return weighted if q == 1 else _in_hop_order(weighted, start)


def _spray(next_hops: NextHops, start: str, target: str) -> Weighted | None:
    """Even split at every branching of the shortest-path graph from ``start``."""
    fanout: dict[str, Sequence[str]] = {}
    stack = [start]
    while stack:
        x = stack.pop()
        if x == target or x in fanout:
            continue
        candidates = next_hops(x)
        if not candidates:
            return None
        fanout[x] = candidates
        stack.extend(candidates)
    weighted: Weighted = {}
    share = {start: 1.0}
    for x in _topological(fanout, start):
        candidates = fanout.get(x, ())
        part = share[x] / len(candidates) if candidates else 0.0
        for y in candidates:
            weighted[(x, y)] = part
            share[y] = share.get(y, 0.0) + part
    return weighted


def _topological(fanout: dict[str, Sequence[str]], start: str) -> list[str]:
    """The devices of a path graph in an order where every device follows all devices
    with a link into it (Kahn), breadth first — so a tree's tiers come one after another."""
    waiting: dict[str, int] = {}
    for candidates in fanout.values():
        for y in candidates:
            waiting[y] = waiting.get(y, 0) + 1
    order = [start]
    for x in order:  # grows while it is read
        for y in fanout.get(x, ()):
            waiting[y] -= 1
            if waiting[y] == 0:
                order.append(y)
    return order


def _in_hop_order(weighted: Weighted, start: str) -> Weighted:
    """``weighted`` reordered so that every link comes after the links into its source
    (merged paths of unequal hop counts may interleave otherwise)."""
    fanout: dict[str, list[str]] = {}
    for x, y in weighted:
        fanout.setdefault(x, []).append(y)
    return {(x, y): weighted[(x, y)] for x in _topological(fanout, start)
            for y in fanout.get(x, ())}


class SwitchGroups:
    """The groups of a fabric whose groups are joined by costlier links (a dragonfly's
    global cables): switches joined by unit-cost links form one group.

    Built from plain data — the fabric's switches, and every directed link leaving a switch
    or a NIC as ``(src, dst, bandwidth, cost)`` — so that it knows no device types.  It
    answers the group of a switch or of a NIC (its switch's), the summed bandwidth of the
    cables from one group to another, and the next hops from a device towards the nearest
    switch of a group (least cost, switches only as transit), cached per group.
    """

    def __init__(self, switches: Sequence[str],
                 links: Sequence[tuple[str, str, float, int]]) -> None:
        self._succ: dict[str, list[tuple[str, int]]] = {}
        for src, dst, _, cost in links:
            self._succ.setdefault(src, []).append((dst, cost))
        switch_set = set(switches)
        self._switches = switch_set
        self._of: dict[str, int] = {}
        groups = 0
        for first in switches:
            if first not in self._of:
                self._fill(first, groups, switch_set)
                groups += 1
        self.count = groups
        self._capacity: dict[tuple[int, int], float] = {}
        for src, dst, bandwidth, _ in links:
            a, b = self._of.get(src), self._of.get(dst)
            if a is not None and b is not None and a != b:
                self._capacity[(a, b)] = self._capacity.get((a, b), 0.0) + bandwidth
            elif a is None and b is not None:
                self._of.setdefault(src, b)  # a NIC belongs to its switch's group
        self._pred: dict[str, list[tuple[str, int]]] = {}
        for src, dst, _, cost in links:
            if src in switch_set and dst in switch_set:
                self._pred.setdefault(dst, []).append((src, cost))
        self._dist: dict[int, dict[str, int]] = {}
        self._hops: dict[tuple[str, int], tuple[str, ...]] = {}

    def _fill(self, first: str, group: int, switches: set[str]) -> None:
        self._of[first] = group
        stack = [first]
        while stack:
            for y, cost in self._succ.get(stack.pop(), ()):
                if cost == 1 and y in switches and y not in self._of:
                    self._of[y] = group
                    stack.append(y)

    def group(self, device: str) -> int | None:
        """The group of a switch, or of a NIC cabled to one; None otherwise."""
        return self._of.get(device)

    def capacity(self, a: int, b: int) -> float:
        """The summed bandwidth of the cables from group ``a`` to group ``b``."""
        return self._capacity.get((a, b), 0.0)

    def towards(self, group: int) -> NextHops:
        """Next hops on least-cost paths to the nearest switch of ``group``."""
        return lambda x: self._next(x, group)

    def _next(self, x: str, group: int) -> tuple[str, ...]:
        key = (x, group)
        if key not in self._hops:
            dist = self._distances(group)
            costs = [(cost + dist[y], y) for y, cost in self._succ.get(x, ()) if y in dist]
            best = min((c for c, _ in costs), default=None)
            self._hops[key] = tuple(sorted(y for c, y in costs if c == best))
        return self._hops[key]

    def _distances(self, group: int) -> dict[str, int]:
        """Least cost from every switch to the group (multi-source Dijkstra, cached)."""
        if group not in self._dist:
            dist = {s: 0 for s in self._switches if self._of[s] == group}
            heap = [(0, s) for s in dist]
            while heap:
                d, v = heapq.heappop(heap)
                if d > dist[v]:
                    continue
                for u, cost in self._pred.get(v, ()):
                    if d + cost < dist.get(u, d + cost + 1):
                        dist[u] = d + cost
                        heapq.heappush(heap, (d + cost, u))
            self._dist[group] = dist
        return self._dist[group]


def _nonminimal(spec: RoutingSpec, next_hops: NextHops, start: str, target: str,
                groups: SwitchGroups | None) -> Weighted | None:
    """``valiant`` and ``ugal``: minimal and detour paths at the group level, each share
    sprayed over its least-cost paths (see the module docstring)."""
    src, dst = (None, None) if groups is None else (groups.group(start), groups.group(target))
    if groups is None or src is None or dst is None or src == dst or groups.count < 3:
        return _spray(next_hops, start, target)
    shares: list[tuple[float, NextHops]] = []
    if spec.policy == "ugal":
        shares.append((groups.capacity(src, dst), next_hops))
    for via in range(groups.count):
        if via not in (src, dst):
            weight = (1.0 if spec.policy == "valiant"
                      else min(groups.capacity(src, via), groups.capacity(via, dst)))
            shares.append((weight, _detour(groups, next_hops, src, via)))
    total = sum(weight for weight, _ in shares)
    weighted: Weighted = {}
    for weight, hops in shares:
        if weight <= 0:
            continue
        part = _spray(hops, start, target)
        if part is None:
            return None
        for link, fraction in part.items():
            weighted[link] = weighted.get(link, 0.0) + fraction * weight / total
    return _in_hop_order(weighted, start)


def _detour(groups: SwitchGroups, next_hops: NextHops, src: int, via: int) -> NextHops:
    """Next hops of the detour through group ``via``: towards it while in group ``src``,
    then minimal to the target."""
    to_via = groups.towards(via)
    return lambda x: to_via(x) if groups.group(x) == src else next_hops(x)


def spread(spec: RoutingSpec, next_hops: NextHops, start: str, target: str,
           conn: Connection, groups: SwitchGroups | None = None) -> Weighted | None:
    """The weighted links ``start -> target`` of ``conn`` under ``spec``'s policy, in hop
    order; None if ``target`` cannot be reached.  ``groups`` are the fabric's groups, for
    the non-minimal policies (None: a fabric without groups)."""
    if start == target:
        return {}
    policy = spec.policy
    if policy == "dmodk":
        return _dmodk(next_hops, start, target, conn)
    if policy == "ecmp":
        return _ecmp(next_hops, start, target, conn, spec)
    if policy in ("valiant", "ugal"):
        return _nonminimal(spec, next_hops, start, target, groups)
    return _spray(next_hops, start, target)  # adaptive, spray: the same even split
