"""Collectives on the DGX presets: channels, rails, algorithm choice, published figures.

The published figures (../shared/data/README.md) are NCCL maintainers' statements, not
logs: H100 NVLink ring ≈ 370 GB/s bus bandwidth in one node, 46–48 GB/s per NDR NIC,
DGX-A100 with 8×200 Gb/s ≈ 192 GB/s ring bus bandwidth across nodes.  They are checked
to within 5 % as regressions of the defaults, which were set from datasheets, not from
these numbers.
"""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator, ring_channels
from distsim_gpu.collectives.algorithms import gpu_rail
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster

GIB = 2**30


@pytest.fixture(scope="module")
def a100x2():
    return build_cluster({"preset": "dgx-a100", "nodes": 2})


@pytest.fixture(scope="module")
def h100x2():
    return build_cluster({"preset": "dgx-h100", "nodes": 2})


def test_two_node_ring_opens_one_channel_per_nic(a100x2):
    channels = ring_channels(a100x2, a100x2.gpus)
    assert len(channels) == 8
    rails = {r for _, hops in channels for r in hops if r is not None}
    assert rails == set(range(8))
    for order, hops in channels:
        assert sorted(order) == sorted(a100x2.gpus)
        assert sum(r is not None for r in hops) == 2  # out of each node once


def test_two_node_ring_puts_bytes_on_every_nic_and_no_gpu_sends_two_channels(a100x2):
    sim = Simulation()
    comm = Communicator(sim, a100x2, CommParams(algorithm="ring", protocol="simple"))
    comm.collective("all_reduce", list(a100x2.gpus), GIB)
    sim.run()
    nic_out = {}
    for link in a100x2.links():
        if a100x2.device(link.src).kind == "nic" and link.kind == "network":
            nic_out[link.src] = sim.network.link_bytes(link.id)
    assert len(nic_out) == 16
    per_nic = 2 * 15 / 16 * GIB / 8
    for sent in nic_out.values():
        assert sent == pytest.approx(per_nic)
    # GPU -> PCIe switch: each GPU sends the traffic of exactly one channel.
    for gpu in a100x2.gpus:
        up = [link for link in a100x2.links() if link.src == gpu and link.kind == "pcie"]
        assert len(up) == 1
        assert sim.network.link_bytes(up[0].id) == pytest.approx(per_nic)


def test_gpus_sharing_a_pcie_switch_send_on_different_rails(a100x2):
    rails = [gpu_rail(a100x2, gpu) for gpu in a100x2.gpus_on_node(0)]
    assert rails == list(range(8))


def busbw_gb(topology, size=8 * GIB, **choices):
    rows = run_benchmark(topology, "all_reduce", [size], params=CommParams(**choices))
    return rows[0].busbw_bytes_per_s / 1e9


def test_h100_nvlink_ring_in_one_node_is_near_370_gbps():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 1})
    assert busbw_gb(topo, algorithm="ring") == pytest.approx(370, rel=0.05)


def test_dgx_a100_two_node_ring_is_near_192_gbps(a100x2):
    assert busbw_gb(a100x2, algorithm="ring") == pytest.approx(192, rel=0.05)


def test_ndr_nic_carries_46_to_48_gbps(h100x2):
    rows = run_benchmark(h100x2, "sendrecv", [GIB])
    assert 46 <= rows[0].busbw_bytes_per_s / 1e9 <= 48.5


def test_tree_beats_ring_for_large_two_node_all_reduce(a100x2):
    # Two nodes: a tree moves S per node over the NICs, a ring 2(n-1)/n·S.
    assert busbw_gb(a100x2, algorithm="tree") > 1.2 * busbw_gb(a100x2, algorithm="ring")
    rows = run_benchmark(a100x2, "all_reduce", [8 * GIB])
    assert rows[0].algorithm == "tree"


def test_auto_uses_low_latency_protocol_for_tiny_and_simple_for_huge(a100x2):
    rows = run_benchmark(a100x2, "all_reduce", [8, 8 * GIB])
    assert rows[0].protocol == "ll"
    assert rows[1].protocol == "simple"


def test_auto_is_never_slower_than_any_forced_choice(a100x2):
    for size in (8, 2**16, 2**22, 2**28, 2**33):
        best = run_benchmark(a100x2, "all_reduce", [size])[0].time_s
        for algorithm in ("ring", "tree"):
            for protocol in ("ll", "ll128", "simple"):
                forced = run_benchmark(a100x2, "all_reduce", [size],
                                       params=CommParams(algorithm=algorithm,
                                                         protocol=protocol))[0].time_s
                assert best <= forced * (1 + 1e-12)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                "alltoall", "sendrecv"])
def test_coflow_and_step_agree_on_a_real_cluster(a100x2, op):
    a = run_benchmark(a100x2, op, [2**26], params=CommParams(fidelity="coflow"))[0]
    b = run_benchmark(a100x2, op, [2**26], params=CommParams(fidelity="step"))[0]
    assert a.time_s == pytest.approx(b.time_s, rel=1e-9)


def test_oversubscribed_fat_tree_slows_a_cross_leaf_ring():
    # NVLink doubled: each GPU's NVLink carries one stream per channel (its ring hop or the
    # PXN hop to the GPU beside the rail's NIC), 8 of them at H100's 450 GB/s would bind
    # before the NICs do and hide the fabric's share.
    spec = {"preset": "dgx-h100", "nodes": 8, "nvlink": {"bandwidth": "900 GB/s"},
            "fabric": {"kind": "fat-tree", "nics_per_leaf": 16}}
    flat = build_cluster(spec)
    spec["fabric"]["oversubscription"] = 4
    thin = build_cluster(spec)
    # One ring hop per rail leaves each 16-NIC leaf (every other node pair crosses): 8
    # flows over 4 uplinks of a NIC's speed each, which D-mod-K fills two by two: half speed.
    assert busbw_gb(thin, algorithm="ring") == pytest.approx(
        0.5 * busbw_gb(flat, algorithm="ring"), rel=0.02)


def test_faster_nics_speed_up_inter_node_rings():
    slow = build_cluster({"preset": "dgx-a100", "nodes": 4, "nic": {"bandwidth": "100 Gbps"}})
    fast = build_cluster({"preset": "dgx-a100", "nodes": 4})
    assert busbw_gb(fast, algorithm="ring") == pytest.approx(
        2 * busbw_gb(slow, algorithm="ring"), rel=0.02)
