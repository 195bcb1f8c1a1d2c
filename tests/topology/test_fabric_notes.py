"""A fabric setting the cluster cannot feel is said, not silently ignored."""

from __future__ import annotations

import json

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.fabric_notes import fabric_notes


def _cluster(nodes: int, ratio: float, per_leaf: int = 32, kind: str = "fat-tree"):
    return build_cluster({"preset": "dgx-h100", "nodes": nodes,
                          "fabric": {"kind": kind, "oversubscription": ratio,
                                     "nics_per_leaf": per_leaf}})


@pytest.mark.parametrize(("nodes", "ratio", "per_leaf", "noted"), [
    (4, 2, 32, True),    # 32 NICs on one 32-port leaf: no spine
    (4, 1, 32, False),   # nothing to ignore
    (4, 2, 16, False),   # two leaves: the ratio thins their uplinks
    (8, 4, 32, False),
])
def test_an_oversubscription_no_traffic_meets_is_noted(nodes, ratio, per_leaf, noted):
    notes = fabric_notes(_cluster(nodes, ratio, per_leaf))
    assert bool(notes) == noted
    if noted:
        assert notes[0].kind == "ignored" and notes[0].key == "fabric.oversubscription"
        assert "32 NICs fit on one leaf" in notes[0].message


def test_nccl_tests_prints_the_note_and_the_ratio_counts_on_two_leaves(capsys):
    base = ["nccl-tests", "--cluster", "dgx-h100", "--nodes", "4", "--set", "fabric.kind=fat-tree",
            "-b", "1G", "-e", "1G", "--json"]
    times = {}
    for per_leaf in (32, 16):
        for ratio in (1, 2):
            assert main([*base, "--set", f"fabric.nics_per_leaf={per_leaf}",
                         "--set", f"fabric.oversubscription={ratio}"]) == 0
            out = capsys.readouterr().out
            times[per_leaf, ratio] = out.split('"time_s": ')[1].split(",")[0]
            assert ('"kind": "ignored"' in out) == (per_leaf == 32 and ratio == 2)
    assert times[32, 1] == times[32, 2]
    assert float(times[16, 2]) > float(times[16, 1])


@pytest.mark.parametrize(("nic", "noted"), [("400 Gbps", False), ("800 Gbps", True)])
def test_a_nic_faster_than_its_pcie_slot_is_noted(nic, noted):
    """An 800 Gb/s NIC (100 GB/s) in DGX H100's Gen5 x16 slot (63 GB/s) carries 63 GB/s."""
    topology = build_cluster({"preset": "dgx-h100", "nodes": 2, "nic": {"bandwidth": nic}})
    notes = [n for n in fabric_notes(topology) if n.key == "nic.bandwidth"]
    assert bool(notes) == noted
    if noted:
        assert notes[0].kind == "ignored"
        assert "16 NICs of 100 GB/s sit on PCIe links of 63.02 GB/s" in notes[0].message


def test_a_faster_slot_lets_the_nic_through_and_says_nothing():
    topology = build_cluster({"preset": "dgx-h100", "nodes": 2, "nic": {"bandwidth": "800 Gbps"},
                              "pcie": {"bandwidth": "126 GB/s"}})
    assert not [n for n in fabric_notes(topology) if n.key == "nic.bandwidth"]


def test_nccl_tests_says_the_slot_caps_the_nic(capsys):
    args = ["nccl-tests", "--cluster", "dgx-h100", "--nodes", "2", "--set",
            "nic.bandwidth=800 Gbps", "-b", "1M", "-e", "1M"]
    assert main(args) == 0
    assert "ignored [nic.bandwidth]: 16 NICs of 100 GB/s" in capsys.readouterr().out


def test_nothing_between_nodes_blames_no_nic_slot(capsys):
    """On one node no byte crosses a NIC, so its PCIe slot caps nothing: neither
    nccl-tests nor a run says it does (both had noted the slot on every one-node run)."""
    args = ["nccl-tests", "--cluster", "dgx-h100", "--nodes", "1", "--set",
            "nic.bandwidth=800 Gbps", "-b", "1M", "-e", "1M"]
    assert main(args) == 0
    assert "PCIe links" not in capsys.readouterr().out
    run = ["run", "scenarios/examples/quickstart.yaml", "--json", "-q", "--set",
           "cluster.preset=dgx-h100", "--set", "cluster.nic.bandwidth=800 Gbps"]
    assert main([*run, "--set", "cluster.nodes=1", "--set", "parallelism.dp=1"]) == 0
    assert "PCIe links" not in capsys.readouterr().out
    assert main(run) == 0  # two nodes: the slot caps the NICs their traffic crosses
    assert "PCIe links" in capsys.readouterr().out


@pytest.mark.parametrize(("nodes", "kind", "noted"), [
    (4, "rail-optimized", True), (32, "rail-optimized", True), (64, "rail-optimized", False),
    (4, "multi-plane", True), (4, "fat-tree", False)])
def test_an_oversubscription_on_one_rail_group_is_noted(nodes, kind, noted):
    topology = build_cluster({"preset": "dgx-h100", "nodes": nodes,
                              "fabric": {"kind": kind, "oversubscription": 4}})
    notes = [n for n in fabric_notes(topology) if "rail group" in n.message]
    assert bool(notes) == noted
    if noted:
        assert f"{nodes} nodes fill one rail group" in notes[0].message


def test_one_rail_group_feels_the_ratio_only_between_rails_without_pxn():
    """What the note says, measured on rail leaves of 4 ports (each 1 up at 4:1): the
    all-reduce's rings and PXN's all-to-all keep to the rails (no change at 4:1); an
    all-to-all without PXN lands on each receiver's own NIC, across the spines, and slows."""
    def busbw(ratio: float, op: str, pxn: bool) -> float:
        topology = build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": {
            "kind": "rail-optimized", "oversubscription": ratio, "nics_per_leaf": 4}})
        assert bool(fabric_notes(topology)) == (ratio > 1)
        params = CommParams(pxn=pxn).on_architecture("hopper")
        (row,) = run_benchmark(topology, op, [64 * 2**20], params=params)
        return row.busbw_bytes_per_s

    for op in ("all_reduce", "alltoall"):
        assert busbw(4, op, True) == pytest.approx(busbw(1, op, True), rel=1e-12)
    assert busbw(4, "alltoall", False) < 0.5 * busbw(1, "alltoall", False)

@pytest.mark.parametrize(("nodes", "noted"), [(18, False), (19, True)])
def test_a_switch_with_more_ports_than_any_made_is_noted(nodes, noted):
    """One switch for every NIC: 18 DGX H100 are 144 ports (Quantum-X800's), 19 are 152."""
    topology = build_cluster({"preset": "dgx-h100", "nodes": nodes,
                              "fabric": {"kind": "single-switch"}})
    notes = [n for n in fabric_notes(topology) if n.kind == "extrapolated"]
    assert bool(notes) == noted
    if noted:
        assert f"has {8 * nodes} ports of 50 GB/s" in notes[0].message


def test_a_two_tier_tree_of_thousands_of_nics_is_noted_and_three_tiers_are_not():
    def radix_notes(kind: str) -> list:
        topology = build_cluster({"preset": "dgx-h100", "nodes": 640, "fabric": {"kind": kind}})
        return [n for n in fabric_notes(topology) if n.kind == "extrapolated"]

    (note,) = radix_notes("fat-tree")  # 160 leaves, each cabled to every spine
    assert note.message.startswith("switch spine0 has 160 ports")
    assert radix_notes("three-tier") == []


def test_a_scenario_run_names_the_cluster_keys_as_the_scenario_sets_them(capsys):
    """In a scenario the cluster's keys sit under ``cluster.``: the note names
    ``cluster.nic.bandwidth`` (what ``--set`` took) and the key to raise as
    ``cluster.pcie.bandwidth``; it had named them as a cluster file does. Setting the key it
    names lifts the cap, so the note points at a key that works."""
    run = ["run", "scenarios/examples/quickstart.yaml", "--json", "-q",
           "--set", "cluster.preset=dgx-h100", "--set", "cluster.nic.bandwidth=800 Gbps"]
    assert main(run) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    (slot,) = [n for n in notes if n["kind"] == "ignored" and "PCIe links" in n["message"]]
    assert slot["key"] == "cluster.nic.bandwidth"
    assert "raise cluster.pcie.bandwidth (PCIe Gen6" in slot["message"]
    assert main([*run, "--set", "cluster.pcie.bandwidth=126 GB/s"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert not [n for n in notes if n["key"] == "cluster.nic.bandwidth"]
