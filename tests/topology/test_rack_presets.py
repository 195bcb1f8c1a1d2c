"""Rack-scale NVLink: the GB200 / GB300 NVL72 presets as cabled, the NVLink domain as a
parameter, and what ``distsim topology show`` reports of them (closed forms)."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.report.topology_view import summarise
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.presets import PCIE_GEN5_X16_BYTES_PER_S
from distsim_gpu.topology.presets_blackwell import PCIE_GEN6_X16_BYTES_PER_S

NVLINK5_BYTES_PER_S = 18 * 50e9  # per GPU, one direction


def _kinds(topology, kind: str) -> set[float]:
    return {link.bandwidth_bytes_per_s for link in topology.links() if link.kind == kind}


def test_an_nvl72_rack_is_one_node_of_72_gpus_in_18_trays():
    rack = build_cluster({"preset": "gb200-nvl72", "nodes": 2})
    assert len(rack.gpus) == 144 and rack.num_nodes == 2
    assert _kinds(rack, "nvlink") == {NVLINK5_BYTES_PER_S}
    # GPU to its Grace over NVLink-C2C (450 GB/s each way), NIC and Grace I/O over PCIe Gen5
    assert _kinds(rack, "pcie") == {450e9, PCIE_GEN5_X16_BYTES_PER_S}
    assert rack.link("n0.gpu5", "n0.pcie5").bandwidth_bytes_per_s == 450e9
    assert rack.local_nics("n0.gpu5") == ("n0.nic5",)
    # Graces are joined only inside their tray: 18 links per rack, not 36·35/2 = 630
    cpu_cables = {tuple(sorted((link.src, link.dst))) for link in rack.links()
                  if link.kind == "cpu"}
    assert len(cpu_cables) == 2 * 18
    assert ("n0.cpu2", "n0.cpu3") in cpu_cables and ("n0.cpu1", "n0.cpu2") not in cpu_cables
    assert rack.link("n0.pcie5", "n0.cpu2").kind == "pcie"  # GPU 5: tray 1's first Grace


def test_topology_show_counts_the_rack_as_built_and_its_bisections():
    summary = summarise(build_cluster({"preset": "gb200-nvl72", "nodes": 2,
                                       "fabric": "rail-optimized"}))
    assert summary.rack == {"gpus": 72, "cpus": 36, "nics": 72, "compute_trays": 18,
                            "nvlink_links": 72 * 18, "nvswitch_chips": 18, "switch_trays": 9}
    # NVLink: half the rack's GPUs to the other half, each at 900 GB/s one way
    assert summary.nvlink_bisection_bytes_per_s == pytest.approx(36 * NVLINK5_BYTES_PER_S)
    # scale-out: a full-bisection fabric carries one rack's 72 NICs at 50 GB/s each
    assert summary.bisection_bytes_per_s == pytest.approx(72 * 50e9)


def test_nvl36x2_doubles_the_switch_trays_and_gb300_doubles_the_nics():
    summary = summarise(build_cluster({"preset": "gb200-nvl36x2"}))
    assert (summary.rack["switch_trays"], summary.rack["nvswitch_chips"]) == (18, 36)
    assert summary.nvlink_bisection_bytes_per_s == pytest.approx(36 * NVLINK5_BYTES_PER_S)
    gb300 = build_cluster({"preset": "gb300-nvl72"})
    assert _kinds(gb300, "network") == {100e9}  # ConnectX-8, 800 Gb/s
    assert PCIE_GEN6_X16_BYTES_PER_S in _kinds(gb300, "pcie")
    assert gb300.config["gpu"]["model"] == "GB300"


@pytest.mark.parametrize(("domain", "trays"), [(4, 1), (8, 2), (36, 9), (72, 18),
                                               (144, 36), (576, 144)])
def test_the_nvlink_domain_tiles_whole_trays(domain, trays):
    cluster = build_cluster({"preset": "gb200-nvl72", "nodes": 2, "nvlink_domain": domain,
                             "fabric": "fat-tree"})
    assert len(cluster.gpus) == 2 * domain and len(cluster.gpus_on_node(1)) == domain
    summary = summarise(cluster)
    assert summary.rack["compute_trays"] == trays and summary.rack["cpus"] == 2 * trays
    assert summary.rack["switch_trays"] == -(-domain * 18 // 144)
    assert summary.nvlink_bisection_bytes_per_s == pytest.approx(
        domain // 2 * NVLINK5_BYTES_PER_S)
    assert cluster.config["nvlink_domain"] == domain


def test_an_hgx_box_grows_into_a_domain_of_boxes_whose_sockets_stay_apart():
    cluster = build_cluster({"preset": "dgx-h100", "nodes": 1, "nvlink_domain": 256})
    assert len(cluster.gpus) == 256 and cluster.num_nodes == 1
    cpu_cables = {tuple(sorted((link.src, link.dst))) for link in cluster.links()
                  if link.kind == "cpu"}
    assert len(cpu_cables) == 32  # one inter-socket link per box
    assert cluster.route("n0.gpu0", "n0.gpu255").transport == "nvlink"
    assert cluster.local_nics("n0.gpu9") == ("n0.nic9",)


@pytest.mark.parametrize(("spec", "words"), [
    ({"preset": "gb200-nvl72", "nvlink_domain": 70}, "multiple of the 4 GPUs"),
    ({"preset": "dgx-h100", "nvlink_domain": 12}, "multiple of the 8 GPUs"),
    ({"preset": "mi355x", "nvlink_domain": 16}, "a mesh"),
    ({"preset": "pcie-8gpu", "nvlink_domain": 16}, "no NVLink"),
    ({"preset": "gb200-nvl72", "nvlink_domain": 0}, ">= 1"),
    ({"preset": "gb200-nvl72", "nvlink_domain": 10**6}, "at most 4,608"),
])
def test_a_domain_that_cannot_be_built_is_an_error_naming_the_key(spec, words):
    with pytest.raises(ConfigError) as info:
        build_cluster(spec)
    assert info.value.key == "nvlink_domain" and words in str(info.value)


@pytest.mark.parametrize(("preset", "hint"), [
    ("dgx-h100", "e.g. 8 (the preset's own), 16"),
    ("gb200-nvl72", "e.g. 4, 8, 72 (the preset's own)"),
])
def test_a_bad_domain_hint_names_each_size_once(preset, hint):
    """On an 8-GPU box one board is the preset's own domain: the hint says 8 once."""
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": preset, "nvlink_domain": 12 if preset == "dgx-h100" else 10})
    assert info.value.hint == hint


def test_topology_show_of_a_rack_preset_through_the_cli(capsys):
    assert main(["topology", "show", "gb200-nvl72", "--nodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "144 GPUs on 2 node(s)" in out
    assert ("each NVLink domain as built: 18 compute trays (36 CPUs, 72 GPUs, 72 NICs), 9 "
            "NVLink switch trays (18 NVSwitch chips), 1,296 NVLink links") in out
    assert "NVLink bisection of one node (half its GPUs to the other half, one way): 32.4 TB/s" \
        in out
    # The GPUs' NVLink-C2C to their Grace (the cluster's pcie hop) is told apart from PCIe
    # by what it joins: 72 GPUs a domain, one cable each.
    assert "pcie               450 GB/s      144        0  gpu-pcie_switch\n" in out
    assert "pcie             63.02 GB/s      288        0  cpu-pcie_switch, nic-pcie_switch\n" \
        in out
    assert main(["topology", "show", "gb200-nvl72", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rack"]["switch_trays"] == 9 and data["gpus"] == 72
    c2c = [c for c in data["links"] if c["bandwidth_bytes_per_s"] == 450e9]
    assert c2c == [{"kind": "pcie", "bandwidth_bytes_per_s": 450e9, "cables": 72,
                    "one_way": 0, "joins": ["gpu-pcie_switch"]}]


def test_topology_show_takes_set_as_every_command_does(capsys):
    """--set on topology show: the 36-GPU domain what-if, and a bare bandwidth refused."""
    assert main(["topology", "show", "gb200-nvl72", "--nodes", "2", "--set",
                 "nvlink_domain=36"]) == 0
    assert "72 GPUs on 2 node(s)" in capsys.readouterr().out
    assert main(["topology", "show", "dgx-h100", "--set", "nic.bandwidth=400"]) == 2
    assert "a bandwidth needs a unit" in capsys.readouterr().err


def test_a_cluster_past_131072_gpus_is_refused_before_it_is_built():
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "gb200-nvl72", "nodes": 2000})
    assert info.value.key == "nodes" and "144,000 GPUs, more than distsim builds" in str(
        info.value)
