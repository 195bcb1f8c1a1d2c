"""Topology core: devices, links, the graph, and routing on small hand-built clusters."""

from __future__ import annotations

import networkx as nx
import pytest
from distsim_gpu.simcore.errors import ConfigError, TopologyError
from distsim_gpu.topology import Device, Link, Route, Topology, build_cluster
from distsim_gpu.topology.model import full_duplex


def _two_gpu_box() -> Topology:
    devices = [Device("g0", "gpu", 0, 0), Device("g1", "gpu", 0, 1),
               Device("sw", "pcie_switch", 0, 0)]
    links = [*full_duplex("g0", "sw", 10.0, 1.0, "pcie"),
             *full_duplex("g1", "sw", 20.0, 2.0, "pcie")]
    return Topology("box", devices, links)


def test_link_id_and_full_duplex() -> None:
    there, back = full_duplex("a", "b", 5e9, 1e-6, "nvlink")
    assert there.id == ("a", "b") and back.id == ("b", "a")
    assert there.bandwidth_bytes_per_s == back.bandwidth_bytes_per_s == 5e9


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"bandwidth_bytes_per_s": 0.0}, "bandwidth must be positive"),
        ({"bandwidth_bytes_per_s": -1.0}, "bandwidth must be positive"),
        ({"bandwidth_bytes_per_s": float("inf")}, "finite"),
        ({"latency_s": -1e-6}, "latency must be zero or positive"),
        ({"kind": "nvlnk"}, "did you mean 'nvlink'"),
        ({"dst": "a"}, "to itself"),
    ],
)
def test_link_rejects_bad_values(kwargs: dict[str, object], words: str) -> None:
    fields: dict[str, object] = {"src": "a", "dst": "b", "bandwidth_bytes_per_s": 1.0,
                                 "latency_s": 0.0, "kind": "pcie"}
    fields.update(kwargs)
    with pytest.raises(TopologyError, match=words):
        Link(**fields)  # type: ignore[arg-type]


def test_device_rejects_unknown_kind() -> None:
    with pytest.raises(TopologyError, match="did you mean 'gpu'"):
        Device("x", "gpus", 0, 0)


def test_topology_rejects_duplicates_and_dangling_links() -> None:
    with pytest.raises(TopologyError, match="duplicate device name 'g0'"):
        Topology("t", [Device("g0", "gpu", 0, 0), Device("g0", "gpu", 0, 1)], [])
    with pytest.raises(TopologyError, match="unknown device 'g9'"):
        Topology("t", [Device("g0", "gpu", 0, 0)], [Link("g0", "g9", 1.0, 0.0, "pcie")])
    devices = [Device("g0", "gpu", 0, 0), Device("g1", "gpu", 0, 1)]
    link = Link("g0", "g1", 1.0, 0.0, "pcie")
    with pytest.raises(TopologyError, match="duplicate link g0 -> g1"):
        Topology("t", devices, [link, link])


def test_graph_carries_devices_and_links_and_is_frozen() -> None:
    topo = _two_gpu_box()
    assert isinstance(topo.graph, nx.DiGraph)
    assert topo.graph.nodes["g0"]["device"] == Device("g0", "gpu", 0, 0)
    assert topo.graph.edges["g1", "sw"]["link"] == topo.link("g1", "sw")
    assert topo.graph.number_of_edges() == len(list(topo.links())) == 4
    with pytest.raises(nx.NetworkXError):
        topo.graph.add_node("intruder")


def test_lookups() -> None:
    topo = _two_gpu_box()
    assert topo.gpus == ("g0", "g1")
    assert topo.num_nodes == 1
    assert topo.node_of("g1") == 0
    assert topo.gpus_on_node(0) == ("g0", "g1")
    assert topo.gpus_on_node(5) == ()
    assert topo.nics_on_node(0) == ()
    assert topo.local_nics("g0") == ()
    with pytest.raises(TopologyError, match="did you mean 'g1'"):
        topo.device("g1x")
    with pytest.raises(TopologyError, match="no link g0 -> g1"):
        topo.link("g0", "g1")


def test_rank_order_is_node_major_and_numeric() -> None:
    devices = [Device("b", "gpu", 1, 0), Device("a10", "gpu", 0, 10),
               Device("a2", "gpu", 0, 2), Device("s", "switch", None, 0)]
    links = [*full_duplex("b", "s", 1.0, 0.0, "network"),
             *full_duplex("a10", "s", 1.0, 0.0, "network"),
             *full_duplex("a2", "s", 1.0, 0.0, "network")]
    topo = Topology("t", devices, links)
    assert topo.gpus == ("a2", "a10", "b")
    assert topo.num_nodes == 2
    with pytest.raises(TopologyError, match="belongs to no node"):
        topo.node_of("s")


def test_route_sums_latencies_and_is_cached() -> None:
    topo = _two_gpu_box()
    route = topo.route("g0", "g1")
    assert route == Route("g0", "g1", (("g0", "sw"), ("sw", "g1")), 3.0, "pcie")
    assert route.devices == ("g0", "sw", "g1")
    assert topo.route("g0", "g1") is route


def test_route_to_self_is_local_and_empty() -> None:
    route = _two_gpu_box().route("g1", "g1")
    assert route.links == () and route.latency_s == 0.0 and route.transport == "local"
    assert route.devices == ("g1",)


def test_route_prefers_nvlink_over_an_equally_short_pcie_path() -> None:
    devices = [Device("g0", "gpu", 0, 0), Device("g1", "gpu", 0, 1),
               Device("nvs", "nvswitch", 0, 0), Device("pcie", "pcie_switch", 0, 0)]
    links = [*full_duplex("g0", "pcie", 1.0, 0.0, "pcie"),
             *full_duplex("g1", "pcie", 1.0, 0.0, "pcie"),
             *full_duplex("g0", "nvs", 1.0, 0.0, "nvlink"),
             *full_duplex("g1", "nvs", 1.0, 0.0, "nvlink")]
    route = Topology("t", devices, links).route("g0", "g1")
    assert route.devices == ("g0", "nvs", "g1")
    assert route.transport == "nvlink"


def test_route_transits_at_most_one_gpu_and_only_over_nvlink() -> None:
    # g0 - g1 - g2 - g3 in an NVLink chain: g0 reaches g2 through g1 (NCCL's NVLink P2P
    # through an intermediate GPU) but not g3, which needs two GPUs to forward.
    devices = [Device(f"g{i}", "gpu", 0, i) for i in range(4)]
    links = [*full_duplex("g0", "g1", 1.0, 0.0, "nvlink"),
             *full_duplex("g1", "g2", 1.0, 0.0, "nvlink"),
             *full_duplex("g2", "g3", 1.0, 0.0, "nvlink")]
    topo = Topology("chain", devices, links)
    assert topo.route("g0", "g1").transport == "nvlink"
    assert topo.route("g0", "g2").devices == ("g0", "g1", "g2")
    with pytest.raises(TopologyError, match="GPU 'g0' cannot reach GPU 'g3'"):
        topo.route("g0", "g3")
    # Over PCIe a GPU forwards nothing.
    pcie = [*full_duplex("g0", "g1", 1.0, 0.0, "pcie"), *full_duplex("g1", "g2", 1.0, 0.0, "pcie")]
    with pytest.raises(TopologyError, match="GPU 'g0' cannot reach GPU 'g2'"):
        Topology("pcie chain", devices[:3], pcie).route("g0", "g2")


def test_route_arguments_are_checked() -> None:
    topo = _two_gpu_box()
    with pytest.raises(TopologyError, match="is a pcie_switch, not a GPU"):
        topo.route("g0", "sw")
    for bad in (-1, True, 1.5, "0"):
        with pytest.raises(ConfigError, match="rail must be a non-negative integer"):
            topo.route("g0", "g1", rail=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="a rail or its ends' own NICs, not both"):
        topo.route("g0", "g1", rail=0, own_nics=True)


def test_a_route_on_its_ends_own_nics_crosses_rails_in_the_fabric() -> None:
    """Without a rail a route keeps the sender's NIC index at both ends (crossing the
    receiver's host to reach it); with ``own_nics`` each end posts on its own NIC."""
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2, "fabric": "rail-optimized"})
    same = topo.route("n0.gpu0", "n1.gpu3").links
    own = topo.route("n0.gpu0", "n1.gpu3", own_nics=True).links
    assert ("n1.nic0", "n1.pcie0") in same and ("n1.nic3", "n1.pcie3") in own
    assert any("spine" in a + b for a, b in own)
    assert not any(topo.link(a, b).kind == "cpu" for a, b in own)
    # On one rail nothing changes.
    assert topo.route("n0.gpu3", "n1.gpu3", own_nics=True).links == \
        topo.route("n0.gpu3", "n1.gpu3").links
