"""Three-tier fat-trees, DGX SuperPOD scalable units and multi-plane rail-optimized fabrics:
switch counts, port capacities and bisection bandwidth against their closed forms."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology, build_cluster
from distsim_gpu.topology.fabrics import FabricSpec, SuperPodShape, build_fabric

NDR = 400e9 / 8
HDR = 200e9 / 8


def _count(topo: Topology, prefix: str) -> int:
    return sum(1 for d in topo.devices() if d.kind == "switch" and d.name.startswith(prefix))


def _capacity(topo: Topology, src_prefix: str, dst_prefix: str, src: str | None = None) -> float:
    """Total bandwidth of the links from ``src`` (or any ``src_prefix`` device) into
    devices named ``dst_prefix…``."""
    return sum(link.bandwidth_bytes_per_s for link in topo.links()
               if (link.src == src if src else link.src.startswith(src_prefix))
               and link.dst.startswith(dst_prefix))


def _switch_path(topo: Topology, a: str, b: str, rail: int | None = None) -> list[str]:
    return [d for d in topo.route(a, b, rail=rail).devices if topo.device(d).kind == "switch"]


def _bisection(topo: Topology, left_nodes: range) -> float:
    """Max flow from the NICs of ``left_nodes`` to every other NIC over the fabric."""
    flow = nx.DiGraph()
    for link in topo.links():
        if link.kind == "network":
            flow.add_edge(link.src, link.dst, capacity=link.bandwidth_bytes_per_s)
    for node in range(topo.num_nodes):
        for nic in topo.nics_on_node(node):
            if node in left_nodes:
                flow.add_edge("source", nic)  # no capacity attribute: unbounded
            else:
                flow.add_edge(nic, "sink")
    return nx.maximum_flow_value(flow, "source", "sink")


# --------------------------------------------------------------------------- three-tier


def _three_tier(nodes: int, **fabric: object) -> Topology:
    spec = {"kind": "three-tier", "nics_per_leaf": 8, "leaves_per_pod": 4, **fabric}
    return build_cluster({"preset": "dgx-h100", "nodes": nodes, "fabric": spec})


def test_three_tier_switch_counts_follow_the_port_arithmetic() -> None:
    topo = _three_tier(12)  # 96 NICs: 12 leaves of 8, 3 pods of 4 leaves
    config = topo.config["fabric"]
    # Spines per pod = leaf uplink ports = 8; cores per plane = spine uplink ports =
    # 4 leaves x 8 up ports / 8 spines = 4; one plane per spine of a pod.
    assert (config["spines_per_pod"], config["cores_per_plane"]) == (8, 4)
    assert (_count(topo, "leaf"), _count(topo, "spine"), _count(topo, "core")) == (12, 24, 32)
    # Spine s of every pod joins exactly the cores of plane s.
    for pod in range(3):
        for s in range(8):
            cores = {link.dst for link in topo.links()
                     if link.src == f"spine{pod * 8 + s}" and link.dst.startswith("core")}
            assert cores == {f"core{s * 4 + c}" for c in range(4)}


@pytest.mark.parametrize(("leaf_ratio", "spine_ratio"), [(1, 1), (2, 1), (1, 2), (2, 4)])
def test_three_tier_tiers_divide_capacity_by_their_ratios(leaf_ratio: float,
                                                          spine_ratio: float) -> None:
    topo = _three_tier(16, leaf_oversubscription=leaf_ratio,
                       spine_oversubscription=spine_ratio)
    leaf_down = 8 * NDR
    assert _capacity(topo, "", "spine", src="leaf5") == pytest.approx(leaf_down / leaf_ratio)
    spines_per_pod = topo.config["fabric"]["spines_per_pod"]
    assert spines_per_pod == 8 / leaf_ratio  # one per leaf uplink port
    spine_down = _capacity(topo, "", "leaf", src="spine3")
    assert spine_down == pytest.approx(4 * leaf_down / leaf_ratio / spines_per_pod)
    assert _capacity(topo, "", "core", src="spine3") == pytest.approx(spine_down / spine_ratio)
    # Bisection between pods {0, 1} and {2, 3}: half the NICs, divided by both ratios.
    assert _bisection(topo, range(8)) == pytest.approx(64 * NDR / (leaf_ratio * spine_ratio))


def test_three_tier_routes_climb_only_as_high_as_needed() -> None:
    topo = _three_tier(16)
    assert len(_switch_path(topo, "n0.gpu0", "n0.gpu1")) == 0  # NVLink
    same_pod = _switch_path(topo, "n0.gpu0", "n3.gpu0")  # leaves 0 and 3, pod 0
    assert [s.rstrip("0123456789") for s in same_pod] == ["leaf", "spine", "leaf"]
    across = _switch_path(topo, "n0.gpu0", "n12.gpu0")  # pod 3
    assert [s.rstrip("0123456789") for s in across] == ["leaf", "spine", "core", "spine",
                                                        "leaf"]
    assert across[0] == "leaf0" and across[-1] == "leaf12"


def test_three_tier_with_one_pod_has_no_cores_and_one_leaf_no_spines() -> None:
    one_pod = _three_tier(4)
    assert one_pod.config["fabric"]["cores_per_plane"] == 0 and _count(one_pod, "core") == 0
    assert _count(one_pod, "spine") == 8
    one_leaf = _three_tier(1)
    assert one_leaf.config["fabric"]["spines_per_pod"] == 0 and _count(one_leaf, "spine") == 0


def test_three_tier_explicit_tiers_split_capacity_evenly() -> None:
    topo = _three_tier(8, spines_per_pod=2, cores_per_plane=3)
    assert {topo.link(f"leaf{k}", "spine0").bandwidth_bytes_per_s for k in range(4)} == {
        8 * NDR / 2}
    # A spine: 4 leaves x 4 NDR ports each down, the same up over 3 cores.
    assert topo.link("spine1", "core3").bandwidth_bytes_per_s == pytest.approx(16 * NDR / 3)
    assert _count(topo, "core") == 2 * 3


def test_three_tier_defaults_build_a_k_ary_tree_for_16384_nics() -> None:
    nics = [[f"n{n}.nic{i}" for i in range(8)] for n in range(2048)]
    spec = FabricSpec("three-tier", NDR, 50e-9, 130e-9)
    fabric = build_fabric(spec, nics, nic_bandwidth_bytes_per_s=NDR, nic_latency_s=0.3e-6)
    names = [d.name.rstrip("0123456789") for d in fabric.devices]
    # 64-port switches, half down: 512 leaves, 16 pods x 32 spines, 32 planes x 32 cores.
    assert (names.count("leaf"), names.count("spine"), names.count("core")) == (512, 512, 1024)
    assert fabric.config["cores_per_plane"] == 32
    assert len(fabric.links) == 2 * (16384 + 512 * 32 + 512 * 32)


@pytest.mark.parametrize(("fabric", "key", "message"), [
    ({"spines_per_pod": 0}, "fabric.spines_per_pod", "need at least one spine"),
    ({"cores_per_plane": 0}, "fabric.cores_per_plane", "need at least one core"),
    ({"leaves_per_pod": 0}, "fabric.leaves_per_pod", ">= 1"),
    ({"spine_oversubscription": "1:2"}, "fabric.spine_oversubscription", "ratio >= 1"),
    ({"oversubscription": 2}, "fabric.oversubscription", "unknown key"),
])
def test_three_tier_bad_shapes_name_their_key(fabric: dict[str, object], key: str,
                                              message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        _three_tier(12, **fabric)
    assert info.value.key == key


# --------------------------------------------------------------------------- SuperPOD


def _superpod_fabric(generation: str, nodes: int):  # type: ignore[no-untyped-def]
    nics = [[f"n{n}.nic{i}" for i in range(8)] for n in range(nodes)]
    port = NDR if generation == "h100" else HDR
    spec = FabricSpec("superpod", port, 50e-9, 130e-9, shape=SuperPodShape(generation))
    return build_fabric(spec, nics, nic_bandwidth_bytes_per_s=port, nic_latency_s=0.3e-6)


@pytest.mark.parametrize(("generation", "nodes", "leaves", "spines", "cores"), [
    # DGX SuperPOD H100/B200 RA, "larger SuperPOD component counts": SUs of 32 nodes.
    ("h100", 32, 8, 4, 0), ("h100", 64, 16, 8, 0), ("h100", 128, 32, 16, 0),
    ("h100", 256, 64, 32, 0), ("h100", 512, 128, 128, 64), ("h100", 1024, 256, 256, 128),
    ("h100", 2048, 512, 512, 256),
    # A100 RA: SUs of 20 nodes, 40-port HDR switches, at most 7 SUs.
    ("a100", 20, 8, 4, 0), ("a100", 140, 56, 28, 0),
])
def test_superpod_switch_counts_match_the_reference_architectures(
        generation: str, nodes: int, leaves: int, spines: int, cores: int) -> None:
    fabric = _superpod_fabric(generation, nodes)
    names = [d.name.rstrip("0123456789") for d in fabric.devices]
    assert (names.count("leaf"), names.count("spine"), names.count("core")) == (
        leaves, spines, cores)
    # Cable counts as in the RA table: node-leaf = leaf-spine (= spine-core) = 8 per node,
    # here as bundles whose bandwidth adds up to that many ports.
    port = NDR if generation == "h100" else HDR
    up = sum(link.bandwidth_bytes_per_s for link in fabric.links
             if link.src.startswith("leaf") and link.dst.startswith("spine"))
    assert up == pytest.approx(8 * nodes * port)
    if cores:
        top = sum(link.bandwidth_bytes_per_s for link in fabric.links
                  if link.src.startswith("spine") and link.dst.startswith("core"))
        assert top == pytest.approx(8 * nodes * port)


@pytest.mark.parametrize(("preset", "su_nodes", "port"), [("dgx-h100", 32, NDR),
                                                          ("dgx-a100", 20, HDR)])
def test_superpod_su_has_eight_rail_leaves_with_a_port_per_node(preset: str, su_nodes: int,
                                                               port: float) -> None:
    nodes = su_nodes + 3  # the second SU partly filled keeps its leaves and ports
    topo = build_cluster({"preset": preset, "nodes": nodes, "fabric": "superpod"})
    assert _count(topo, "leaf") == 16
    for node in range(nodes):
        for rail, nic in enumerate(topo.nics_on_node(node)):
            leaf = f"leaf{(node // su_nodes) * 8 + rail}"
            assert topo.link(nic, leaf).bandwidth_bytes_per_s == port
    for k in range(16):
        # Each leaf: su_nodes ports up, whatever its SU holds (sized by design).
        assert _capacity(topo, "", "spine", src=f"leaf{k}") == pytest.approx(su_nodes * port)
    assert _switch_path(topo, "n0.gpu3", f"n{su_nodes - 1}.gpu3", rail=3) == ["leaf3"]
    across = _switch_path(topo, "n0.gpu3", f"n{su_nodes}.gpu3", rail=3)
    assert across[0] == "leaf3" and across[2] == "leaf11" and across[1].startswith("spine")


def test_more_spines_than_uplinks_take_whole_ports() -> None:
    # A100 SuperPOD at 7 SUs: 56 leaves with 20 HDR uplinks each, 28 spines of 40 ports.
    fabric = _superpod_fabric("a100", 140)
    up: dict[str, list[float]] = {}
    down: dict[str, int] = {}
    for link in fabric.links:
        if link.src.startswith("leaf") and link.dst.startswith("spine"):
            up.setdefault(link.src, []).append(link.bandwidth_bytes_per_s)
            down[link.dst] = down.get(link.dst, 0) + 1
    assert all(ports == [HDR] * 20 for ports in up.values()) and len(up) == 56
    assert set(down.values()) == {40} and len(down) == 28  # every spine port used once
    reach = {leaf: {link.dst for link in fabric.links if link.src == leaf
                    and link.dst.startswith("spine")} for leaf in up}
    assert all(reach[a] & reach[b] for a, b in itertools.combinations(reach, 2))


def test_superpod_three_tier_crosses_the_core_only_between_sus() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 9 * 32, "fabric": "superpod"})
    assert _count(topo, "spine") == 9 * 8 and _count(topo, "core") == 8 * math.ceil(9 / 2)
    assert _switch_path(topo, "n0.gpu5", "n31.gpu5", rail=5) == ["leaf5"]  # one SU, one rail
    assert len(_switch_path(topo, "n0.gpu5", "n40.gpu5", rail=5)) == 5  # SU 0 -> SU 1
    # Across rails inside an SU: up to a spine of the SU and down (NCCL avoids it).
    assert len(nx.shortest_path(topo.graph, "n0.nic0", "n31.nic5")) == 5


def test_superpod_bisection_is_non_blocking() -> None:
    topo = build_cluster({"preset": "dgx-a100", "nodes": 40, "fabric": "superpod"})
    assert _bisection(topo, range(20)) == pytest.approx(20 * 8 * HDR)


@pytest.mark.parametrize(("spec", "key", "message"), [
    ({"preset": "dgx-a100", "nodes": 141, "fabric": "superpod"}, "fabric.kind",
     r"at most 7 scalable units of 20 nodes \(140 nodes\), got 141"),
    ({"preset": "pcie-8gpu", "nodes": 2, "fabric": "superpod"}, "fabric.generation",
     "no DGX SuperPOD design"),
    ({"preset": "dgx-h100", "nodes": 2, "fabric": {"kind": "superpod", "generation": "b200"}},
     "fabric.generation", "unknown SuperPOD generation 'b200'"),
    ({"preset": "dgx-h100", "nodes": 2, "fabric": {"kind": "superpod", "spines": 4}},
     "fabric.spines", "unknown key"),
])
def test_superpod_errors_name_their_key(spec: dict[str, object], key: str,
                                        message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        build_cluster(spec)
    assert info.value.key == key


def test_superpod_over_64_h100_sus_is_an_error() -> None:
    with pytest.raises(ConfigError, match="at most 64 scalable units"):
        _superpod_fabric("h100", 64 * 32 + 1)


def test_superpod_generation_sets_the_port_speed() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2,
                          "fabric": {"kind": "superpod", "generation": "a100"}})
    assert topo.config["fabric"]["link_bandwidth"] == HDR
    assert topo.link("n0.nic0", "leaf0").bandwidth_bytes_per_s == HDR  # slower end


# --------------------------------------------------------------------------- multi-plane


def test_dual_plane_splits_every_nic_over_two_disjoint_planes() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 40, "fabric": "dual-plane"})
    assert topo.config["fabric"]["kind"] == "multi-plane"
    assert topo.config["fabric"]["planes"] == 2
    for node in (0, 39):
        for rail, nic in enumerate(topo.nics_on_node(node)):
            leaf = (node // 32) * 8 + rail
            ports = {link.dst: link.bandwidth_bytes_per_s for link in topo.links()
                     if link.src == nic and link.kind == "network"}
            assert ports == {f"plane0.leaf{leaf}": NDR / 2, f"plane1.leaf{leaf}": NDR / 2}
    for plane in (0, 1):
        assert _count(topo, f"plane{plane}.leaf") == 16
        assert _count(topo, f"plane{plane}.spine") == 32
    crossing = [link for link in topo.links()
                if link.src.startswith("plane") and link.dst.startswith("plane")
                and link.src[:6] != link.dst[:6]]
    assert crossing == []
    # The two planes together carry every NIC at full speed across the bisection.
    full = build_cluster({"preset": "dgx-h100", "nodes": 64, "fabric": "dual-plane"})
    assert _bisection(full, range(32)) == pytest.approx(32 * 8 * NDR)


@pytest.mark.parametrize("routing", ["dmodk", "ecmp", "adaptive"])
def test_a_connection_spreads_over_both_planes_under_any_routing(routing: str) -> None:
    # The NIC sprays its packets over its planes; each plane routes its half.
    topo = build_cluster({"preset": "dgx-h100", "nodes": 40,
                          "fabric": {"kind": "dual-plane", "routing": routing}})
    route = topo.route("n0.gpu2", "n39.gpu2")
    shares = dict(zip(route.links, route.weights, strict=True))
    assert shares[("n0.nic2", "plane0.leaf2")] == shares[("n0.nic2", "plane1.leaf2")] == 0.5
    assert shares[("plane0.leaf10", "n39.nic2")] == shares[("plane1.leaf10", "n39.nic2")] == 0.5
    for plane in ("plane0", "plane1"):
        up = sum(w for (a, b), w in shares.items()
                 if a == f"{plane}.leaf2" and b.startswith(f"{plane}.spine"))
        assert up == pytest.approx(0.5)


def test_multi_plane_ports_follow_planes_and_overrides() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2,
                          "fabric": {"kind": "multi-plane", "planes": 4}})
    assert _count(topo, "plane3.leaf") == 8
    assert topo.link("n1.nic5", "plane3.leaf5").bandwidth_bytes_per_s == NDR / 4
    fast = build_cluster({"preset": "dgx-h100", "nodes": 2,
                          "fabric": {"kind": "multi-plane", "link_bandwidth": "800 Gbps"}})
    assert fast.link("n1.nic5", "plane1.leaf5").bandwidth_bytes_per_s == NDR / 2  # the NIC's half
    with pytest.raises(ConfigError, match=">= 1") as info:
        build_cluster({"preset": "dgx-h100", "nodes": 2,
                       "fabric": {"kind": "multi-plane", "planes": 0}})
    assert info.value.key == "fabric.planes"
