"""Collective algorithms as plans: ring, double binary tree, all-to-all, point-to-point.

Each builder turns (topology, group of GPUs, operation, protocol) into a
:class:`~collectives.plan.CollectivePlan` — which links carry how many streams of which
fraction of the size, in which steps, with which latency — the way NCCL runs it:

* **channels** — NCCL runs several rings (or trees) at once.  Across nodes each channel
  leaves and enters a node through its own NIC (one rail per channel), entering at a GPU
  that shares a PCIe switch with that NIC and leaving from another such GPU, or, where the
  group has none, from a GPU that forwards over NVLink to one (PXN): the search of
  :mod:`collectives.rails`, so that a two-node DGX ring uses all eight NICs, no GPU's PCIe
  link carries two channels and no byte crosses a CPU socket link.
  Inside one node every channel would cross the same NVLink/NVSwitch links, which a flow
  model cannot tell apart from one channel, so one channel is used there — except in a
  mesh node (GPUs cabled to each other, no NVSwitch), where NCCL's rings follow the direct
  links and as many open as the links carry (:mod:`collectives.meshrings`), and a node's
  part of a ring across nodes is a path over direct links too.
* **ring** all-reduce = reduce-scatter + all-gather: ``2(n-1)`` steps, each moving ``S/n``
  per channel-share over every ring hop; reduce-scatter and all-gather take ``n-1`` steps;
  broadcast and reduce pipeline ``S`` along the ring as a chain from/to the root.
* **tree** all-reduce (NCCL's double binary tree): inside each node a chain, across nodes
  two complementary binary trees each carrying half the data, reduce up and broadcast down
  pipelined, so each node's NICs move ``S`` in each direction instead of the ring's
  ``2(n-1)/n·S``.
* **all-to-all**: every rank sends ``S/n`` to every other rank at once, its latency growing
  with the rank's network peers (:func:`alltoall_peer_latency_s`); **sendrecv**: every
  rank sends ``S`` to the next; **p2p**: one send.

NVLS, NVLS-tree, CollNet and PXN plans live in their own modules; :mod:`collectives.catalog`
builds any algorithm's plan and says which ones ``auto`` weighs.

Latency per call is NCCL's base latency plus, per step, the hop latency of the hop's
transport and protocol and the route's physical latency (see :mod:`collectives.params`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.collectives.meshrings import mesh_rings
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.collectives.rails import channel_rails, node_segment, pxn_proxy
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Route, Topology

__all__ = [
    "OPS",
    "PlanDraft",
    "PlanDrafts",
    "alltoall_peer_latency_s",
    "build_plan",
    "check_group",
    "gpu_rail",
    "pairs_plan",
    "ring_channels",
]

LinkId = Hashable

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "alltoall",
       "sendrecv", "p2p")

# A ring channel: the GPUs in ring order and, per hop i (order[i] -> order[i+1]), the NIC
# rail to use when that hop leaves the node (None inside a node).
Channel = tuple[tuple[str, ...], tuple[int | None, ...]]


def gpu_rail(topo: Topology, gpu: str) -> int | None:
    """The NIC rail a GPU sends point-to-point traffic on (:meth:`Topology.own_rail`)."""
    return topo.own_rail(gpu)


def _node_order(topo: Topology, group: Sequence[str]) -> dict[int, list[str]]:
    """The group's GPUs per node, nodes and GPUs in global rank order."""
    rank_of = topo.rank_of
    per_node: dict[int, list[str]] = {}
    for gpu in sorted(group, key=rank_of):
        per_node.setdefault(topo.node_of(gpu), []).append(gpu)
    return per_node


def ring_channels(topo: Topology, group: Sequence[str], max_channels: int = 0) -> list[Channel]:
    """The rings NCCL would build for ``group``: across nodes one per NIC rail the group's
    GPUs sit beside, each node entered beside the rail's NIC (:mod:`collectives.rails`);
    inside one node one, or in a mesh node as many as its direct links carry."""
    per_node = _node_order(topo, group)
    if len(per_node) == 1:
        (gpus,) = per_node.values()
        rings = mesh_rings(topo, gpus)[:max_channels or None] or [tuple(gpus)]
        return [(ring, (None,) * len(ring)) for ring in rings]
    channels: list[Channel] = []
    for node_rails in channel_rails(topo, per_node)[:max_channels or None]:
        order: list[str] = []
        for node, gpus in per_node.items():
            order.extend(node_segment(topo, gpus, node_rails[node]))
        # A hop into another node arrives on the rail that node's part of the ring uses.
        hops = tuple(
            node_rails[topo.node_of(order[(i + 1) % len(order)])]
            if topo.node_of(order[i]) != topo.node_of(order[(i + 1) % len(order)]) else None
            for i in range(len(order))
        )
        channels.append((tuple(order), hops))
    return channels


# A send's routes: the one route it takes, or its two legs where a GPU relays it (PXN).
Legs = tuple[Route, ...]


class _Builder:
    """Accumulates streams per link for one step and prices its hops' latencies.

    ``protocol`` is None for a builder that only drafts a ring or tree plan (streams and
    hop routes, :class:`PlanDraft`): those do not depend on the protocol, which prices the
    hops afterwards.
    """

    def __init__(self, topo: Topology, params: CommParams, algorithm: str,
                 protocol: str | None = None):
        self.topo = topo
        self.params = params
        self.algorithm = algorithm
        self.protocol = protocol

    def route(self, src: str, dst: str, rail: int | None) -> Route:
        """The route; across nodes without a given rail, the sender's own NIC rail."""
        if rail is None and self.topo.node_of(src) != self.topo.node_of(dst):
            rail = gpu_rail(self.topo, src)
        return self.topo.route(src, dst, rail=rail)

    def p2p_route(self, src: str, dst: str) -> Route:
        """A point-to-point send's route without PXN: across nodes each end on its own
        GPU's NIC, as NCCL's net transport connects them (the receiver posts on its own
        NIC), the fabric crossing rails between them; inside a node as :meth:`route`."""
        if self.topo.node_of(src) == self.topo.node_of(dst):
            return self.route(src, dst, None)
        return self.topo.route(src, dst, own_nics=True)

    def ring_send(self, streams: dict[LinkId, float], src: str, dst: str, rail: int | None,
                  relays: Sequence[str], count: float = 1.0) -> Legs:
        """Add one ring hop ``src -> dst`` leaving on ``rail``; return its routes.

        Across nodes a sender far from the rail's NIC forwards over NVLink to one of
        ``relays`` (the group's GPUs on its node) beside the NIC, as NCCL's PXN path does
        (:func:`collectives.rails.pxn_proxy`; not with ``pxn: false``).
        """
        relay = None
        if rail is not None and self.params.pxn and rail not in self.topo.local_rails(src):
            # The group's GPUs first (NCCL's only candidates); where none of them is beside
            # the NIC (a group sitting differently on two nodes) any GPU of the node that
            # belongs to the job (another job's GPU holds none of its buffers).
            # Lazily: pxn_proxy takes the first beside the NIC, mostly one of ``relays``.
            others = (g for g in self.topo.gpus_on_node(self.topo.node_of(src))
                      if g not in relays and self.topo.has_rank(g))
            among = itertools.chain(relays, others)
            relay = pxn_proxy(self.topo, src, dst, rail=rail, among=among)
        return self.relayed_legs(streams, src, dst, rail, relay, count)

    def relayed_send(self, streams: dict[LinkId, float], src: str, dst: str,
                     rail: int | None, relay: str | None, count: float = 1.0) -> float:
        """Add one send ``src -> dst`` leaving its node on ``rail``, through ``relay``'s NIC
        when one is given (PXN: NVLink to the relay, then the network); return its hop
        latency, both legs' where relayed."""
        return self.legs_latency_s(self.relayed_legs(streams, src, dst, rail, relay, count))

    def relayed_legs(self, streams: dict[LinkId, float], src: str, dst: str,
                     rail: int | None, relay: str | None, count: float = 1.0) -> Legs:
        """:meth:`relayed_send`'s streams; return its routes instead of their latency."""
        if relay is None:
            route = self.route(src, dst, rail)
            self.add(streams, route, count)
            return (route,)
        legs = (self.route(src, relay, None), self.route(relay, dst, rail))
        for leg in legs:
            self.add(streams, leg, count)
        return legs

    def legs_latency_s(self, legs: Legs) -> float:
        """A send's hop latency: its route's, or both legs' where relayed."""
        if len(legs) == 1:
            return self.hop_latency_s(legs[0])
        return sum(self.hop_latency_s(leg) for leg in legs)

    def slowest_s(self, sends: Iterable[Legs]) -> float:
        """The largest latency of ``sends`` that run at once (0 for none)."""
        return max((self.legs_latency_s(legs) for legs in sends), default=0.0)

    def total_s(self, sends: Iterable[Legs]) -> float:
        """The summed latency of ``sends`` that run one after the other."""
        total = 0.0
        for legs in sends:
            total += self.legs_latency_s(legs)
        return total

    def hop_latency_s(self, route: Route) -> float:
        if route.transport == "local":
            return 0.0
        table = self.params.hop_latency_s[self.algorithm][route.transport]
        return table[self.protocol] + route.latency_s

    @staticmethod
    def add(streams: dict[LinkId, float], route: Route, count: float = 1.0) -> None:
        # A multipath route puts a fraction of each stream on each of its paths' links.
        for link, weight in zip(route.links, route.weights, strict=True):
            streams[link] = streams.get(link, 0.0) + count * weight


@dataclass(frozen=True, slots=True)
class _StepDraft:
    """A plan step before its protocol: its streams, and its latency as a function of a
    builder that prices hops in one protocol (the same sums and maxima, in the same
    order, as pricing each hop while the streams were added)."""

    streams: dict[LinkId, float]
    fraction: float
    latency_s: Callable[[_Builder], float]
    repeat: int = 1
    pipeline_hops: int = 0


@dataclass(frozen=True, slots=True)
class PlanDraft:
    """A ring or tree plan without its protocol: which links carry which streams, and
    the routes of every hop.  NCCL's protocols differ only in their latencies (per hop
    and base), efficiency and chunk, so ``auto`` weighing ll, ll128 and simple drafts
    the plan once and prices it three times (:meth:`priced`) instead of building it
    three times — the routes, PXN relays and streams of a 10k-GPU ring each time."""

    op: str
    algorithm: str
    num_ranks: int
    channels: int
    steps: tuple[_StepDraft, ...]

    def priced(self, b: _Builder, base_s: float) -> CollectivePlan:
        """The plan in ``b``'s protocol, of base latency ``base_s`` (none without steps);
        its steps share the draft's streams (nothing writes to a plan's streams)."""
        protocol = b.protocol
        assert protocol is not None  # a drafting builder prices nothing
        steps = tuple(StepShape(s.streams, s.fraction, s.latency_s(b), s.repeat,
                                s.pipeline_hops) for s in self.steps)
        return CollectivePlan(self.op, self.algorithm, protocol, self.num_ranks,
                              self.channels, steps, base_s if steps else 0.0,
                              b.params.protocol_efficiency[protocol],
                              b.params.chunk_bytes[protocol])


def build_plan(
    topo: Topology,
    group: Sequence[str],
    op: str,
    *,
    algorithm: str,
    protocol: str,
    params: CommParams,
    root: str | None = None,
    peer: str | None = None,
) -> CollectivePlan:
    """The plan of ``op`` over ``group`` with a concrete algorithm and protocol.

    ``algorithm`` is ``ring`` or ``tree`` (tree: all_reduce only); ``protocol`` one of
    ``ll``, ``ll128``, ``simple``.  ``root`` is the broadcast/reduce root (default: the
    first GPU of the group), ``peer`` the destination of a ``p2p`` send from ``group[0]``.
    Drafted afresh; :class:`PlanDrafts` keeps the drafts for the other protocols.
    """
    return PlanDrafts(topo, params).plan(group, op, algorithm=algorithm, protocol=protocol,
                                         root=root, peer=peer)


class PlanDrafts:
    """The ring and tree plans of one topology and params: each drafted once
    (:class:`PlanDraft`), priced per protocol.  A :class:`Communicator` keeps one."""

    def __init__(self, topo: Topology, params: CommParams) -> None:
        self.topo = topo
        self.params = params
        self._drafts: dict[tuple[Any, ...], PlanDraft] = {}

    def plan(self, group: Sequence[str], op: str, *, algorithm: str, protocol: str,
             root: str | None = None, peer: str | None = None) -> CollectivePlan:
        """:func:`build_plan`'s plan, from the draft of an earlier protocol if there is one."""
        topo, params = self.topo, self.params
        gpus = _checked_gpus(topo, group, op, algorithm)
        b = _Builder(topo, params, algorithm, protocol)
        # Looked up first: an unknown protocol fails before any plan is built, as it did.
        base = params.base_latency_s["tree" if algorithm == "tree" else "ring"][protocol]
        key = (op, tuple(group), algorithm, root, peer)
        draft = self._drafts.get(key)
        if draft is None:
            draft = self._drafts[key] = _draft(_Builder(topo, params, algorithm), gpus, op,
                                               root, peer)
        return draft.priced(b, base)

    def pairs_plan(self, pairs: Sequence[tuple[str, str]], *, protocol: str) -> CollectivePlan:
        """:func:`pairs_plan`'s plan, from the draft of an earlier protocol if there is one
        (no base latency: the sends are one call's, as NCCL groups them)."""
        b = _Builder(self.topo, self.params, "ring", protocol)  # NCCL's send: ring-class
        key = ("pairs", tuple(pairs))
        draft = self._drafts.get(key)
        if draft is None:
            draft = self._drafts[key] = _pairs_draft(_Builder(self.topo, self.params, "ring"),
                                                     pairs)
        return draft.priced(b, 0.0)


def _draft(b: _Builder, gpus: list[str], op: str, root: str | None,
           peer: str | None) -> PlanDraft:
    """:func:`build_plan`'s plan before its protocol."""
    n = len(gpus)

    def plan(steps: list[_StepDraft], channels: int) -> PlanDraft:
        return PlanDraft(op, b.algorithm, n, channels, tuple(steps))

    if op == "p2p":
        if peer is None:
            raise ConfigError("a p2p transfer needs a peer")
        route = b.p2p_route(gpus[0], peer)
        streams: dict[LinkId, float] = {}
        b.add(streams, route)
        return plan([_StepDraft(streams, 1.0, lambda pricing: pricing.hop_latency_s(route))], 1)
    if n == 1:
        return plan([], 1)
    if op == "alltoall":
        return plan([_alltoall_step(b, gpus)], 1)
    if op == "sendrecv":
        return plan([_sendrecv_step(b, gpus)], 1)
    if b.algorithm == "tree":
        return _tree_plan(b, gpus, b.params, plan)
    channels = ring_channels(b.topo, gpus, b.params.max_channels)
    if op in ("broadcast", "reduce"):
        return plan([_chain_step(b, channels, root or gpus[0], towards_root=op == "reduce")],
                    len(channels))
    return plan([_ring_step(b, gpus, channels, op)], len(channels))


def _checked_gpus(topo: Topology, group: Sequence[str], op: str, algorithm: str) -> list[str]:
    """``op`` and ``algorithm`` checked; ``group``'s GPUs, each known and named once."""
    check_choice(op, OPS, key="op", what="collective")
    # NVLS, CollNet and PXN plans are built by collectives.catalog (its build_plan).
    check_choice(algorithm, ("ring", "tree"), key="algorithm")
    if algorithm == "tree" and op != "all_reduce":
        raise ConfigError(f"the tree algorithm implements all_reduce only, not {op}",
                          hint="use algorithm ring or auto")
    return check_group(topo, group)


def check_group(topo: Topology, group: Sequence[str]) -> list[str]:
    """The group's GPUs, each once: an error for a GPU named twice or not in ``topo``."""
    gpus = list(dict.fromkeys(group))
    if len(gpus) != len(group):
        raise ConfigError("a collective group names a GPU twice", hint=f"group: {list(group)}")
    for gpu in gpus:
        topo.node_of(gpu)  # raises for an unknown GPU
    return gpus


def _sendrecv_step(b: _Builder, gpus: list[str]) -> _StepDraft:
    """Every rank sends the full size to the next in rank order, all at once."""
    n = len(gpus)
    streams: dict[LinkId, float] = {}
    ordered = sorted(gpus, key=b.topo.rank_of)
    sends: list[Legs] = []
    for i, src in enumerate(ordered):
        sends.append((b.p2p_route(src, ordered[(i + 1) % n]),))
        b.add(streams, sends[-1][0])
    return _StepDraft(streams, 1.0, lambda pricing: pricing.slowest_s(sends))


def _ring_step(b: _Builder, gpus: list[str], channels: list[Channel], op: str) -> _StepDraft:
    """Ring all-reduce, reduce-scatter or all-gather: one step, repeated n-1 times a pass."""
    topo = b.topo
    n = len(gpus)
    passes = 2 if op == "all_reduce" else 1
    steps_per_pass = n - 1
    streams: dict[LinkId, float] = {}
    relays = _node_order(topo, gpus)
    # Per channel, every hop's routes, in ring order.
    hops = [[b.ring_send(streams, src, order[(i + 1) % n], rails[i], relays[topo.node_of(src)])
             for i, src in enumerate(order)] for order, rails in channels]

    def latency_s(pricing: _Builder) -> float:
        pass_latency = 0.0
        for channel in hops:
            hop_latencies = [pricing.legs_latency_s(legs) for legs in channel]
            # One pass of the ring crosses every hop but the one back to where it started.
            pass_latency = max(pass_latency, sum(hop_latencies) - max(hop_latencies))
        return pass_latency / steps_per_pass

    return _StepDraft(streams, 1.0 / (n * len(channels)), latency_s,
                      repeat=passes * steps_per_pass)


def pairs_plan(topo: Topology, pairs: Sequence[tuple[str, str]], *, protocol: str,
               params: CommParams) -> CollectivePlan:
    """Several point-to-point sends at once, each of the full size: one stream per pair.

    Pipeline stages exchange activations this way: every tensor-parallel rank of a stage
    sends its shard to the same rank of the next stage at the same time.  A send to another
    node's rail goes through the GPU on that rail (PXN, :func:`collectives.rails.pxn_proxy`)
    unless ``params.pxn`` is off.  Drafted afresh; :class:`PlanDrafts` keeps the drafts.
    """
    return PlanDrafts(topo, params).pairs_plan(pairs, protocol=protocol)


def _pairs_draft(b: _Builder, pairs: Sequence[tuple[str, str]]) -> PlanDraft:
    """:func:`pairs_plan`'s plan before its protocol."""
    topo, params = b.topo, b.params
    streams: dict[LinkId, float] = {}
    sends: list[Legs] = []
    rails: dict[str, int | None] = {}
    for src, dst in pairs:
        # NCCL's P2P sends go through PXN too (NCCL_P2P_PXN_LEVEL=2): to the receiver's rail.
        relay = pxn_proxy(topo, src, dst, rails) if params.pxn else None
        if relay is None:
            route = b.p2p_route(src, dst)
            b.add(streams, route)
            sends.append((route,))
        else:
            sends.append(b.relayed_legs(streams, src, dst, rails[dst], relay))
    step = _StepDraft(streams, 1.0, lambda pricing: pricing.slowest_s(sends))
    return PlanDraft("p2p", "ring", len(pairs), 1, (step,))


def _chain_step(b: _Builder, channels: list[Channel], root: str, *,
                towards_root: bool) -> _StepDraft:
    """Broadcast (root first) or reduce (root last) pipelined along each ring as a chain,
    in the ring's direction as NCCL runs both (a reduce starts at the root's successor),
    so that every hop across nodes leaves and enters as the ring's search placed it."""
    streams: dict[LinkId, float] = {}
    relays = _node_order(b.topo, channels[0][0])
    chains: list[list[Legs]] = []  # per channel, its sends in chain order
    for order, rails in channels:
        if root not in order:
            raise ConfigError(f"root {root} is not in the group")
        n = len(order)
        start = (order.index(root) + (1 if towards_root else 0)) % n
        chain = []
        for i in range(n - 1):
            a, c = (start + i) % n, (start + i + 1) % n
            chain.append(b.ring_send(streams, order[a], order[c], rails[a],
                                     relays[b.topo.node_of(order[a])]))
        chains.append(chain)

    def latency_s(pricing: _Builder) -> float:
        return max((pricing.total_s(chain) for chain in chains), default=0.0)

    hops = len(channels[0][0]) - 1
    return _StepDraft(streams, 1.0 / len(channels), latency_s, pipeline_hops=max(hops - 1, 0))


def _alltoall_step(b: _Builder, gpus: list[str]) -> _StepDraft:
    """Every rank sends S/n to every other rank concurrently."""
    streams: dict[LinkId, float] = {}
    sends: list[Legs] = []
    for src in gpus:
        for dst in gpus:
            if src != dst:
                sends.append((b.p2p_route(src, dst),))
                b.add(streams, sends[-1][0])
    return _StepDraft(streams, 1.0 / len(gpus), lambda pricing: pricing.slowest_s(sends)
                      + alltoall_peer_latency_s(pricing, gpus))


def alltoall_peer_latency_s(b: _Builder, gpus: Sequence[str]) -> float:
    """What an all-to-all's peers add to one send's latency, for its busiest rank.

    NCCL's all-to-all is ``n-1`` grouped sends and receives; each peer costs
    ``params.peer_latency_s[transport][protocol]`` (network peers: the proxy's post
    overhead, paid one after another), the costliest one already being in the step's hop
    latency: ``sum_t k_t·c_t - max_t c_t`` over the transports ``t`` a rank has ``k_t``
    peers on.  With NCCL's figures only network peers count: ``(k_net - 1)·c_net``.
    """
    topo = b.topo
    table = b.params.peer_latency_s
    worst = 0.0
    for src in gpus:
        counts: dict[str, int] = {}
        node = topo.node_of(src)
        for dst in gpus:
            if dst != src:
                transport = ("net" if topo.node_of(dst) != node
                             else topo.route(src, dst).transport)
                counts[transport] = counts.get(transport, 0) + 1
        costs = {t: table[t][b.protocol] for t in counts if t in table}
        if costs:
            extra = sum(counts[t] * c for t, c in costs.items()) - max(costs.values())
            worst = max(worst, extra)
    return worst


def _tree_plan(b: _Builder, gpus: list[str], params: CommParams,
               plan: Callable[[list[_StepDraft], int], PlanDraft]) -> PlanDraft:
    """NCCL's double binary tree: chains inside nodes, two binary trees across nodes."""
    topo = b.topo
    per_node = _node_order(topo, gpus)
    nodes = list(per_node)
    if len(nodes) == 1:
        return plan([_one_node_tree_step(b, per_node[nodes[0]])], 1)
    streams: dict[LinkId, float] = {}
    channels = ring_channels(topo, gpus, params.max_channels)
    num_trees = 2
    path_hops = 0
    # Per channel, its chains' routes and, per tree, its depth and its edges' sends.
    drafted: list[tuple[list[list[Route]], list[tuple[int, list[Legs]]]]] = []
    for order, rails in channels:
        # The rail each node's part of the channel arrives on: the tree's edge into a node
        # arrives there too, at the head beside that NIC.
        node_rail = {topo.node_of(order[(i + 1) % len(order)]): rail
                     for i, rail in enumerate(rails) if rail is not None}
        # Each node's GPUs in ring order, in one pass over the ring (a filter of the ring
        # per node was quadratic in nodes: 11 of 12 s of a 256-node nccl-tests run).
        by_node: dict[int, list[str]] = {node: [] for node in nodes}
        for g in order:
            by_node[topo.node_of(g)].append(g)
        chains = [by_node[node] for node in nodes]
        chain_routes = _node_chains(b, streams, chains, num_trees)
        trees = []
        for tree in range(num_trees):
            # Tree 0: heap order over nodes; tree 1: the mirror, so that the leaves of one
            # are the inner nodes of the other (every node's NIC is busy in both).
            positions = list(range(len(nodes))) if tree == 0 else list(range(len(nodes)))[::-1]
            depth = 0
            sends = []
            for p in range(1, len(positions)):
                child, parent = chains[positions[p]][0], chains[positions[(p - 1) // 2]][0]
                for src, dst in ((child, parent), (parent, child)):
                    sends.append(b.ring_send(streams, src, dst, node_rail[topo.node_of(dst)],
                                             per_node[topo.node_of(src)]))
                depth = max(depth, (p + 1).bit_length() - 1)
            trees.append((depth, sends))
            # A chunk climbs a chain and the tree, then comes back down.
            longest_chain = max(len(chain) - 1 for chain in chains)
            path_hops = max(path_hops, 2 * (longest_chain + depth))
        drafted.append((chain_routes, trees))

    def latency_s(pricing: _Builder) -> float:
        depth_latency = 0.0
        for intra_routes, trees in drafted:
            intra = _chains_latency_s(pricing, intra_routes)
            inter = 0.0
            for depth, sends in trees:
                inter = max(inter, depth * pricing.slowest_s(sends))
            depth_latency = max(depth_latency, 2 * (intra + inter))
        return depth_latency

    # Each tree carries half of the data, each channel its share of that.
    fraction = 1.0 / (num_trees * len(channels))
    return plan([_StepDraft(streams, fraction, latency_s, pipeline_hops=max(path_hops - 1, 0))],
                len(channels))


def _one_node_tree_step(b: _Builder, gpus: list[str]) -> _StepDraft:
    """NCCL's tree inside one node: one pipelined step along a chain of ``gpus``."""
    streams: dict[LinkId, float] = {}
    # One node: a chain, reduced up and broadcast down, pipelined; in a mesh node along
    # direct links (the first ring's order), as NCCL's tree search keeps to NVLink.
    rings = mesh_rings(b.topo, gpus)
    chain = list(rings[0]) if rings else gpus
    sends: list[Legs] = []
    for up, down in zip(chain[1:], chain[:-1]):
        for src, dst in ((up, down), (down, up)):
            sends.append((b.route(src, dst, None),))
            b.add(streams, sends[-1][0])
    # A chunk goes up the chain and back down: 2(n-1) hops, the first one paid by S.
    return _StepDraft(streams, 1.0, lambda pricing: pricing.total_s(sends),
                      pipeline_hops=max(2 * (len(chain) - 1) - 1, 0))


def _node_chains(b: _Builder, streams: dict[LinkId, float], chains: list[list[str]],
                 num_trees: int) -> list[list[Route]]:
    """Add each node's chain, both ways for every tree; return each chain's routes."""
    drafted = []
    for chain in chains:
        routes = []
        for up, down in zip(chain[1:], chain[:-1]):
            for src, dst in ((up, down), (down, up)):
                routes.append(b.route(src, dst, None))
                b.add(streams, routes[-1], num_trees)
        drafted.append(routes)
    return drafted


def _chains_latency_s(pricing: _Builder, chains: list[list[Route]]) -> float:
    """The slowest of :func:`_node_chains`' chains: half its hops' latencies (each tree
    carries half the data), summed hop by hop."""
    intra = 0.0
    for routes in chains:
        chain_latency = 0.0
        for route in routes:
            chain_latency += pricing.hop_latency_s(route) / 2
        intra = max(intra, chain_latency)
    return intra
