"""Topology import: hand-written dumps of published machines give the preset's cluster."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import run_benchmark, size_series
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.scenarios.report.topology_view import (
    MAX_BISECTION_NODES,
    format_summary,
    summarise,
)
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError
from distsim_gpu.topology import build_cluster, load_cluster
from distsim_gpu.topology.importers import cluster_spec, cluster_yaml, read_node_dump
from distsim_gpu.topology.importers.ibnetdiscover import (
    fabric_cluster_spec,
    parse_ibnetdiscover,
)
from distsim_gpu.topology.importers.layout import without_nics
from distsim_gpu.topology.importers.nccl_xml import parse_nccl_xml
from distsim_gpu.topology.importers.nvidia_smi import parse_topo_matrix
from distsim_gpu.topology.preset_registry import PRESETS
from hypothesis import given, settings
from hypothesis import strategies as st

DUMPS = Path(__file__).parent / "dumps"
SIZES = size_series(8, 1 << 27, 32.0)


def _table(topology):
    return [r.to_dict() for r in run_benchmark(topology, "all_reduce", SIZES,
                                               params=CommParams())]


@pytest.mark.parametrize(("machine", "fmt"), [
    (m, f) for m in ("dgx-a100", "dgx-h100", "pcie-8gpu") for f in ("txt", "xml")
] + [("dgx1-v100", "txt")])  # the DGX-1 as older nvidia-smi prints it (mlx5_N, SOC)
def test_imported_node_has_the_presets_shape_and_nccl_tests_table(machine, fmt):
    layout = read_node_dump(DUMPS / f"{machine}.topo.{fmt}")
    preset = PRESETS[machine]
    assert layout.gpu_pcie_switch == preset.gpu_pcie_switch
    assert layout.nic_pcie_switch == preset.nic_layouts[0]
    assert layout.pcie_switch_cpu == preset.pcie_switch_cpu
    assert layout.has_nvlink == (preset.nvlink is not None)
    assert sorted(layout.nvlink_pairs) == sorted(preset.gpu_links)  # a mesh's cables
    nodes = 2 if fmt == "xml" else 1  # the XML states NIC speeds: check the network too
    imported = build_cluster(cluster_spec(layout, nodes=nodes))
    assert _table(imported) == _table(build_cluster({"preset": machine, "nodes": nodes}))


def test_nvlink_counts_tell_nvswitch_from_mesh():
    a100 = read_node_dump(DUMPS / "dgx-a100.topo.txt")
    assert a100.nvswitch and a100.links_per_gpu == 12 and a100.sm == 80
    # Four GPUs with NV6 to each other: 18 links each, no more than a GPU has: a mesh.
    text = "\tGPU0\tGPU1\tGPU2\tGPU3\n" + "".join(
        f"GPU{i}\t" + "\t".join("X" if i == j else "NV6" for j in range(4)) + "\n"
        for i in range(4))
    mesh = parse_topo_matrix(text, source="quad.txt")
    assert not mesh.nvswitch and len(mesh.nvlink_pairs) == 6 and mesh.sm == 90


def test_a_blackwell_dump_gets_nvlink_5_and_an_unknown_one_says_so(tmp_path):
    xml = (DUMPS / "dgx-h100.topo.xml").read_text()
    for sm, model, nvlink in (("100", "B200-180GB", 18 * 50e9), ("103", "B300-288GB", 18 * 50e9),
                              ("120", "unknown GPU", 18 * 25e9)):
        path = tmp_path / f"sm{sm}.xml"
        path.write_text(xml.replace('sm="90"', f'sm="{sm}"'))
        layout = read_node_dump(path)
        spec = cluster_spec(layout)
        assert (spec["gpu"]["model"], spec["nvlink"]["bandwidth"]) == (model, nvlink)
        text = cluster_yaml(layout)
        assert ("which distsim does not know" in text) == (sm == "120")
    b200 = build_cluster({"preset": "dgx-b200", "nodes": 1})
    imported = build_cluster(cluster_spec(read_node_dump(tmp_path / "sm100.xml")))
    assert _table(imported) == _table(b200)  # the dump and the preset: one machine


def test_nics_of_different_speeds_are_said_and_the_slowest_taken(tmp_path):
    xml = (DUMPS / "dgx-h100.topo.xml").read_text()
    path = tmp_path / "mix.xml"
    path.write_text(xml.replace('speed="400000"', 'speed="200000"', 1))
    layout = read_node_dump(path)
    assert layout.nic_bandwidth_bytes_per_s == 200e9 / 8
    assert "NICs run at different speeds (1 x 200 Gb/s, 7 x 400 Gb/s)" in " ".join(layout.notes)


def test_written_file_builds_the_cluster_it_states(tmp_path):
    out = tmp_path / "cluster.yaml"
    assert main(["topology", "import", str(DUMPS / "dgx-h100.topo.xml"), "-o", str(out),
                 "--nodes", "2"]) == 0
    text = out.read_text()
    assert "stated by the dump" in text and "default" in text  # figures say their source
    loaded = load_cluster(out)
    expected = build_cluster(cluster_spec(read_node_dump(DUMPS / "dgx-h100.topo.xml"),
                                          nodes=2))
    assert loaded.config == expected.config
    assert build_cluster(loaded.config).config == loaded.config  # config round-trips
    assert len(load_cluster(out, nodes=3).gpus) == 24  # --nodes works on the node form


def test_nccl_tests_command_prints_the_presets_rows_for_the_imported_file(tmp_path, capsys):
    out = tmp_path / "a100.yaml"
    assert main(["topology", "import", str(DUMPS / "dgx-a100.topo.txt"), "-o", str(out),
                 "--nodes", "2"]) == 0
    capsys.readouterr()
    rows = []
    for cluster in (str(out), "dgx-a100"):
        assert main(["nccl-tests", "--cluster", cluster, "--nodes", "2", "-b", "1K", "-e",
                     "64M", "-f", "8", "--json"]) == 0
        rows.append(json.loads(capsys.readouterr().out)["rows"])
    assert rows[0] == rows[1] and len(rows[0]) == 6


def test_ibnetdiscover_fabric_matches_the_single_switch_preset(tmp_path):
    fabric = parse_ibnetdiscover((DUMPS / "two-dgx-a100.ibnetdiscover").read_text(),
                                 source="ib")
    assert len(fabric.switches) == 1 and len(fabric.cables) == 16
    assert {h: len(c) for h, c in fabric.hosts().items()} == {"dgx01": 8, "dgx02": 8}
    imported = build_cluster(fabric_cluster_spec(fabric, build_cluster({"preset": "dgx-a100"})))
    preset = build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": "single-switch"})
    assert _table(imported) == _table(preset)
    out = tmp_path / "ib.yaml"
    assert main(["topology", "import", str(DUMPS / "two-dgx-a100.ibnetdiscover"), "-o",
                 str(out), "--node", str(DUMPS / "dgx-a100.topo.txt")]) == 0
    assert len(load_cluster(out).gpus) == 16


def test_a_fabric_import_names_a_mistyped_node_and_a_node_count_it_contradicts(tmp_path,
                                                                                capsys):
    dump, out = str(DUMPS / "two-dgx-a100.ibnetdiscover"), str(tmp_path / "ib.yaml")
    assert main(["topology", "import", dump, "-o", out, "--node", "dgx-a10"]) == 2
    assert "'dgx-a10' is neither a node preset nor a file (did you mean 'dgx-a100'" in (
        capsys.readouterr().err)
    assert main(["topology", "import", dump, "-o", out, "--node", "dgx-a100",
                 "--nodes", "4"]) == 2
    assert "the fabric dump has 2 hosts, --nodes says 4" in capsys.readouterr().err
    assert not (tmp_path / "ib.yaml").exists()
    assert main(["topology", "import", dump, "-o", out, "--node", "dgx-a100",
                 "--nodes", "2"]) == 0


def test_show_summarises_and_draws(tmp_path, capsys):
    out = tmp_path / "c.png"
    assert main(["topology", "show", "dgx-h100", "--nodes", "2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "16 GPUs on 2 node(s)" in text and "450 GB/s" in text
    # 16 NVLink cables (GPU to NVSwitch), 16 NIC cables to the fabric's one switch.
    assert [line.split()[3:] for line in text.splitlines() if line.startswith(
        ("nvlink", "network"))] == [["16", "0", "nic-switch"], ["16", "0", "gpu-nvswitch"]]
    assert out.stat().st_size > 1000
    svg = tmp_path / "new" / "c.svg"  # a folder that is not there yet is made
    assert main(["topology", "show", "dgx-h100", "-o", str(svg)]) == 0
    assert svg.read_text().lstrip().startswith("<?xml")
    capsys.readouterr()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert main(["topology", "show", "dgx-h100", "-o", str(blocked / "c.png")]) != 0
    err = capsys.readouterr().err
    assert "cannot write output file" in err and "Traceback" not in err


_GOOD = (DUMPS / "pcie-8gpu.topo.txt").read_text()


@pytest.mark.parametrize(("text", "line", "words"), [
    (_GOOD.replace("GPU3\tPIX", "GPU3\tPXQ", 1), 5, "unknown connection"),
    (_GOOD.replace("GPU1\tPIX", "GPU1\tSYS", 1), 3, "symmetric"),
    ("\n".join(_GOOD.splitlines()[:5]), 1, "no row for GPU4"),
    ("\n".join(line if not line.startswith("GPU2") else "GPU2\tPIX"
               for line in _GOOD.splitlines()), 4, "cells"),
])
def test_malformed_topo_matrix_names_the_line(text, line, words):
    with pytest.raises(ParseError, match=words) as caught:
        parse_topo_matrix(text, source="topo.txt")
    assert caught.value.source == "topo.txt" and caught.value.line == line


_XML = (DUMPS / "pcie-8gpu.topo.xml").read_text()


def _line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


@pytest.mark.parametrize(("text", "line", "words"), [
    (_XML.replace("</cpu>", "</cpux>", 1), _line_of(_XML, "</cpu>"), "malformed XML"),
    (_XML.replace(' sm="80"', "", 1), _line_of(_XML, "<gpu "), "no 'sm'"),
    (_XML.replace('speed="200000"', 'speed="fast"'), _line_of(_XML, "<net "),
     "must be a number > 0"),
    ('<!DOCTYPE x [<!ENTITY a "b">]><system/>', 1, "DTD"),
    ("<topology/>", 1, "expected <system>"),
])
def test_malformed_nccl_xml_names_the_line(text, line, words):
    with pytest.raises(ParseError, match=words) as caught:
        parse_nccl_xml(text, source="topo.xml")
    assert caught.value.line == line


_IB = (DUMPS / "two-dgx-a100.ibnetdiscover").read_text()


@pytest.mark.parametrize(("text", "line", "words"), [
    (_IB.replace("lid 11 4xHDR", "lid 11 4xWOW", 1), 12, "width and speed"),
    (_IB.replace('"H-0c42a10300c80000"[1]', '"H-ffff"[1]', 1), 12, "not listed"),
    (_IB.replace('"S-0c42a10300aa0000"[1]\t', '"S-0c42a10300aa0000"[2]\t', 1), 12,
     "but"),
    (_IB + "garbage line\n", _IB.count("\n") + 1, "cannot read"),
])
def test_malformed_ibnetdiscover_names_the_line(text, line, words):
    with pytest.raises(ParseError, match=words) as caught:
        parse_ibnetdiscover(text, source="ib")
    assert caught.value.line == line


@pytest.mark.parametrize(("node", "key"), [
    ({"gpu_pcie_switch": [0, 2], "pcie_switch_cpu": [0, 0]}, "node.gpu_pcie_switch[1]"),
    ({"gpu_pcie_switch": [0], "pcie_switch_cpu": [0], "nvswitch": True,
      "nvlink_pairs": [[0, 0, 1]]}, "node.nvlink_pairs[0]"),
    ({"gpu_pcie_switch": [0]}, "node"),
    ({"gpu_pcie_switch": [0], "pcie_switch_cpu": [0], "nvswitchh": True}, "node.nvswitchh"),
    # CPU 9 named, 2..8 holding nothing: ten sockets were built for two.
    ({"gpu_pcie_switch": [0, 1, 2], "pcie_switch_cpu": [0, 1, 9]}, "node.pcie_switch_cpu"),
])
def test_node_form_errors_name_the_key(node, key):
    with pytest.raises(ConfigError) as caught:
        build_cluster({"node": node})
    assert caught.value.key == key


def test_cli_errors_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("hello\n")
    assert main(["topology", "import", str(bad), "-o", str(tmp_path / "c.yaml")]) == 2
    assert "not a topology dump" in capsys.readouterr().err
    assert main(["topology", "import", str(DUMPS / "two-dgx-a100.ibnetdiscover"), "-o",
                 str(tmp_path / "c.yaml")]) == 2
    assert "--node" in capsys.readouterr().err
    with pytest.raises(DistsimError):
        read_node_dump(tmp_path / "missing.txt")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300), st.integers(0, 3000))
def test_damaged_dumps_read_or_fail_cleanly(noise, at):
    for good, parse in ((_GOOD, parse_topo_matrix), (_XML, parse_nccl_xml),
                        (_IB, parse_ibnetdiscover)):
        at = min(at, len(good))
        with contextlib.suppress(ParseError):
            parse(good[:at] + noise + good[at + len(noise):], source="fuzz")


@pytest.mark.parametrize(("ratio", "expected"), [(1, 2 * 8 * 50e9), (2, 2 * 8 * 50e9 / 2)])
def test_bisection_is_the_half_clusters_nics_over_the_leaf_ratio(ratio, expected):
    # Four DGX H100 nodes, one leaf of 8 NDR ports each: the two first nodes' 16 NICs send
    # to the other two through their leaves' uplinks, 1/ratio of their ports.
    topology = build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": {
        "kind": "fat-tree", "nics_per_leaf": 8, "oversubscription": ratio}})
    assert summarise(topology).bisection_bytes_per_s == pytest.approx(expected, rel=1e-12)
    assert summarise(build_cluster({"preset": "dgx-h100"})).bisection_bytes_per_s is None


def test_a_bisection_left_out_at_scale_says_so():
    big = summarise(build_cluster({"preset": "dgx-h100", "nodes": MAX_BISECTION_NODES + 1,
                                   "fabric": {"kind": "fat-tree"}}))
    assert big.bisection_bytes_per_s is None
    assert f"bisection: not computed above {MAX_BISECTION_NODES} nodes" in format_summary(big)
    one = summarise(build_cluster({"preset": "dgx-h100"}))
    assert "bisection: not computed" not in format_summary(one)


def test_left_out_nics_leave_the_cluster(tmp_path, capsys):
    layout = without_nics(read_node_dump(DUMPS / "dgx-a100.topo.xml"), ["mlx5_1", "mlx5_6"])
    assert layout.nic_names == ("mlx5_0", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_7")
    assert layout.nic_pcie_switch == (0, 1, 1, 2, 2, 3)
    assert len(build_cluster(cluster_spec(layout)).nics_on_node(0)) == 6
    with pytest.raises(ConfigError, match="no NIC 'mlx5_8'"):
        without_nics(layout, ["mlx5_8"])
    assert main(["topology", "import", str(DUMPS / "dgx-a100.topo.xml"), "-o",
                 str(tmp_path / "c.yaml"), "--exclude-nic", "mlx5_9"]) == 2
    assert "--exclude-nic" in capsys.readouterr().err


def test_a_drawing_beyond_eight_nodes_draws_fabric_tiers_only(tmp_path):
    """The first eight nodes are drawn; an undrawn node's NICs and GPUs are not placed as
    fabric tiers above the switches (leaf and spine: two tiers)."""
    from distsim_gpu.scenarios.report.topology_view import _LAYER, MAX_DRAWN_NODES, _positions

    topology = build_cluster({"preset": "dgx-a100", "nodes": 16,
                              "fabric": {"kind": "fat-tree", "nics_per_leaf": 32}})
    pos = _positions(topology, MAX_DRAWN_NODES)
    for name in pos:
        node = topology.device(name).node
        assert node is None or node < MAX_DRAWN_NODES, name
    fabric_heights = {y for name, (_, y) in pos.items() if topology.device(name).node is None}
    assert fabric_heights == {_LAYER["nic"] + 1.5, _LAYER["nic"] + 3.0}
    assert main(["topology", "show", "dgx-a100", "--nodes", "16", "-o",
                 str(tmp_path / "c.png")]) == 0


def test_drawing_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    status = main(["topology", "show", "dgx-h100", "--nodes", "2", "-o",
                   str(tmp_path / "c.png")])
    err = capsys.readouterr().err
    assert status == 2
    assert "pip install 'distsim-gpu[plot]'" in err and "Traceback" not in err
    assert not (tmp_path / "c.png").exists()
