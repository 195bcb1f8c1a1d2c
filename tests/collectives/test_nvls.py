"""NVLink SHARP (NVLS, NVLS-tree) against its closed forms and NVIDIA's figures.

On one node each GPU's NVLink port carries ``(1 + 1/n)·S`` each way (the switch reads
every slice from every GPU and writes every result into every GPU), so with ideal
parameters an all-reduce takes ``(1 + 1/n)·S/B`` plus two GPU-switch-GPU ways of link
latency; with NCCL's figures the bus bandwidth on 8 H100 is NVIDIA's ~480 GB/s.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator, run_benchmark
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

H100_NVLINK = 450e9  # bytes/s per direction per GPU (H100 datasheet)
NVLINK_LINK_LATENCY = 0.3e-6  # per link, dgx-h100 preset
GiB = 2**30


@pytest.fixture(scope="module")
def h100() -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": 1})


@pytest.fixture(scope="module")
def h100x2() -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": 2, "fabric": "single-switch"})


def ideal() -> CommParams:
    return CommParams(protocol="simple").ideal()


def run(topo, group, size, *, params, algorithm="nvls", fidelity="coflow"):
    sim = Simulation()
    comm = Communicator(sim, topo, params)
    process = comm.collective("all_reduce", group, size, algorithm=algorithm,
                              fidelity=fidelity)
    sim.run()
    return process.value


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 8), size=st.integers(1, 2**33), fidelity=st.sampled_from(
    ["coflow", "step"]))
def test_nvls_all_reduce_is_one_plus_one_over_n_times_s_over_b(h100, n, size, fidelity):
    group = list(h100.gpus[:n])
    record = run(h100, group, size, params=ideal(), fidelity=fidelity)
    expected = (1 + 1 / n) * size / H100_NVLINK + 2 * 2 * NVLINK_LINK_LATENCY
    assert record.duration_s == pytest.approx(expected, rel=1e-9)
    assert (record.algorithm, record.protocol) == ("nvls", "simple")


def test_nvls_efficiency_and_latency_come_from_the_parameters(h100):
    params = replace(ideal(), nvls_efficiency=0.5,
                     hop_latency_s={**ideal().hop_latency_s,
                                    "nvls": {"nvlink": {"simple": 25e-6},
                                             "net": {"simple": 0.0}}})
    size = GiB
    record = run(h100, list(h100.gpus), size, params=params)
    expected = (1 + 1 / 8) * size / (0.5 * H100_NVLINK) + 25e-6 + 4 * NVLINK_LINK_LATENCY
    assert record.duration_s == pytest.approx(expected, rel=1e-9)


def test_each_nvlink_port_carries_s_and_its_slice_each_way(h100):
    comm = Communicator(Simulation(), h100, ideal())
    plan = comm.plan("all_reduce", list(h100.gpus), algorithm="nvls", protocol="simple")
    size = 8e9
    per_stream, links = plan.coflow(size)
    assert set(links) == ({(g, "n0.nvswitch") for g in h100.gpus}
                          | {("n0.nvswitch", g) for g in h100.gpus})
    for streams in links.values():
        assert per_stream * streams == pytest.approx(size * (1 + 1 / 8))


def test_nvls_bus_bandwidth_on_8_h100_is_nvidias_figure_uncalibrated(h100):
    """NCCL maintainers: ~480 GB/s NVLS, ~370 GB/s ring all-reduce on 8 H100 (SXM)."""
    nvls, = run_benchmark(h100, "all_reduce", [8 * GiB], params=CommParams(algorithm="nvls"))
    ring, = run_benchmark(h100, "all_reduce", [8 * GiB], params=CommParams(algorithm="ring"))
    assert nvls.busbw_bytes_per_s == pytest.approx(480e9, rel=0.03)
    assert ring.busbw_bytes_per_s == pytest.approx(370e9, rel=0.03)


def test_auto_picks_nvls_for_large_all_reduces_on_one_h100_node(h100):
    rows = run_benchmark(h100, "all_reduce", [1024, 64 * 2**20, GiB], params=CommParams())
    assert [r.algorithm for r in rows] == ["ring", "nvls", "nvls"]


@pytest.mark.parametrize("spec", [
    {"preset": "dgx-a100", "nodes": 1},
    {"preset": "dgx-a100", "nodes": 2, "fabric": {"kind": "single-switch", "sharp": True}},
    {"preset": "pcie-8gpu", "nodes": 1},
])
def test_without_switches_that_reduce_auto_weighs_ring_and_tree_as_before(spec):
    topo = build_cluster(spec)
    comm = Communicator(Simulation(), topo)
    found = comm.candidates("all_reduce", list(topo.gpus))
    assert "nvls" not in found and "nvls_tree" not in found
    assert found[:2] == ("ring", "tree")
    assert comm.candidates("all_gather", list(topo.gpus)) == ("ring",)


def test_asking_for_nvls_where_it_cannot_run_names_what_is_missing(h100):
    a100 = build_cluster({"preset": "dgx-a100", "nodes": 1})
    comm = Communicator(Simulation(), a100)
    with pytest.raises(ConfigError, match="NVLink SHARP"):
        comm.estimate_s("all_reduce", list(a100.gpus), 1e6, algorithm="nvls")
    h100_comm = Communicator(Simulation(), h100)
    with pytest.raises(ConfigError, match="simple protocol only, not ll"):
        h100_comm.estimate_s("all_reduce", list(h100.gpus), 1e6, algorithm="nvls",
                             protocol="ll")
    with pytest.raises(ConfigError, match="all_gather only, not broadcast"):
        h100_comm.estimate_s("broadcast", list(h100.gpus), 1e6, algorithm="nvls")
    with pytest.raises(ConfigError, match="two or more nodes"):
        h100_comm.estimate_s("all_reduce", list(h100.gpus), 1e6, algorithm="nvls_tree")


def test_auto_with_a_forced_protocol_skips_simple_only_algorithms(h100):
    comm = Communicator(Simulation(), h100)
    plan = comm.choose("all_reduce", list(h100.gpus), GiB, protocol="ll128")
    assert (plan.algorithm, plan.protocol) == ("ring", "ll128")


def test_nvls_tree_on_two_nodes_moves_each_slice_once_each_way_per_nic(h100x2):
    """Two nodes: the double tree is one edge each way per tree, so every NIC sends and
    receives its head's slice S/8 once; NVLink ports carry (1 + 1/8)·S as on one node."""
    comm = Communicator(Simulation(), h100x2, ideal())
    gpus = list(h100x2.gpus)
    plan = comm.plan("all_reduce", gpus, algorithm="nvls_tree", protocol="simple")
    size = 8e9
    per_stream, links = plan.coflow(size)
    loads = {link: per_stream * streams for link, streams in links.items()}
    for node in (0, 1):
        for nic in h100x2.nics_on_node(node):
            assert loads[(nic, "leaf0")] == pytest.approx(size / 8)
            assert loads[("leaf0", nic)] == pytest.approx(size / 8)
        for gpu in h100x2.gpus_on_node(node):
            assert loads[(gpu, f"n{node}.nvswitch")] == pytest.approx(size * 9 / 8)
    # Closed form: NVLink (9/8·S at 450 GB/s) and NICs (S/8 at 50 GB/s) tie at S/400 GB/s.
    record = run(h100x2, gpus, size, params=ideal(), algorithm="nvls_tree")
    latency = plan.latency_s
    assert record.duration_s == pytest.approx(size * 9 / 8 / H100_NVLINK + latency, rel=1e-9)


def test_auto_across_h100_nodes_weighs_nvls_tree_and_picks_it_for_large_sizes(h100x2):
    comm = Communicator(Simulation(), h100x2)
    gpus = list(h100x2.gpus)
    assert comm.candidates("all_reduce", gpus) == ("ring", "tree", "nvls_tree")
    assert comm.choose("all_reduce", gpus, GiB).algorithm == "nvls_tree"
    assert comm.choose("all_reduce", gpus, 1024).algorithm in ("ring", "tree")
