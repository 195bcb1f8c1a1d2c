"""The quad GH200 node (CSCS Alps) and the Google Cloud A4 (8 x B200) presets: their shape,
their figures and the collective rates those figures imply.

A quad GH200 node is a mesh: every GPU pair cabled with 6 NVLink4 links (150 GB/s each way),
one 200 Gb/s Slingshot NIC per superchip.  Across nodes a ring all-reduce runs one channel
per NIC, so its bus bandwidth is the node's 4 x 25 GB/s; an A4 node's ring all-gather over
two nodes runs at its 8 x 50 GB/s.
"""

from __future__ import annotations

import itertools

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import Topology, build_cluster
from distsim_gpu.workloads.specs.gpus import get_gpu

IDEAL = CommParams(protocol="simple").ideal()
GiB = 2**30


@pytest.fixture(scope="module")
def gh200x2() -> Topology:
    return build_cluster({"preset": "quad-gh200", "nodes": 2})


@pytest.fixture(scope="module")
def a4x2() -> Topology:
    return build_cluster({"preset": "gcp-a4", "nodes": 2})


def _nic_ports(topo: Topology) -> set[float]:
    return {link.bandwidth_bytes_per_s for link in topo.links()
            if topo.device(link.src).kind == "nic" and topo.device(link.dst).kind == "switch"}


def _collective_s(topo: Topology, op: str, size: float, params: CommParams,
                  algorithm: str = "ring") -> float:
    sim = Simulation()
    comm = Communicator(sim, topo, params)
    proc = comm.collective(op, list(topo.gpus), size, algorithm=algorithm)
    sim.run()
    return proc.value.duration_s


def test_quad_gh200_shape(gh200x2: Topology) -> None:
    assert len(gh200x2.gpus) == 8 and gh200x2.num_nodes == 2
    assert gh200x2.nics_on_node(0) == tuple(f"n0.nic{j}" for j in range(4))
    assert not any(d.kind == "nvswitch" for d in gh200x2.devices())
    for a, b in itertools.permutations(gh200x2.gpus_on_node(0), 2):
        assert dict(gh200x2.gpu_peers(a))[b] == 6 * 25e9  # 6 NVLink4 links per pair
    assert _nic_ports(gh200x2) == {25e9}  # Slingshot-11, 200 Gb/s
    for k in range(4):  # each superchip: its GPU and its own NIC on one Grace
        assert gh200x2.local_nics(f"n1.gpu{k}") == (f"n1.nic{k}",)
    fabric = gh200x2.config["fabric"]
    assert fabric["technology"] == "ethernet" and fabric["routing"] == "ecmp"
    assert fabric["switch_latency"] == pytest.approx(350e-9)
    assert gh200x2.config["gpu"]["model"] == "GH200-96GB"


def test_gcp_a4_shape(a4x2: Topology) -> None:
    assert len(a4x2.gpus) == 16
    switches = [d for d in a4x2.devices() if d.kind == "nvswitch"]
    # One NVSwitch device per node stands for the board's switch chips; NVLink SHARP.
    assert len(switches) == 2 and all(d.sharp for d in switches)
    assert a4x2.link("n0.gpu3", "n0.nvswitch").bandwidth_bytes_per_s == 900e9
    assert _nic_ports(a4x2) == {50e9}  # ConnectX-7, 400 Gb/s
    assert a4x2.local_nics("n0.gpu5") == ("n0.nic5",)
    assert a4x2.config["fabric"]["technology"] == "ethernet"


def test_gpu_specs_behind_the_presets() -> None:
    assert get_gpu("NVIDIA GH200 120GB").memory_bytes == 96 * GiB
    assert get_gpu("gh200").peak_flops("bf16") == get_gpu("h100").peak_flops("bf16")
    assert get_gpu("b200").peak_flops("bf16") == pytest.approx(2250e12)


def test_quad_gh200_ring_across_nodes_runs_at_the_nics(gh200x2: Topology) -> None:
    # 4 channels, one per NIC rail; each crosses a NIC once per direction: 2(n-1)/n S/(4 B).
    n, size = 8, 4 * GiB
    bandwidth_s = 2 * (n - 1) / n * size / (4 * 25e9)
    assert _collective_s(gh200x2, "all_reduce", size, IDEAL) == pytest.approx(bandwidth_s,
                                                                              rel=2e-3)


def test_gcp_a4_ring_all_gather_across_two_nodes_runs_at_the_nics(a4x2: Topology) -> None:
    # All-gather: (n-1)/n S per GPU over 8 NIC channels of 50 GB/s, so busbw = 8 x 50 GB/s.
    (row,) = run_benchmark(a4x2, "all_gather", [4 * GiB], params=IDEAL)
    assert row.busbw_bytes_per_s == pytest.approx(8 * 50e9, rel=2e-3)
