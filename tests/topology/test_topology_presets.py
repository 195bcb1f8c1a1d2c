"""Node presets: the documented figures, the box layouts, and the routes through them."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import Topology, build_cluster, list_presets
from distsim_gpu.topology.presets import PCIE_GEN4_X16_BYTES_PER_S, PCIE_GEN5_X16_BYTES_PER_S

GEN4_X16 = 16e9 * 16 * (128 / 130) / 8  # 16 GT/s x16, 128b/130b, one direction
GEN5_X16 = 32e9 * 16 * (128 / 130) / 8


def _kinds(topo: Topology, kind: str) -> set[float]:
    """The distinct bandwidths of the links of one kind."""
    return {link.bandwidth_bytes_per_s for link in topo.links() if link.kind == kind}


def _nic_port_bandwidths(topo: Topology) -> set[float]:
    return {link.bandwidth_bytes_per_s for link in topo.links()
            if topo.device(link.src).kind == "nic" and link.kind == "network"}


@pytest.fixture(scope="module")
def a100x2() -> Topology:
    return build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": "single-switch"})


@pytest.fixture(scope="module")
def h100x2() -> Topology:
    return build_cluster({"preset": "dgx-h100", "nodes": 2})


def test_list_presets_names_every_preset() -> None:
    presets = list_presets()
    assert list(presets) == ["dgx-a100", "dgx-h100", "dgx-h200", "dgx1-v100", "mi300x", "pcie-8gpu",
                             "quad-gh200", "gcp-a4", "gb200-nvl72", "gb300-nvl72",
                             "gb200-nvl36x2", "dgx-b200", "hgx-b300", "mi355x", "switch"]
    assert all(isinstance(text, str) and text for text in presets.values())


def test_pcie_constants_are_x16_with_128b130b_encoding() -> None:
    gen4, gen5 = PCIE_GEN4_X16_BYTES_PER_S, PCIE_GEN5_X16_BYTES_PER_S
    assert gen4 == GEN4_X16 == pytest.approx(31.5077e9, rel=1e-5)
    assert gen5 == GEN5_X16 == pytest.approx(63.0154e9, rel=1e-5)


def test_dgx_a100_figures(a100x2: Topology) -> None:
    # A100 datasheet: 600 GB/s bidirectional = 12 links x 25 GB/s per direction.
    assert _kinds(a100x2, "nvlink") == {300e9}
    assert _kinds(a100x2, "pcie") == {GEN4_X16}
    assert _kinds(a100x2, "cpu") == {128e9}
    assert _nic_port_bandwidths(a100x2) == {25e9}  # HDR 200 Gb/s
    assert a100x2.config["gpu"]["model"] == "A100-SXM4-80GB"
    assert len(a100x2.gpus) == 16 and a100x2.num_nodes == 2
    assert a100x2.gpus[:3] == ("n0.gpu0", "n0.gpu1", "n0.gpu2")
    assert a100x2.gpus[8] == "n1.gpu0"


def test_dgx_a100_pcie_layout(a100x2: Topology) -> None:
    for k in range(4):
        for member in (f"n0.gpu{2 * k}", f"n0.gpu{2 * k + 1}",
                       f"n0.nic{2 * k}", f"n0.nic{2 * k + 1}"):
            assert a100x2.link(member, f"n0.pcie{k}").kind == "pcie"
        assert a100x2.link(f"n0.pcie{k}", f"n0.cpu{k // 2}").kind == "pcie"
    assert a100x2.link("n0.cpu0", "n0.cpu1").kind == "cpu"
    assert a100x2.local_nics("n0.gpu3") == ("n0.nic2", "n0.nic3")
    assert a100x2.nics_on_node(1) == tuple(f"n1.nic{j}" for j in range(8))
    assert a100x2.gpus_on_node(1) == tuple(f"n1.gpu{j}" for j in range(8))


def test_dgx_a100_route_inside_a_node_is_two_nvlinks(a100x2: Topology) -> None:
    route = a100x2.route("n0.gpu0", "n0.gpu5")
    assert route.links == (("n0.gpu0", "n0.nvswitch"), ("n0.nvswitch", "n0.gpu5"))
    assert route.transport == "nvlink"
    assert route.latency_s == pytest.approx(0.6e-6)  # NCCL's NVLink hop latency


def test_dgx_a100_route_between_nodes(a100x2: Topology) -> None:
    route = a100x2.route("n0.gpu0", "n1.gpu1")
    assert route.devices == ("n0.gpu0", "n0.pcie0", "n0.nic0", "leaf0",
                             "n1.nic0", "n1.pcie0", "n1.gpu1")
    assert [a100x2.device(d).kind for d in route.devices] == [
        "gpu", "pcie_switch", "nic", "switch", "nic", "pcie_switch", "gpu"]
    assert route.transport == "net"
    assert route.latency_s == sum(a100x2.link(*i).latency_s for i in route.links)
    # 4 PCIe hops x 0.5 us + 2 NIC crossings x 0.3 us + 2 cables x 50 ns + 1 switch 130 ns
    assert route.latency_s == pytest.approx(4 * 0.5e-6 + 2 * 0.3e-6 + 2 * 50e-9 + 130e-9)


@pytest.mark.parametrize("rail", range(10))
def test_rail_picks_the_same_nic_on_both_sides(a100x2: Topology, rail: int) -> None:
    route = a100x2.route("n0.gpu0", "n1.gpu7", rail=rail)
    nics = [d for d in route.devices if a100x2.device(d).kind == "nic"]
    assert nics == [f"n0.nic{rail % 8}", f"n1.nic{rail % 8}"]
    assert route.transport == "net"


def test_no_rail_uses_first_local_nic_and_same_index_remote(a100x2: Topology) -> None:
    route = a100x2.route("n0.gpu5", "n1.gpu0")
    nics = [d for d in route.devices if a100x2.device(d).kind == "nic"]
    assert nics == ["n0.nic4", "n1.nic4"]
    # n1.nic4 is behind switch 2 (socket 1), n1.gpu0 behind switch 0 (socket 0): the last
    # leg climbs through both root complexes.
    assert ("n1.cpu1", "n1.cpu0") in route.links


def test_dgx_h100_figures_and_pairs(h100x2: Topology) -> None:
    # H100 datasheet: 900 GB/s bidirectional = 18 links x 25 GB/s per direction.
    assert _kinds(h100x2, "nvlink") == {450e9}
    assert _kinds(h100x2, "pcie") == {GEN5_X16}
    assert _kinds(h100x2, "cpu") == {128e9}
    assert _nic_port_bandwidths(h100x2) == {50e9}  # NDR 400 Gb/s
    for k in range(8):
        assert h100x2.local_nics(f"n0.gpu{k}") == (f"n0.nic{k}",)
        assert h100x2.link(f"n0.pcie{k}", f"n0.cpu{k // 4}").kind == "pcie"
        route = h100x2.route(f"n0.gpu{k}", f"n1.gpu{k}")
        assert route.devices == (f"n0.gpu{k}", f"n0.pcie{k}", f"n0.nic{k}", "leaf0",
                                 f"n1.nic{k}", f"n1.pcie{k}", f"n1.gpu{k}")


def test_pcie_8gpu_routes_through_the_cpus() -> None:
    topo = build_cluster({"preset": "pcie-8gpu"})
    assert not any(d.kind == "nvswitch" for d in topo.devices())
    assert _kinds(topo, "nvlink") == set()
    near = topo.route("n0.gpu0", "n0.gpu3")
    assert near.devices == ("n0.gpu0", "n0.pcie0", "n0.gpu3")
    assert near.transport == "pcie" and near.latency_s == pytest.approx(1.0e-6)
    far = topo.route("n0.gpu1", "n0.gpu6")
    assert far.devices == ("n0.gpu1", "n0.pcie0", "n0.cpu0", "n0.cpu1", "n0.pcie1",
                           "n0.gpu6")
    assert far.transport == "pcie"
    assert topo.link("n0.cpu0", "n0.cpu1").kind == "cpu"
    assert topo.link("n0.cpu0", "n0.cpu1").bandwidth_bytes_per_s == pytest.approx(67.2e9)
    assert far.latency_s == sum(topo.link(*i).latency_s for i in far.links)


def test_pcie_8gpu_nic_count() -> None:
    one = build_cluster({"preset": "pcie-8gpu", "nodes": 2})
    assert one.nics_on_node(0) == ("n0.nic0",)
    assert one.local_nics("n0.gpu6") == ("n0.nic0",)  # nearest, across the sockets
    assert one.route("n0.gpu6", "n1.gpu6").transport == "net"
    two = build_cluster({"preset": "pcie-8gpu", "nodes": 2, "nic": {"count": 2}})
    assert two.nics_on_node(1) == ("n1.nic0", "n1.nic1")
    assert two.link("n0.nic1", "n0.pcie1").kind == "pcie"
    assert two.local_nics("n0.gpu6") == ("n0.nic1",)
    assert _nic_port_bandwidths(two) == {25e9}
    with pytest.raises(ConfigError, match="cannot have 3 NICs") as info:
        build_cluster({"preset": "pcie-8gpu", "nic": {"count": 3}})
    assert info.value.key == "nic.count" and "valid: 1, 2" in str(info.value)


def test_switch_preset_is_one_node_with_exact_latency() -> None:
    topo = build_cluster({"preset": "switch", "gpus": 16, "link_bandwidth": "50 GB/s",
                          "link_latency": "2 us"})
    assert len(topo.gpus) == 16 and topo.num_nodes == 1
    assert {link.bandwidth_bytes_per_s for link in topo.links()} == {50e9}
    route = topo.route("n0.gpu3", "n0.gpu12")
    assert route.links == (("n0.gpu3", "n0.switch"), ("n0.switch", "n0.gpu12"))
    assert route.latency_s == 2 * 2e-6
    assert route.transport == "nvlink"


def test_switch_preset_defaults() -> None:
    topo = build_cluster({"preset": "switch"})
    assert len(topo.gpus) == 8
    assert topo.route("n0.gpu0", "n0.gpu1").latency_s == 2 * 1e-6
    assert topo.config == {"name": "switch x8", "preset": "switch", "nodes": 1, "gpus": 8,
                           "link_bandwidth": 100e9, "link_latency": 1e-6}
