"""InfiniBand SHARP (CollNet): switches that aggregate take each node's data once.

A SHARP all-reduce sends ``S`` per node into the fabric and takes ``S`` back — where a
ring moves ``2(n-1)/n·S`` per node — and every link of an aggregation tree carries one
reduced stream however many nodes feed it.
"""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.sharp import ARITY_LATENCY_S
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

GiB = 2**30
A100_NIC = 25e9  # HDR 200 Gb/s per direction


def a100(nodes: int, *, sharp: bool = True, kind: str = "rail-optimized", **extra) -> object:
    return build_cluster({"preset": "dgx-a100", "nodes": nodes,
                          "fabric": {"kind": kind, "sharp": sharp}, **extra})


def ideal() -> CommParams:
    return CommParams(protocol="simple").ideal()


def nic_bytes(topo, plan, size: float) -> tuple[dict[int, float], dict[int, float]]:
    """Bytes each node sends into and takes from the fabric under ``plan``."""
    per_stream, links = plan.coflow(size)
    sent = {node: 0.0 for node in range(topo.num_nodes)}
    taken = dict(sent)
    for (src, dst), streams in links.items():
        a, b = topo.device(src), topo.device(dst)
        if a.kind == "nic" and b.node is None:
            sent[a.node] += per_stream * streams
        elif b.kind == "nic" and a.node is None:
            taken[b.node] += per_stream * streams
    return sent, taken


@pytest.mark.parametrize("nodes", [2, 3, 5])
def test_sharp_moves_s_per_node_each_way_where_a_ring_moves_2_n_minus_1_over_n(nodes):
    topo = a100(nodes)
    comm = Communicator(Simulation(), topo, ideal())
    gpus = list(topo.gpus)
    size = 1e9
    collnet = comm.plan("all_reduce", gpus, algorithm="collnet", protocol="simple")
    sent, taken = nic_bytes(topo, collnet, size)
    assert all(v == pytest.approx(size) for v in (*sent.values(), *taken.values()))
    ring = comm.plan("all_reduce", gpus, algorithm="ring", protocol="simple")
    n = len(gpus)
    ring_sent, _ = nic_bytes(topo, ring, size)
    # A ring crosses each node boundary once per channel: 2(n-1)/n of S per channel.
    assert ring_sent[0] == pytest.approx(2 * (n - 1) / n * size)


def test_every_aggregation_tree_link_carries_one_stream_per_head():
    topo = a100(6, kind="single-switch")
    comm = Communicator(Simulation(), topo, ideal())
    plan = comm.plan("all_reduce", list(topo.gpus), algorithm="collnet", protocol="simple")
    (step,) = plan.steps
    fabric = {link: s for link, s in step.link_streams.items()
              if topo.device(link[0]).kind in ("nic", "switch")
              and topo.device(link[1]).kind in ("nic", "switch")}
    # 6 nodes x 8 NICs, each with one stream up and one down: the leaf forwards one
    # reduced stream per head instead of one per node.
    assert len(fabric) == 2 * 6 * 8
    assert set(fabric.values()) == {1.0}


@settings(max_examples=15, deadline=None)
@given(nodes=st.integers(2, 6), size=st.integers(10**6, 2**34))
def test_sharp_time_is_s_over_the_node_nic_bandwidth_when_the_nics_bind(nodes, size):
    """NVLink made fast, so the NICs bind: S/(8 NICs · 25 GB/s) plus the latency: two
    intra-node passes (the arity term of 7 extra local GPUs each) and a route up and one
    down the tree."""
    topo = a100(nodes, nvlink={"bandwidth": "100 TB/s"})
    gpus = list(topo.gpus)
    sim = Simulation()
    comm = Communicator(sim, topo, ideal())
    process = comm.collective("all_reduce", gpus, size, algorithm="collnet")
    sim.run()
    intra = max(topo.route(a, b).latency_s for a in gpus[:8] for b in gpus[:8] if a != b)
    up = max(topo.route(topo.gpus_on_node(k)[j], gpus[j], rail=j).latency_s
             for k in range(1, nodes) for j in range(8))
    down = max(topo.route(gpus[j], topo.gpus_on_node(k)[j], rail=j).latency_s
               for k in range(1, nodes) for j in range(8))
    latency = 2 * (intra + 7 * ARITY_LATENCY_S) + up + down
    expected = size / (8 * A100_NIC) + latency
    assert process.value.duration_s == pytest.approx(expected, rel=1e-9)


def test_auto_picks_collnet_for_large_all_reduces_when_the_fabric_aggregates():
    topo = a100(4)
    comm = Communicator(Simulation(), topo)
    gpus = list(topo.gpus)
    assert comm.candidates("all_reduce", gpus) == ("ring", "tree", "collnet")
    assert comm.choose("all_reduce", gpus, GiB).algorithm == "collnet"
    plain = a100(4, sharp=False)
    assert Communicator(Simulation(), plain).candidates("all_reduce", gpus) == ("ring", "tree")


def test_h100_nodes_on_a_sharp_fabric_offer_nvls_with_sharp_across_nodes():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 4,
                          "fabric": {"kind": "rail-optimized", "sharp": True}})
    comm = Communicator(Simulation(), topo)
    gpus = list(topo.gpus)
    assert comm.candidates("all_reduce", gpus) == ("ring", "tree", "nvls_tree", "nvls",
                                                   "collnet")
    assert comm.choose("all_reduce", gpus, GiB).algorithm == "nvls"
    size = 1e9
    plan = Communicator(Simulation(), topo, ideal()).plan("all_reduce", gpus, algorithm="nvls",
                                                          protocol="simple")
    sent, taken = nic_bytes(topo, plan, size)
    assert all(v == pytest.approx(size) for v in (*sent.values(), *taken.values()))


def test_collnet_without_aggregating_switches_names_fabric_sharp():
    topo = a100(2, sharp=False)
    comm = Communicator(Simulation(), topo)
    with pytest.raises(ConfigError, match=r"fabric\.sharp"):
        comm.estimate_s("all_reduce", list(topo.gpus), 1e6, algorithm="collnet")
    with pytest.raises(ConfigError, match="two or more nodes"):
        comm.estimate_s("all_reduce", list(topo.gpus[:8]), 1e6, algorithm="collnet")
    # NVLS across nodes needs the same switches, and says so as NVLS (not "collnet").
    h100 = build_cluster({"preset": "dgx-h100", "nodes": 2})
    with pytest.raises(ConfigError, match=r"^NVLS across nodes reduces in the fabric"):
        Communicator(Simulation(), h100).estimate_s("all_reduce", list(h100.gpus), 1e6,
                                                    algorithm="nvls")


def test_fabric_sharp_is_recorded_and_checked():
    topo = a100(2)
    assert topo.config["fabric"]["sharp"] is True
    assert all(d.sharp for d in topo.devices() if d.kind == "switch")
    assert not any(d.sharp for d in topo.devices() if d.kind == "nvswitch")
    with pytest.raises(DistsimError, match=r"fabric\.sharp"):
        build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": {"sharp": "maybe"}})


def test_a_custom_cluster_marks_its_aggregating_switches():
    devices = [{"name": "g0", "kind": "gpu", "node": 0}, {"name": "g1", "kind": "gpu", "node": 1},
               {"name": "x0", "kind": "nic", "node": 0}, {"name": "x1", "kind": "nic", "node": 1},
               {"name": "sw", "kind": "switch", "sharp": True}]
    links = [{"src": "g0", "dst": "x0", "bandwidth": "64 GB/s", "kind": "pcie"},
             {"src": "g1", "dst": "x1", "bandwidth": "64 GB/s", "kind": "pcie"},
             {"src": "x0", "dst": "sw", "bandwidth": "50 GB/s", "kind": "network"},
             {"src": "x1", "dst": "sw", "bandwidth": "50 GB/s", "kind": "network"}]
    topo = build_cluster({"devices": devices, "links": links})
    assert topo.device("sw").sharp
    assert topo.config["devices"][4]["sharp"] is True
    comm = Communicator(Simulation(), topo)
    assert "collnet" in comm.candidates("all_reduce", list(topo.gpus))
    bad = [*devices[:4], {"name": "sw", "kind": "switch"},
           {"name": "g2", "kind": "gpu", "node": 0, "sharp": True}]
    with pytest.raises(ConfigError, match=r"devices\[5\].sharp"):
        build_cluster({"devices": bad, "links": links})
