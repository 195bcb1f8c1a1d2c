"""NVLink SHARP (NVLS): all-reduce reduced inside the NVSwitch, alone or with a network part.

A third-generation NVSwitch (HGX H100/H200; :attr:`topology.Device.sharp` on the node's
``nvswitch``) reduces and multicasts in the switch (PTX ``multimem.ld_reduce`` and
``multimem.st``).  NCCL (>= 2.17, ``src/device/all_reduce.h``) runs an all-reduce over
it in two passes per slice of the data: the slice's *head* GPU loads it through the
switch, which reads the slice from every GPU's buffer and returns the sum; the head then
stores the sum through the switch, which writes it into every GPU's buffer.  Both passes
reach every GPU of the node, the head included, through its NVLink port, so with ``H``
heads a GPU's port carries ``S`` (its share of every slice's load) plus ``S/H`` (its own
slice's result) towards the switch and the same back.  On one node every GPU is a head
(``H = n``): each direction moves ``(1 + 1/n)·S`` — against a ring's ``2(n-1)/n·S`` —
so the call takes ``(1 + 1/n)·S / (e·B) + latency`` with ``B`` the NVLink rate and ``e``
the NVLS efficiency (NCCL ``tuning.cc`` ``nvlsEfficiency``, 0.85 on Hopper: the
multimem operations reach 85 % of the link rate).  With the default link efficiency
that is about 490 GB/s bus bandwidth on 8 H100 (NVIDIA quotes ~480 GB/s; the ring
~370 GB/s).  The efficiency is modelled as link occupancy: each NVLS byte holds an NVLink
port for ``1/e`` of a byte's time.

Across nodes each node's heads are its GPUs on distinct NIC rails (one per NIC); head
``h`` carries slice ``h`` (``S/H``) through its own NIC:

* ``nvls`` across nodes (NCCL's NVLS with CollNet) sends the slice into a SHARP
  aggregation tree (:mod:`collectives.sharp`): the fabric's switches must aggregate too;
* ``nvls_tree`` runs NCCL's double binary tree over the nodes for every slice (two trees,
  each with half the slice, the second mirroring the first so that every node is a leaf
  of one), as the ``tree`` algorithm does across nodes.

Latency (``tuning.cc``): no base latency; one NVLS pass 25 us; ``nvls`` across nodes adds
one network hop (18 us), ``nvls_tree`` ``2·log2(nodes)`` network hops (20.9 us each);
physical route latencies are added.  Simple protocol only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from distsim_gpu.collectives.algorithms import _Builder, _node_order, gpu_rail
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.collectives.sharp import aggregation_tree
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["add_aggregation_trees", "double_trees", "nvls_heads", "nvls_plan", "nvls_switches",
           "nvls_tree_plan"]

LinkId = Hashable


def nvls_switches(topo: Topology, gpus: Sequence[str]) -> dict[int, str] | None:
    """Per node of the group, the NVSwitch that reduces (NVLink SHARP) and is cabled to each
    of the group's GPUs on that node; None if a node has none."""
    found: dict[int, str] = {}
    for node, node_gpus in _node_order(topo, gpus).items():
        common: set[str] | None = None
        for gpu in node_gpus:
            here = {sw for sw in topo.graph.successors(gpu)
                    if topo.device(sw).kind == "nvswitch" and topo.device(sw).sharp
                    and topo.graph.has_edge(sw, gpu)}
            common = here if common is None else common & here
        if not common:
            return None
        found[node] = min(common)
    return found


def nvls_heads(topo: Topology, gpus: Sequence[str]) -> list[list[str]] | None:
    """Per node, the heads: the group's GPUs on distinct NIC rails, one per rail in rank
    order.  None if the nodes have different numbers of heads."""
    heads: list[list[str]] = []
    for node_gpus in _node_order(topo, gpus).values():
        by_rail: dict[int | None, str] = {}
        for gpu in node_gpus:
            by_rail.setdefault(gpu_rail(topo, gpu), gpu)
        heads.append([g for r, g in by_rail.items() if r is not None])
    if len({len(h) for h in heads}) != 1 or not heads[0]:
        return None
    return heads


def double_trees(num_nodes: int) -> tuple[list[list[tuple[int, int]]], int]:
    """NCCL's double binary tree over ``num_nodes`` positions: per tree its (child, parent)
    edges, and the depth.  Tree 0 in heap order, tree 1 its mirror image."""
    trees: list[list[tuple[int, int]]] = []
    for tree in range(2):
        order = list(range(num_nodes)) if tree == 0 else list(range(num_nodes))[::-1]
        trees.append([(order[p], order[(p - 1) // 2]) for p in range(1, num_nodes)])
    depth = (num_nodes).bit_length() - 1
    return trees, depth


def _check(topo: Topology, gpus: list[str], algorithm: str) -> dict[int, str]:
    switches = nvls_switches(topo, gpus)
    if switches is None:
        raise ConfigError(f"{algorithm} needs every node's GPUs on an NVSwitch that reduces "
                          f"(NVLink SHARP, as in dgx-h100 nodes)",
                          hint="use algorithm ring, tree or auto")
    return switches


def _intra_streams(b: _Builder, per_node: dict[int, list[str]], switches: dict[int, str],
                   heads: set[str], units: float, efficiency: float
                   ) -> tuple[dict[LinkId, float], float]:
    """NVLink port loads of the two NVLS passes, in stream units (``units`` streams make
    ``S``), and the latency of the two passes over the longest GPU-switch-GPU way."""
    topo = b.topo
    streams: dict[LinkId, float] = {}
    way_s = 0.0
    for node, node_gpus in per_node.items():
        sw = switches[node]
        node_heads = sum(1 for g in node_gpus if g in heads)
        for gpu in node_gpus:
            # Every slice's load reads S in all from this GPU (and every store writes S
            # into it); a head also receives and stores its own slice, S/heads.
            share = 1.0 + (1.0 / node_heads if gpu in heads else 0.0)
            load = units * share / efficiency
            up, down = topo.link(gpu, sw), topo.link(sw, gpu)
            streams[up.id] = streams.get(up.id, 0.0) + load
            streams[down.id] = streams.get(down.id, 0.0) + load
            way_s = max(way_s, up.latency_s + down.latency_s)
    return streams, 2 * way_s


def add_aggregation_trees(b: _Builder, heads: list[list[str]],
                          streams: dict[LinkId, float]) -> float:
    """Add to ``streams`` the SHARP aggregation tree of each head slot (one per NIC rail,
    over every node's head GPU in that slot); the slowest tree's latency in seconds."""
    tree_s = 0.0
    for slot in range(len(heads[0])):
        slot_gpus = [node_heads[slot] for node_heads in heads]
        links, latency_s = aggregation_tree(b, slot_gpus, gpu_rail(b.topo, slot_gpus[0]))
        for link, weight in links.items():
            streams[link] = streams.get(link, 0.0) + weight
        tree_s = max(tree_s, latency_s)
    return tree_s


def _plan(op: str, algorithm: str, n: int, channels: int, step: StepShape,
          params: CommParams) -> CollectivePlan:
    return CollectivePlan(op, algorithm, "simple", n, channels, (step,),
                          params.base_latency_s[algorithm]["simple"],
                          params.protocol_efficiency["simple"], params.chunk_bytes["simple"])


def nvls_plan(b: _Builder, gpus: list[str], op: str, params: CommParams) -> CollectivePlan:
    """NVLS all-reduce: in the switch on one node; with SHARP switches across nodes."""
    topo = b.topo
    switches = _check(topo, gpus, "nvls")
    per_node = _node_order(topo, gpus)
    nvlink_s = params.hop_latency_s["nvls"]["nvlink"]["simple"]
    if len(per_node) == 1:
        # Every GPU heads one slice: stream unit S/n, n units of load plus one of result.
        n = len(gpus)
        streams, way_s = _intra_streams(b, per_node, switches, set(gpus), n,
                                        params.nvls_efficiency)
        step = StepShape(streams, 1.0 / n, nvlink_s + way_s, pipeline_hops=1)
        return _plan(op, "nvls", n, 1, step, params)
    heads = nvls_heads(topo, gpus)
    if heads is None:
        raise ConfigError("nvls across nodes needs the same number of NIC rails on every node")
    h = len(heads[0])
    streams, way_s = _intra_streams(b, per_node, switches, {g for hs in heads for g in hs},
                                    h, params.nvls_efficiency)
    tree_s = add_aggregation_trees(b, heads, streams)
    latency = nvlink_s + params.hop_latency_s["nvls"]["net"]["simple"] + way_s + tree_s
    # Load, up the aggregation tree, down, store: four stages.
    step = StepShape(streams, 1.0 / h, latency, pipeline_hops=3)
    return _plan(op, "nvls", len(gpus), h, step, params)


def nvls_tree_plan(b: _Builder, gpus: list[str], op: str,
                   params: CommParams) -> CollectivePlan:
    """NVLS inside each node, a double binary tree over the nodes for every head's slice."""
    topo = b.topo
    switches = _check(topo, gpus, "nvls_tree")
    per_node = _node_order(topo, gpus)
    heads = nvls_heads(topo, gpus) if len(per_node) > 1 else None
    if heads is None:
        raise ConfigError("nvls_tree needs the group on two or more nodes with the same "
                          "number of NIC rails each", hint="use nvls on one node, or auto")
    h = len(heads[0])
    # Stream unit: half a head's slice, S/(2h); 2h units make S.
    streams, way_s = _intra_streams(b, per_node, switches, {g for hs in heads for g in hs},
                                    2 * h, params.nvls_efficiency)
    trees, depth = double_trees(len(heads))
    hop_s = 0.0
    for slot in range(h):
        rail = gpu_rail(topo, heads[0][slot])
        for edges in trees:
            for child, parent in edges:
                a, c = heads[child][slot], heads[parent][slot]
                # Heads on different rails (a group placed unevenly on its nodes) send from
                # and to their own NICs, across the spines, as NCCL's tree channels do.
                same = gpu_rail(topo, a) == gpu_rail(topo, c)
                for src, dst in ((a, c), (c, a)):
                    route = b.route(src, dst, rail if same else None)
                    b.add(streams, route)
                    hop_s = max(hop_s, route.latency_s)
    net_s = params.hop_latency_s["nvls_tree"]["net"]["simple"]
    latency = (params.hop_latency_s["nvls_tree"]["nvlink"]["simple"] + way_s
               + 2 * depth * (net_s + hop_s))
    step = StepShape(streams, 1.0 / (2 * h), latency, pipeline_hops=2 * depth + 1)
    return _plan(op, "nvls_tree", len(gpus), h, step, params)
