"""A fabric setting the cluster cannot feel is said, not silently ignored."""

from __future__ import annotations

import pytest
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
