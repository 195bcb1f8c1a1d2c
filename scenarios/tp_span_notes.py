"""Where a job's tensor-parallel groups sit, said as a note when they leave a node.

Tensor parallelism runs a collective after every block, sized for NVLink.  A TP group
whose GPUs sit on two nodes (NVLink domains) runs them over the NICs instead: a layout
that is legal and simulated as such, but one a reader of the headline time would not
suspect — typically ``tp`` not dividing a rack's NVLink domain, or an order that puts
another dimension inside TP.
"""

from __future__ import annotations

from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.topology.model import Topology
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, Placement

__all__ = ["tp_span_notes"]


def tp_span_notes(parallel: ParallelConfig, topology: Topology) -> list[RunNote]:
    """A ``headline`` note when some of the job's TP groups span nodes; ``topology``: the
    job's GPUs in rank order."""
    gpus = topology.gpus
    if parallel.tp <= 1 or parallel.tp * parallel.dp_cp * parallel.pp != len(gpus):
        return []
    placement = Placement(parallel)
    groups = [placement.tp_group(replica, stage) for stage in range(parallel.pp)
              for replica in range(parallel.dp_cp)]
    split = [g for g in groups if len({topology.node_of(gpus[r]) for r in g}) > 1]
    if not split:
        return []
    first = split[0]
    node_gpus = len(topology.gpus_on_node(topology.node_of(gpus[first[0]])))
    why = (f"tp {parallel.tp} does not divide a node's {node_gpus} GPUs"
           if node_gpus % parallel.tp else
           f"parallelism.order {parallel.order!r} or the job's placement does not keep "
           "each TP group on one node")
    return [RunNote("headline", f"{len(split)} of {len(groups)} tensor-parallel groups span "
                    f"two or more nodes (NVLink domains), e.g. {gpus[first[0]]} … "
                    f"{gpus[first[-1]]}: their per-layer collectives cross the network "
                    f"({why})", "parallelism.tp")]
