"""All-to-all plans for expert parallelism: skewed (all-to-allv) and hierarchical (HetuMoE).

A MoE layer's dispatch and combine are all-to-alls whose bytes per pair follow the
router: rank ``s`` sends rank ``d`` ``S/n · w_d``, where ``w_d`` is ``d``'s receive
weight relative to uniform (:meth:`workloads.specs.moe_routing.MoeLoads.receive_weights`; 1 for
a uniform router).  A plan's stream multiplicities are real numbers, so a weighted pair is
a stream of multiplicity ``w_d`` moving ``S/n`` — every link carries exactly its bytes.

* **flat** (:func:`flat_alltoall_plan`): NCCL's all-to-all, every pair at once, sends to
  another rail through PXN as NCCL's default (with weights 1 it is the plan
  :mod:`collectives.catalog` builds for ``alltoall``).
* **hierarchical** (:func:`hierarchical_alltoall_plan`, HetuMoE, Nie et al. 2022): three
  legs — (1) inside each node every GPU sends the data bound for node ``B`` to the
  node's *leader* for ``B`` over NVLink (pairs inside the node go directly here);
  (2) one message per ordered node pair, leader to leader, over the NICs; (3) the
  receiving leader scatters inside its node.  The legs are pipelined in chunks (one
  step whose streams hold all three legs' links, each chunk paying the three latencies),
  as NCCL-proxy and DeepEP-style implementations forward;
  HetuMoE's own kernels run the legs one after another, which would add the NVLink legs'
  time to the exchange's.  The leader of the pair ``{A, B}`` is, on
  either node, the GPU next to NIC rail ``(A + B) mod rails`` (one rail per node pair,
  pairs spread over rails, the same rail at both ends so the message stays on its rail).

A rank's network peers fall from ``n - g`` (flat) to at most ``nodes - 1`` (each paying
NCCL's per-peer proxy cost, :func:`collectives.algorithms.alltoall_peer_latency_s`), and
its NIC messages grow ``g²``-fold; but a node sends over at most ``min(rails, nodes-1)``
NICs and every byte crosses NVLink up to twice more.  So with one NIC per node the
hierarchical form wins (same NIC bytes, fewer peers); with a NIC per GPU and few node
pairs the flat form keeps every NIC busy and wins for large messages.
``communication.all_to_all: auto`` takes whichever plan's closed-form uncontended time
(:meth:`CollectivePlan.uncontended_time_s` on the real topology's capacities) is lower;
as the legs are one step, the coflow and step fidelities agree with it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from distsim_gpu.collectives.algorithms import _Builder, gpu_rail
from distsim_gpu.collectives.params import ALLTOALL_MODES, CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.collectives.pxn import pxn_proxy
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["ALLTOALL_MODES", "alltoall_plans", "flat_alltoall_plan", "hierarchical_alltoall_plan",
           "link_bytes"]

LinkId = Hashable


def _weights(gpus: Sequence[str], weights: Sequence[float] | None) -> list[float]:
    if weights is None:
        return [1.0] * len(gpus)
    if len(weights) != len(gpus):
        raise ConfigError(f"{len(weights)} receive weights for a group of {len(gpus)} GPUs",
                          hint="one weight per rank of the all-to-all group")
    return [float(w) for w in weights]


def _plan(b: _Builder, n: int, steps: list[StepShape], algorithm: str) -> CollectivePlan:
    params = b.params
    base = params.base_latency_s["ring"][b.protocol] if steps else 0.0
    return CollectivePlan("alltoall", algorithm, b.protocol, n, 1, tuple(steps), base,
                          params.protocol_efficiency[b.protocol],
                          params.chunk_bytes[b.protocol])


def _peer_latency_s(b: _Builder, peers: dict[str, dict[str, str]]) -> float:
    """NCCL's per-peer cost for the busiest sender: ``Σ_t k_t·c_t - max_t c_t``."""
    table = b.params.peer_latency_s
    worst = 0.0
    for by_peer in peers.values():
        counts: dict[str, int] = {}
        for transport in by_peer.values():
            counts[transport] = counts.get(transport, 0) + 1
        costs = {t: table[t][b.protocol] for t in counts if t in table}
        if costs:
            worst = max(worst, sum(counts[t] * c for t, c in costs.items())
                        - max(costs.values()))
    return worst


class _Step:
    """Streams, hop latency and per-sender peer counts of one step being built."""

    def __init__(self, b: _Builder) -> None:
        self.b = b
        self.streams: dict[LinkId, float] = {}
        self.latency_s = 0.0
        self.peers: dict[str, dict[str, str]] = {}  # sender -> peer -> transport
        self.rails: dict[str, int | None] = {}  # pxn_proxy's cache

    def send(self, src: str, dst: str, count: float, rail: int | None = None, *,
             pxn: bool = False) -> None:
        """``count`` streams ``src -> dst``; through NCCL's PXN proxy when ``pxn``."""
        if src == dst or count <= 0:
            return
        b = self.b
        proxy = pxn_proxy(b.topo, src, dst, self.rails) if pxn else None
        legs = ([b.route(src, dst, rail)] if proxy is None
                else [b.route(src, proxy, None), b.route(proxy, dst, self.rails[dst])])
        for leg in legs:
            b.add(self.streams, leg, count)
        self.latency_s = max(self.latency_s, sum(b.hop_latency_s(leg) for leg in legs))
        transport = "net" if b.topo.node_of(src) != b.topo.node_of(dst) else legs[0].transport
        self.peers.setdefault(src, {})[dst] = transport

    def shape(self, fraction: float) -> StepShape | None:
        if not self.streams:
            return None
        return StepShape(self.streams, fraction, self.latency_s + _peer_latency_s(self.b,
                                                                                  self.peers))


def flat_alltoall_plan(b: _Builder, gpus: Sequence[str],
                       weights: Sequence[float] | None = None) -> CollectivePlan:
    """Every rank sends ``S/n · w_d`` to every other rank ``d`` at once, as NCCL does:
    a send to another node's GPU on another rail through PXN unless ``params.pxn`` is off
    (:mod:`collectives.pxn`)."""
    w = _weights(gpus, weights)
    step = _Step(b)
    for src in gpus:
        for d, dst in enumerate(gpus):
            step.send(src, dst, w[d], pxn=b.params.pxn)
    shape = step.shape(1.0 / len(gpus)) if len(gpus) > 1 else None
    return _plan(b, len(gpus), [shape] if shape else [], "flat")


def _leaders(topo: Topology, per_node: dict[int, list[str]]) -> dict[tuple[int, int],
                                                                        tuple[str, int | None]]:
    """(node A, node B) -> (A's leader GPU for B, the NIC rail the pair uses)."""
    nodes = list(per_node)
    leaders: dict[tuple[int, int], tuple[str, int | None]] = {}
    for a_index, a in enumerate(nodes):
        gpus = per_node[a]
        rails = sorted({r for g in gpus for r in topo.local_rails(g)})
        for b_index, other in enumerate(nodes):
            if other == a:
                continue
            rail = rails[(a_index + b_index) % len(rails)] if rails else None
            near = [g for g in gpus if gpu_rail(topo, g) == rail] or [
                g for g in gpus if rail in topo.local_rails(g)] or gpus
            leaders[(a, other)] = (near[0], rail)
    return leaders


def hierarchical_alltoall_plan(b: _Builder, gpus: Sequence[str],
                               weights: Sequence[float] | None = None) -> CollectivePlan:
    """HetuMoE's gather / exchange per node pair / scatter (see the module docstring)."""
    topo = b.topo
    w = dict(zip(gpus, _weights(gpus, weights)))
    per_node: dict[int, list[str]] = {}
    for gpu in sorted(gpus, key=topo.rank_of):
        per_node.setdefault(topo.node_of(gpu), []).append(gpu)
    if len(per_node) == 1:
        plan = flat_alltoall_plan(b, gpus, weights)
        return _plan(b, len(gpus), list(plan.steps), "hierarchical")
    leaders = _leaders(topo, per_node)
    gather, exchange, scatter = _Step(b), _Step(b), _Step(b)
    for a, local in per_node.items():
        for src in local:
            for dst in local:
                gather.send(src, dst, w[dst])
        for other, remote in per_node.items():
            if other == a:
                continue
            leader, rail = leaders[(a, other)]
            bound = sum(w[d] for d in remote)
            for src in local:
                gather.send(src, leader, bound)
            peer, _ = leaders[(other, a)]
            exchange.send(leader, peer, len(local) * bound, rail)
            for dst in remote:
                scatter.send(peer, dst, len(local) * w[dst])
    fraction = 1.0 / len(gpus)
    return _plan(b, len(gpus), [_pipelined(
        [s for s in (gather.shape(fraction), exchange.shape(fraction),
                     scatter.shape(fraction)) if s is not None])], "hierarchical")


def _pipelined(legs: list[StepShape]) -> StepShape:
    """The legs as one pipelined step: chunks flow gather -> exchange -> scatter while
    the next chunks follow, so every leg's links are busy at once and a chunk pays every
    leg's latency.  The pipeline's fill (a chunk's time on the NVLink legs, ~1.4 us for
    NCCL's 512 KiB Simple chunk at 369 GB/s) is left out: the plan's per-stream fill
    term would charge it once per stream sharing the bottleneck, hundreds of times."""
    streams: dict[LinkId, float] = {}
    for leg in legs:
        for link, count in leg.link_streams.items():
            streams[link] = streams.get(link, 0.0) + count
    return StepShape(streams, legs[0].fraction, sum(leg.latency_s for leg in legs))


def alltoall_plans(topo: Topology, group: Sequence[str], params: CommParams,
                   protocol: str) -> list[CollectivePlan]:
    """The plans ``params.all_to_all`` weighs for an all-to-all over ``group``: the flat
    one, the hierarchical one, or both for ``auto`` (the caller times them; ``deepep``'s
    is :func:`collectives.deepep.deepep_plans`), with
    ``params.alltoall_weights`` when the group has that many ranks."""
    gpus = list(group)
    weights = params.alltoall_weights if len(params.alltoall_weights) == len(gpus) else None
    b = _Builder(topo, params, "ring", protocol)  # NCCL's send/recv: ring-class latencies
    plans = []
    if params.all_to_all in ("flat", "auto"):
        plans.append(flat_alltoall_plan(b, gpus, weights))
    if params.all_to_all in ("hierarchical", "auto"):
        plans.append(hierarchical_alltoall_plan(b, gpus, weights))
    return plans


def link_bytes(plan: CollectivePlan, size_bytes: float) -> dict[LinkId, float]:
    """Wire bytes each link carries in one call of ``size_bytes`` per GPU."""
    wire = size_bytes / plan.protocol_efficiency
    carried: dict[LinkId, float] = {}
    for step in plan.steps:
        per_stream = step.repeat * step.fraction * wire  # bytes, not the pipeline's fill
        for link, streams in step.link_streams.items():
            carried[link] = carried.get(link, 0.0) + streams * per_stream
    return carried
