"""Collectives against their closed forms on the synthetic ``switch`` cluster.

With ideal parameters (every efficiency 1, protocol latencies 0) a call costs exactly the
bandwidth formula plus the topology's latency: on ``switch`` every hop crosses two links
(GPU→switch→GPU), so the per-step latency is α = 2·link_latency.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

B = 50e9  # bytes/s per link direction
L = 1e-6  # seconds per link
ALPHA = 2 * L


def switch(n: int, bandwidth: float = B, latency: float = L):
    return build_cluster({"preset": "switch", "gpus": n, "link_bandwidth": bandwidth,
                          "link_latency": latency})


def ideal() -> CommParams:
    return CommParams(protocol="simple").ideal()


def run_one(topo, op, size, *, fidelity="coflow", algorithm="ring", params=None, group=None):
    sim = Simulation()
    comm = Communicator(sim, topo, params or ideal())
    proc = comm.collective(op, group or list(topo.gpus), size, algorithm=algorithm,
                           fidelity=fidelity)
    sim.run()
    return proc.value


@pytest.mark.parametrize("fidelity", ["coflow", "step"])
@pytest.mark.parametrize("n", [2, 3, 4, 8, 16, 33, 64])
def test_ring_all_reduce_matches_formula(n, fidelity):
    size = 256 * 2**20
    record = run_one(switch(n), "all_reduce", size, fidelity=fidelity)
    expected = 2 * (n - 1) / n * size / B + 2 * (n - 1) * ALPHA
    assert record.duration_s == pytest.approx(expected, rel=1e-9)
    assert record.algorithm == "ring"


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 24), size=st.integers(1, 2**34),
       bandwidth=st.floats(1e8, 1e12), latency=st.floats(0, 1e-4))
def test_ring_all_reduce_formula_for_any_size_and_link(n, size, bandwidth, latency):
    record = run_one(switch(n, bandwidth, latency), "all_reduce", size)
    expected = 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * 2 * latency
    assert record.duration_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
def test_half_ring_ops_match_formula(op):
    n, size = 8, 64 * 2**20
    record = run_one(switch(n), op, size)
    assert record.duration_s == pytest.approx((n - 1) / n * size / B + (n - 1) * ALPHA)


def test_reduce_scatter_plus_all_gather_equals_all_reduce():
    topo, size = switch(12), 3 * 2**30
    rs = run_one(topo, "reduce_scatter", size).duration_s
    ag = run_one(topo, "all_gather", size).duration_s
    ar = run_one(topo, "all_reduce", size).duration_s
    assert rs + ag == pytest.approx(ar, rel=1e-12)


@pytest.mark.parametrize("op", ["broadcast", "reduce"])
def test_chain_ops_pipeline_the_whole_buffer(op):
    n, size = 8, 2**30
    record = run_one(switch(n), op, size)
    assert record.duration_s == pytest.approx(size / B + (n - 1) * ALPHA)


def test_alltoall_moves_n_minus_1_over_n_of_the_buffer_per_link():
    n, size = 8, 2**30
    record = run_one(switch(n), "alltoall", size)
    assert record.duration_s == pytest.approx((n - 1) / n * size / B + ALPHA)


def test_sendrecv_moves_the_buffer_once():
    n, size = 6, 2**28
    assert run_one(switch(n), "sendrecv", size).duration_s == pytest.approx(size / B + ALPHA)


def test_p2p_send_is_bytes_over_bandwidth_plus_latency():
    topo = switch(4)
    sim = Simulation()
    comm = Communicator(sim, topo, ideal())
    proc = comm.send(topo.gpus[0], topo.gpus[3], 10e9)
    sim.run()
    assert proc.value.duration_s == pytest.approx(10e9 / B + ALPHA)


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                "reduce", "alltoall", "sendrecv"])
def test_coflow_and_step_agree_uncontended(op):
    topo = switch(8)
    params = CommParams(protocol="simple")  # real efficiencies and latencies this time
    a = run_one(topo, op, 123456789, fidelity="coflow", params=params).duration_s
    b = run_one(topo, op, 123456789, fidelity="step", params=params).duration_s
    assert a == pytest.approx(b, rel=1e-9)


@pytest.mark.parametrize("fidelity", ["coflow", "step"])
def test_two_all_reduces_on_one_bottleneck_take_twice_as_long(fidelity):
    topo, size = switch(8, latency=0.0), 2**30
    sim = Simulation()
    comm = Communicator(sim, topo, ideal())
    first = comm.collective("all_reduce", list(topo.gpus), size, algorithm="ring",
                            fidelity=fidelity)
    second = comm.collective("all_reduce", list(topo.gpus), size, algorithm="ring",
                             fidelity=fidelity)
    sim.run()
    alone = 2 * 7 / 8 * size / B
    assert first.value.duration_s == pytest.approx(2 * alone)
    assert second.value.duration_s == pytest.approx(2 * alone)


def test_disjoint_groups_do_not_interfere():
    topo, size = switch(8, latency=0.0), 2**30
    sim = Simulation()
    comm = Communicator(sim, topo, ideal())
    left = comm.collective("all_reduce", list(topo.gpus[:4]), size, algorithm="ring")
    right = comm.collective("all_reduce", list(topo.gpus[4:]), size, algorithm="ring")
    sim.run()
    alone = 2 * 3 / 4 * size / B
    assert left.value.duration_s == pytest.approx(alone)
    assert right.value.duration_s == pytest.approx(alone)


def test_efficiency_and_protocol_scale_the_bandwidth_term():
    topo, size, n = switch(4, latency=0.0), 2**30, 4
    base = CommParams(protocol="ll").ideal()
    params = replace(base, link_efficiency=dict.fromkeys(base.link_efficiency, 0.5),
                     protocol_efficiency={**base.protocol_efficiency, "ll": 0.5})
    record = run_one(topo, "all_reduce", size, params=params)
    # Half the link rate carries payload, and LL sends two wire bytes per payload byte.
    assert record.duration_s == pytest.approx(2 * (n - 1) / n * size / (B * 0.5 * 0.5))


def test_single_gpu_collective_is_free():
    topo = switch(4)
    assert run_one(topo, "all_reduce", 2**20, group=[topo.gpus[2]]).duration_s == 0.0


def test_bytes_are_conserved_on_every_ring_link():
    n, size = 6, 6 * 2**20
    topo = switch(n)
    sim = Simulation()
    comm = Communicator(sim, topo, ideal())
    comm.collective("all_reduce", list(topo.gpus), size, algorithm="ring")
    sim.run()
    per_hop = 2 * (n - 1) / n * size
    uplinks = [link for link in topo.links() if link.src in topo.gpus]
    assert len(uplinks) == n
    for link in uplinks:
        assert sim.network.link_bytes(link.id) == pytest.approx(per_hop)


def test_pipelined_chain_pays_one_chunk_per_extra_hop():
    n, size, chunk = 8, 2**30, 2.0**20
    base = ideal()
    params = replace(base, chunk_bytes={**base.chunk_bytes, "simple": chunk})
    record = run_one(switch(n), "broadcast", size, params=params)
    # The last chunk leaves the root after S/B and still has n-2 hops to cross.
    assert record.duration_s == pytest.approx(size / B + (n - 2) * chunk / B
                                              + (n - 1) * ALPHA)


def test_chunk_larger_than_the_stream_costs_the_stream_per_hop():
    n, size, chunk = 4, 2.0**10, 2.0**20
    base = ideal()
    params = replace(base, chunk_bytes={**base.chunk_bytes, "simple": chunk})
    record = run_one(switch(n), "broadcast", size, params=params)
    assert record.duration_s == pytest.approx((n - 1) * size / B + (n - 1) * ALPHA)
