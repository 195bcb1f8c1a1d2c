"""A GPU swapped into a cluster built for another says which links it kept and which node
preset is its own."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.gpu_notes import gpu_cluster_notes, nodes_of_gpu
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.preset_registry import NODE_PRESETS
from distsim_gpu.workloads.specs.gpus import GPU_PRESETS, canonical_gpu_name, get_gpu


def test_every_node_preset_names_a_gpu_distsim_knows():
    for preset in NODE_PRESETS.values():
        assert canonical_gpu_name(preset.gpu_model) in GPU_PRESETS, preset.name
    assert nodes_of_gpu("h200") == ["dgx-h200"]
    assert nodes_of_gpu("b200") == ["gcp-a4", "dgx-b200"]


def test_an_h200_on_a_dgx_a100_keeps_nvlink3_and_names_its_node():
    (note,) = gpu_cluster_notes(get_gpu("h200"), build_cluster({"preset": "dgx-a100"}))
    assert note.key == "compute.gpu" and note.kind == "defaulted"
    assert "(dgx-a100: A100-SXM4-80GB)" in note.message
    assert "NVLink at 300 GB/s a GPU each way" in note.message  # 12 links x 25 GB/s
    assert "cluster.preset dgx-h200 is h200's own node" in note.message


def test_a_mesh_sums_a_gpus_links():
    (note,) = gpu_cluster_notes(get_gpu("b200"), build_cluster({"preset": "mi300x"}))
    assert "NVLink at 448 GB/s a GPU each way" in note.message  # 7 xGMI links x 64 GB/s
    assert "cluster.preset gcp-a4 or dgx-b200" in note.message


@pytest.mark.parametrize(("gpu", "preset"), [
    ("h200", "dgx-h100"),  # the DGX H200 is the DGX H100 chassis: the same links
    ("a100-40gb", "dgx-a100"), ("h100-sxm", "dgx-h100"), ("gb200", "gb200-nvl72")])
def test_a_gpu_that_computes_as_the_clusters_has_no_note(gpu, preset):
    assert gpu_cluster_notes(get_gpu(gpu), build_cluster({"preset": preset})) == []


def test_a_swap_is_noted_in_the_run(tiny):
    data = tiny(cluster="dgx-a100", compute={"gpu": "mi300x"})
    report = run_scenario(scenario_from_mapping(data))
    (note,) = [n for n in report.notes if n.key == "compute.gpu"]
    assert "cluster.preset mi300x is mi300x's own node" in note.message
    plain = run_scenario(scenario_from_mapping(tiny(cluster="dgx-a100")))
    assert not [n for n in plain.notes if n.key == "compute.gpu"]
