"""Rails as NCCL uses them: which NICs a group's rings use, how each node's GPUs are
ordered in a ring, and through which GPU a send reaches its NIC (PXN).

NCCL searches its rings per node (``src/graph/search.cc``, ``ncclTopoSearchRecNet``): a
ring channel enters the node from a NIC at a GPU local to that NIC (the NIC's ``localGpu``
first, then the others behind its PCIe switch), crosses the node's GPUs over NVLink and
leaves by a NIC.  With ``NCCL_CROSS_NIC`` at its default (2) the search first asks that a
ring leave by the NIC it entered by — one rail end to end across nodes — and only allows
another NIC if that finds nothing as fast.  Before giving up on one rail it relaxes the
GPU-to-NIC path it accepts from "same PCIe switch" to PXN: ``src/graph/paths.cc`` gives a
GPU a path to a NIC *through another GPU of the communicator* when that GPU sits beside the
NIC and the two share NVLink (``NCCL_PXN_DISABLE=0`` by default), only in the send
direction ("receiving locally and sending remotely").  So a ring that leaves from a GPU
far from the rail's NIC forwards over NVLink to the GPU beside it, whose NIC sends; it
never sends over the CPU socket link while such a GPU exists.

One channel per NIC that the group's GPUs sit beside (as the search opens one per NIC it
selects, ``ncclTopoSelectNets``), on one rail across nodes wherever the group sits on every
node alike (a data-parallel group of a tp/pp/dp split does); within each node the ring
enters at a GPU beside the channel's NIC, leaves from another one if the group has it, else
from a GPU that forwards through one (:func:`pxn_proxy`).  Where a group's GPUs sit beside
different NICs on different nodes (the first and last pipeline stage's embedding group)
NCCL's rings cross rails in the fabric; routes here keep one NIC index at both ends, so the
sender forwards over NVLink to the GPU beside the receiver's NIC instead (a GPU of the
group if one is there, else any of the node): the bytes still never cross a socket.
"""

from __future__ import annotations

from collections.abc import Iterable

from distsim_gpu.collectives.meshrings import mesh_path
from distsim_gpu.simcore.errors import TopologyError
from distsim_gpu.topology import Topology

__all__ = ["channel_rails", "node_segment", "pxn_proxy"]


def pxn_proxy(topo: Topology, src: str, dst: str,
              rails: dict[str, int | None] | None = None, *, rail: int | None = None,
              among: Iterable[str] | None = None) -> str | None:
    """The GPU on ``src``'s node that forwards a send to ``dst`` through its NIC, or None
    when the send goes straight (same node, ``src`` already on the rail, no NVLink path,
    no NIC).

    Point-to-point (``among`` None): the send must reach ``dst``'s own rail and any GPU of
    the node whose own rail that is may forward (NCCL's P2P PXN, NCCL >= 2.12).  A ring's
    hop (``among`` given): the send must leave on ``rail``, ``src`` goes straight if that
    NIC is beside it, and the first of the GPUs ``among`` beside the NIC forwards (the
    communicator's on that node first: all NCCL's trimmed topology holds).  Either way NCCL forwards
    only over NVLink.  ``rails`` caches :meth:`Topology.own_rail` per GPU across calls.
    """
    rails = {} if rails is None else rails

    def rail_of(gpu: str) -> int | None:
        if gpu not in rails:
            rails[gpu] = topo.own_rail(gpu)
        return rails[gpu]

    if topo.node_of(src) == topo.node_of(dst):
        return None
    target = rail if rail is not None else rail_of(dst)
    if target is None:
        return None
    if among is None:
        if rail_of(src) == target:
            return None
        # A GPU of another job cannot forward: PXN stages the bytes in the proxy's memory.
        serving = (g for g in topo.gpus_on_node(topo.node_of(src))
                   if rail_of(g) == target and topo.has_rank(g))
    else:
        if target in topo.local_rails(src):
            return None
        serving = (g for g in among if g != src and target in topo.local_rails(g))
    # Lazily: only the first serving GPU counts (a 72-GPU node's every GPU was looked at).
    for gpu in serving:
        # NCCL forwards only over NVLink; without it the send goes straight.
        return gpu if topo.route(src, gpu).transport == "nvlink" else None
    return None


def channel_rails(topo: Topology, per_node: dict[int, list[str]]) -> list[dict[int, int]]:
    """Per ring channel of a group spanning nodes, the NIC rail each node's part of the
    ring enters and leaves by: one channel per NIC beside the group's GPUs (as many as the
    node with the fewest has; the same rail on every node where the group sits alike on
    them).  Raises TopologyError if the first node's GPUs reach no NIC."""
    near = {node: sorted({r for g in gpus for r in topo.local_rails(g)})
            for node, gpus in per_node.items()}
    first = next(iter(near.values()))
    if not first:
        gpu = next(iter(per_node.values()))[0]
        raise TopologyError(f"GPU {gpu} spans nodes but reaches no NIC",
                            hint="give its node NICs linked to the fabric")
    # A node whose GPUs reach no NIC of their own takes the first node's rails.
    near = {node: rails or first for node, rails in near.items()}
    count = min(len(rails) for rails in near.values())
    return [{node: rails[c] for node, rails in near.items()} for c in range(count)]


def node_segment(topo: Topology, gpus: list[str], rail: int) -> list[str]:
    """This node's part of a ring on ``rail``: enter at a GPU beside the rail's NIC, leave
    from another GPU beside it if the group has one (else from the next GPU, whose send a
    GPU beside the NIC forwards: :func:`pxn_proxy`), the rest in between."""
    near = [g for g in gpus if rail in topo.local_rails(g)] or list(gpus)
    # Rails that share the same nearby GPUs take turns as entry, so that each GPU sends
    # for one rail and receives for another instead of one GPU sending for two.
    siblings = sorted({r for g in near for r in topo.local_rails(g)})
    turn = siblings.index(rail) if rail in siblings else 0
    entry = near[turn % len(near)]
    if len(gpus) == 1:
        return [entry]
    if len(near) > 1:
        exit_gpu = near[(turn + 1) % len(near)]
    else:
        exit_gpu = gpus[(gpus.index(entry) + 1) % len(gpus)]
    # In a mesh node the ring crosses the node over direct links where it can.
    through_mesh = mesh_path(topo, gpus, entry, exit_gpu)
    if through_mesh is not None:
        return through_mesh
    middle = [g for g in gpus if g not in (entry, exit_gpu)]
    return [entry, *middle, exit_gpu]
