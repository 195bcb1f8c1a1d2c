"""Mesh nodes: GPUs cabled to each other directly (DGX-1 hybrid cube-mesh, MI300X xGMI).

Shapes against the published cabling, routes inside a mesh (the direct link, else one
intermediate GPU over NVLink, as NCCL's P2P), p2p times against S/B + α, and the rule that
on a switched node no route passes through a GPU.
"""

from __future__ import annotations

import itertools

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import TopologyError
from distsim_gpu.topology import Topology, build_cluster
from distsim_gpu.topology.preset_registry import NODE_PRESETS
from hypothesis import given, settings
from hypothesis import strategies as st

NVLINK2_BPS = 25e9  # one NVLink 2.0, per direction
XGMI_BPS = 64e9  # one MI300X Infinity Fabric link, per direction
DIRECT_LATENCY_S = 0.6e-6  # a direct GPU-GPU link: one NCCL NVLink hop
# nvidia-smi topo -m on 8x V100-SXM2 cube-mesh servers: the NV2 pairs.
DGX1_DOUBLED = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
DGX1_SINGLE = {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}


@pytest.fixture(scope="module")
def dgx1() -> Topology:
    return build_cluster({"preset": "dgx1-v100"})


@pytest.fixture(scope="module")
def mi300x() -> Topology:
    return build_cluster({"preset": "mi300x", "nodes": 2})


def gpu(i: int, node: int = 0) -> str:
    return f"n{node}.gpu{i}"


def links_between_gpus(topo: Topology) -> dict[tuple[int, int], float]:
    return {(topo.device(link.src).index, topo.device(link.dst).index): link.bandwidth_bytes_per_s
            for link in topo.links()
            if topo.device(link.src).kind == "gpu" and topo.device(link.dst).kind == "gpu"
            and topo.device(link.src).node == 0}


# ----------------------------------------------------------------------------- shapes


def test_dgx1_is_the_published_cube_mesh(dgx1: Topology) -> None:
    links = links_between_gpus(dgx1)
    expected = {**{p: 2 * NVLINK2_BPS for p in DGX1_DOUBLED},
                **{p: NVLINK2_BPS for p in DGX1_SINGLE}}
    expected.update({(b, a): bw for (a, b), bw in expected.items()})
    assert links == expected
    assert not any(d.kind == "nvswitch" for d in dgx1.devices())
    for i in range(8):
        peers = dgx1.gpu_peers(gpu(i))
        assert len(peers) == 4  # three in its quad, and i +/- 4
        assert sum(bw for _, bw in peers) == 6 * NVLINK2_BPS  # six NVLinks per V100
        assert gpu(i ^ 4) in dict(peers)


def test_mi300x_is_a_full_xgmi_mesh_with_a_nic_per_gpu(mi300x: Topology) -> None:
    links = links_between_gpus(mi300x)
    assert links == {(a, b): XGMI_BPS for a in range(8) for b in range(8) if a != b}
    assert all(link.kind == "nvlink" and link.latency_s == DIRECT_LATENCY_S
               for link in mi300x.links() if link.src.startswith("n0.gpu")
               and link.dst.startswith("n0.gpu"))
    for i in range(8):
        assert sum(bw for _, bw in mi300x.gpu_peers(gpu(i))) == 7 * XGMI_BPS  # 448 GB/s
        assert mi300x.local_nics(gpu(i)) == (f"n0.nic{i}",)
    assert mi300x.config["nic"]["bandwidth"] == 400e9 / 8
    assert mi300x.config["gpu"]["model"] == "MI300X"


def test_nvlink_override_sets_one_link_of_a_mesh() -> None:
    topo = build_cluster({"preset": "dgx1-v100", "nvlink": {"bandwidth": "20 GB/s"}})
    assert topo.link(gpu(0), gpu(3)).bandwidth_bytes_per_s == 2 * 20e9  # doubled pair
    assert topo.link(gpu(0), gpu(1)).bandwidth_bytes_per_s == 20e9
    assert topo.config["nvlink"]["bandwidth"] == 20e9
    rebuilt = build_cluster(topo.config)
    assert links_between_gpus(rebuilt) == links_between_gpus(topo)


def test_switched_and_pcie_nodes_have_no_gpu_peers() -> None:
    for name in ("dgx-a100", "dgx-h100", "pcie-8gpu"):
        topo = build_cluster({"preset": name})
        assert all(topo.gpu_peers(g) == () for g in topo.gpus), name


def test_mesh_presets_declare_their_links_consistently() -> None:
    for preset in NODE_PRESETS.values():
        pairs = [(a, b) for a, b, _ in preset.gpu_links]
        assert len(pairs) == len(set(pairs)), preset.name
        assert all(0 <= a < b < preset.gpus and count >= 1
                   for a, b, count in preset.gpu_links), preset.name


def test_gpu_peers_of_a_non_gpu_is_an_error(dgx1: Topology) -> None:
    with pytest.raises(TopologyError, match="is a pcie_switch, not a GPU"):
        dgx1.gpu_peers("n0.pcie0")


# ----------------------------------------------------------------------------- routes


def _direct(topo: Topology, a: int, b: int) -> float:
    return dict(topo.gpu_peers(gpu(a))).get(gpu(b), 0.0)


def test_every_cube_mesh_pair_routes_over_nvlink(dgx1: Topology) -> None:
    for a, b in itertools.permutations(range(8), 2):
        route = dgx1.route(gpu(a), gpu(b))
        assert route.transport == "nvlink"
        if _direct(dgx1, a, b):
            assert route.links == ((gpu(a), gpu(b)),)
            assert route.latency_s == pytest.approx(DIRECT_LATENCY_S)
            continue
        # Not cabled: through exactly one GPU cabled to both, the widest such (lowest
        # rank on a tie), as NCCL's NVB path.
        (_, via), _ = route.links
        assert len(route.links) == 2 and dgx1.device(via).kind == "gpu"
        common = [g for g in range(8) if _direct(dgx1, a, g) and _direct(dgx1, g, b)]
        widest = max(min(_direct(dgx1, a, g), _direct(dgx1, g, b)) for g in common)
        first = min(g for g in common
                    if min(_direct(dgx1, a, g), _direct(dgx1, g, b)) == widest)
        assert via == gpu(first)
        assert route.latency_s == pytest.approx(2 * DIRECT_LATENCY_S)


def test_cube_mesh_pairs_without_a_link_are_the_far_corners(dgx1: Topology) -> None:
    relayed = {(a, b) for a, b in itertools.permutations(range(8), 2)
               if len(dgx1.route(gpu(a), gpu(b)).links) == 2}
    # GPU i reaches every GPU of the other quad but i+4 through a neighbour: 3 per GPU.
    assert relayed == {(a, b) for a in range(8) for b in range(8)
                       if a // 4 != b // 4 and b != a ^ 4}


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "pcie-8gpu"])
def test_nothing_routes_through_a_gpu_on_a_switched_node(name: str) -> None:
    topo = build_cluster({"preset": name, "nodes": 2})
    for src in topo.gpus:
        for dst in topo.gpus:
            middle = topo.route(src, dst).devices[1:-1]
            assert not any(topo.device(d).kind == "gpu" for d in middle), (src, dst)


def test_routes_leaving_a_mesh_node_start_at_the_gpus_own_nic(mi300x: Topology) -> None:
    for i in range(8):
        route = mi300x.route(gpu(i), gpu(i, node=1), rail=i)
        assert route.transport == "net"
        assert route.devices[:3] == (gpu(i), f"n0.pcie{i}", f"n0.nic{i}")
        assert not any(mi300x.device(d).kind == "gpu" for d in route.devices[1:-1])


# ----------------------------------------------------------------------------- p2p


def p2p_s(topo: Topology, src: str, dst: str, size: float, params: CommParams) -> float:
    sim = Simulation()
    comm = Communicator(sim, topo, params)
    proc = comm.send(src, dst, size)
    sim.run()
    return proc.value.duration_s


IDEAL = CommParams(protocol="simple").ideal()


@settings(max_examples=25, deadline=None)
@given(a=st.integers(0, 7), b=st.integers(0, 7), size=st.integers(1, 2**32))
def test_p2p_on_the_cube_mesh_is_size_over_bottleneck_plus_route_latency(a, b, size) -> None:
    dgx1 = build_cluster({"preset": "dgx1-v100"})
    if a == b:
        return
    route = dgx1.route(gpu(a), gpu(b))
    bottleneck = min(dgx1.link(*hop).bandwidth_bytes_per_s for hop in route.links)
    expected = size / bottleneck + DIRECT_LATENCY_S * len(route.links)
    assert p2p_s(dgx1, gpu(a), gpu(b), size, IDEAL) == pytest.approx(expected, rel=1e-9)


def test_p2p_closed_forms_on_each_kind_of_pair(dgx1: Topology, mi300x: Topology) -> None:
    size = 2**30
    # Doubled NVLink pair: S / 50 GB/s + one hop.
    assert p2p_s(dgx1, gpu(0), gpu(3), size, IDEAL) == pytest.approx(
        size / (2 * NVLINK2_BPS) + DIRECT_LATENCY_S, rel=1e-12)
    # Single NVLink pair: S / 25 GB/s + one hop.
    assert p2p_s(dgx1, gpu(0), gpu(1), size, IDEAL) == pytest.approx(
        size / NVLINK2_BPS + DIRECT_LATENCY_S, rel=1e-12)
    # Not cabled (0 -> 5 through GPU 1): the single link 0 -> 1 bounds it, two hops.
    assert p2p_s(dgx1, gpu(0), gpu(5), size, IDEAL) == pytest.approx(
        size / NVLINK2_BPS + 2 * DIRECT_LATENCY_S, rel=1e-12)
    # xGMI with the default parameters: payload at 0.82 of the link, plus NCCL's base
    # latency and NVLink hop latency (simple protocol) and the route's own.
    params = CommParams(protocol="simple")
    expected = (size / (0.82 * XGMI_BPS) + params.base_latency_s["ring"]["simple"]
                + params.hop_latency_s["ring"]["nvlink"]["simple"] + DIRECT_LATENCY_S)
    assert p2p_s(mi300x, gpu(2), gpu(6), size, params) == pytest.approx(expected, rel=1e-12)
