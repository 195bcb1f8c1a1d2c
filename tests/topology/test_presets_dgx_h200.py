"""The DGX H200 preset: the DGX H100 chassis with H200 GPUs (NVIDIA DGX H200 datasheet).

Every link, device and figure is DGX H100's; only the GPU differs, and a run on the preset
that names no ``compute.gpu`` computes on an H200 (141 GiB of HBM3e at 4.8 TB/s, Hopper's
989 TFLOP/s bf16).  Its SuperPOD fabric is cabled as the H100 generation's.
"""

from __future__ import annotations

import json

import pytest
from distsim_gpu.scenarios.cli.main import main
from distsim_gpu.topology import Topology, build_cluster
from distsim_gpu.workloads.specs.gpus import get_gpu

GiB = 2**30


def _links(topo: Topology) -> set[tuple[str, str, float, float, str]]:
    return {(link.src, link.dst, link.bandwidth_bytes_per_s, link.latency_s, link.kind)
            for link in topo.links()}


def _devices(topo: Topology) -> set[tuple[str, str]]:
    return {(device.name, device.kind) for device in topo.devices()}


@pytest.mark.parametrize("fabric", ["fat-tree", "rail-optimized", "superpod"])
def test_dgx_h200_is_dgx_h100_cabled_alike(fabric: str) -> None:
    h200 = build_cluster({"preset": "dgx-h200", "nodes": 4, "fabric": {"kind": fabric}})
    h100 = build_cluster({"preset": "dgx-h100", "nodes": 4, "fabric": {"kind": fabric}})
    assert _links(h200) == _links(h100)
    assert _devices(h200) == _devices(h100)
    nic_ports = {link.bandwidth_bytes_per_s for link in h200.links()
                 if h200.device(link.src).kind == "nic" and link.kind == "network"}
    assert nic_ports == {400e9 / 8}  # ConnectX-7 NDR
    nvlink = {link.bandwidth_bytes_per_s for link in h200.links() if link.kind == "nvlink"}
    assert nvlink == {18 * 25e9}  # NVLink 4: 900 GB/s both ways


def test_dgx_h200_gpu_is_an_h200() -> None:
    topo = build_cluster({"preset": "dgx-h200", "nodes": 1})
    gpu = get_gpu(topo.config["gpu"]["model"])
    assert gpu is get_gpu("h200")
    assert gpu.memory_bytes == 141 * GiB
    assert gpu.memory_bandwidth_bytes_per_s == 4.8e12
    assert gpu.peak_flops_per_s["bf16"] == get_gpu("h100-sxm").peak_flops_per_s["bf16"]


def test_a_run_on_dgx_h200_computes_on_h200(tmp_path, capsys) -> None:
    scenario = tmp_path / "h200.yaml"
    scenario.write_text(
        "cluster: {preset: dgx-h200, nodes: 1}\n"
        "model: {preset: llama3.1-8b}\n"
        "parallelism: {tp: 8, dp: 1}\n"
        "training: {micro_batch: 1, global_batch: 4, seq_len: 2048}\n")
    assert main(["run", str(scenario), "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["gpu_memory_bytes"] == 141 * GiB
    assert summary["peak_flops_per_gpu"] == get_gpu("h200").peak_flops_per_s["bf16"]
