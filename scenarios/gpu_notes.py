"""A note when a run's GPU is not the one its cluster was built for.

``compute.gpu`` sets the GPU's compute and memory; the cluster (``cluster.preset`` or a
cluster file) sets everything between GPUs: NVLink, PCIe, NICs, hosts.  Swapping the GPU
alone (``--set compute.gpu=h200`` on a DGX A100 scenario) therefore runs H200s over DGX
A100's third-generation NVLink, which is a what-if worth running but not an H200 cluster.
:func:`gpu_cluster_notes` says which links the run kept and which node preset holds the
GPU, so that a GPU comparison is not read as a cluster comparison.
"""

from __future__ import annotations

from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.topology import Topology
from distsim_gpu.topology.preset_registry import NODE_PRESETS
from distsim_gpu.workloads.specs.gpus import (
    GPU_PRESETS,
    GpuSpec,
    canonical_gpu_name,
    same_compute,
)

__all__ = ["gpu_cluster_notes", "nodes_of_gpu"]


def nodes_of_gpu(gpu: str) -> list[str]:
    """The node presets built with GPU preset (or alias) ``gpu``, in registry order."""
    wanted = canonical_gpu_name(gpu)
    return [name for name, preset in NODE_PRESETS.items()
            if canonical_gpu_name(preset.gpu_model) == wanted]


def _nvlink_text(topology: Topology) -> str:
    """One GPU's NVLink (or xGMI) bandwidth each way, all its links together."""
    if not topology.gpus:
        return "no NVLink"
    first = topology.gpus[0]
    links = (topology.link(first, peer) for peer in topology.graph.successors(first))
    each_way = sum(link.bandwidth_bytes_per_s for link in links if link.kind == "nvlink")
    return f"NVLink at {each_way / 1e9:.4g} GB/s a GPU each way" if each_way else "no NVLink"


def gpu_cluster_notes(gpu: GpuSpec | None, topology: Topology) -> list[RunNote]:
    """A note when ``gpu`` does not compute as the GPU model ``topology`` was built for
    (module docstring; an H200 on a DGX H100 does, and the boxes are the same); none when
    the cluster names no GPU model distsim knows."""
    model = str(topology.config.get("gpu", {}).get("model", "") or "")
    built_for = GPU_PRESETS.get(canonical_gpu_name(model))
    if gpu is None or built_for is None or same_compute(gpu, built_for):
        return []  # a model distsim does not know says nothing of its links
    cluster = str(topology.config.get("preset") or topology.config.get("name") or "cluster")
    homes = nodes_of_gpu(gpu.name)
    advice = (f"cluster.preset {' or '.join(homes)} is {gpu.name}'s own node" if homes else
              f"no node preset holds {gpu.name}: describe its node under cluster")
    return [RunNote(
        "defaulted", f"compute.gpu {gpu.name} is not the GPU the cluster was built for "
        f"({cluster}: {model}): the run keeps that cluster's links ({_nvlink_text(topology)}), "
        f"NICs and hosts; {advice}", "compute.gpu")]
