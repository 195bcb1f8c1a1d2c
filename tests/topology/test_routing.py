"""Routing policies: D-mod-K, adaptive, ECMP per queue pair, spraying; multipath routes.

Closed forms and invariants: a flow split over two disjoint links of capacity c moves S in
S/(2c) and shares max-min fairly with a single-path competitor; D-mod-K makes every shift
permutation contention-free on a non-blocking tree (two and three tiers); ring all-reduce
moves its bytes at the same rate at 2, 16 and 128 nodes; ECMP collisions follow the
balls-into-bins law; an oversubscribed tier slows cross-leaf traffic by its ratio only.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.algorithms import build_plan
from distsim_gpu.collectives.communicator import Communicator
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.simcore.errors import ConfigError, DistsimError, TopologyError
from distsim_gpu.simcore.maxmin import max_min_fair
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Route, Topology, build_cluster, load_cluster
from distsim_gpu.topology.model import Device, Link, full_duplex
from distsim_gpu.topology.routing import (
    FOLDING_POLICIES,
    POLICIES,
    Connection,
    RoutingSpec,
    spread,
)
from hypothesis import given, settings
from hypothesis import strategies as st

GB = 1e9


def _two_paths(policy: str, *, latency_b: str = "0 us") -> Topology:
    """g0 -> {swa, swb} -> g1, every link 10 GB/s; g2 reaches g1 through swa only."""
    return build_cluster({
        "name": "two-paths",
        "routing": policy,
        "devices": [{"name": "g0", "kind": "gpu", "node": 0},
                    {"name": "g1", "kind": "gpu", "node": 1},
                    {"name": "g2", "kind": "gpu", "node": 2},
                    {"name": "swa", "kind": "switch"}, {"name": "swb", "kind": "switch"}],
        "links": [{"src": "g0", "dst": "swa", "bandwidth": "10 GB/s", "kind": "network"},
                  {"src": "swa", "dst": "g1", "bandwidth": "10 GB/s", "kind": "network"},
                  {"src": "g0", "dst": "swb", "bandwidth": "10 GB/s", "kind": "network",
                   "latency": latency_b},
                  {"src": "swb", "dst": "g1", "bandwidth": "10 GB/s", "kind": "network",
                   "latency": latency_b},
                  {"src": "g2", "dst": "swa", "bandwidth": "10 GB/s", "kind": "network"}],
    })


def _sends(topo: Topology, sends: list[tuple[str, str, float]]) -> list[float]:
    """Start every send at t=0 on ideal parameters; each one's duration in seconds."""
    sim = Simulation(0)
    comm = Communicator(sim, topo, CommParams().ideal())
    procs = [comm.send(src, dst, size) for src, dst, size in sends]
    sim.run(until=sim.env.all_of(procs))
    return [p.value.duration_s for p in procs]


def _fabric_load(routes: list[Route]) -> Counter[tuple[str, str]]:
    """Flows (weighted) per directed link between switches and NICs / switches."""
    load: Counter[tuple[str, str]] = Counter()
    for route in routes:
        for link, weight in zip(route.links, route.weights, strict=True):
            load[link] += weight
    return load


# --------------------------------------------------------------------------- multipath flows


@pytest.mark.parametrize("policy", ["spray", "adaptive"])
def test_a_sprayed_flow_over_two_disjoint_links_takes_s_over_2c(policy: str) -> None:
    topo = _two_paths(policy)
    route = topo.route("g0", "g1")
    assert route.multipath
    assert dict(zip(route.links, route.weights, strict=True)) == {
        ("g0", "swa"): 0.5, ("g0", "swb"): 0.5, ("swa", "g1"): 0.5, ("swb", "g1"): 0.5}
    size = 3e9
    (alone,) = _sends(topo, [("g0", "g1", size)])
    assert alone == pytest.approx(size / (2 * 10 * GB), rel=1e-12)


def test_a_single_path_policy_takes_s_over_c() -> None:
    topo = _two_paths("ecmp")
    route = topo.route("g0", "g1")
    assert not route.multipath and len(route.links) == 2
    (alone,) = _sends(topo, [("g0", "g1", 3e9)])
    assert alone == pytest.approx(3e9 / (10 * GB), rel=1e-12)


def test_a_split_flow_shares_max_min_with_a_single_path_competitor() -> None:
    # On swa -> g1 the split flow puts r1/2 and the competitor r2: progressive filling
    # raises both to r with 1.5 r = c, so r = 2c/3 each.  The competitor (S/3) ends at
    # (S/3)/(2c/3) = S/(2c); the split flow has moved S/3 by then and sends the other 2S/3
    # alone at 2c: it ends at S/(2c) + S/(3c) = 5S/(6c).
    c, size = 10 * GB, 3e9
    topo = _two_paths("spray")
    split, competitor = _sends(topo, [("g0", "g1", size), ("g2", "g1", size / 3)])
    assert competitor == pytest.approx(size / (2 * c), rel=1e-12)
    assert split == pytest.approx(5 * size / (6 * c), rel=1e-12)
    # The same allocation from the solver alone.
    flows = [dict(zip(r.links, r.weights, strict=True))
             for r in (topo.route("g0", "g1"), topo.route("g2", "g1"))]
    rates = max_min_fair(flows, {link.id: link.bandwidth_bytes_per_s for link in topo.links()})
    assert rates == pytest.approx([2 * c / 3, 2 * c / 3], rel=1e-12)


def test_multipath_latency_is_the_slowest_path() -> None:
    topo = _two_paths("spray", latency_b="3 us")
    route = topo.route("g0", "g1")
    assert route.latency_s == pytest.approx(6e-6)  # path b: 2 links of 3 us; path a: 0


def test_route_weights_default_to_one_and_must_match_the_links() -> None:
    route = Route("a", "b", (("a", "s"), ("s", "b")), 1e-6, "net")
    assert route.weights == (1.0, 1.0) and not route.multipath
    with pytest.raises(TopologyError, match="1 weights for 2 links"):
        Route("a", "b", (("a", "s"), ("s", "b")), 1e-6, "net", (0.5,))


# --------------------------------------------------------------------------- D-mod-K


def _single_nic_fat_tree(nodes: int, nics_per_leaf: int, ratio: float = 1,
                         routing: str = "dmodk") -> Topology:
    """PCIe servers with one 100 Gb/s NIC each: NIC i is node i (fabric index i)."""
    return build_cluster({"preset": "pcie-8gpu", "nodes": nodes,
                          "nic": {"count": 1, "bandwidth": "100 Gbps"},
                          "fabric": {"kind": "fat-tree", "nics_per_leaf": nics_per_leaf,
                                     "oversubscription": ratio, "routing": routing}})


def _shift(topo: Topology, k: int) -> list[Route]:
    n = topo.num_nodes
    return [topo.route(f"n{i}.gpu0", f"n{(i + k) % n}.gpu0") for i in range(n)]


def _network_load(topo: Topology, routes: list[Route]) -> dict[tuple[str, str], float]:
    return {link: load for link, load in _fabric_load(routes).items()
            if topo.link(*link).kind == "network"}


def test_dmodk_makes_every_shift_contention_free_on_a_two_tier_tree() -> None:
    topo = _single_nic_fat_tree(64, 8)  # 8 leaves x 8 NICs, 8 spines
    assert topo.routing.policy == "dmodk"
    for k in range(1, 64):
        load = _network_load(topo, _shift(topo, k))
        assert max(load.values()) == 1.0, k
        if k % 8:
            assert any(dst.startswith("spine") for _, dst in load)  # it does cross spines


def test_ecmp_collides_on_some_shift_where_dmodk_does_not() -> None:
    topo = _single_nic_fat_tree(64, 8, routing="ecmp")
    worst = max(max(_network_load(topo, _shift(topo, k)).values()) for k in range(1, 64))
    assert worst >= 2.0


def _three_tier_tree(k: int) -> Topology:
    """A k-ary fat tree (Al-Fares et al. 2008): k pods of k/2 leaves and k/2 spines, (k/2)²
    cores; each leaf has k/2 hosts (GPUs, one per node); spine j of every pod reaches cores
    j·k/2 … j·k/2 + k/2 - 1.  Non-blocking; hosts numbered pod-major."""
    half = k // 2
    devices: list[Device] = []
    links: list[Link] = []
    for c in range(half * half):
        devices.append(Device(f"core{c}", "switch", None, c))
    host = 0
    for p in range(k):
        for j in range(half):
            spine = f"p{p}.spine{j}"
            devices.append(Device(spine, "switch", None, j))
            for t in range(half):
                links.extend(full_duplex(spine, f"core{j * half + t}", 1.0, 0.0, "network"))
        for leaf_i in range(half):
            leaf = f"p{p}.leaf{leaf_i}"
            devices.append(Device(leaf, "switch", None, leaf_i))
            for j in range(half):
                links.extend(full_duplex(leaf, f"p{p}.spine{j}", 1.0, 0.0, "network"))
            for _ in range(half):
                devices.append(Device(f"h{host}", "gpu", host, 0))
                links.extend(full_duplex(f"h{host}", leaf, 1.0, 0.0, "network"))
                host += 1
    return Topology(f"{k}-ary fat tree", devices, links, routing=RoutingSpec("dmodk"))


@pytest.mark.parametrize("k", [4, 6])
def test_dmodk_makes_every_shift_contention_free_on_a_three_tier_tree(k: int) -> None:
    topo = _three_tier_tree(k)
    hosts = topo.gpus
    n = len(hosts)
    assert n == k ** 3 // 4
    for shift in range(1, n):
        routes = [topo.route(hosts[i], hosts[(i + shift) % n]) for i in range(n)]
        load = _fabric_load(routes)
        assert max(load.values()) == 1.0, shift
    # Far destinations climb to the cores, choosing a spine then a core (two digits of d).
    assert sum(d.startswith("core") for d in topo.route("h0", f"h{n - 1}").devices) == 1


def test_ring_all_reduce_moves_bytes_at_the_same_rate_at_2_16_and_128_nodes() -> None:
    # busbw with the latency term taken out: 2(n-1)/n·S / (time - plan latency).  A ring
    # on a non-blocking D-mod-K fat tree never shares a link, so the rate is the 2-node one.
    size = 2**30
    params = CommParams(algorithm="ring", protocol="simple")
    rates = []
    for nodes in (2, 16, 128):
        topo = build_cluster({"preset": "dgx-a100", "nodes": nodes, "fabric": "fat-tree"})
        n = len(topo.gpus)
        plan = build_plan(topo, topo.gpus, "all_reduce", algorithm="ring", protocol="simple",
                          params=params)
        (row,) = run_benchmark(topo, "all_reduce", [size], params=params)
        rates.append(2 * (n - 1) / n * size / (row.time_s - plan.latency_s))
    assert rates[1] == pytest.approx(rates[0], rel=1e-9)
    assert rates[2] == pytest.approx(rates[0], rel=1e-9)


# --------------------------------------------------------------------------- ECMP


def test_ecmp_collisions_follow_balls_into_bins_over_hash_seeds() -> None:
    # 16 flows leave leaf0 for leaf1 over its 16 uplinks, each hashed onto one: the number
    # of uplinks used is the number of occupied bins, n balls into m bins:
    # E = m(1 - p1) with p1 = (1 - 1/m)^n the chance a bin stays empty; the variance is the
    # empty bins' count's, m·p1 + m(m-1)·p2 - (m·p1)² with p2 = (1 - 2/m)^n.
    n = m = 16
    p1, p2 = (1 - 1 / m) ** n, (1 - 2 / m) ** n
    expected = m * (1 - p1)
    var = m * p1 + m * (m - 1) * p2 - (m * p1) ** 2
    seeds = 200
    used = []
    for seed in range(seeds):
        topo = build_cluster({"preset": "dgx-a100", "nodes": 4,
                              "fabric": {"kind": "fat-tree", "nics_per_leaf": 16,
                                         "technology": "ethernet", "hash_seed": seed}})
        routes = [topo.route(f"n{a}.gpu{r}", f"n{a + 2}.gpu{r}", rail=r)
                  for a in (0, 1) for r in range(8)]
        used.append(len({link for route in routes for link in route.links
                         if link[0] == "leaf0"}))
    mean = sum(used) / seeds
    assert abs(mean - expected) < 4 * math.sqrt(var / seeds), (mean, expected)


def test_ecmp_queue_pairs_each_carry_their_share_on_their_own_path() -> None:
    q = 4
    topo = build_cluster({"preset": "dgx-h100", "nodes": 8,
                          "fabric": {"kind": "fat-tree", "technology": "ethernet",
                                     "qps_per_connection": q}})
    assert topo.routing == RoutingSpec("ecmp", q, 0)
    route = topo.route("n0.gpu0", "n7.gpu0")
    up = {dst: w for (src, dst), w in zip(route.links, route.weights, strict=True)
          if src == "leaf0"}
    assert sum(up.values()) == pytest.approx(1.0)
    assert all(w * q == pytest.approx(round(w * q)) for w in up.values())  # k QPs of 1/q
    assert len(up) > 1  # four hashes over 32 spines: some differ (fixed, so checked)


def test_ecmp_routes_are_the_same_in_every_process(tmp_path: Path) -> None:
    spec = {"preset": "dgx-a100", "nodes": 4,
            "fabric": {"kind": "fat-tree", "nics_per_leaf": 16, "routing": "ecmp",
                       "qps_per_connection": 2, "hash_seed": 7}}
    script = (
        "import json, sys\n"
        "from distsim_gpu.topology import build_cluster\n"
        "t = build_cluster(json.loads(sys.argv[1]))\n"
        "r = [t.route(f'n0.gpu{i}', f'n3.gpu{i}', rail=i) for i in range(8)]\n"
        "print(json.dumps([[list(x.links), list(x.weights)] for x in r]))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4321"}
    out = subprocess.run([sys.executable, "-c", script, json.dumps(spec)], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True).stdout
    topo = build_cluster(spec)
    here = [[[list(link) for link in r.links], list(r.weights)]
            for r in (topo.route(f"n0.gpu{i}", f"n3.gpu{i}", rail=i) for i in range(8))]
    assert json.loads(out) == here
    other = build_cluster({**spec, "fabric": {**spec["fabric"], "hash_seed": 8}})
    assert any(other.route(f"n0.gpu{i}", f"n3.gpu{i}", rail=i).links != tuple(
        tuple(link) for link in here[i][0]) for i in range(8))


# --------------------------------------------------------------------------- tiers


@pytest.mark.parametrize("routing", ["dmodk", "adaptive"])
def test_an_oversubscribed_tier_slows_cross_leaf_traffic_by_its_ratio(routing: str) -> None:
    def rates(ratio: float, k: int) -> list[float]:
        topo = _single_nic_fat_tree(16, 8, ratio, routing)  # 2 leaves of 8 NICs
        flows = [dict(zip(r.links, r.weights, strict=True)) for r in _shift(topo, k)]
        return max_min_fair(flows, {link.id: link.bandwidth_bytes_per_s
                                    for link in topo.links()})

    nic = 100e9 / 8
    cross = 8  # every NIC of each leaf sends to the other leaf
    assert rates(1, cross) == pytest.approx([nic] * 16, rel=1e-12)
    assert rates(2, cross) == pytest.approx([nic / 2] * 16, rel=1e-12)
    # Same-leaf traffic (a shift inside each leaf) never climbs: untouched.
    inside = [(i // 8) * 8 + (i + 1) % 8 for i in range(16)]
    for ratio in (1, 2):
        topo = _single_nic_fat_tree(16, 8, ratio, routing)
        routes = [topo.route(f"n{i}.gpu0", f"n{j}.gpu0") for i, j in enumerate(inside)]
        flows = [dict(zip(r.links, r.weights, strict=True)) for r in routes]
        got = max_min_fair(flows, {link.id: link.bandwidth_bytes_per_s for link in topo.links()})
        assert got == pytest.approx([nic] * 16, rel=1e-12)


# --------------------------------------------------------------------------- invariants


def test_adaptive_splits_evenly_and_each_tier_carries_the_whole_flow() -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 8,
                          "fabric": {"kind": "fat-tree", "routing": "adaptive"}})
    route = topo.route("n0.gpu0", "n7.gpu0")
    weights = dict(zip(route.links, route.weights, strict=True))
    up = [w for (a, _), w in weights.items() if a == "leaf0"]
    down = [w for (_, b), w in weights.items() if b == "leaf1" and _.startswith("spine")]
    assert up == [1 / 32] * 32 and down == [1 / 32] * 32
    assert sum(up) == pytest.approx(1.0) and sum(down) == pytest.approx(1.0)
    assert route.latency_s == pytest.approx(sum(
        topo.link(*link).latency_s for link in topo.route("n0.gpu0", "n7.gpu0").links
        if not link[0].startswith("spine") and not link[1].startswith("spine"))
        + topo.link("leaf0", "spine0").latency_s + topo.link("spine0", "leaf1").latency_s)


@settings(max_examples=30, deadline=None)
@given(
    preset=st.sampled_from(["dgx-a100", "dgx-h100", "pcie-8gpu"]),
    nodes=st.integers(2, 6),
    kind=st.sampled_from(["fat-tree", "rail-optimized"]),
    nics_per_leaf=st.integers(1, 12),
    ratio=st.sampled_from([1, 2, 3]),
    routing=st.sampled_from(["dmodk", "adaptive", "ecmp", "spray"]),
    qps=st.integers(1, 4),
    picks=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6),
                             st.none() | st.integers(0, 9)), min_size=1, max_size=6),
)
def test_every_policy_conserves_the_flow(preset: str, nodes: int, kind: str,
                                         nics_per_leaf: int, ratio: int, routing: str,
                                         qps: int,
                                         picks: list[tuple[int, int, int | None]]) -> None:
    # Into every transit device as much as out of it; all of it leaves src and reaches dst.
    topo = build_cluster({"preset": preset, "nodes": nodes,
                          "fabric": {"kind": kind, "nics_per_leaf": nics_per_leaf,
                                     "oversubscription": ratio, "routing": routing,
                                     "qps_per_connection": qps}})
    gpus = topo.gpus
    for a, b, rail in picks:
        src, dst = gpus[a % len(gpus)], gpus[b % len(gpus)]
        route = topo.route(src, dst, rail=rail)
        if src == dst:
            continue
        net: Counter[str] = Counter()
        for (u, v), w in zip(route.links, route.weights, strict=True):
            assert 0 < w <= 1
            net[u] -= w
            net[v] += w
        assert net[src] == pytest.approx(-1.0) and net[dst] == pytest.approx(1.0)
        assert all(abs(v) < 1e-12 for d, v in net.items() if d not in (src, dst))
        assert route.devices[0] == src and route.devices[-1] == dst
        if routing == "dmodk" or (routing == "ecmp" and qps == 1):
            assert not route.multipath  # one path per connection


# --------------------------------------------------------------------------- configuration


def test_the_default_routing_follows_the_technology() -> None:
    ib = build_cluster({"preset": "dgx-h100", "nodes": 8})
    assert ib.routing == RoutingSpec("dmodk")
    assert {k: ib.config["fabric"][k] for k in
            ("technology", "routing", "qps_per_connection", "hash_seed")} == {
        "technology": "infiniband", "routing": "dmodk", "qps_per_connection": 1,
        "hash_seed": 0}
    eth = build_cluster({"preset": "dgx-h100", "nodes": 8,
                         "fabric": {"technology": "ethernet", "qps_per_connection": 2}})
    assert eth.routing == RoutingSpec("ecmp", 2, 0)
    again = build_cluster(eth.config)  # the resolved configuration rebuilds it
    assert again.routing == eth.routing and again.config == eth.config
    sprayed = load_cluster("dgx-h100", nodes=8, overrides=["fabric.routing=spray"])
    assert sprayed.routing.policy == "spray"
    assert sprayed.config["fabric"]["technology"] == "infiniband"


def test_custom_clusters_route_by_ecmp_unless_told() -> None:
    topo = _two_paths("ecmp")
    assert topo.routing == RoutingSpec()
    assert topo.config["routing"] == {"policy": "ecmp", "qps_per_connection": 1,
                                      "hash_seed": 0}
    spec = {**topo.config, "routing": {"policy": "dmodk"}}
    assert build_cluster(spec).routing.policy == "dmodk"
    del spec["routing"]
    assert build_cluster(spec).routing == RoutingSpec()


@pytest.mark.parametrize(("fabric", "key", "words"), [
    ({"routing": "dmod"}, "fabric.routing", "unknown routing policy 'dmod'"),
    ({"technology": "omnipath"}, "fabric.technology", "unknown fabric technology"),
    ({"technology": "RoCE"}, "fabric.technology", "write ethernet: RoCE is an ethernet"),
    ({"technology": "ndr"}, "fabric.technology", "write infiniband"),
    ({"qps_per_connection": 0}, "fabric.qps_per_connection", "whole number >= 1"),
    ({"hash_seed": -1}, "fabric.hash_seed", "whole number >= 0"),
    ({"hash_seed": 1.5}, "fabric.hash_seed", "whole number >= 0"),
])
def test_bad_routing_keys_are_named(fabric: dict, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": {"kind": "fat-tree",
                                                                    **fabric}})
    assert info.value.key == key
    assert words in str(info.value)


def test_bad_custom_routing_is_named() -> None:
    spec = dict(_two_paths("ecmp").config)
    with pytest.raises(ConfigError) as info:
        build_cluster({**spec, "routing": "sprya"})
    assert info.value.key == "routing.policy" and "did you mean 'spray'" in str(info.value)
    with pytest.raises(DistsimError) as info:
        build_cluster({**spec, "routing": {"policy": "ecmp", "qps": 2}})
    assert info.value.key == "routing.qps"
    with pytest.raises(ConfigError, match="unknown routing policy"):
        RoutingSpec("ospf")


# --------------------------------------------------------------------------- the policies alone


def _dag(graph: dict[str, list[str]]):
    return lambda x: graph.get(x, [])


@pytest.mark.parametrize("d", range(6))
def test_dmodk_takes_one_digit_of_the_destination_per_choice(d: int) -> None:
    # Two choices then three: port (d mod 2), then ((d div 2) mod 3) — each of the six
    # destinations its own pair of ports.
    graph = {"s": ["a0", "a1"], "a0": ["b0", "b1", "b2"], "a1": ["b0", "b1", "b2"],
             "b0": ["t"], "b1": ["t"], "b2": ["t"]}
    got = spread(RoutingSpec("dmodk"), _dag(graph), "s", "t", Connection("x", "y", None, d))
    assert got == {("s", f"a{d % 2}"): 1.0, (f"a{d % 2}", f"b{d // 2 % 3}"): 1.0,
                   (f"b{d // 2 % 3}", "t"): 1.0}


def test_spray_splits_at_each_branching_whatever_the_path_lengths() -> None:
    # Least-cost paths need not have equal hop counts (a costed link): s-a-t and s-b-c-t.
    graph = {"s": ["a", "b"], "a": ["t"], "b": ["c", "t"], "c": ["t"]}
    got = spread(RoutingSpec("spray"), _dag(graph), "s", "t", Connection("x", "y", None, 0))
    assert got == {("s", "a"): 0.5, ("s", "b"): 0.5, ("a", "t"): 0.5, ("b", "c"): 0.25,
                   ("b", "t"): 0.25, ("c", "t"): 0.25}
    order = list(got)
    for x, y in got:  # every link after the links into its source
        assert all(order.index((u, v)) < order.index((x, y)) for u, v in got if v == x)


def test_ecmp_queue_pairs_merge_in_hop_order() -> None:
    graph = {"s": ["a", "b"], "a": ["t"], "b": ["c"], "c": ["t"]}
    spec = RoutingSpec("ecmp", qps_per_connection=8)
    got = spread(spec, _dag(graph), "s", "t", Connection("x", "y", 0, 0))
    assert sum(w for (x, _), w in got.items() if x == "s") == pytest.approx(1.0)
    assert got[("s", "a")] + got.get(("s", "b"), 0.0) == pytest.approx(1.0)
    assert 0 < got[("s", "a")] < 1  # eight hashes over two ports: both used (fixed hashes)
    order = list(got)
    assert order.index(("b", "c")) < order.index(("c", "t"))
    assert order.index(("s", "b")) < order.index(("b", "c"))


def test_a_plan_weighs_each_link_by_the_fraction_its_route_puts_there() -> None:
    # A p2p send across leaves under adaptive routing: 1/32 of its one stream on each of
    # leaf0's 32 uplinks, the whole stream on the NIC links.
    topo = build_cluster({"preset": "dgx-h100", "nodes": 8,
                          "fabric": {"kind": "fat-tree", "routing": "adaptive"}})
    plan = build_plan(topo, ["n0.gpu0"], "p2p", algorithm="ring", protocol="simple",
                      params=CommParams(), peer="n7.gpu0")
    (step,) = plan.steps
    up = [m for (a, b), m in step.link_streams.items() if a == "leaf0"]
    assert up == [pytest.approx(1 / 32)] * 32
    assert step.link_streams[("n0.nic0", "leaf0")] == 1.0
    assert step.link_streams[("leaf1", "n7.nic0")] == 1.0


@pytest.mark.parametrize(("policy", "folds"), [
    ("dmodk", True), ("adaptive", True), ("spray", True),
    ("ecmp", False), ("valiant", False), ("ugal", False)])
def test_a_policy_says_whether_replicas_fold_under_it(policy: str, folds: bool) -> None:
    # Hashing (ECMP) and random or load-driven detours (Valiant, UGAL) route two replicas
    # unalike; the iteration reads this property instead of naming policies.
    assert RoutingSpec(policy).folds_replicas is folds
    assert set(FOLDING_POLICIES) <= set(POLICIES)
