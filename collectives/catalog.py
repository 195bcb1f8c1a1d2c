"""Every collective algorithm, what it implements, where it can run, and what ``auto`` weighs.

============  ======================================  ==========================================
algorithm     operations                              runs where
============  ======================================  ==========================================
ring          every operation                         anywhere
tree          all_reduce                              anywhere
nvls          all_reduce, reduce_scatter, all_gather  NVSwitches that reduce (NVLink SHARP); across
                                                      nodes also fabric switches that do (SHARP),
                                                      and for reduce_scatter/all_gather a NIC rail
                                                      per GPU
nvls_tree     all_reduce                              two or more such nodes
collnet       all_reduce                              two or more nodes, fabric switches with SHARP
pat           reduce_scatter, all_gather              one GPU on each of two or more nodes
pxn           alltoall, sendrecv, p2p                 sends between rails of different nodes
============  ======================================  ==========================================

``auto`` follows NCCL's tuner (``src/graph/tuning.cc``, ``src/enqueue.cc``): for an
all-reduce every algorithm the hardware offers is a candidate — NVLS only on one node
unless the fabric aggregates too (NCCL enables NVLS across nodes with CollNet only),
NVLS-tree only across nodes — with every protocol it runs (Simple only for NVLS,
NVLS-tree and CollNet), and the one with the least predicted time wins.  A reduce-scatter
or all-gather weighs, as NCCL >= 2.23 does, the ring, NVLS (:mod:`collectives.nvls_rsag`:
on one node; across nodes only where the fabric aggregates and every GPU has its own
NIC rail) and PAT (:mod:`collectives.pat`: one GPU per node).  PXN is not a
tuner choice in NCCL but a transport that is on by default (``NCCL_PXN_DISABLE=0``): an
all-to-all, send/recv or p2p uses it whenever one of its sends crosses rails between
nodes, unless ``pxn: false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from distsim_gpu.collectives.algorithms import OPS, PlanDrafts, _Builder, check_group
from distsim_gpu.collectives.nvls import nvls_heads, nvls_plan, nvls_switches, nvls_tree_plan
from distsim_gpu.collectives.nvls_rsag import NVLS_RSAG_OPS, nvls_rsag_applies, nvls_rsag_plan
from distsim_gpu.collectives.params import ALGORITHMS, PROTOCOLS, CommParams
from distsim_gpu.collectives.pat import PAT_OPS, pat_applies, pat_plan
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.collectives.pxn import pxn_applies, pxn_step
from distsim_gpu.collectives.sharp import collnet_plan, fabric_reduces, head_slots
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["ALGORITHM_OPS", "ALGORITHM_PROTOCOLS", "build_plan", "candidates", "drafted_plan"]

_CONCRETE = tuple(a for a in ALGORITHMS if a != "auto")
_ALL_PROTOCOLS = tuple(p for p in PROTOCOLS if p != "auto")

#: The operations each algorithm implements.
ALGORITHM_OPS = MappingProxyType({
    "ring": OPS, "tree": ("all_reduce",), "nvls": ("all_reduce", *NVLS_RSAG_OPS),
    "nvls_tree": ("all_reduce",), "collnet": ("all_reduce",), "pat": PAT_OPS,
    "pxn": ("alltoall", "sendrecv", "p2p"),
})
#: The NCCL protocols each algorithm runs with.
ALGORITHM_PROTOCOLS = MappingProxyType({
    "ring": _ALL_PROTOCOLS, "tree": _ALL_PROTOCOLS, "nvls": ("simple",),
    "nvls_tree": ("simple",), "collnet": ("simple",), "pat": ("simple",),
    "pxn": _ALL_PROTOCOLS,
})


def build_plan(topo: Topology, group: Sequence[str], op: str, *, algorithm: str,
               protocol: str, params: CommParams, root: str | None = None,
               peer: str | None = None) -> CollectivePlan:
    """The plan of ``op`` over ``group`` with a concrete algorithm and protocol.

    Ring and tree plans come from :class:`collectives.algorithms.PlanDrafts`; the others
    from their modules.  ConfigError names an operation or protocol the algorithm does not
    run, or hardware it needs and the cluster lacks.
    """
    return drafted_plan(PlanDrafts(topo, params), group, op, algorithm=algorithm,
                        protocol=protocol, root=root, peer=peer)


def drafted_plan(drafts: PlanDrafts, group: Sequence[str], op: str, *, algorithm: str,
                 protocol: str, root: str | None = None,
                 peer: str | None = None) -> CollectivePlan:
    """:func:`build_plan` on ``drafts``' topology and params, a ring or tree plan from
    its draft for another protocol where ``drafts`` has one (a Communicator's)."""
    topo, params = drafts.topo, drafts.params
    check_choice(op, OPS, key="op", what="collective")
    check_choice(algorithm, _CONCRETE, key="algorithm")
    if op not in ALGORITHM_OPS[algorithm]:
        raise ConfigError(f"the {algorithm} algorithm implements "
                          f"{', '.join(ALGORITHM_OPS[algorithm])} only, not {op}",
                          hint="use algorithm ring or auto")
    if algorithm in ("ring", "tree"):
        return drafts.plan(group, op, algorithm=algorithm, protocol=protocol, root=root,
                           peer=peer)
    if protocol not in ALGORITHM_PROTOCOLS[algorithm]:
        raise ConfigError(f"the {algorithm} algorithm runs the "
                          f"{'/'.join(ALGORITHM_PROTOCOLS[algorithm])} protocol only, "
                          f"not {protocol}", hint="use protocol simple or auto")
    gpus = check_group(topo, group)
    # A PXN send is a ring-class send to NCCL: the ring's latency tables.
    b = _Builder(topo, params, "ring" if algorithm == "pxn" else algorithm, protocol)
    if algorithm == "pxn":
        return _pxn_plan(b, gpus, op, peer)
    if len(gpus) == 1:
        return CollectivePlan(op, algorithm, protocol, 1, 1, (), 0.0,
                              params.protocol_efficiency[protocol],
                              params.chunk_bytes[protocol])
    if algorithm == "pat":
        return pat_plan(b, gpus, op, params)
    if algorithm == "nvls":
        if op in NVLS_RSAG_OPS:
            return nvls_rsag_plan(b, gpus, op, params)
        return nvls_plan(b, gpus, op, params)
    if algorithm == "nvls_tree":
        return nvls_tree_plan(b, gpus, op, params)
    return collnet_plan(b, gpus, op, params)


def _pxn_plan(b: _Builder, gpus: list[str], op: str, peer: str | None) -> CollectivePlan:
    """PXN sends at the ring's base latency (a send is a ring-class operation to NCCL)."""
    params, protocol = b.params, b.protocol
    n = len(gpus)
    if op == "p2p":
        if peer is None:
            raise ConfigError("a p2p transfer needs a peer")
        steps = (pxn_step(b, op, gpus, peer),)
    else:
        steps = (pxn_step(b, op, gpus),) if n > 1 else ()
    base = params.base_latency_s["ring"][protocol] if steps else 0.0
    return CollectivePlan(op, "pxn", protocol, n, 1, steps, base,
                          params.protocol_efficiency[protocol], params.chunk_bytes[protocol])


def candidates(topo: Topology, group: Sequence[str], op: str, params: CommParams, *,
               peer: str | None = None, fabric_sharp: bool | None = None) -> tuple[str, ...]:
    """The algorithms ``auto`` weighs for ``op`` over ``group`` on this cluster.

    ``fabric_sharp`` is :func:`collectives.sharp.fabric_reduces` of the cluster if the
    caller has it (it looks at every switch), else it is found here.
    """
    check_choice(op, OPS, key="op", what="collective")
    gpus = list(group)
    if op in ALGORITHM_OPS["pxn"]:
        if params.pxn and _pxn_possible(topo, gpus, op, peer):
            return ("pxn",)
        return ("ring",)
    if op in PAT_OPS:
        return _rsag_candidates(topo, gpus, fabric_sharp)
    if op != "all_reduce":
        return ("ring",)
    found = ["ring", "tree"]
    if len(gpus) < 2:
        return tuple(found)
    nodes = {topo.node_of(g) for g in gpus}
    if len(nodes) > 1 and fabric_sharp is None:
        fabric_sharp = fabric_reduces(topo)
    if nvls_switches(topo, gpus) is not None:
        if len(nodes) == 1:
            found.append("nvls")
        elif nvls_heads(topo, gpus) is not None:
            found.append("nvls_tree")
            if fabric_sharp:
                found.append("nvls")
    if len(nodes) > 1 and fabric_sharp and head_slots(topo, gpus) is not None:
        found.append("collnet")
    return tuple(found)


def _rsag_candidates(topo: Topology, gpus: list[str],
                     fabric_sharp: bool | None) -> tuple[str, ...]:
    """Reduce-scatter / all-gather: the ring, NVLS where it runs, PAT with one GPU per node."""
    found = ["ring"]
    if len(gpus) < 2:
        return tuple(found)
    multi_node = len({topo.node_of(g) for g in gpus}) > 1
    if multi_node and fabric_sharp is None:
        fabric_sharp = fabric_reduces(topo)
    if nvls_rsag_applies(topo, gpus, bool(fabric_sharp)):
        found.append("nvls")
    if pat_applies(topo, gpus):
        found.append("pat")
    return tuple(found)


def _pxn_possible(topo: Topology, gpus: list[str], op: str, peer: str | None) -> bool:
    if op == "p2p":
        return peer is not None and pxn_applies(topo, [(gpus[0], peer)])
    if len({topo.node_of(g) for g in gpus}) < 2:
        return False
    if op == "sendrecv":
        ordered = sorted(gpus, key=topo.rank_of)
        return pxn_applies(topo, list(zip(ordered, ordered[1:] + ordered[:1])))
    return pxn_applies(topo, [(s, d) for s in gpus for d in gpus if s != d])
