"""PAT reduce-scatter / all-gather against its closed form, and ``auto`` against NCCL's tuner.

With one GPU per node on ``n`` nodes of one switch (every route the same), PAT takes
``8 us + 2.8 us·n + ceil(log2 n)·(4 us + route) + (n-1)/n·S / (0.75·B)`` — NCCL's PAT
latency and bandwidth (``tuning.cc``) with ``B`` the NIC's achievable rate — and moves the
ring's ``(n-1)/n·S`` out of and into every GPU.  A ring over the same GPUs takes
``base_p + (n-1)·(hop_p + route) + (n-1)/n·S/(e_p·B)`` per protocol ``p``; ``auto`` picks
PAT below the size where the best ring protocol's line crosses PAT's, the ring above.
"""

from __future__ import annotations

import math

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.pat import (
    PAT_BANDWIDTH_EFFICIENCY,
    PAT_PER_RANK_LATENCY_S,
    pat_steps,
)
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

NIC_BYTES_PER_S = 400e9 / 8 * 0.96  # NDR 400 Gb/s at the network link efficiency
# NCCL tuning.cc figures the model must reproduce (microseconds -> seconds).
PAT_BASE_S, PAT_STEP_S = 8.0e-6, 14.0e-6 / 3.5
RING_BASE_S = {"ll": 6.6e-6, "ll128": 14.0e-6, "simple": 8.4e-6}
RING_NET_HOP_S = {"ll": 2.7e-6, "ll128": 4.0e-6, "simple": 14.0e-6}
RING_EFFICIENCY = {"ll": 0.5, "ll128": 120 / 128, "simple": 1.0}
MAX_NODES = 64


@pytest.fixture(scope="module")
def cluster() -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": MAX_NODES,
                          "fabric": "single-switch"})


def rail_group(topo, n: int) -> list[str]:
    return [f"n{i}.gpu0" for i in range(n)]


def route_s(topo) -> float:
    return topo.route("n0.gpu0", "n1.gpu0").latency_s


def pat_closed_form_s(n: int, size: float, route: float) -> float:
    steps = math.ceil(math.log2(n))
    return (PAT_BASE_S + PAT_PER_RANK_LATENCY_S * n + steps * (PAT_STEP_S + route)
            + (n - 1) / n * size / (PAT_BANDWIDTH_EFFICIENCY * NIC_BYTES_PER_S))


def ring_line(n: int, protocol: str, route: float) -> tuple[float, float]:
    """Latency (s) and seconds per byte of the one-channel ring over n nodes."""
    latency = RING_BASE_S[protocol] + (n - 1) * (RING_NET_HOP_S[protocol] + route)
    return latency, (n - 1) / n / (RING_EFFICIENCY[protocol] * NIC_BYTES_PER_S)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 64, 1000, 1344])
def test_pat_steps_are_ceil_log2_n_and_send_n_minus_1_blocks(n):
    steps = pat_steps(n)
    assert len(steps) == math.ceil(math.log2(n))
    assert sum(blocks for _, blocks in steps) == n - 1
    assert [d for d, _ in steps] == [2**k for k in range(len(steps))]


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, MAX_NODES), size=st.integers(1, 2**32),
       op=st.sampled_from(["reduce_scatter", "all_gather"]),
       fidelity=st.sampled_from(["coflow", "step"]))
def test_pat_time_is_its_closed_form(cluster, n, size, op, fidelity):
    sim = Simulation()
    comm = Communicator(sim, cluster, CommParams())
    process = comm.collective(op, rail_group(cluster, n), size, algorithm="pat",
                              fidelity=fidelity)
    sim.run()
    record = process.value
    assert (record.algorithm, record.protocol) == ("pat", "simple")
    expected = pat_closed_form_s(n, size, route_s(cluster))
    assert record.duration_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("op", ["reduce_scatter", "all_gather"])
@pytest.mark.parametrize("n", [2, 6, 16])
def test_pat_moves_the_rings_bytes_in_and_out_of_every_gpu(cluster, op, n):
    group = rail_group(cluster, n)
    comm = Communicator(Simulation(), cluster, CommParams())
    size = 3e9
    pat = comm.plan(op, group, algorithm="pat", protocol="simple")
    ring = comm.plan(op, group, algorithm="ring", protocol="simple")
    for plan, occupancy in ((pat, 1 / PAT_BANDWIDTH_EFFICIENCY), (ring, 1.0)):
        per_stream, links = plan.coflow(size)
        for gpu in group:
            out = per_stream * links[(gpu, gpu.replace("gpu", "pcie"))]
            into = per_stream * links[(gpu.replace("gpu", "pcie"), gpu)]
            assert out == pytest.approx((n - 1) / n * size * occupancy)
            assert into == pytest.approx((n - 1) / n * size * occupancy)
    # Every step of PAT: each GPU sends once and receives once.
    for step in pat.steps:
        for gpu in group:
            assert step.link_streams[(gpu, gpu.replace("gpu", "pcie"))] == pytest.approx(
                1 / PAT_BANDWIDTH_EFFICIENCY)


@pytest.mark.parametrize("n", [16, 64])
def test_auto_picks_pat_below_the_crossover_with_the_best_ring_and_the_ring_above(
        cluster, n):
    route = route_s(cluster)
    pat_latency = pat_closed_form_s(n, 0, route)
    pat_per_byte = (n - 1) / n / (PAT_BANDWIDTH_EFFICIENCY * NIC_BYTES_PER_S)
    crossings = []
    for protocol in RING_BASE_S:
        latency, per_byte = ring_line(n, protocol, route)
        assert latency > pat_latency  # PAT's log steps beat the ring's n-1 at any n here
        if per_byte < pat_per_byte:
            crossings.append((latency - pat_latency) / (pat_per_byte - per_byte))
    crossover = min(crossings)
    comm = Communicator(Simulation(), cluster, CommParams())
    group = rail_group(cluster, n)
    for op in ("reduce_scatter", "all_gather"):
        assert comm.choose(op, group, 1024).algorithm == "pat"
        assert comm.choose(op, group, 0.97 * crossover).algorithm == "pat"
        assert comm.choose(op, group, 1.03 * crossover).algorithm == "ring"
    # At 64 nodes the LL128 ring takes over at ~40 MB: a GPT-3 DP bucket is on the edge.
    if n == 64:
        assert crossover == pytest.approx(39.5e6, rel=0.01)


def test_pat_is_offered_only_with_one_gpu_per_node(cluster):
    comm = Communicator(Simulation(), cluster, CommParams())
    assert "pat" in comm.candidates("all_gather", rail_group(cluster, 4))
    two_per_node = ["n0.gpu0", "n0.gpu1", "n1.gpu0", "n1.gpu1"]
    assert "pat" not in comm.candidates("all_gather", two_per_node)
    assert "pat" not in comm.candidates("all_reduce", rail_group(cluster, 4))
    assert comm.candidates("all_gather", ["n0.gpu0"]) == ("ring",)


def test_asking_for_pat_where_nccl_does_not_run_it_names_why(cluster):
    comm = Communicator(Simulation(), cluster, CommParams())
    with pytest.raises(ConfigError, match="one GPU on each"):
        comm.estimate_s("all_gather", ["n0.gpu0", "n0.gpu1", "n1.gpu0"], 1e6,
                        algorithm="pat")
    with pytest.raises(ConfigError, match="reduce_scatter, all_gather only, not all_reduce"):
        comm.estimate_s("all_reduce", rail_group(cluster, 4), 1e6, algorithm="pat")
    with pytest.raises(ConfigError, match="simple protocol only, not ll128"):
        comm.estimate_s("reduce_scatter", rail_group(cluster, 4), 1e6, algorithm="pat",
                        protocol="ll128")
