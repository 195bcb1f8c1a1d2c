"""What a network designer reads off ``distsim topology show``: the fabric tier by tier
(switch counts, cables and capacity down and up, the oversubscription as cabled), checked
against the closed forms of the fabrics' docs, and the settings a fabric cannot feel said
as notes; the errors of a written-out node name the keys the file has."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.report.topology_view import fabric_tiers, format_summary, summarise
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.fabric_notes import fabric_notes

PORT = 50e9  # NDR 400 Gb/s, one way


def _h100(nodes: int, **fabric: object):
    return build_cluster({"preset": "dgx-h100", "nodes": nodes, "fabric": fabric})


@pytest.mark.parametrize("ratio", [1, 2, 4])
def test_two_tier_counts_follow_the_leaf_spine_closed_form(ratio):
    # 16 nodes x 8 NICs on 16-port leaves: 8 leaves, each with 16/ratio uplink ports, one to
    # each of 16/ratio spines; uplinks = downlinks / ratio.
    leaf, spine = fabric_tiers(_h100(16, kind="fat-tree", nics_per_leaf=16,
                                     oversubscription=ratio))
    up = 16 // ratio
    assert (leaf.tier, leaf.switches, leaf.down_cables, leaf.up_cables) == (1, 8, 128, 8 * up)
    assert leaf.down_bytes_per_s == pytest.approx(128 * PORT)
    assert leaf.up_bytes_per_s == pytest.approx(8 * up * PORT)
    assert leaf.oversubscription == pytest.approx(ratio)
    assert (spine.switches, spine.down_cables, spine.up_cables) == (up, 8 * up, 0)
    assert spine.oversubscription is None


def test_three_tier_is_the_k_ary_fat_tree_with_a_thinned_core():
    # k = 8: 4-port leaves down, 4 leaves a pod, 8 pods (128 NICs): 32 leaves, 32 spines
    # (4 a pod), and (k/2)^2 = 16 cores at 1:1; spine_oversubscription 2 halves the cores.
    for ratio, cores in ((1, 16), (2, 8)):
        tiers = fabric_tiers(_h100(16, kind="three-tier", nics_per_leaf=4, leaves_per_pod=4,
                                   spine_oversubscription=ratio))
        assert [t.switches for t in tiers] == [32, 32, cores]
        assert [t.down_cables for t in tiers] == [128, 128, 128 // ratio]
        assert [t.oversubscription for t in tiers] == pytest.approx([1, ratio, None])


def test_multi_plane_tiers_count_every_plane_at_its_share_of_the_nic():
    # 2 planes: each NIC one 25 GB/s port on each plane's rail leaf (8 a plane).
    leaf, _spine = fabric_tiers(_h100(4, kind="multi-plane", planes=2))
    assert (leaf.switches, leaf.down_cables) == (16, 64)
    assert leaf.down_bytes_per_s == pytest.approx(32 * PORT)  # the NICs' own bandwidth


def test_a_dragonfly_is_one_tier_of_routers():
    # 4 groups of 4 routers: 6 local cables a group (all-to-all), and 4·2 // 3 = 2 global
    # cables a group pair (global_cables' closed form) over 6 pairs; the 8 routers no
    # node reaches are peers of the others, not a tier above them (until 7 December they
    # showed as tiers 2 and 3 with an "8:1" leaf).
    (routers,) = fabric_tiers(_h100(8, kind="dragonfly", groups=4, routers_per_group=4,
                                    nics_per_router=8, global_links_per_router=2))
    assert (routers.switches, routers.down_cables, routers.up_cables) == (16, 64, 0)
    assert routers.within_cables == 4 * 6 + 6 * 2
    assert routers.oversubscription is None


def test_show_prints_the_tiers_and_json_carries_them(capsys):
    # 4 nodes on 8-port leaves at 4:1: 4 leaves of 2 uplinks, 2 spines.
    args = ["topology", "show", "dgx-h100", "--nodes", "4", "--set", "fabric.kind=fat-tree",
            "--set", "fabric.nics_per_leaf=8", "--set", "fabric.oversubscription=4"]
    assert main(args) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["1", "4", "32", "1600", "GB/s", "8", "400", "GB/s", "4:1", "0"] in rows
    assert main([*args, "--json"]) == 0
    tiers = json.loads(capsys.readouterr().out)["tiers"]
    assert [(t["switches"], t["oversubscription"]) for t in tiers] == [(4, 4.0), (2, None)]
    single = summarise(build_cluster({"preset": "dgx-h100", "nodes": 2}))
    assert [(t.switches, t.down_cables, t.up_cables) for t in single.tiers] == [(1, 16, 0)]
    assert "fabric tier" not in format_summary(summarise(build_cluster({"preset": "switch"})))


@pytest.mark.parametrize(("fabric", "key", "words"), [
    ({"routing": "valiant"}, "fabric.routing", "a fat-tree fabric has none"),
    ({"routing": "dmodk", "qps_per_connection": 4}, "fabric.qps_per_connection",
     "under dmodk routing"),
])
def test_routing_knobs_the_fabric_never_reads_are_noted(fabric, key, words):
    notes = fabric_notes(_h100(4, kind="fat-tree", nics_per_leaf=16, **fabric))
    assert [(n.kind, n.key) for n in notes] == [("ignored", key)]
    assert words in notes[0].message
    # ECMP hashes queue pairs apart, and a dragonfly has the groups valiant detours through.
    assert not fabric_notes(_h100(4, kind="fat-tree", nics_per_leaf=16, routing="ecmp",
                                  qps_per_connection=4))


def test_a_custom_clusters_slot_note_names_its_links():
    devices = [{"name": n, "kind": k, "node": node} for n, k, node in (
        ("g0", "gpu", 0), ("p0", "pcie_switch", 0), ("x0", "nic", 0),
        ("g1", "gpu", 1), ("p1", "pcie_switch", 1), ("x1", "nic", 1))]
    devices.append({"name": "sw", "kind": "switch"})
    links = [{"src": a, "dst": b, "bandwidth": bw, "kind": kind} for a, b, bw, kind in (
        ("g0", "p0", "32 GB/s", "pcie"), ("x0", "p0", "32 GB/s", "pcie"),
        ("g1", "p1", "32 GB/s", "pcie"), ("x1", "p1", "32 GB/s", "pcie"),
        ("x0", "sw", "400 Gbps", "network"), ("x1", "sw", "400 Gbps", "network"))]
    notes = fabric_notes(build_cluster({"devices": devices, "links": links}))
    assert [n.key for n in notes] == ["links"]
    assert "pcie.bandwidth" not in notes[0].message and "2 NICs of 50 GB/s" in notes[0].message


def test_a_written_out_nodes_nic_count_error_names_its_nic_list():
    node = {"gpu_pcie_switch": [0, 0], "nic_pcie_switch": [0], "pcie_switch_cpu": [0],
            "nvswitch": True}
    with pytest.raises(ConfigError) as caught:
        build_cluster({"node": node, "nodes": 2, "nic": {"count": 2}})
    assert caught.value.key == "nic.count"
    assert "node.nic_pcie_switch places 1 NIC" in str(caught.value)
    assert "preset 'node'" not in str(caught.value)
