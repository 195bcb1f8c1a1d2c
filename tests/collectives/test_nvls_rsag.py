"""NVLS reduce-scatter / all-gather against their closed forms and NCCL's choices.

On one node a GPU's NVLink port carries ``S`` one way and ``S/n`` the other (NCCL's
maintainers, NVIDIA/nccl#1083), so with ideal parameters a call takes ``S/B`` plus one
GPU-switch-GPU way; with NCCL's figures ``25 us + S/(0.85·B)`` against the Simple ring's
``8.4 us + 7·(3.4 us + way) + 7/8·S/B``: NVLS wins below the crossover of the two lines,
the ring above — and with every protocol allowed the LL/LL128 rings win everywhere, as
NCCL's tuner keeps the ring for them (NVIDIA/nccl#1047, #1670).  Across nodes NVLS needs
a fabric that aggregates and a NIC per GPU; then each node's NICs carry ``S/h`` each.
"""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator, run_benchmark
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

H100_NVLINK = 450e9  # bytes/s per direction per GPU (H100 datasheet)
NVLINK_EFFICIENCY, NVLS_EFFICIENCY = 0.82, 0.85  # collectives.params / tuning.cc
NVLINK_LINK_LATENCY = 0.3e-6  # per link, dgx-h100 preset
NIC_BYTES_PER_S = 50e9  # NDR 400 Gb/s, ideal parameters
NVLS_LATENCY_S, RING_BASE_S, RING_NVLINK_HOP_S = 25e-6, 8.4e-6, 3.4e-6  # tuning.cc
OPS = ("reduce_scatter", "all_gather")
GiB = 2**30


@pytest.fixture(scope="module")
def h100() -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": 1})


def sharp_h100(nodes: int) -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": nodes,
                          "fabric": {"kind": "rail-optimized", "sharp": True}})


def ideal() -> CommParams:
    return CommParams(protocol="simple").ideal()


def run(topo, op, group, size, *, params, fidelity="coflow"):
    sim = Simulation()
    process = Communicator(sim, topo, params).collective(op, group, size, algorithm="nvls",
                                                         fidelity=fidelity)
    sim.run()
    return process.value


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 8), size=st.integers(1, 2**33), op=st.sampled_from(OPS),
       fidelity=st.sampled_from(["coflow", "step"]))
def test_nvls_rs_ag_on_one_node_is_s_over_b(h100, n, size, op, fidelity):
    record = run(h100, op, list(h100.gpus[:n]), size, params=ideal(), fidelity=fidelity)
    assert (record.algorithm, record.protocol) == ("nvls", "simple")
    assert record.duration_s == pytest.approx(size / H100_NVLINK + 2 * NVLINK_LINK_LATENCY,
                                              rel=1e-9)


@pytest.mark.parametrize("op", OPS)
def test_each_port_carries_s_one_way_and_its_slice_the_other(h100, op):
    comm = Communicator(Simulation(), h100, ideal())
    plan = comm.plan(op, list(h100.gpus), algorithm="nvls", protocol="simple")
    size = 8e9
    per_stream, links = plan.coflow(size)
    to_switch = sum(per_stream * links[(g, "n0.nvswitch")] for g in h100.gpus)
    from_switch = sum(per_stream * links[("n0.nvswitch", g)] for g in h100.gpus)
    busy, light = (to_switch, from_switch) if op == "reduce_scatter" else (from_switch,
                                                                           to_switch)
    assert busy == pytest.approx(8 * size)  # S per GPU: every GPU's whole buffer
    assert light == pytest.approx(size)  # S/8 per GPU: its own slice


@pytest.mark.parametrize("op", OPS)
def test_nvls_busbw_on_8_h100_is_0_85_of_nvlink_times_7_8_below_the_rings(h100, op):
    nvls, = run_benchmark(h100, op, [8 * GiB], params=CommParams(algorithm="nvls"))
    ring, = run_benchmark(h100, op, [8 * GiB], params=CommParams(algorithm="ring"))
    link = H100_NVLINK * NVLINK_EFFICIENCY
    assert nvls.busbw_bytes_per_s == pytest.approx(7 / 8 * NVLS_EFFICIENCY * link, rel=0.01)
    # NVIDIA/nccl#1047 measures the ring at 362 GB/s (8 GiB) and NVLS below it.
    assert ring.busbw_bytes_per_s == pytest.approx(362e9, rel=0.03)
    assert nvls.busbw_bytes_per_s < ring.busbw_bytes_per_s


@pytest.mark.parametrize("op", OPS)
def test_simple_only_auto_picks_nvls_below_the_crossover_and_the_ring_above(h100, op):
    link = H100_NVLINK * NVLINK_EFFICIENCY
    way = 2 * NVLINK_LINK_LATENCY
    nvls_latency, nvls_per_byte = NVLS_LATENCY_S + way, 1 / (NVLS_EFFICIENCY * link)
    ring_latency, ring_per_byte = RING_BASE_S + 7 * (RING_NVLINK_HOP_S + way), 7 / 8 / link
    crossover = (ring_latency - nvls_latency) / (nvls_per_byte - ring_per_byte)
    assert crossover == pytest.approx(13.2e6, rel=0.01)
    comm = Communicator(Simulation(), h100, CommParams(protocol="simple"))
    group = list(h100.gpus)
    assert comm.choose(op, group, 1024).algorithm == "nvls"
    assert comm.choose(op, group, 0.97 * crossover).algorithm == "nvls"
    assert comm.choose(op, group, 1.03 * crossover).algorithm == "ring"


@pytest.mark.parametrize("op", OPS)
def test_with_every_protocol_auto_keeps_the_ring_on_one_h100_node_as_nccl_does(h100, op):
    sizes = [2**k for k in range(10, 34, 2)]
    rows = run_benchmark(h100, op, sizes, params=CommParams())
    assert {r.algorithm for r in rows} == {"ring"}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("nodes", [2, 4])
def test_across_sharp_nodes_the_binding_link_sets_the_time(op, nodes):
    topo = sharp_h100(nodes)
    size = 4e9
    record = run(topo, op, list(topo.gpus), size, params=ideal())
    route = topo.route("n0.gpu0", "n1.gpu0", rail=0).latency_s
    # NVLink port: S at 450 GB/s; each NIC: its rail's portion S/8 at 50 GB/s.
    bandwidth_s = max(size / H100_NVLINK, size / 8 / NIC_BYTES_PER_S)
    expected = bandwidth_s + 2 * NVLINK_LINK_LATENCY + 2 * route
    assert record.duration_s == pytest.approx(expected, rel=1e-6)


def test_nvls_across_nodes_is_offered_only_where_nccl_runs_it():
    sharp, plain = sharp_h100(2), build_cluster({"preset": "dgx-h100", "nodes": 2})
    full = list(sharp.gpus)
    rails = ["n0.gpu0", "n1.gpu0"]
    assert "nvls" in Communicator(Simulation(), sharp).candidates("all_gather", full)
    assert "nvls" not in Communicator(Simulation(), plain).candidates("all_gather", full)
    assert "nvls" not in Communicator(Simulation(), sharp).candidates("all_gather", rails)
    with pytest.raises(ConfigError, match="two or more GPUs per node"):
        Communicator(Simulation(), sharp).estimate_s("all_gather", rails, 1e6,
                                                     algorithm="nvls")
    with pytest.raises(ConfigError, match=r"fabric\.sharp"):
        Communicator(Simulation(), plain).estimate_s("reduce_scatter", full, 1e6,
                                                     algorithm="nvls")


def test_auto_at_scale_on_a_sharp_fabric_takes_nvls_for_a_dp_bucket():
    topo = sharp_h100(16)
    comm = Communicator(Simulation(), topo, CommParams())
    for op in OPS:
        assert comm.choose(op, list(topo.gpus), 40e6).algorithm == "nvls"
