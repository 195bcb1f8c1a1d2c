"""The CLI's shared options: parsed arguments -> Topology, CommParams and overrides; the
trace commands' cluster choice (a library function fed plain values)."""

from __future__ import annotations

import argparse

import pytest
from distsim_gpu.measured.records import RankTrace
from distsim_gpu.scenarios.cli.options import (
    add_cluster_options,
    add_trace_cluster_options,
    checked_comm,
    cluster_and_params,
    comm_file,
    comm_params,
    comm_params_on,
    split_cluster_overrides,
)
from distsim_gpu.scenarios.fit.validate_trace import trace_cluster
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.topology import load_cluster


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="distsim-test")
    add_cluster_options(parser)
    return parser.parse_args(list(argv))


def test_cluster_options_become_a_topology_and_comm_params():
    args = parse("--cluster", "dgx-a100", "--nodes", "2", "--set", 'nic.bandwidth="100 Gbps"',
                 "--set", "comm.link_efficiency.nvlink=0.9", "--algo", "ring",
                 "--proto", "simple", "--fidelity", "step")
    topology, params = cluster_and_params(args)
    assert topology.num_nodes == 2 and len(topology.gpus) == 16
    assert topology.config["nic"]["bandwidth"] == pytest.approx(100e9 / 8)
    assert (params.algorithm, params.protocol, params.fidelity) == ("ring", "simple", "step")
    assert params.efficiency_of("nvlink") == pytest.approx(0.9)


def test_defaults_are_the_presets_and_auto():
    topology, params = cluster_and_params(parse("--cluster", "dgx-h100"))
    assert topology.num_nodes == 1 and len(topology.gpus) == 8
    assert (params.algorithm, params.protocol) == ("auto", "auto")


@pytest.mark.parametrize(("cluster", "nvlink"), [("dgx-a100", 0.78), ("dgx-h100", 0.82)])
def test_a_known_cluster_gives_its_gpu_generations_nvlink_unless_set(cluster, nvlink):
    # What the trace commands do: check the mapping first, then finish it on the cluster.
    topology = load_cluster(cluster, nodes=1)
    assert comm_params_on(checked_comm([]), topology).efficiency_of("nvlink") == nvlink
    given = checked_comm([("link_efficiency.nvlink", 0.5)], algo="ring")
    assert comm_params_on(given, topology).efficiency_of("nvlink") == 0.5
    with pytest.raises(ConfigError, match=r"link_efficiency\.nvlink"):
        checked_comm([("link_efficiency.nvlink", 2)])


def test_comm_file_then_set_then_flags(tmp_path):
    path = tmp_path / "fit.yaml"
    path.write_text("communication:\n  algorithm: tree\n  link_efficiency:\n"
                    "    nvlink: 0.5\n    network: 0.6\n")
    params = comm_params([("link_efficiency.nvlink", 0.7)], path=str(path), algo="ring")
    assert params.efficiency_of("nvlink") == pytest.approx(0.7)  # --set over the file
    assert params.efficiency_of("network") == pytest.approx(0.6)  # the file's
    assert params.algorithm == "ring"  # --algo over the file
    assert comm_params([], path=str(path)).algorithm == "tree"


def test_comm_file_without_the_section_names_the_file(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes: 2\n")
    with pytest.raises(ConfigError) as info:
        comm_file(str(path))
    assert "cluster.yaml" in str(info.value) and "communication" in str(info.value)
    assert "calibrate nccl" in str(info.value)


def test_overrides_split_by_prefix():
    cluster, comm = split_cluster_overrides(["nic.bandwidth=5", "comm.protocol=ll",
                                             "comm.link_efficiency.pcie=0.5"])
    assert cluster == [("nic.bandwidth", 5)]
    assert comm == [("protocol", "ll"), ("link_efficiency.pcie", 0.5)]


@pytest.mark.parametrize(("argv", "message"), [
    (("--cluster", "dgx-a100", "--set", "novalue"), "KEY=VALUE"),
    (("--cluster", "dgx-a100", "--set", "comm.link_efficiency.nvlink=2"), "(0, 1]"),
    (("--cluster", "dgx-a101"), "did you mean 'dgx-a100'"),
])
def test_bad_values_are_distsim_errors(argv, message):
    with pytest.raises(DistsimError, match=None) as info:
        cluster_and_params(parse(*argv))
    assert message in str(info.value)


def test_comm_errors_come_before_cluster_errors():
    # Both are wrong: the communication parameters are checked first, as before the split.
    with pytest.raises(DistsimError) as info:
        cluster_and_params(parse("--cluster", "dgx-a101", "--set",
                                 "comm.link_efficiency.nvlink=2"))
    assert "(0, 1]" in str(info.value)


def test_trace_cluster_options_parse():
    parser = argparse.ArgumentParser(prog="distsim-test")
    add_trace_cluster_options(parser)
    args = parser.parse_args(["a.json", "b.json", "--ranks-per-node", "4", "--set", "x=1"])
    assert args.traces == ["a.json", "b.json"]
    assert (args.cluster, args.nodes, args.ranks_per_node, args.comm) == (None, None, 4, None)
    assert args.overrides == ["x=1"]


# --------------------------------------------------------------------------- trace_cluster


def traces(gpu_model: str | None, world_size: int | None, ranks: int) -> list[RankTrace]:
    return [RankTrace(f"rank{r}.json", r, world_size, gpu_model, (), ()) for r in range(ranks)]


def test_trace_cluster_defaults_to_the_box_of_the_gpu_with_enough_nodes():
    chosen = trace_cluster(traces("NVIDIA A100-SXM4-80GB", 16, 2))
    assert chosen.cluster == "dgx-a100"
    assert chosen.topology.num_nodes == 2  # 16 ranks at the node's 8 GPUs
    assert chosen.description.startswith("dgx-a100 (the box of the traces' ")
    assert chosen.description.endswith(", 2 node(s)")


def test_trace_cluster_of_rocm_traces_is_the_mi300x_platform():
    chosen = trace_cluster(traces("AMD Instinct MI300X", 8, 8))
    assert (chosen.cluster, chosen.topology.num_nodes) == ("mi300x", 1)


@pytest.mark.parametrize(("gpu", "box", "nodes"), [
    ("NVIDIA GH200 120GB", "quad-gh200", 2),  # 4 superchips per node
    ("NVIDIA B200", "gcp-a4", 1)])
def test_trace_cluster_of_gh200_and_b200_traces(gpu, box, nodes):
    chosen = trace_cluster(traces(gpu, 8, 8))
    assert (chosen.cluster, chosen.topology.num_nodes) == (box, nodes)


def test_trace_cluster_sizes_nodes_by_ranks_per_node_and_highest_rank():
    # No world size recorded: the highest rank seen (11) sizes the job: 12 ranks.
    chosen = trace_cluster(traces("NVIDIA H100 80GB HBM3", None, 12), ranks_per_node=4)
    assert (chosen.cluster, chosen.topology.num_nodes) == ("dgx-h100", 3)


def test_trace_cluster_takes_what_it_is_given():
    chosen = trace_cluster(traces(None, 16, 1), cluster="dgx-h100", nodes=4,
                           overrides=[("nic.bandwidth", "100 Gbps")])
    assert chosen.cluster == "dgx-h100" and chosen.topology.num_nodes == 4
    # 16 ranks fill 2 of the 4 nodes: said, so that a what-if knows the rest sat idle.
    assert chosen.description == ("dgx-h100, 4 node(s), 2 of them unused (the traces hold "
                                  "16 ranks at 8 a node)")
    exact = trace_cluster(traces(None, 16, 1), cluster="dgx-h100", nodes=2)
    assert exact.description == "dgx-h100, 2 node(s)"
    assert chosen.topology.config["nic"]["bandwidth"] == pytest.approx(100e9 / 8)


def test_trace_cluster_without_a_gpu_model_says_so():
    chosen = trace_cluster(traces(None, 8, 1))
    assert chosen.cluster == "dgx-a100"
    assert "give --cluster" in chosen.description
