"""A Communicator drafts each ring and tree plan once and prices it per protocol
(:class:`collectives.algorithms.PlanDrafts`): its plans must be exactly those built afresh
for the protocol asked, whichever protocol drafted the plan first, and a draft must never
serve a call that differs from the one it was drafted for (root, peer, op, algorithm)."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.algorithms import build_plan, pairs_plan
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster

PROTOCOLS = ("ll", "ll128", "simple")
CLUSTERS = {
    "h100-rail": {"preset": "dgx-h100", "nodes": 4,
                  "fabric": {"kind": "rail-optimized", "oversubscription": 2,
                             "nics_per_leaf": 4}},
    "v100-mesh": {"preset": "dgx1-v100", "nodes": 2},
    "a100": {"preset": "dgx-a100", "nodes": 2},
}


def groups(topo) -> dict[str, list[str]]:
    gpus = list(topo.gpus)
    per_node = [list(topo.gpus_on_node(n)) for n in sorted({topo.node_of(g) for g in gpus})]
    return {"all": gpus, "node": per_node[0], "one per node": [p[0] for p in per_node],
            # Beside different NICs on each node: PXN relays through another GPU.
            "skewed": [per_node[0][0], per_node[1][-1]], "single": gpus[:1]}


def fresh(comm: Communicator, op: str, group: list[str], algorithm: str, protocol: str,
          **where: str | None):
    return build_plan(comm.topology, group, op, algorithm=algorithm, protocol=protocol,
                      params=comm.params, **where)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
@pytest.mark.parametrize("pxn", [True, False])
def test_drafted_plans_are_those_built_afresh_for_each_protocol(cluster, pxn):
    topo = build_cluster(CLUSTERS[cluster])
    params = CommParams(pxn=pxn)
    calls = [(op, "ring") for op in ("all_reduce", "reduce_scatter", "all_gather",
                                     "broadcast", "reduce", "alltoall", "sendrecv")]
    calls.append(("all_reduce", "tree"))
    # Drafted first in ll by one communicator, in simple by the other.
    for order in (PROTOCOLS, PROTOCOLS[::-1]):
        comm = Communicator(Simulation(), topo, params)
        for group in groups(topo).values():
            for op, algorithm in calls:
                for protocol in order:
                    plan = comm.plan(op, group, algorithm=algorithm, protocol=protocol)
                    assert plan == fresh(comm, op, group, algorithm, protocol)
                    assert plan.protocol == protocol


def test_a_draft_serves_only_the_call_it_was_drafted_for():
    topo = build_cluster(CLUSTERS["h100-rail"])
    comm = Communicator(Simulation(), topo)
    group = groups(topo)["one per node"]
    other = groups(topo)["skewed"]
    # Each pair differs only in the root, the peer, the op or the algorithm.
    pairs = [
        (("broadcast", group, "ring", {"root": group[0]}),
         ("broadcast", group, "ring", {"root": group[2]})),
        (("reduce_scatter", group, "ring", {}), ("all_gather", group, "ring", {})),
        (("all_reduce", group, "ring", {}), ("all_reduce", group, "tree", {})),
        (("p2p", other[:1], "ring", {"peer": other[1]}),
         ("p2p", other[:1], "ring", {"peer": group[1]})),
    ]
    for first, second in pairs:
        (op_a, group_a, algo_a, where_a), (op_b, group_b, algo_b, where_b) = first, second
        drafted = comm.plan(op_a, group_a, algorithm=algo_a, protocol="ll", **where_a)
        plan = comm.plan(op_b, group_b, algorithm=algo_b, protocol="simple", **where_b)
        expected = fresh(comm, op_b, group_b, algo_b, "simple", **where_b)
        assert plan == expected
        assert (plan.op, plan.algorithm) == (op_b, algo_b)
        assert drafted == fresh(comm, op_a, group_a, algo_a, "ll", **where_a)


def test_each_protocol_prices_the_same_streams_with_its_own_hop_latencies():
    # One DGX H100: a ring of 8 over NVSwitch, every hop the same transport, so a step's
    # latency is one hop's, the protocol's table entry plus the route's own latency.
    topo = build_cluster({"preset": "dgx-h100", "nodes": 1})
    comm = Communicator(Simulation(), topo)
    gpus = list(topo.gpus)
    route = topo.route(gpus[0], gpus[1])
    table = comm.params.hop_latency_s["ring"][route.transport]
    plans = {p: comm.plan("all_gather", gpus, algorithm="ring", protocol=p) for p in PROTOCOLS}
    for protocol, plan in plans.items():
        (step,) = plan.steps
        assert step.link_streams == plans["simple"].steps[0].link_streams
        assert step.latency_s == pytest.approx(table[protocol] + route.latency_s, rel=1e-12)
        assert plan.base_latency_s == comm.params.base_latency_s["ring"][protocol]
        assert plan.protocol_efficiency == comm.params.protocol_efficiency[protocol]
    assert len({plan.steps[0].latency_s for plan in plans.values()}) == len(PROTOCOLS)


@pytest.mark.parametrize("pxn", [True, False])
def test_drafted_pairs_plans_are_those_built_afresh(pxn):
    topo = build_cluster(CLUSTERS["h100-rail"])
    comm = Communicator(Simulation(), topo, CommParams(pxn=pxn))
    first, second = (list(topo.gpus_on_node(n)) for n in (0, 1))
    # Straight across (one rail each), crossed (PXN relays), and the first crossed pair
    # alone: sets that differ in one pair must not share a draft.
    for pairs in (list(zip(first, second)), list(zip(first, second[::-1])),
                  [(first[0], second[-1])], [(first[0], second[0])]):
        for protocol in PROTOCOLS[::-1]:
            plan = comm.pairs_plan(pairs, 2.0**20, protocol=protocol)
            assert plan == pairs_plan(topo, pairs, protocol=protocol, params=comm.params)
