"""PAT (Parallel Aggregated Trees): reduce-scatter and all-gather in log2(n) network steps.

NCCL >= 2.23 runs reduce-scatter and all-gather with PAT when a communicator has one GPU
per node (``tuning.cc`` ``ncclPatEnable``: ``nNodes == nRanks``, a host-driven network,
``NCCL_PAT_ENABLE`` unset) and only with the Simple protocol.  Where a ring needs ``n-1``
steps, each waiting for the previous one's data to cross the network, PAT exchanges with
peers at doubling distances, so a call waits for ``ceil(log2 n)`` network steps.  It moves
the same bytes per rank as the ring: at distance ``2^k`` a rank forwards the
``min(2^k, n - 2^k)`` blocks of ``S/n`` it has gathered so far (all-gather; a
reduce-scatter runs the same exchanges in reverse order, sending partial sums), and
``sum_k min(2^k, n - 2^k) = n - 1``: ``(n-1)/n·S`` out of and into every rank.

NCCL's tuner (``src/graph/tuning.cc``, 2.23-2.27) prices PAT as

* latency ``8 us + log2(nodes) · 14 us / 3.5 + 2.8 us · nRanks`` — the base latency, the
  tree's network latency (used whenever ``ppn == 1``) over 3.5 per log step, and a linear
  term per rank that NCCL's comment says the implementation still has;
* bandwidth ``0.75 ×`` the ring's bus bandwidth.

The model takes the base and the per-step latency from
:class:`~collectives.params.CommParams` (``pat`` rows), adds the physical route latency
per step, charges :data:`PAT_PER_RANK_LATENCY_S` per rank, and runs every byte at
:data:`PAT_BANDWIDTH_EFFICIENCY` of the link rate (each PAT byte holds a link for
``1/0.75`` of a byte's time).  The plan has one step per distance, each with its own
fraction and peers, so under contention every step's routes are what they are.  Steps are
counted as ``ceil(log2 n)`` — the exchanges there are; NCCL's estimate uses
``floor(log2 n)``, one step (4 us) less when ``n`` is not a power of two.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from distsim_gpu.collectives.algorithms import _Builder
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["PAT_BANDWIDTH_EFFICIENCY", "PAT_OPS", "PAT_PER_RANK_LATENCY_S", "pat_applies",
           "pat_plan", "pat_steps"]

LinkId = Hashable

#: The operations PAT implements (NCCL 2.23+: reduce-scatter and all-gather only).
PAT_OPS = ("reduce_scatter", "all_gather")
#: PAT's bandwidth as a fraction of the ring's (NCCL ``tuning.cc``: ``busBw *= .75``).
PAT_BANDWIDTH_EFFICIENCY = 0.75
#: Latency per rank of the call (NCCL ``tuning.cc``: ``nRanks * 2.8`` us, "still a linear
#: part").
PAT_PER_RANK_LATENCY_S = 2.8e-6


def pat_applies(topo: Topology, gpus: Sequence[str]) -> bool:
    """Whether NCCL would enable PAT for this group: two or more GPUs, one per node."""
    nodes = {topo.node_of(g) for g in gpus}
    return len(gpus) >= 2 and len(nodes) == len(gpus)


def pat_steps(n: int) -> list[tuple[int, int]]:
    """All-gather order of PAT's exchanges over ``n`` ranks: per step, the peer distance
    ``2^k`` and the number of ``S/n`` blocks each rank sends (``min(2^k, n - 2^k)``).

    ``ceil(log2 n)`` steps whose blocks add up to ``n - 1``; a reduce-scatter runs them in
    reverse order.
    """
    steps: list[tuple[int, int]] = []
    distance = 1
    while distance < n:
        steps.append((distance, min(distance, n - distance)))
        distance *= 2
    return steps


def pat_plan(b: _Builder, gpus: list[str], op: str, params: CommParams) -> CollectivePlan:
    """PAT reduce-scatter or all-gather over one GPU per node (see the module docstring)."""
    topo = b.topo
    if op not in PAT_OPS:
        raise ConfigError(f"the pat algorithm implements {', '.join(PAT_OPS)} only, not {op}",
                          hint="use algorithm ring or auto")
    if not pat_applies(topo, gpus):
        raise ConfigError("pat needs the group on two or more nodes with one GPU on each "
                          f"(got {len(gpus)} GPUs on "
                          f"{len({topo.node_of(g) for g in gpus})} nodes), as NCCL enables "
                          "PAT only then", hint="use algorithm ring or auto")
    ordered = sorted(gpus, key=topo.rank_of)
    n = len(ordered)
    schedule = pat_steps(n)
    if op == "reduce_scatter":
        schedule = schedule[::-1]
    weight = 1.0 / PAT_BANDWIDTH_EFFICIENCY
    steps: list[StepShape] = []
    for distance, blocks in schedule:
        streams: dict[LinkId, float] = {}
        latency_s = 0.0
        for i, src in enumerate(ordered):
            # All-gather forwards what it holds to the rank behind; reduce-scatter sends
            # partial sums ahead: the same exchanges, mirrored.
            peer = i - distance if op == "all_gather" else i + distance
            route = b.route(src, ordered[peer % n], None)
            b.add(streams, route, weight)
            latency_s = max(latency_s, b.hop_latency_s(route))
        steps.append(StepShape(streams, blocks / n, latency_s))
    base_s = params.base_latency_s["pat"]["simple"] + n * PAT_PER_RANK_LATENCY_S
    return CollectivePlan(op, "pat", "simple", n, 1, tuple(steps), base_s,
                          params.protocol_efficiency["simple"], params.chunk_bytes["simple"])
