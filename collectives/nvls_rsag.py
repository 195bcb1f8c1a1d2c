"""NVLink SHARP (NVLS) reduce-scatter and all-gather: one pass through the NVSwitch.

NCCL (>= 2.19, ``src/device/reduce_scatter.h``, ``all_gather.h``) runs both over an
NVSwitch that reduces and multicasts (:mod:`collectives.nvls`): a reduce-scatter's head
GPU of each slice loads it through the switch, which reads the slice from every GPU and
returns the sum (``multimem.ld_reduce``); an all-gather's GPUs each store their slice
once through the switch, which writes it into every GPU (``multimem.st``).  So on one
node each GPU's NVLink port carries, as NCCL's maintainers put it (NVIDIA/nccl#1083):

* reduce-scatter: ``S`` towards the switch, ``S/n`` back;
* all-gather: ``S/n`` towards the switch, ``S`` back;

against the ring's ``(n-1)/n·S`` each way.  Fewer bytes in all, but more in the busier
direction, and at NVLS's efficiency (0.85 of the link rate on Hopper) instead of the
link's: a large NVLS reduce-scatter or all-gather is *slower* than the ring
(``S/(0.85·B)`` against ``(n-1)/n·S/B``), which is why NCCL's tuner keeps the ring for
them (NVIDIA/nccl#1047, #1670); NVLS's latency (25 us, no base latency) is lower than the
Simple ring's, but LL and LL128 rings are lower still at the sizes where latency counts.

Across nodes NCCL runs them only with CollNet (SHARP switches in the fabric, a plugin with
``iallgather``/``ireducescatter``) and one NIC per local GPU (``tuning.cc``: every local
rank must be a head).  Head ``h`` of every node (:func:`collectives.nvls.nvls_heads`)
sends its rail's portion ``S/h`` into that rail's aggregation tree
(:func:`collectives.sharp.aggregation_tree`), which reduces it (reduce-scatter) or
multicasts it (all-gather).  Every tree link is charged ``S/h`` each way: exact in the
aggregated direction (reduce-scatter up, all-gather down), an upper bound in the other.
Latency (``tuning.cc``): 25 us through the NVSwitch, plus 18 us through the network
across nodes, plus the physical route latencies.  Simple protocol only.
"""

from __future__ import annotations

from collections.abc import Hashable

from distsim_gpu.collectives.algorithms import _Builder, _node_order
from distsim_gpu.collectives.nvls import add_aggregation_trees, nvls_heads, nvls_switches
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["NVLS_RSAG_OPS", "nvls_rsag_applies", "nvls_rsag_plan"]

LinkId = Hashable

#: The operations this module plans.
NVLS_RSAG_OPS = ("reduce_scatter", "all_gather")


def _heads_cover_group(topo: Topology, gpus: list[str]) -> list[list[str]] | None:
    """Per node its heads, if every GPU of the group is one and nodes hold two or more."""
    heads = nvls_heads(topo, gpus)
    if heads is None or len(heads[0]) < 2 or sum(len(h) for h in heads) != len(gpus):
        return None
    return heads


def nvls_rsag_applies(topo: Topology, gpus: list[str], fabric_sharp: bool) -> bool:
    """Whether NCCL would offer NVLS for a reduce-scatter/all-gather over ``gpus``: two or
    more GPUs on NVSwitches that reduce; across nodes also a fabric that aggregates and
    a NIC rail of its own for every GPU."""
    if len(gpus) < 2 or nvls_switches(topo, gpus) is None:
        return False
    if len({topo.node_of(g) for g in gpus}) == 1:
        return True
    return fabric_sharp and _heads_cover_group(topo, gpus) is not None


def _port_loads(b: _Builder, per_node: dict[int, list[str]], switches: dict[int, str],
                op: str, units: float, efficiency: float
                ) -> tuple[dict[LinkId, float], float]:
    """NVLink port loads in stream units (``units`` make ``S``): the busy direction ``S``,
    the other ``S/units``; and the longest GPU-switch-GPU way."""
    topo = b.topo
    streams: dict[LinkId, float] = {}
    way_s = 0.0
    to_switch, from_switch = (units, 1.0) if op == "reduce_scatter" else (1.0, units)
    for node, node_gpus in per_node.items():
        sw = switches[node]
        for gpu in node_gpus:
            up, down = topo.link(gpu, sw), topo.link(sw, gpu)
            streams[up.id] = streams.get(up.id, 0.0) + to_switch / efficiency
            streams[down.id] = streams.get(down.id, 0.0) + from_switch / efficiency
            way_s = max(way_s, up.latency_s + down.latency_s)
    return streams, way_s


def nvls_rsag_plan(b: _Builder, gpus: list[str], op: str,
                   params: CommParams) -> CollectivePlan:
    """NVLS reduce-scatter or all-gather: in the switch on one node, with SHARP across."""
    topo = b.topo
    if op not in NVLS_RSAG_OPS:
        raise ConfigError(f"nvls_rsag_plan plans {', '.join(NVLS_RSAG_OPS)}, not {op}")
    switches = nvls_switches(topo, gpus)
    if switches is None:
        raise ConfigError(f"nvls needs every node's GPUs on an NVSwitch that reduces "
                          f"(NVLink SHARP, as in dgx-h100 nodes) for {op}",
                          hint="use algorithm ring or auto")
    per_node = _node_order(topo, gpus)
    nvlink_s = params.hop_latency_s["nvls"]["nvlink"]["simple"]
    n = len(gpus)
    if len(per_node) == 1:
        streams, way_s = _port_loads(b, per_node, switches, op, n, params.nvls_efficiency)
        # One pass through the switch: nothing to pipeline behind it.
        step = StepShape(streams, 1.0 / n, nvlink_s + way_s)
        return _plan(op, n, 1, step, params)
    heads = _heads_cover_group(topo, gpus)
    if heads is None:
        raise ConfigError(f"nvls {op} across nodes needs two or more GPUs per node, each on "
                          "a NIC rail of its own (NCCL: one NIC per local GPU)",
                          hint="use algorithm ring, pat or auto")
    h = len(heads[0])
    streams, way_s = _port_loads(b, per_node, switches, op, h, params.nvls_efficiency)
    tree_s = add_aggregation_trees(b, heads, streams)
    latency_s = nvlink_s + params.hop_latency_s["nvls"]["net"]["simple"] + way_s + tree_s
    # Three stages: through the switch, up the tree, down it (all-gather: the reverse).
    step = StepShape(streams, 1.0 / h, latency_s, pipeline_hops=2)
    return _plan(op, n, h, step, params)


def _plan(op: str, n: int, channels: int, step: StepShape,
          params: CommParams) -> CollectivePlan:
    return CollectivePlan(op, "nvls", "simple", n, channels, (step,),
                          params.base_latency_s["nvls"]["simple"],
                          params.protocol_efficiency["simple"], params.chunk_bytes["simple"])
