"""Rings over mesh nodes, as NCCL lays them: every hop a direct link, as many rings as the
links carry, and collective times against their closed forms.

On a fully connected 8-GPU mesh with one link per pair (MI300X) the 56 directed links split
into k = 7 rings, so a ring all-reduce takes 2(n-1)/n·S/(7·B) plus 2(n-1) hop latencies; on
the DGX-1 cube-mesh (6 NVLinks per GPU) k = 6.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.algorithms import build_plan, ring_channels
from distsim_gpu.collectives.meshrings import mesh_path, mesh_rings
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import Topology, build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

XGMI_BPS = 64e9
NVLINK2_BPS = 25e9
HOP_S = 0.6e-6  # a direct GPU-GPU link's latency in the mesh presets
IDEAL = CommParams(protocol="simple").ideal()


@pytest.fixture(scope="module")
def mi300x() -> Topology:
    return build_cluster({"preset": "mi300x"})


@pytest.fixture(scope="module")
def dgx1() -> Topology:
    return build_cluster({"preset": "dgx1-v100"})


def gpus(*indices: int, node: int = 0) -> list[str]:
    return [f"n{node}.gpu{i}" for i in indices]


def link_count(topo: Topology, a: str, b: str) -> int:
    """How many links of the cluster's narrowest GPU-GPU width join a -> b directly."""
    widths = [bw for g in topo.gpus for _, bw in topo.gpu_peers(g)]
    return round(dict(topo.gpu_peers(a)).get(b, 0.0) / min(widths)) if widths else 0


def ring_arcs(ring: tuple[str, ...]) -> list[tuple[str, str]]:
    return list(zip(ring, ring[1:] + ring[:1]))


def run_s(topo: Topology, op: str, group: list[str], size: float, params: CommParams,
          algorithm: str = "ring", fidelity: str = "coflow") -> float:
    sim = Simulation()
    comm = Communicator(sim, topo, params)
    proc = comm.collective(op, group, size, algorithm=algorithm, fidelity=fidelity)
    sim.run()
    return proc.value.duration_s


# ----------------------------------------------------------------------------- rings


def test_mi300x_mesh_splits_into_seven_rings_using_every_link_once(mi300x: Topology) -> None:
    rings = mesh_rings(mi300x, list(mi300x.gpus))
    assert len(rings) == 7
    arcs = Counter(arc for ring in rings for arc in ring_arcs(ring))
    assert set(arcs) == set(itertools.permutations(mi300x.gpus, 2))
    assert set(arcs.values()) == {1}
    assert all(sorted(ring) == sorted(mi300x.gpus) and ring[0] == "n0.gpu0" for ring in rings)


def test_cube_mesh_carries_six_rings_over_direct_nvlinks(dgx1: Topology) -> None:
    rings = mesh_rings(dgx1, list(dgx1.gpus))
    assert len(rings) == 6
    arcs = Counter(arc for ring in rings for arc in ring_arcs(ring))
    # Every NVLink is crossed by exactly one ring in each direction: a doubled pair by two.
    assert arcs == {(a, b): link_count(dgx1, a, b)
                    for a, b in itertools.permutations(dgx1.gpus, 2) if link_count(dgx1, a, b)}


@pytest.mark.parametrize(("indices", "rings"), [
    ((0, 1, 2, 3), 4),  # a quad: fully connected, 4 NVLinks per GPU inside it
    ((0, 3), 1),  # a doubled pair alone: one ring of two, at both links' width
    ((0, 1), 1),
    ((0, 1, 4, 5), 2),  # a cube face: one square, both directions
])
def test_cube_mesh_subgroups(dgx1: Topology, indices: tuple[int, ...], rings: int) -> None:
    assert len(mesh_rings(dgx1, gpus(*indices))) == rings


def test_groups_the_mesh_does_not_close_fall_back_to_one_rank_order_ring(
        dgx1: Topology) -> None:
    assert mesh_rings(dgx1, gpus(0, 5)) == []  # not cabled
    assert mesh_rings(dgx1, gpus(0, 6, 7)) == []  # 0 is cabled to neither
    (channel,) = ring_channels(dgx1, gpus(0, 5))
    assert channel == (tuple(gpus(0, 5)), (None, None))


def test_switched_nodes_keep_one_ring() -> None:
    topo = build_cluster({"preset": "dgx-h100"})
    assert mesh_rings(topo, list(topo.gpus)) == []
    assert ring_channels(topo, list(topo.gpus)) == [(topo.gpus, (None,) * 8)]


def test_max_channels_caps_the_mesh_rings(mi300x: Topology) -> None:
    assert len(ring_channels(mi300x, list(mi300x.gpus), max_channels=3)) == 3
    assert len(ring_channels(mi300x, list(mi300x.gpus))) == 7


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 7), data=st.data())
def test_rings_of_any_mesh_are_hamiltonian_and_within_link_counts(n: int, data) -> None:
    pairs = list(itertools.combinations(range(n), 2))
    counts = data.draw(st.lists(st.integers(0, 3), min_size=len(pairs), max_size=len(pairs)))
    devices = [{"name": f"g{i}", "kind": "gpu"} for i in range(n)]
    devices.append({"name": "sw", "kind": "pcie_switch"})
    links = [{"src": f"g{i}", "dst": "sw", "bandwidth": 1e9, "kind": "pcie"} for i in range(n)]
    links += [{"src": f"g{a}", "dst": f"g{b}", "bandwidth": c * 10e9, "kind": "nvlink"}
              for (a, b), c in zip(pairs, counts) if c]
    topo = build_cluster({"devices": devices, "links": links})
    group = list(topo.gpus)
    rings = mesh_rings(topo, group)
    used = Counter(arc for ring in rings for arc in ring_arcs(ring))
    # Rings share a link unit only in halves, and then every arc is counted in halves.
    halves = 2 if any(times > link_count(topo, a, b) for (a, b), times in used.items()) else 1
    for (a, b), times in used.items():
        assert times <= halves * link_count(topo, a, b)  # never more rings than units
    assert all(sorted(ring) == sorted(group) for ring in rings)
    out_links = min(sum(link_count(topo, g, h) for h in group if h != g) for g in group)
    assert len(rings) <= halves * out_links
    if n >= 3 and all(counts) and len(set(counts)) == 1:
        # A complete mesh of equal links decomposes into n-1 rings (Tillson), except on 4
        # and 6 GPUs, whose double does: 2(n-1) rings at half a link's width.  Equal links
        # are one unit each, however many cables each holds.
        assert len(rings) == (2 * (n - 1) if n in (4, 6) else n - 1)


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("fidelity", ["coflow", "step"])
def test_mi300x_ring_all_reduce_runs_on_seven_rings(mi300x: Topology, fidelity: str) -> None:
    n, size, k = 8, 2**30, 7
    expected = 2 * (n - 1) / n * size / (k * XGMI_BPS) + 2 * (n - 1) * HOP_S
    got = run_s(mi300x, "all_reduce", list(mi300x.gpus), size, IDEAL, fidelity=fidelity)
    assert got == pytest.approx(expected, rel=1e-9)


def test_mi300x_ring_uses_only_direct_links_once_each(mi300x: Topology) -> None:
    plan = build_plan(mi300x, list(mi300x.gpus), "all_reduce", algorithm="ring",
                      protocol="simple", params=IDEAL)
    (step,) = plan.steps
    assert plan.channels == 7
    assert dict(step.link_streams) == dict.fromkeys(itertools.permutations(mi300x.gpus, 2), 1.0)


def test_mi300x_all_reduce_with_default_parameters(mi300x: Topology) -> None:
    n, size, k = 8, 2**30, 7
    params = CommParams(protocol="simple")
    hop = params.hop_latency_s["ring"]["nvlink"]["simple"] + HOP_S
    expected = (params.base_latency_s["ring"]["simple"] + 2 * (n - 1) * hop
                + 2 * (n - 1) / n * size / (k * 0.82 * XGMI_BPS))
    assert run_s(mi300x, "all_reduce", list(mi300x.gpus), size, params) == pytest.approx(
        expected, rel=1e-9)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_mi300x_half_ring_ops(mi300x: Topology, op: str) -> None:
    n, size, k = 8, 3 * 2**30, 7
    expected = (n - 1) / n * size / (k * XGMI_BPS) + (n - 1) * HOP_S
    assert run_s(mi300x, op, list(mi300x.gpus), size, IDEAL) == pytest.approx(expected,
                                                                                rel=1e-9)


@pytest.mark.parametrize(("indices", "k"), [((0, 1, 2, 3, 4, 5, 6, 7), 6), ((0, 1, 2, 3), 4),
                                            ((0, 3), 2), ((0, 1, 4, 5), 2)])
def test_cube_mesh_all_reduce_at_nvlink_speed(dgx1: Topology, indices, k: int) -> None:
    n, size = len(indices), 2**30
    expected = 2 * (n - 1) / n * size / (k * NVLINK2_BPS) + 2 * (n - 1) * HOP_S
    assert run_s(dgx1, "all_reduce", gpus(*indices), size, IDEAL) == pytest.approx(expected,
                                                                                     rel=1e-9)


def test_cube_mesh_pair_without_a_link_relays_through_a_gpu(dgx1: Topology) -> None:
    # 0 <-> 5 through GPU 1 (0-1 single, 1-5 doubled): one link's bandwidth, two hops.
    size = 2**30
    expected = size / NVLINK2_BPS + 2 * (2 * HOP_S)
    assert run_s(dgx1, "all_reduce", gpus(0, 5), size, IDEAL) == pytest.approx(expected,
                                                                                rel=1e-9)


def test_cube_mesh_tree_chain_keeps_to_direct_links(dgx1: Topology) -> None:
    plan = build_plan(dgx1, list(dgx1.gpus), "all_reduce", algorithm="tree",
                      protocol="simple", params=IDEAL)
    links = {link for step in plan.steps for link in step.link_streams}
    assert all(link_count(dgx1, a, b) for a, b in links)
    # The first ring is the doubled cycle: the chain runs at two links' bandwidth.
    assert {dgx1.link(a, b).bandwidth_bytes_per_s for a, b in links} == {2 * NVLINK2_BPS}


# ----------------------------------------------------------------------------- across nodes


@pytest.mark.parametrize("preset", ["mi300x", "dgx1-v100"])
def test_rings_across_mesh_nodes_cross_each_node_over_direct_links(preset: str) -> None:
    topo = build_cluster({"preset": preset, "nodes": 2})
    channels = ring_channels(topo, list(topo.gpus))
    assert len(channels) == len(topo.nics_on_node(0))
    for order, rails in channels:
        for i, rail in enumerate(rails):
            if rail is None:
                src, dst = order[i], order[(i + 1) % len(order)]
                assert link_count(topo, src, dst), (src, dst)


def test_mesh_path_visits_every_gpu_between_entry_and_exit(dgx1: Topology) -> None:
    group = list(dgx1.gpus)
    path = mesh_path(dgx1, group, "n0.gpu0", "n0.gpu1")
    assert path is not None and path[0] == "n0.gpu0" and path[-1] == "n0.gpu1"
    assert sorted(path) == sorted(group)
    assert all(link_count(dgx1, a, b) for a, b in itertools.pairwise(path))
    assert mesh_path(dgx1, gpus(0, 5), "n0.gpu0", "n0.gpu5") is None
    assert mesh_path(build_cluster({"preset": "dgx-a100"}), gpus(0, 1), "n0.gpu0",
                     "n0.gpu1") is None


def test_quad_gh200_runs_six_rings_at_half_a_pair_each() -> None:
    # 4 GPUs, 6 NVLinks per pair: 2 rings at a pair's width would leave a third of every
    # GPU's links idle; 6 at half a pair's width (each directed Hamiltonian cycle once) use
    # them all, so a ring all-reduce runs at 6 x 75 GB/s = 450 GB/s per GPU.
    topo = build_cluster({"preset": "quad-gh200"})
    rings = mesh_rings(topo, list(topo.gpus))
    assert len(rings) == 6
    arcs = Counter(arc for ring in rings for arc in ring_arcs(ring))
    assert set(arcs) == set(itertools.permutations(topo.gpus, 2))
    assert set(arcs.values()) == {2}
    n, size = 4, 2**30
    expected = 2 * (n - 1) / n * size / (6 * 75e9) + 2 * (n - 1) * HOP_S
    assert run_s(topo, "all_reduce", list(topo.gpus), size, IDEAL) == pytest.approx(
        expected, rel=1e-9)
