"""Fabrics: leaf assignment, oversubscription arithmetic, ECMP over spines, scale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Route, Topology, build_cluster
from distsim_gpu.topology.fabrics import FabricSpec, build_fabric
from hypothesis import given, settings
from hypothesis import strategies as st


def _leaf_of(topo: Topology, nic: str) -> str:
    (leaf,) = [dst for (src, dst) in topo.graph.out_edges(nic)
               if topo.device(dst).kind == "switch"]
    return leaf


def _switches(topo: Topology, route: Route) -> list[str]:
    return [d for d in route.devices if topo.device(d).kind == "switch"]


def _sum_bw(topo: Topology, src: str, dst_kind_prefix: str) -> float:
    return sum(link.bandwidth_bytes_per_s for link in topo.links()
               if link.src == src and link.dst.startswith(dst_kind_prefix))


def test_single_switch_joins_every_nic_to_one_switch() -> None:
    topo = build_cluster({"preset": "dgx-a100", "nodes": 3, "fabric": "single-switch"})
    switches = [d for d in topo.devices() if d.kind == "switch"]
    assert [s.name for s in switches] == ["leaf0"]
    assert all(_leaf_of(topo, nic) == "leaf0"
               for node in range(3) for nic in topo.nics_on_node(node))
    assert _switches(topo, topo.route("n0.gpu4", "n2.gpu4")) == ["leaf0"]
    assert "spines" not in topo.config["fabric"]


def test_fat_tree_with_one_leaf_has_no_spines() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 4})  # 32 NICs, 32 per leaf
    assert topo.config["fabric"]["kind"] == "fat-tree"
    assert topo.config["fabric"]["spines"] == 0
    assert not any(d.name.startswith("spine") for d in topo.devices())


def test_fat_tree_fills_leaves_node_major() -> None:
    topo = build_cluster({"preset": "dgx-a100", "nodes": 4,
                          "fabric": {"kind": "fat-tree", "nics_per_leaf": 16}})
    for node in range(4):
        for nic in topo.nics_on_node(node):
            assert _leaf_of(topo, nic) == f"leaf{node // 2}"
    same_leaf = topo.route("n0.gpu0", "n1.gpu0")
    assert _switches(topo, same_leaf) == ["leaf0"]
    across = topo.route("n0.gpu0", "n3.gpu0")
    switches = _switches(topo, across)
    assert switches[0] == "leaf0" and switches[2] == "leaf1"
    assert switches[1].startswith("spine")
    assert across.latency_s == sum(topo.link(*i).latency_s for i in across.links)
    # 4 PCIe hops, 2 NIC crossings, 4 cables, 3 switch traversals.
    assert across.latency_s == pytest.approx(4 * 0.5e-6 + 2 * 0.3e-6 + 4 * 50e-9
                                             + 3 * 130e-9)


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_oversubscription_divides_uplink_capacity(ratio: int) -> None:
    topo = build_cluster({"preset": "dgx-a100", "nodes": 4,
                          "fabric": {"kind": "leaf-spine", "nics_per_leaf": 16,
                                     "oversubscription": ratio}})
    assert topo.config["fabric"]["kind"] == "fat-tree"
    assert topo.config["fabric"]["spines"] == 16 // ratio  # one uplink port per spine
    for leaf in ("leaf0", "leaf1"):
        down = sum(link.bandwidth_bytes_per_s for link in topo.links()
                   if link.dst == leaf and topo.device(link.src).kind == "nic")
        assert down == 16 * 25e9
        assert _sum_bw(topo, leaf, "spine") == pytest.approx(down / ratio)
        up_into_leaf = sum(link.bandwidth_bytes_per_s for link in topo.links()
                           if link.dst == leaf and link.src.startswith("spine"))
        assert up_into_leaf == pytest.approx(down / ratio)


def test_explicit_spines_split_the_uplink_evenly() -> None:
    topo = build_cluster({"preset": "dgx-a100", "nodes": 4,
                          "fabric": {"kind": "fat-tree", "nics_per_leaf": 16,
                                     "oversubscription": "2:1", "spines": 4}})
    per_pair = {topo.link(f"leaf{k}", f"spine{s}").bandwidth_bytes_per_s
                for k in range(2) for s in range(4)}
    assert per_pair == {16 * 25e9 / 2 / 4}
    assert topo.config["fabric"]["oversubscription"] == 2.0


def test_ecmp_spreads_pairs_over_spines_deterministically() -> None:
    spec = {"preset": "dgx-a100", "nodes": 4,
            "fabric": {"kind": "fat-tree", "nics_per_leaf": 16, "routing": "ecmp"}}
    topo = build_cluster(spec)
    pairs = [(f"n0.gpu{i}", f"n{n}.gpu{j}") for i in range(8) for n in (2, 3)
             for j in range(8)]
    spines = {_switches(topo, topo.route(a, b))[1] for a, b in pairs}
    assert len(spines) > 1
    rails = {_switches(topo, topo.route("n0.gpu0", "n2.gpu0", rail=r))[1] for r in range(8)}
    assert len(rails) > 1
    fresh = build_cluster(spec)
    for a, b in pairs:
        assert topo.route(a, b) == topo.route(a, b) == fresh.route(a, b)


def test_ecmp_does_not_depend_on_the_process_hash_seed(tmp_path: Path) -> None:
    spec = {"preset": "dgx-a100", "nodes": 4,
            "fabric": {"kind": "fat-tree", "nics_per_leaf": 16, "routing": "ecmp"}}
    script = (
        "import json, sys\n"
        "from distsim_gpu.topology import build_cluster\n"
        "spec = json.loads(sys.argv[1])\n"
        "t = build_cluster(spec)\n"
        "print(json.dumps([t.route(f'n0.gpu{i}', f'n3.gpu{i}', rail=r).links"
        " for i in range(8) for r in range(2)]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(spec)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    topo = build_cluster(spec)
    here = [[list(link) for link in topo.route(f"n0.gpu{i}", f"n3.gpu{i}", rail=r).links]
            for i in range(8) for r in range(2)]
    assert json.loads(out) == here


def test_rail_optimized_puts_rail_i_on_leaf_i() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": "rail-optimized"})
    for node in range(4):
        for i, nic in enumerate(topo.nics_on_node(node)):
            assert _leaf_of(topo, nic) == f"leaf{i}"
    for k in range(8):
        route = topo.route(f"n0.gpu{k}", f"n3.gpu{k}")
        assert _switches(topo, route) == [f"leaf{k}"]
        route = topo.route("n1.gpu0", "n2.gpu5", rail=k)
        assert _switches(topo, route) == [f"leaf{k}"]
    # Cross-rail traffic is possible: rails are joined through the spines.
    path = nx.shortest_path(topo.graph, "n0.nic0", "n1.nic3")
    assert path[1] == "leaf0" and path[2].startswith("spine") and path[3] == "leaf3"


def test_rail_optimized_groups_nodes_by_nics_per_leaf() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 6,
                          "fabric": {"kind": "rail-optimized", "nics_per_leaf": 4}})
    assert _leaf_of(topo, "n3.nic2") == "leaf2"
    assert _leaf_of(topo, "n5.nic2") == "leaf10"  # group 1: leaves 8..15
    assert _switches(topo, topo.route("n0.gpu2", "n3.gpu2")) == ["leaf2"]
    switches = _switches(topo, topo.route("n0.gpu2", "n5.gpu2"))
    assert switches[0] == "leaf2" and switches[-1] == "leaf10" and len(switches) == 3


def test_fabric_link_bandwidth_overrides_switch_ports() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 8,
                          "fabric": {"kind": "fat-tree", "link_bandwidth": "200 Gbps",
                                     "link_latency": "100 ns", "switch_latency": "0.2 us"}})
    nic_ports = {link.bandwidth_bytes_per_s for link in topo.links()
                 if link.src.endswith("nic0") and link.kind == "network"}
    assert nic_ports == {25e9}  # the slower end: the 200 Gb/s switch port
    assert topo.link("leaf0", "spine0").latency_s == pytest.approx(100e-9 + 0.2e-6)
    assert topo.link("leaf0", "n0.nic0").latency_s == pytest.approx(100e-9 + 0.3e-6)


def test_spines_zero_with_many_leaves_is_an_error() -> None:
    with pytest.raises(ConfigError, match="need at least one spine") as info:
        build_cluster({"preset": "dgx-h100", "nodes": 8, "fabric": {"spines": 0}})
    assert info.value.key == "fabric.spines"


def test_1024_gpu_rail_optimized_cluster_builds_and_routes() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 128, "fabric": "rail-optimized"})
    assert len(topo.gpus) == 1024 and topo.num_nodes == 128
    assert topo.config["fabric"]["spines"] == 32
    leaves = [d for d in topo.devices() if d.name.startswith("leaf")]
    assert len(leaves) == 4 * 8  # 4 groups of 32 nodes x 8 rails
    gpus = topo.gpus
    for i, gpu in enumerate(gpus):
        ring_next = topo.route(gpu, gpus[(i + 8) % len(gpus)])  # same rail, next node
        assert ring_next.transport == "net"
        hops = len(_switches(topo, ring_next))
        same_group = topo.node_of(gpu) // 32 == ((i + 8) % len(gpus)) // 8 // 32
        assert hops == (1 if same_group else 3)
        topo.route(gpu, gpus[(i * 37 + 5) % len(gpus)], rail=i % 8)
    spines = {_switches(topo, topo.route("n0.gpu0", f"n{n}.gpu0"))[1] for n in range(32, 128)}
    # D-mod-K (InfiniBand's default) numbers NICs leaf by leaf: node n's rail-0 NIC is port
    # n mod 32 of its rail leaf, and goes up to spine n mod 32 — all 32 spines.
    assert spines == {f"spine{s}" for s in range(32)}


@settings(max_examples=25, deadline=None)
@given(
    preset=st.sampled_from(["dgx-a100", "dgx-h100", "pcie-8gpu"]),
    nodes=st.integers(1, 6),
    kind=st.sampled_from(["single-switch", "fat-tree", "rail-optimized"]),
    nics_per_leaf=st.integers(1, 20),
    ratio=st.sampled_from([1, 1.5, 2, 4]),
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6),
                             st.none() | st.integers(0, 20)), min_size=1, max_size=8),
)
def test_routes_are_well_formed(preset: str, nodes: int, kind: str, nics_per_leaf: int,
                                ratio: float, picks: list[tuple[int, int, int | None]]) -> None:
    fabric: dict[str, object] = {"kind": kind}
    if kind != "single-switch":
        fabric.update(nics_per_leaf=nics_per_leaf, oversubscription=ratio)
    topo = build_cluster({"preset": preset, "nodes": nodes, "fabric": fabric})
    gpus = topo.gpus
    for a, b, rail in picks:
        src, dst = gpus[a % len(gpus)], gpus[b % len(gpus)]
        route = topo.route(src, dst, rail=rail)
        devices = route.devices
        assert devices[0] == src and devices[-1] == dst
        assert len(set(devices)) == len(devices)  # no loops
        assert all(topo.device(d).kind != "gpu" for d in devices[1:-1])  # GPUs never transit
        assert route.latency_s == sum(topo.link(*i).latency_s for i in route.links)
        if src == dst:
            assert route.transport == "local"
        elif topo.node_of(src) != topo.node_of(dst):
            assert route.transport == "net"
            nics = [d for d in devices if topo.device(d).kind == "nic"]
            assert len(nics) == 2
            if rail is not None:
                rails = len(topo.nics_on_node(0))
                assert nics == [f"n{topo.node_of(src)}.nic{rail % rails}",
                                f"n{topo.node_of(dst)}.nic{rail % rails}"]
        else:
            assert route.transport == ("nvlink" if preset != "pcie-8gpu" else "pcie")


def test_build_fabric_names_an_unknown_kind():
    spec = FabricSpec("torus", 1e9, 1e-6, 1e-6)
    with pytest.raises(ConfigError) as info:
        build_fabric(spec, [["n0.nic0"]], nic_bandwidth_bytes_per_s=1e9, nic_latency_s=1e-6)
    assert str(info.value).startswith(
        "fabric.kind: unknown fabric kind 'torus' (valid: dragonfly, fat-tree, multi-plane, "
        "rail-optimized, single-switch, superpod, three-tier)")
