"""DeepEP's expert-parallel dispatch and combine: one copy per destination, two hops.

DeepEP's normal (training and prefill) kernels, as its README and the DeepSeek-V3 report
(arXiv 2412.19437, §2.1.2 node-limited routing, §3.2.2) describe them, send a token not
once per expert it is routed to, as an all-to-all of ``top_k`` copies does, but:

* **once per destination GPU** holding at least one of its experts (the GPU expands it to
  its local experts), over NVLink inside the sender's node;
* **once per destination node** over InfiniBand, to the GPU with the sender's local index
  on that node (the same NIC rail: no spine hop on a rail-optimised fabric), which
  **forwards** it over NVLink to that node's destination GPUs;
* with **node-limited routing** a token's experts lie on at most ``M`` nodes (DeepSeek-V3:
  4), so its InfiniBand copies are at most ``M − 1``.

The combine sends the experts' outputs back the same way (the forwarding GPU sums a
node's contributions before the InfiniBand hop), so both are one plan.  Under a uniform
router of ``k`` experts out of ``E`` over ``n`` ranks on ``N`` nodes (:func:`reach`):

    P(token reaches a given GPU)  = 1 − C(E − E/n, k) / C(E, k)
    P(token reaches a given node) = 1 − C(E − E/N, k) / C(E, k)

and with a node limit ``M < N`` each token picks ``M`` nodes and its ``k`` experts among
their ``M·E/N``: a node with probability ``M/N``, a GPU of a picked node with
``1 − C(M·E/N − E/n, k) / C(M·E/N, k)``.  The plan's streams are relative to a flat
all-to-all of the same ``S`` (``k`` copies of every token: ``S/n`` per pair), so the
iteration's bytes stay the router's and the plan says how many of them move where.

NVIDIA's HybridEP runs the same two hops; ``communication.ep_kernels`` says whose kernels
a run uses and so the defaults of their figures (:mod:`collectives.ep_kernels`).  The
copies inside a node reach ``deepep_nvlink_efficiency`` of the payload rate NCCL's reach on
the same NVLink (DeepEP's 0.84, fitted on its own intranode H800 rows; HybridEP's 0.90, on
its 8-rank Blackwell rows): the NVLink legs' streams count ``1/efficiency`` each, the time
they hold the links, as NVLink SHARP's do.  The InfiniBand leg is the NIC's RDMA, at the
network's rate.

The SMs DeepEP's kernels run on (``deepep_sms``, a run's ``compute.comm_sms``) bound their
rate: an SM spends ``deepep_sm_token_s`` on each token and moves its bytes at
``deepep_sm_bytes_per_s`` (B200's SM sweep, :data:`~collectives.ep_kernels.DEEPEP_SM_TOKEN_S`
and :data:`~collectives.ep_kernels.DEEPEP_SM_BYTES_PER_S`: FP8 tokens, half the bytes, move
at 0.67 of the BF16 tokens' byte rate; HybridEP's, a byte rate of 0, bind nothing), so a
GPU's NVLink copies of tokens of ``B`` bytes leave it at most at ``sms · B / (t + B /
rate)``; when that is below what its NVLink ports give them (:func:`nvlink_copy_rate`)
each NVLink leg's stream holds its link longer by the ratio (:func:`sm_bound_factor`;
traffic beside them on those links then gets less of them than the bytes alone would
leave it).  ``B`` is the exchange's size over the token copies it carries
(``CommParams.token_bytes``): a dispatch's and a combine's differ under FP8, so each size
gets its own plan.  On Hopper the 20-24 SMs DeepEP runs on outpace NVLink for
DeepSeek-V3's 16-bit tokens (7,168 wide) and nothing changes;
narrower tokens (Qwen3-235B's 4,096) bind there, and on Blackwell's NVLink most do.  The
InfiniBand leg, a NIC's 50-100 GB/s, is not bounded; the SMs the kernels take from compute are
``compute.comm_sms`` too (:mod:`workloads.cost.compute.roofline`).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

from distsim_gpu.collectives.algorithms import _Builder, _node_order, gpu_rail
from distsim_gpu.collectives.alltoall_hier import _pipelined, _plan, _Step, _weights
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.collectives.plan import CollectivePlan, StepShape
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology

__all__ = ["deepep_plan", "deepep_plans", "nvlink_copy_rate", "reach", "sm_bound_factor"]


def _hit(pool: int, held: int, top_k: int) -> float:
    """P(at least one of ``held`` experts among ``top_k`` drawn from ``pool``)."""
    if held >= pool or top_k >= pool - held + 1:
        return 1.0
    return 1.0 - comb(pool - held, top_k) / comb(pool, top_k)


def reach(*, ranks: int, nodes: int, experts: int, top_k: int,
          max_nodes: int = 0) -> tuple[float, float]:
    """``(P(a token reaches a given GPU), P(it reaches a given node))`` under a uniform
    router of ``top_k`` of ``experts`` over ``ranks`` GPUs on ``nodes`` nodes, each token's
    experts on at most ``max_nodes`` nodes (0: no limit); see the module docstring."""
    if experts % ranks or ranks % nodes or not 1 <= top_k <= experts:
        raise ConfigError(f"{experts} experts top-{top_k} do not spread evenly over "
                          f"{ranks} ranks on {nodes} nodes", key="communication.all_to_all",
                          hint="deepep needs whole experts per rank and ranks per node")
    per_gpu = experts // ranks
    if max_nodes and max_nodes < nodes:
        pool = max_nodes * experts // nodes
        node = max_nodes / nodes
        return node * _hit(pool, per_gpu, min(top_k, pool)), node
    return _hit(experts, per_gpu, top_k), _hit(experts, experts // nodes, top_k)


def deepep_plan(b: _Builder, gpus: Sequence[str],
                weights: Sequence[float] | None = None, token_bytes: float = 0.0,
                ) -> CollectivePlan:
    """The dispatch (or combine) over ``gpus`` as one pipelined step: NVLink sends inside
    each node, one InfiniBand send per (GPU, other node) to the same-rail GPU there, and
    that GPU's NVLink forwarding (module docstring).  ``weights``: receive weights per
    rank (a skewed router), as for the flat all-to-all; ``token_bytes``: a token's bytes
    (0: not known), for the SMs' bound."""
    params, topo = b.params, b.topo
    n = len(gpus)
    w = dict(zip(gpus, _weights(gpus, weights), strict=True))
    per_node = _node_order(topo, gpus)
    if params.moe_experts < 2 or params.moe_top_k < 1:
        raise ConfigError("all_to_all: deepep needs a MoE model's router (experts, top_k)",
                          key="communication.all_to_all", hint="use flat for other models")
    p_gpu, p_node = reach(ranks=n, nodes=len(per_node), experts=params.moe_experts,
                          top_k=params.moe_top_k, max_nodes=params.deepep_max_nodes)
    # Streams relative to S/n, S being top_k copies of every token (module docstring).
    per_gpu, per_node_copy = p_gpu * n / params.moe_top_k, p_node * n / params.moe_top_k
    # An NVLink copy's hold: its kernels' fraction of the link, and their SMs' bound.
    copy = per_gpu / params.deepep_nvlink_efficiency * sm_bound_factor(topo, params,
                                                                       token_bytes)
    local, network, forward = _Step(b), _Step(b), _Step(b)
    # A relay forwards what every other node's same-rail GPU sent it: one send per
    # (relay, destination) with their sum, not one per sender (a third of the sends).
    forwarded: dict[tuple[str, str], float] = {}
    for node, members in per_node.items():
        for src in members:
            for dst in members:
                local.send(src, dst, copy * w[dst])
            rail = gpu_rail(topo, src)
            for other, remote in per_node.items():
                if other == node:
                    continue
                relay = _same_rail(topo, remote, rail, members.index(src))
                share = sum(w[d] for d in remote) / len(remote)
                network.send(src, relay, per_node_copy * share, rail)
                for dst in remote:
                    forwarded[relay, dst] = forwarded.get((relay, dst), 0.0) + copy * w[dst]
    for (relay, dst), count in forwarded.items():
        forward.send(relay, dst, count)
    fraction = 1.0 / n
    legs = [s for s in (local.shape(fraction), network.shape(fraction),
                        forward.shape(fraction)) if s is not None]
    steps: list[StepShape] = [_pipelined(legs)] if legs else []
    return _plan(b, n, steps, "deepep")


def deepep_plans(topo: Topology, group: Sequence[str], params: CommParams,
                 protocol: str, token_bytes: float = 0.0) -> list[CollectivePlan]:
    """``all_to_all: deepep``'s plan for an exchange of tokens of ``token_bytes`` over
    ``group`` (one candidate), with ``params.alltoall_weights`` when the group has that
    many ranks."""
    gpus = list(group)
    weights = params.alltoall_weights if len(params.alltoall_weights) == len(gpus) else None
    return [deepep_plan(_Builder(topo, params, "ring", protocol), gpus, weights,
                        token_bytes)]


def nvlink_copy_rate(topo: Topology, params: CommParams) -> float:
    """Bytes per second DeepEP's NVLink copies leave one GPU at (its NVLink ports at the
    payload efficiency and ``deepep_nvlink_efficiency``; the first GPU's, a cluster's
    nodes being alike); 0 without NVLink."""
    gpu = next(iter(topo.gpus))
    ports = sum(link.bandwidth_bytes_per_s for link in topo.links()
                if link.src == gpu and link.kind == "nvlink")
    return ports * params.efficiency_of("nvlink") * params.deepep_nvlink_efficiency


def sm_bound_factor(topo: Topology, params: CommParams, token_bytes: float = 0.0) -> float:
    """How much longer DeepEP's NVLink copies of tokens of ``token_bytes`` (0: not known,
    their bytes alone counted) hold their links than NVLink alone would have them (module
    docstring): the NVLink copy rate over what ``params.deepep_sms`` SMs move, at least 1;
    1 when the SMs are not counted or there is no NVLink."""
    link_rate = nvlink_copy_rate(topo, params)
    sm_rate = params.deepep_sms * params.deepep_sm_rate(token_bytes)
    if not sm_rate or not link_rate:
        return 1.0
    return max(1.0, link_rate / sm_rate)


def _same_rail(topo: Topology, remote: Sequence[str], rail: int | None, index: int) -> str:
    """The GPU of a remote node on ``rail`` (else the one at the sender's local index)."""
    for gpu in remote:
        if rail is not None and gpu_rail(topo, gpu) == rail:
            return gpu
    return remote[index % len(remote)]
