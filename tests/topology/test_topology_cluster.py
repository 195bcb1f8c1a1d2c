"""Cluster specs: overrides, YAML files, custom clusters, and every error message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError, TopologyError
from distsim_gpu.topology import Topology, apply_overrides, build_cluster, load_cluster

CUSTOM = """\
name: tiny
devices:
  - {name: a0, kind: gpu, node: 0}
  - {name: a1, kind: gpu, node: 0}
  - {name: asw, kind: pcie_switch, node: 0}
  - {name: anic, kind: nic, node: 0}
  - {name: b0, kind: gpu, node: 1}
  - {name: bsw, kind: pcie_switch, node: 1}
  - {name: bnic, kind: nic, node: 1}
  - {name: ib, kind: switch}
links:
  - {src: a0, dst: asw, bandwidth: 32 GB/s, latency: 0.5 us, kind: pcie}
  - {src: a1, dst: asw, bandwidth: 32 GB/s, latency: 0.5 us, kind: pcie}
  - {src: anic, dst: asw, bandwidth: 32 GB/s, latency: 0.5 us, kind: pcie}
  - {src: anic, dst: ib, bandwidth: 200 Gbps, latency: 1 us, kind: network}
  - {src: b0, dst: bsw, bandwidth: 32 GB/s, latency: 0.5 us, kind: pcie}
  - {src: bnic, dst: bsw, bandwidth: 32 GB/s, latency: 0.5 us, kind: pcie}
  - {src: bnic, dst: ib, bandwidth: 200 Gbps, latency: 1 us, kind: network}
"""


def _write(tmp_path: Path, text: str, name: str = "cluster.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _error(excinfo: pytest.ExceptionInfo[DistsimError]) -> str:
    return str(excinfo.value)


# --------------------------------------------------------------------------- overrides


def test_build_cluster_group_overrides_change_the_right_links() -> None:
    base = build_cluster({"preset": "dgx-a100", "nodes": 2})
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2,
                          "nvlink": {"bandwidth": "450 GB/s", "latency": "1 us"},
                          "pcie": {"latency": "0.25 us"}, "cpu": {"bandwidth": "50 GB/s"},
                          "nic": {"bandwidth": "100 Gbps"}, "gpu": "A100-SXM4-40GB"})
    for link in topo.links():
        old = base.link(*link.id)
        if link.kind == "nvlink":
            assert (link.bandwidth_bytes_per_s, link.latency_s) == (450e9, 1e-6)
        elif link.kind == "pcie":
            assert link.bandwidth_bytes_per_s == old.bandwidth_bytes_per_s
            assert link.latency_s == 0.25e-6
        elif link.kind == "cpu":
            assert (link.bandwidth_bytes_per_s, link.latency_s) == (50e9, old.latency_s)
        else:
            assert link.bandwidth_bytes_per_s == 12.5e9  # NIC ports and the fabric follow
    assert topo.config["gpu"] == {"model": "A100-SXM4-40GB"}
    assert topo.config["nic"]["bandwidth"] == 12.5e9
    assert topo.config["fabric"]["link_bandwidth"] == 12.5e9


@pytest.mark.parametrize(("nic", "model"), [
    ({"bandwidth": "800 Gbps"}, "ConnectX-6 HDR 200Gb/s (run at 800 Gb/s)"),
    ({"bandwidth": "200 Gbps"}, "ConnectX-6 HDR 200Gb/s"),  # the preset's own rate
    ({"bandwidth": "800 Gbps", "model": "CX-8"}, "CX-8"),   # a model the user named
])
def test_a_nic_rate_what_if_is_not_printed_under_the_old_part_name(nic, model) -> None:
    """The resolved NIC of a what-if: a 200 Gb/s part's name on an 800 Gb/s link had read as
    a run at 200 Gb/s; the name a user gives is kept as given, and re-reading the resolved
    config adds nothing."""
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2, "nic": nic})
    assert topo.config["nic"]["model"] == model
    again = build_cluster({"preset": "dgx-a100", "nodes": 2, "nic": topo.config["nic"]})
    assert again.config["nic"] == topo.config["nic"]


def test_apply_overrides_sets_dotted_paths_without_touching_the_input() -> None:
    spec: dict[str, Any] = {"preset": "dgx-h100", "nodes": 8, "fabric": "fat-tree"}
    out = apply_overrides(spec, ["nic.bandwidth=200 Gbps", "fabric.oversubscription=2",
                                 "nodes = 16", ("fabric.spines", 4)])
    assert spec == {"preset": "dgx-h100", "nodes": 8, "fabric": "fat-tree"}
    assert out == {"preset": "dgx-h100", "nodes": 16,
                   "fabric": {"kind": "fat-tree", "oversubscription": 2, "spines": 4},
                   "nic": {"bandwidth": "200 Gbps"}}
    topo = build_cluster(out)
    assert {link.bandwidth_bytes_per_s for link in topo.links()
            if link.src == "n0.nic0" and link.kind == "network"} == {25e9}
    # 4 leaves of 32 ports at 25 GB/s, halved, over 4 spines.
    assert topo.link("leaf0", "spine3").bandwidth_bytes_per_s == 32 * 25e9 / 2 / 4


def test_apply_overrides_reads_values_as_yaml() -> None:
    out = apply_overrides({"preset": "switch"}, ["gpus=4", "link_latency=1e-6",
                                                 "name=hand check", "fabric={kind: x}"])
    assert out["gpus"] == 4 and out["link_latency"] == "1e-6"
    assert out["name"] == "hand check" and out["fabric"] == {"kind": "x"}


def test_apply_overrides_indexes_lists() -> None:
    spec = {"devices": [{"name": "g", "kind": "gpu"}], "links": [{"src": "a"}]}
    out = apply_overrides(spec, ["links[0].bandwidth=10 GB/s", "devices[0].node=2"])
    assert out["links"][0] == {"src": "a", "bandwidth": "10 GB/s"}
    assert out["devices"][0]["node"] == 2
    with pytest.raises(ConfigError, match=r"no list item \[3\]") as info:
        apply_overrides(spec, ["links[3].kind=pcie"])
    assert info.value.key == "links[3].kind" and info.value.source == "--set"


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("nic.bandwidth", "is not KEY=VALUE"),
        ("nic..bandwidth=1", "cannot read key path"),
        ("nodes.count=2", "nodes is int 2, not a mapping"),
    ],
)
def test_apply_overrides_rejects_bad_overrides(override: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as info:
        apply_overrides({"preset": "dgx-a100", "nodes": 2}, [override])
    assert info.value.source == "--set"


def test_resolved_config_rebuilds_the_same_cluster() -> None:
    for spec in ({"preset": "dgx-a100", "nodes": 4,
                  "fabric": {"kind": "fat-tree", "nics_per_leaf": 16, "oversubscription": 2}},
                 {"preset": "dgx-h100", "nodes": 2, "fabric": "rail-optimized"},
                 {"preset": "pcie-8gpu", "nodes": 3, "fabric": "single-switch"},
                 {"preset": "switch", "gpus": 4}):
        topo = build_cluster(spec)
        again = build_cluster(json.loads(json.dumps(topo.config)))
        assert again.config == topo.config
        assert list(again.links()) == list(topo.links())


# --------------------------------------------------------------------------- files


def test_load_cluster_by_preset_name_with_nodes_and_overrides() -> None:
    topo = load_cluster("dgx-h100", nodes=2, overrides=["nic.bandwidth=200 Gbps"])
    assert topo.num_nodes == 2 and topo.config["nic"]["bandwidth"] == 25e9


def test_load_cluster_preset_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "preset: dgx-a100\nnodes: 2\nfabric:\n  kind: rail-optimized\n"
                            "nic: {bandwidth: 100 Gbps}\n")
    topo = load_cluster(path)
    assert topo.num_nodes == 2 and topo.config["fabric"]["kind"] == "rail-optimized"
    assert load_cluster(Path(path), nodes=3).num_nodes == 3


def test_load_custom_cluster(tmp_path: Path) -> None:
    topo = load_cluster(_write(tmp_path, CUSTOM))
    assert topo.name == "tiny" and topo.gpus == ("a0", "a1", "b0") and topo.num_nodes == 2
    assert topo.link("asw", "a0").bandwidth_bytes_per_s == 32e9  # duplex by default
    route = topo.route("a0", "b0")
    assert route.devices == ("a0", "asw", "anic", "ib", "bnic", "bsw", "b0")
    assert route.transport == "net"
    assert route.latency_s == pytest.approx(4 * 0.5e-6 + 2 * 1e-6)
    local = topo.route("a1", "a0")
    assert local.transport == "pcie" and local.latency_s == pytest.approx(1e-6)
    assert topo.local_nics("a0") == ("anic",)
    rebuilt = build_cluster(json.loads(json.dumps(topo.config)))
    assert rebuilt.config == topo.config


def test_custom_cluster_defaults_node_and_index() -> None:
    topo = build_cluster({
        "devices": [{"name": "x", "kind": "gpu"}, {"name": "y", "kind": "gpu"},
                    {"name": "s", "kind": "nvswitch"}],
        "links": [{"src": "x", "dst": "s", "bandwidth": 1e9, "kind": "nvlink"},
                  {"src": "y", "dst": "s", "bandwidth": "1 GB/s", "kind": "nvlink"}],
    })
    assert topo.device("y").node == 0 and topo.device("y").index == 1
    assert topo.route("x", "y").transport == "nvlink"
    assert topo.route("x", "y").latency_s == 0.0


def test_custom_cluster_simplex_links() -> None:
    spec = {"devices": [{"name": "x", "kind": "gpu"}, {"name": "y", "kind": "gpu"}],
            "links": [{"src": "x", "dst": "y", "bandwidth": "1 B/s", "kind": "nvlink",
                       "duplex": False}]}
    with pytest.raises(TopologyError, match="GPU 'y' cannot reach GPU 'x'"):
        build_cluster(spec)
    spec["links"].append({"src": "y", "dst": "x", "bandwidth": "2 B/s", "kind": "nvlink",
                          "duplex": False})
    topo = build_cluster(spec)
    assert topo.link("y", "x").bandwidth_bytes_per_s == 2
    spec["links"][1]["duplex"] = "no"
    with pytest.raises(ConfigError) as info:
        build_cluster(spec)
    assert str(info.value) == "links[1].duplex: must be true or false, got 'no'"


# --------------------------------------------------------------------------- errors


def test_unknown_key_names_the_path_and_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "dgx-a100", "fabirc": "fat-tree"})
    assert info.value.key == "fabirc"
    assert _error(info).startswith("fabirc: unknown key for preset 'dgx-a100'")
    assert "did you mean 'fabric'?" in _error(info)
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "dgx-a100", "fabric": {"oversubscriptoin": 2}})
    assert info.value.key == "fabric.oversubscriptoin"
    assert "did you mean 'oversubscription'?" in _error(info)
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "dgx-a100", "nic": {"bandwith": "1 GB/s"}})
    assert info.value.key == "nic.bandwith" and "did you mean 'bandwidth'?" in _error(info)


def test_key_valid_elsewhere_is_rejected_where_it_means_nothing() -> None:
    with pytest.raises(ConfigError, match="for fabric 'single-switch'") as info:
        build_cluster({"preset": "dgx-a100", "fabric": {"kind": "single-switch",
                                                        "spines": 2}})
    assert info.value.key == "fabric.spines"
    with pytest.raises(ConfigError, match="has no NVLink") as info:
        build_cluster({"preset": "pcie-8gpu", "nvlink": {"bandwidth": "1 GB/s"}})
    assert info.value.key == "nvlink"
    with pytest.raises(ConfigError, match="for preset 'switch'"):
        build_cluster({"preset": "switch", "fabric": "fat-tree"})


@pytest.mark.parametrize(
    ("spec", "key", "words"),
    [
        ({"nic": {"bandwidth": "-5 GB/s"}}, "nic.bandwidth", "bandwidth must be positive"),
        ({"nvlink": {"bandwidth": "0 GB/s"}}, "nvlink.bandwidth", "bandwidth must be positive"),
        ({"nvlink": {"bandwidth": 400}}, "nvlink.bandwidth", "a bandwidth needs a unit"),
        ({"fabric": {"link_bandwidth": "0 Gbps"}}, "fabric.link_bandwidth", "positive"),
        ({"pcie": {"latency": "-1 us"}}, "pcie.latency", "latency must be zero or positive"),
        ({"cpu": {"bandwidth": "fast"}}, "cpu.bandwidth", "cannot read 'fast'"),
        ({"nodes": 0}, "nodes", "nodes: must be a whole number >= 1, got 0"),
        ({"nodes": -3}, "nodes", "nodes: must be a whole number >= 1, got -3"),
        ({"nodes": 2.5}, "nodes", "must be a whole number >= 1, got 2.5"),
        ({"nodes": True}, "nodes", "must be a whole number >= 1, got True"),
        ({"fabric": {"spines": -1}}, "fabric.spines", "must be a whole number >= 0, got -1"),
        ({"fabric": {"oversubscription": 0.5}}, "fabric.oversubscription", "ratio >= 1"),
        ({"fabric": {"nics_per_leaf": 0}}, "fabric.nics_per_leaf", ">= 1"),
        ({"fabric": "fat-three"}, "fabric", "did you mean 'fat-tree'"),
        ({"fabric": {"kind": "torus"}}, "fabric.kind", "unknown fabric kind 'torus'"),
        ({"nic": {"count": 4}}, "nic.count", "cannot have 4 NICs"),
        ({"nic": "fast"}, "nic", "expected a mapping"),
        ({"gpu": {"model": ""}}, "gpu.model", "non-empty string"),
    ],
)
def test_bad_values_name_their_key(spec: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(DistsimError) as info:
        build_cluster({"preset": "dgx-a100", **spec}, source="c.yaml")
    assert info.value.key == key
    assert words in _error(info)
    assert _error(info).startswith(f"c.yaml: {key}: ")


def test_switch_preset_is_one_node() -> None:
    with pytest.raises(ConfigError, match="single node, got nodes=2"):
        build_cluster({"preset": "switch", "nodes": 2})
    with pytest.raises(DistsimError, match="link_latency") as info:
        build_cluster({"preset": "switch", "link_latency": "-2 us"})
    assert info.value.key == "link_latency"


def test_unknown_preset_lists_the_presets() -> None:
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "dgx-b100"})
    assert "unknown preset 'dgx-b100'" in _error(info)
    assert ("dgx-a100, dgx-b200, dgx-h100, dgx-h200, dgx1-v100, gb200-nvl36x2, gb200-nvl72, "
            "gb300-nvl72, gcp-a4, hgx-b300, mi300x, mi355x, pcie-8gpu, quad-gh200, switch"
            in _error(info))
    with pytest.raises(ConfigError) as info:
        load_cluster("dgx-a10")
    text = _error(info)
    assert "no preset or cluster file named 'dgx-a10'" in text
    assert "did you mean 'dgx-a100'?" in text
    assert ("valid: dgx-a100, dgx-b200, dgx-h100, dgx-h200, dgx1-v100, gb200-nvl36x2, gb200-nvl72, "
            "gb300-nvl72, gcp-a4, hgx-b300, mi300x, mi355x, pcie-8gpu, quad-gh200, switch"
            in text)


def test_spec_without_preset_or_devices() -> None:
    with pytest.raises(ConfigError, match="needs 'preset'") as info:
        build_cluster({"nodes": 2})
    assert "dgx-a100" in _error(info)
    with pytest.raises(ConfigError, match="expected a mapping"):
        build_cluster(["dgx-a100"])  # type: ignore[arg-type]


def test_load_cluster_nodes_below_one() -> None:
    with pytest.raises(ConfigError, match="nodes: must be a whole number >= 1, got 0"):
        load_cluster("dgx-a100", nodes=0)


def test_yaml_syntax_error_has_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "preset: dgx-a100\nnodes: 2\nfabric: {kind: fat-tree\nnic: {}\n")
    with pytest.raises(ParseError) as info:
        load_cluster(path)
    assert info.value.source == path and info.value.line == 4
    assert _error(info).startswith(f"{path}:4: invalid YAML")


def test_yaml_value_errors_carry_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "preset: dgx-a100\nnodes: 2\nfabric:\n  kind: fat-tree\n"
                            "  oversubscriptoin: 2\n")
    with pytest.raises(ConfigError) as info:
        load_cluster(path)
    assert _error(info).startswith(f"{path}:5: fabric.oversubscriptoin: unknown key")
    path = _write(tmp_path, "preset: dgx-a100\nnic:\n  bandwidth: -1 Gbps\n", "neg.yaml")
    with pytest.raises(ParseError) as info:
        load_cluster(path)
    assert (info.value.line, info.value.key) == (3, "nic.bandwidth")


def test_errors_from_an_override_blame_the_override(tmp_path: Path) -> None:
    path = _write(tmp_path, "preset: dgx-a100\nnodes: 2\nfabric: {kind: fat-tree}\n")
    with pytest.raises(ConfigError) as info:
        load_cluster(path, overrides=["fabric.oversubscription=0.5"])
    assert info.value.source == "--set" and info.value.line is None
    assert info.value.key == "fabric.oversubscription"


def test_cluster_file_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="holds a mapping, got list"):
        load_cluster(_write(tmp_path, "- dgx-a100\n"))
    with pytest.raises(ConfigError, match="holds a mapping, got an empty file"):
        load_cluster(_write(tmp_path, "", "empty.yaml"))
    with pytest.raises(ConfigError, match="nodes applies to preset clusters"):
        load_cluster(_write(tmp_path, CUSTOM, "custom.yaml"), nodes=2)


def test_dangling_link_end_names_the_list_index(tmp_path: Path) -> None:
    text = CUSTOM.replace("{src: b0, dst: bsw,", "{src: b0, dst: bsww,")
    path = _write(tmp_path, text)
    with pytest.raises(TopologyError) as info:
        load_cluster(path)
    assert info.value.key == "links[4].dst"
    assert "link end 'bsww' is not a device" in _error(info)
    assert "did you mean 'bsw'?" in _error(info)
    assert info.value.line == 16


def test_unreachable_gpu_names_both_gpus(tmp_path: Path) -> None:
    text = CUSTOM.replace("  - {src: bnic, dst: ib, bandwidth: 200 Gbps, latency: 1 us, "
                          "kind: network}\n", "")
    with pytest.raises(TopologyError) as info:
        load_cluster(_write(tmp_path, text))
    assert "GPU 'a0' cannot reach GPU 'b0'" in _error(info)


@pytest.mark.parametrize(
    ("edit", "key", "words"),
    [
        (lambda s: s.replace("{name: a1,", "{name: a0,"), "devices[1].name",
         "duplicate device name 'a0' (first at devices[0])"),
        (lambda s: s.replace("{name: ib, kind: switch}", "{name: ib, kind: swich}"),
         "devices[7].kind", "did you mean 'switch'?"),
        (lambda s: s.replace("{name: ib, kind: switch}", "{name: ib, kind: switch, nod: 1}"),
         "devices[7].nod", "did you mean 'node'?"),
        (lambda s: s.replace("latency: 1 us, kind: network}", "latency: -1 us, kind: network}",
                             1), "links[3].latency", "latency must be zero or positive"),
        (lambda s: s.replace("bandwidth: 200 Gbps", "bandwidth: 0 Gbps", 1),
         "links[3].bandwidth", "bandwidth must be positive"),
        (lambda s: s.replace("kind: pcie}", "kind: pci}", 1), "links[0].kind",
         "did you mean 'pcie'?"),
        (lambda s: s.replace("{src: a1, dst: asw,", "{src: a1, dst: a1,"), "links[1]",
         "joins 'a1' to itself"),
        (lambda s: s.replace("{src: a1, dst: asw,", "{src: asw, dst: a0,"), "links[1]",
         "link asw -> a0 is already given by links[0]"),
        (lambda s: s.replace("{name: a1, kind: gpu, node: 0}",
                             "{name: a1, kind: gpu, node: 0, index: 0}"), "devices[1].index",
         "gpu index 0 on node 0 is taken by devices[0]"),
        (lambda s: s.replace("name: tiny", "nme: tiny"), "nme", "did you mean 'name'?"),
    ],
)
def test_custom_cluster_errors(tmp_path: Path, edit: Any, key: str, words: str) -> None:
    with pytest.raises(DistsimError) as info:
        load_cluster(_write(tmp_path, edit(CUSTOM)))
    assert info.value.key == key
    assert words in _error(info)
    assert info.value.line is not None


def test_custom_cluster_without_gpus() -> None:
    with pytest.raises(TopologyError, match="at least one GPU"):
        build_cluster({"devices": [{"name": "s", "kind": "switch"}]})


def test_topology_config_is_json_serialisable() -> None:
    topo: Topology = build_cluster({"preset": "dgx-h100", "nodes": 2})
    assert json.loads(json.dumps(topo.config)) == topo.config
    assert set(topo.config) == {"name", "preset", "nodes", "gpu", "nvlink", "pcie", "cpu",
                                "nic", "fabric"}


def test_a_multi_plane_fabric_has_a_bounded_number_of_planes():
    # Each plane is a whole fabric: a file must not be able to ask for 100,000 of them.
    with pytest.raises(ConfigError, match="100000 planes") as error:
        build_cluster({"preset": "dgx-h100", "nodes": 2,
                       "fabric": {"kind": "multi-plane", "planes": 100000}})
    assert error.value.key == "fabric.planes"
