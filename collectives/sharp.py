"""In-network reduction: InfiniBand SHARP, as NCCL's CollNet algorithm uses it.

Switches that aggregate (:attr:`topology.Device.sharp`; ``fabric: {sharp: true}`` on a
preset cluster) reduce an all-reduce's data as it climbs an *aggregation tree* of switches
and send the result back down the same tree (NVIDIA SHARP on Quantum / Quantum-2
InfiniBand switches; NCCL reaches it through the SHARP plugin with
``NCCL_COLLNET_ENABLE=1``).  So a node sends its data into the fabric once and gets the
result once: ``S`` per node and direction, where a ring moves ``2(n-1)/n·S`` and a tree
about ``2S``.

**CollNet Direct** (NCCL ``src/device/all_reduce.h``): inside a node the GPUs
reduce-scatter directly to each other over NVLink, so that each GPU is the *head* of
``1/ppn`` of the data; each head sends its reduced slice through its own NIC up the
aggregation tree and receives the fully reduced slice; the heads then all-gather directly.
Per GPU that is ``2(ppn-1)/ppn·S`` each way over NVLink (as a ring inside the node) and
``S/ppn`` each way through its NIC.

The model builds, per head slot (the j-th GPU of every node, on its own rail), the tree as
the union of the routes from the slot's GPU on every node to the slot's GPU on the first
node (up) and back (down).  Every link of that union carries the slot's slice once per
direction however many routes share it — which is what aggregation does: a switch
forwards one reduced stream where it received several.  Where a route splits over several
paths (adaptive routing) a link carries the largest fraction any route puts on it.

Latency follows NCCL's tuning model (``src/graph/tuning.cc``, CollNet Direct): no base
latency, ``2·(intra hop + (ppn-1)·0.4 us)`` for the two passes inside the node (0.4 us:
NCCL's "arity serialization" per extra local GPU) plus one network hop, with the
physical route latencies added.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from distsim_gpu.collectives.algorithms import _Builder, _node_order, gpu_rail
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Route, Topology

__all__ = ["aggregation_tree", "collnet_plan", "fabric_reduces", "head_slots"]

LinkId = Hashable

# NCCL tuning.cc, CollNet Direct: serialisation of the direct scatter/gather per extra
# local GPU ("arity serialization latency").
ARITY_LATENCY_S = 0.4e-6


def fabric_reduces(topo: Topology) -> bool:
    """Whether the cluster has fabric switches and every one of them aggregates (SHARP)."""
    switches = [d for d in topo.devices() if d.kind == "switch"]
    return bool(switches) and all(d.sharp for d in switches)


def head_slots(topo: Topology, gpus: Sequence[str]) -> list[list[str]] | None:
    """The group's GPUs by slot: ``slots[j]`` is the j-th GPU (rank order) of every node.

    None when the nodes hold different numbers of the group's GPUs (no uniform heads).
    """
    per_node = _node_order(topo, gpus)
    counts = {len(node_gpus) for node_gpus in per_node.values()}
    if len(counts) != 1:
        return None
    (ppn,) = counts
    return [[node_gpus[j] for node_gpus in per_node.values()] for j in range(ppn)]


def _route_weights(b: _Builder, route: Route) -> dict[LinkId, float]:
    weights: dict[LinkId, float] = {}
    b.add(weights, route)
    return weights


def aggregation_tree(b: _Builder, slot: Sequence[str], rail: int | None
                     ) -> tuple[dict[LinkId, float], float]:
    """The links of one slot's aggregation tree, each carrying its slice once per direction,
    and the latency of a slice's way up and back down.

    Raises ConfigError if the tree crosses a fabric switch that does not aggregate.
    """
    topo = b.topo
    root = slot[0]
    links: dict[LinkId, float] = {}
    up_s = down_s = 0.0
    for gpu in slot[1:]:
        for src, dst in ((gpu, root), (root, gpu)):
            route = b.route(src, dst, rail)
            for link, weight in _route_weights(b, route).items():
                links[link] = max(links.get(link, 0.0), weight)
            if src == gpu:
                up_s = max(up_s, route.latency_s)
            else:
                down_s = max(down_s, route.latency_s)
    for src, _ in links:
        device = topo.device(src)
        if device.kind == "switch" and not device.sharp:
            across = ("NVLS across nodes reduces in the fabric's switches too (InfiniBand "
                      "SHARP): " if b.algorithm.startswith("nvls") else f"{b.algorithm}: ")
            raise ConfigError(f"{across}fabric switch {src!r} does not reduce in the network",
                              hint="set fabric.sharp: true (SHARP switches), or use "
                                   "algorithm ring, tree or auto")
    return links, up_s + down_s


def collnet_plan(b: _Builder, gpus: list[str], op: str, params: CommParams) -> CollectivePlan:
    """CollNet Direct all-reduce over SHARP switches (see the module docstring)."""
    topo = b.topo
    slots = head_slots(topo, gpus)
    if slots is None or len(slots[0]) < 2:
        raise ConfigError("collnet needs the group on two or more nodes with the same number "
                          "of GPUs on each", hint="use algorithm ring, tree or auto")
    ppn = len(slots)
    streams: dict[LinkId, float] = {}
    intra_s = 0.0
    # Direct reduce-scatter then all-gather inside each node: every ordered pair of local
    # GPUs carries one slice each way per pass.
    for node_gpus in _node_order(topo, gpus).values():
        for src in node_gpus:
            for dst in node_gpus:
                if src != dst:
                    route = b.route(src, dst, None)
                    b.add(streams, route, 2.0)
                    intra_s = max(intra_s, b.hop_latency_s(route))
    tree_s = 0.0
    for slot in slots:
        links, latency_s = aggregation_tree(b, slot, gpu_rail(topo, slot[0]))
        for link, weight in links.items():
            streams[link] = streams.get(link, 0.0) + weight
        tree_s = max(tree_s, latency_s)
    net_s = params.hop_latency_s["collnet"]["net"]["simple"]
    latency = 2 * (intra_s + (ppn - 1) * ARITY_LATENCY_S) + net_s + tree_s
    # Scatter, up, down, gather: a chunk crosses four stages (two without local peers).
    pipeline_hops = 3 if ppn > 1 else 1
    step = StepShape(streams, 1.0 / ppn, latency, pipeline_hops=pipeline_hops)
    return CollectivePlan(op, "collnet", "simple", len(gpus), ppn, (step,),
                          params.base_latency_s["collnet"]["simple"],
                          params.protocol_efficiency["simple"], params.chunk_bytes["simple"])
