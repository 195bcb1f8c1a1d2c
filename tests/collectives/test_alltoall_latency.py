"""An all-to-all's latency grows with its network peers, as NCCL's does.

NCCL's all-to-all is ``n-1`` grouped sends and receives; its proxy posts every network
peer's operations one after another (``tuning.cc`` network post overhead: 1 us, x3 for
Simple), so each network peer beyond the first adds that overhead; NVLink peers run
concurrently in the kernel and add nothing.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator, comm_params_from_mapping
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

NET_PEER_S = {"ll": 1e-6, "ll128": 1e-6, "simple": 3e-6}


def h100(nodes: int) -> object:
    return build_cluster({"preset": "dgx-h100", "nodes": nodes, "fabric": "single-switch"})


def a2a_latency_s(nodes: int, protocol: str, params: CommParams | None = None) -> float:
    topo = h100(nodes)
    comm = Communicator(Simulation(), topo, params or CommParams())
    return comm.plan("alltoall", list(topo.gpus), algorithm="ring",
                     protocol=protocol).latency_s


@settings(max_examples=20, deadline=None)
@given(nodes=st.integers(3, 8), protocol=st.sampled_from(["ll", "ll128", "simple"]))
def test_every_further_network_peer_adds_the_post_overhead(nodes, protocol):
    """Same hops at 2 and at ``nodes`` nodes: the difference is 8·(nodes-2) more network
    peers per rank, each ``NET_PEER_S[protocol]``."""
    grown = a2a_latency_s(nodes, protocol) - a2a_latency_s(2, protocol)
    assert grown == pytest.approx(8 * (nodes - 2) * NET_PEER_S[protocol], rel=1e-9)


def test_8_and_64_gpus_follow_the_formula():
    """8 GPUs on one node: base + one NVLink hop (LL: 6.6 + 0.6 us) + the route's 0.6 us,
    no network peer.  64 GPUs on 8 nodes: base + one network hop + 55 further network
    peers x 1 us."""
    params = CommParams()
    one_node = a2a_latency_s(1, "ll")
    assert one_node == pytest.approx(6.6e-6 + 0.6e-6 + 0.6e-6)
    topo = h100(8)
    base = params.base_latency_s["ring"]["ll"]
    hop = params.hop_latency_s["ring"]["net"]["ll"]
    # Each send posts on its own GPU's NIC at both ends (NCCL without PXN's relay).
    worst_route = max(topo.route(a, b, own_nics=True).latency_s for a in topo.gpus
                      for b in topo.gpus if topo.node_of(a) != topo.node_of(b))
    expected = base + hop + worst_route + 55 * 1e-6
    assert a2a_latency_s(8, "ll") == pytest.approx(expected, rel=1e-9)


def test_without_peer_latency_it_does_not_grow():
    params = replace(CommParams(), peer_latency_s={
        t: dict.fromkeys(row, 0.0) for t, row in CommParams().peer_latency_s.items()})
    assert a2a_latency_s(8, "simple", params) == pytest.approx(
        a2a_latency_s(2, "simple", params), rel=1e-9)


def test_pxn_all_to_all_pays_the_same_per_peer_term():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": "rail-optimized"})
    comm = Communicator(Simulation(), topo)
    gpus = list(topo.gpus)
    pxn = comm.plan("alltoall", gpus, algorithm="pxn", protocol="ll")
    assert pxn.latency_s >= 23 * 1e-6  # 24 network peers per rank


def test_peer_latency_is_configurable_and_checked():
    params = comm_params_from_mapping({"peer_latency": {"net": {"simple": "2 us"}}})
    assert params.peer_latency_s["net"] == {"ll": 1e-6, "ll128": 1e-6, "simple": 2e-6}
    with pytest.raises(ConfigError, match=r"comm.peer_latency.nic: unknown transport"):
        comm_params_from_mapping({"peer_latency": {"nic": {"ll": "1 us"}}})
    assert CommParams().ideal().peer_latency_s["net"]["simple"] == 0.0
