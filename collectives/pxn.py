"""PXN (PCI x NVLink): sends to another node's GPU leave through the NIC of its rail.

Without PXN a GPU sends through its own NIC and the receiver takes the data on its own
NIC, so a send between GPUs on different rails crosses from one rail to the other in the
fabric — through the spines of a rail-optimized fabric, the tier it is built to keep
traffic off.  NCCL >= 2.12 (``NCCL_PXN_DISABLE=0``, ``NCCL_P2P_PXN_LEVEL=2`` by default;
NVIDIA's "Doubling all2all performance with NCCL 2.12") moves the data first over NVLink
to the sender-side GPU that sits on the *receiver's* rail, whose NIC then sends it to the
receiver's NIC: same rail at both ends, one leaf on a rail-optimized fabric.

PXN applies where the intermediate GPU is reachable over NVLink (NCCL checks for an
NVLink path) and the two GPUs' rails differ; otherwise a send goes straight.  The plans
here serve ``alltoall`` (every rank sends ``S/n`` to every other), ``sendrecv`` (to the
next rank) and ``p2p``; their latency is the ring algorithm's: base latency, the slowest
send's hop latencies (its NVLink hop and its network hop) and, for an all-to-all, the
per-peer term of :func:`collectives.algorithms.alltoall_peer_latency_s`.  Which GPU
forwards is :func:`collectives.rails.pxn_proxy`, the same choice a ring's hop makes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from distsim_gpu.collectives.algorithms import _Builder, alltoall_peer_latency_s
from distsim_gpu.collectives.plan import StepShape
from distsim_gpu.collectives.rails import pxn_proxy
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["pxn_applies", "pxn_proxy", "pxn_step"]

LinkId = Hashable


def pxn_applies(topo: Topology, pairs: Sequence[tuple[str, str]]) -> bool:
    """Whether any of the sends ``src -> dst`` would go through a PXN proxy."""
    rails: dict[str, int | None] = {}
    return any(pxn_proxy(topo, src, dst, rails) is not None for src, dst in pairs)


def _send(b: _Builder, streams: dict[LinkId, float], src: str, dst: str,
          rails: dict[str, int | None]) -> float:
    """Add one stream ``src -> dst`` as PXN sends it; return its hop latency."""
    proxy = pxn_proxy(b.topo, src, dst, rails)
    return b.relayed_send(streams, src, dst, rails[dst] if proxy is not None else None, proxy)


def pxn_step(b: _Builder, op: str, gpus: list[str], peer: str | None = None) -> StepShape:
    """The one step of ``op`` (alltoall, sendrecv or p2p) with PXN sends."""
    topo = b.topo
    if op == "alltoall":
        pairs = [(s, d) for s in gpus for d in gpus if s != d]
        fraction = 1.0 / len(gpus)
    elif op == "sendrecv":
        ordered = sorted(gpus, key=topo.rank_of)
        pairs = [(s, ordered[(i + 1) % len(ordered)]) for i, s in enumerate(ordered)]
        fraction = 1.0
    elif op == "p2p" and peer is not None:
        pairs = [(gpus[0], peer)]
        fraction = 1.0
    else:
        raise ConfigError(f"pxn implements alltoall, sendrecv and p2p (with a peer), not {op}",
                          hint="use algorithm ring or auto")
    streams: dict[LinkId, float] = {}
    rails: dict[str, int | None] = {}
    latency = 0.0
    for src, dst in pairs:
        latency = max(latency, _send(b, streams, src, dst, rails))
    if op == "alltoall":
        latency += alltoall_peer_latency_s(b, gpus)
    return StepShape(streams, fraction, latency)
