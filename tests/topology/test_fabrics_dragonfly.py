"""Dragonfly fabrics: router and cable counts in closed form, minimal routes, bad shapes."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.topology import Link, Topology, build_cluster
from distsim_gpu.topology.fabric_dragonfly import global_cables

NDR = 400e9 / 8
_ROUTER = re.compile(r"^g(\d+)\.r(\d+)$")


def _dragonfly(nodes: int, **fabric: object) -> Topology:
    """A small dragonfly, NICs filling routers node-major unless told otherwise."""
    spec = {"kind": "dragonfly", "routers_per_group": 4, "nics_per_router": 4,
            "global_links_per_router": 2, "nic_placement": "nodes", **fabric}
    return build_cluster({"preset": "dgx-h100", "nodes": nodes, "fabric": spec})


def _group(name: str) -> int | None:
    match = _ROUTER.match(name)
    return int(match.group(1)) if match else None


Bandwidths = dict[tuple[str, str], float]


def _router_links(topo: Topology) -> tuple[Bandwidths, Bandwidths]:
    """Directed router-to-router links split into (local, global), with bandwidths."""
    local: Bandwidths = {}
    global_: Bandwidths = {}
    for link in topo.links():
        a, b = _group(link.src), _group(link.dst)
        if a is not None and b is not None:
            (local if a == b else global_)[link.id] = link.bandwidth_bytes_per_s
    return local, global_


@pytest.mark.parametrize(("groups", "a", "h"), [(2, 4, 2), (3, 4, 2), (5, 4, 2), (9, 4, 2),
                                                (4, 3, 3), (7, 6, 1)])
def test_cable_counts_follow_the_closed_form(groups: int, a: int, h: int) -> None:
    topo = _dragonfly(2, groups=groups, routers_per_group=a, global_links_per_router=h,
                      global_link_bandwidth="100 Gbps", local_link_bandwidth="800 Gbps")
    routers = [d for d in topo.devices() if _ROUTER.match(d.name)]
    assert len(routers) == groups * a
    local, global_ = _router_links(topo)
    assert len(local) == groups * a * (a - 1)  # all-to-all inside each group, both ways
    assert set(local.values()) == {800e9 / 8}
    per_pair = a * h // (groups - 1)
    for g, j in itertools.permutations(range(groups), 2):
        cables = sum(bw for (x, y), bw in global_.items()
                     if _group(x) == g and _group(y) == j) / (100e9 / 8)
        assert cables == pytest.approx(per_pair)
    # No router has more global cables than it has global ports.
    for router in routers:
        out = sum(bw for (x, _), bw in global_.items() if x == router.name) / (100e9 / 8)
        assert out <= h + 1e-9


def test_global_cables_are_spread_over_routers() -> None:
    cables = global_cables(groups=3, routers_per_group=4, global_links_per_router=2)
    # 8 ports per group, 2 peers: 4 cables per pair; group 0's ports alternate peers.
    assert sum(n for (g, _, j, _), n in cables.items() if (g, j) == (0, 1)) == 4
    routers_of_0 = {rg for (g, rg, _, _) in cables if g == 0}
    assert routers_of_0 == {0, 1, 2, 3}


def test_nics_fill_routers_node_major_and_groups_follow() -> None:
    topo = _dragonfly(5)  # 40 NICs, 4 per router, 16 per group -> 3 groups
    assert topo.config["fabric"]["groups"] == 3
    assert topo.link("n0.nic3", "g0.r0").bandwidth_bytes_per_s == NDR
    assert topo.link("n0.nic4", "g0.r1")
    assert topo.link("n2.nic0", "g1.r0")  # NIC 16 -> router 4 = group 1, router 0
    assert topo.link("n4.nic7", "g2.r1")  # NIC 39 -> router 9


def test_rail_placement_puts_a_nodes_nics_on_different_routers() -> None:
    # 8 rails, 4 NIC ports per router: NIC i of nodes 4b..4b+3 on router 8b + i.
    topo = _dragonfly(6, nic_placement="rails")
    assert topo.config["fabric"]["groups"] == 4  # 2 blocks of 4 nodes x 8 rails = 16 routers
    for node in range(6):
        for rail, nic in enumerate(topo.nics_on_node(node)):
            assert topo.link(nic, "g{}.r{}".format(*divmod((node // 4) * 8 + rail, 4)))
    # A ring's neighbours on one rail share a router, or cross one cable of their own.
    assert [d for d in topo.route("n0.gpu0", "n3.gpu0", rail=5).devices
            if _ROUTER.match(d)] == ["g1.r1"]
    crossings = {tuple(d for d in topo.route(f"n{n}.gpu0", f"n{n + 1}.gpu0", rail=r).devices
                       if _ROUTER.match(d)) for n in (3,) for r in range(8)}
    assert len(crossings) == 8  # each rail on its own routers


@pytest.mark.parametrize("routing", ["dmodk", "ecmp", "adaptive"])
def test_minimal_routes_take_one_global_cable_at_most(routing: str) -> None:
    # By hop count alone, g -> third group -> j is as short as local-global-local (and
    # shorter where one router of the third group has cables to both): least cost is not.
    topo = _dragonfly(16, groups=8, routing=routing)  # 128 NICs fill all 8 groups
    _, global_ = _router_links(topo)
    for i, j in [(0, 15), (3, 9), (5, 6), (0, 1), (0, 0)]:
        for rail in range(8):
            route = topo.route(f"n{i}.gpu0", f"n{j}.gpu1", rail=rail)
            routers = [d for d in route.devices if _ROUTER.match(d)]
            if i == j:
                assert routers == []
                continue
            ends = {_group(routers[0]), _group(routers[-1])}
            assert {_group(r) for r in routers} == ends  # no third group
            crossing = sum(w for link, w in zip(route.links, route.weights, strict=True)
                           if link in global_)
            assert crossing == pytest.approx(1.0 if len(ends) == 2 else 0.0)
            assert all(len(ends) == 2 or link not in global_ for link in route.links)


def test_explicit_groups_are_all_built() -> None:
    topo = _dragonfly(1, groups=6)
    assert topo.config["fabric"]["groups"] == 6
    assert topo.device("g5.r3").kind == "switch"


@pytest.mark.parametrize(("fabric", "key", "message"), [
    ({"groups": 0}, "fabric.groups", ">= 1"),
    ({"groups": 2}, "fabric.groups", r"40 NICs need 10 routers of 4 NIC ports \(nic_placement "
                                     r"nodes\), more than 2 groups x 4 routers"),
    ({"nic_placement": "racks"}, "fabric.nic_placement", "unknown NIC placement 'racks'"),
    ({"groups": 10}, "fabric.global_links_per_router",
     "10 groups need 9 global ports per group"),
    ({"routers_per_group": 0}, "fabric.routers_per_group", ">= 1"),
    ({"nics_per_router": 0}, "fabric.nics_per_router", ">= 1"),
    ({"global_link_bandwidth": "fast"}, "fabric.global_link_bandwidth", "as a bandwidth"),
    ({"spines": 2}, "fabric.spines", "unknown key"),
])
def test_bad_dragonfly_shapes_name_their_key(fabric: dict[str, object], key: str,
                                             message: str) -> None:
    with pytest.raises(DistsimError, match=message) as info:
        _dragonfly(5, **fabric)
    assert info.value.key == key


def test_defaults_are_slingshot_groups_of_32_routers() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 80, "fabric": "dragonfly"})
    config = topo.config["fabric"]
    assert (config["routers_per_group"], config["nics_per_router"],
            config["global_links_per_router"]) == (32, 16, 17)
    assert config["groups"] == 2  # 640 NICs, 512 per group
    _, global_ = _router_links(topo)
    # 32 x 17 = 544 global ports per group, all to the one other group.
    assert sum(global_.values()) == pytest.approx(2 * 544 * NDR)


def test_link_cost_must_be_a_whole_number_of_hops() -> None:
    with pytest.raises(DistsimError, match="routing cost must be a whole number >= 1"):
        Link("a", "b", 1e9, 0.0, "network", 0)
    assert Link("a", "b", 1e9, 0.0, "network").cost == 1


def _global_shares(topo: Topology, route_links: Any, weights: Any) -> dict[tuple[int, int], float]:
    """Fraction of the route's bytes crossing from group to group, per (from, to) pair."""
    shares: dict[tuple[int, int], float] = {}
    for (a, b), w in zip(route_links, weights, strict=True):
        ga, gb = _group(a), _group(b)
        if ga is not None and gb is not None and ga != gb:
            shares[(ga, gb)] = shares.get((ga, gb), 0.0) + w
    return shares


def test_valiant_detours_evenly_through_every_other_group() -> None:
    topo = _dragonfly(8, groups=6, routing="valiant")  # groups 0..3 hold NICs, 4..5 empty
    route = topo.route("n0.gpu0", "n5.gpu0", rail=0)  # group 0 -> group 2
    shares = _global_shares(topo, route.links, route.weights)
    assert sum(shares.values()) == pytest.approx(2.0)  # two global cables per byte
    assert set(shares) == {(0, v) for v in (1, 3, 4, 5)} | {(v, 2) for v in (1, 3, 4, 5)}
    assert all(share == pytest.approx(1 / 4) for share in shares.values())
    # Inside one group there is nothing to detour through: the minimal even split.
    inside = topo.route("n0.gpu0", "n1.gpu0", rail=0)
    assert _global_shares(topo, inside.links, inside.weights) == {}


def test_ugal_splits_by_bottleneck_capacity() -> None:
    # 6 groups x 4 routers x 2 global ports: 8 ports over 5 peers, one cable per pair, so
    # the direct path and each of the 4 detours carry one cable's worth: 1/5 each.
    topo = _dragonfly(8, groups=6, routing="ugal")
    route = topo.route("n0.gpu0", "n5.gpu0", rail=0)
    shares = _global_shares(topo, route.links, route.weights)
    assert shares[(0, 2)] == pytest.approx(1 / 5)
    assert all(shares[(0, v)] == pytest.approx(1 / 5) for v in (1, 3, 4, 5))
    assert sum(shares.values()) == pytest.approx(1 / 5 + 2 * 4 / 5)


def test_non_minimal_policies_are_the_even_split_without_groups() -> None:
    for kind in ("fat-tree", "rail-optimized"):
        spec = {"preset": "dgx-h100", "nodes": 8, "fabric": {"kind": kind, "nics_per_leaf": 4}}
        adaptive = build_cluster({**spec, "fabric": {**spec["fabric"], "routing": "adaptive"}})
        for policy in ("valiant", "ugal"):
            other = build_cluster({**spec, "fabric": {**spec["fabric"], "routing": policy}})
            for a, b in [("n0.gpu0", "n7.gpu0"), ("n1.gpu3", "n4.gpu3")]:
                assert other.route(a, b) == adaptive.route(a, b)
    three = _dragonfly(5, routing="valiant", groups=3, global_links_per_router=1)
    route = three.route("n0.gpu0", "n4.gpu0", rail=0)  # group 0 -> 2: all through group 1
    assert _global_shares(three, route.links, route.weights) == {(0, 1): 1.0, (1, 2): 1.0}
