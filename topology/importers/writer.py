"""Write what an importer read as a cluster file a person can read and edit.

The file is the ordinary preset form of :mod:`topology.cluster` with the node written out
(``node:``, :mod:`topology.node_shape`) instead of named: ``nodes``, ``fabric`` and every
figure can be edited as in any cluster file.  Each figure carries a comment saying where it
came from — stated by the dump, or a default (and which) where the dump is silent.
Numbers are written in SI (bytes per second, seconds) so the file builds exactly the
cluster the comments describe; the comments give them in readable units.
"""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass
from typing import Any

import yaml
from distsim_gpu.simcore.units import format_bandwidth
from distsim_gpu.topology.importers.layout import NodeLayout
from distsim_gpu.topology.presets import (
    INTER_SOCKET_LATENCY_S,
    NIC_LATENCY_S,
    NVLINK_DIRECT_LATENCY_S,
    NVLINK_HOP_LATENCY_S,
    PCIE_GEN3_X16_BYTES_PER_S,
    PCIE_GEN4_X16_BYTES_PER_S,
    PCIE_GEN5_X16_BYTES_PER_S,
    PCIE_HOP_LATENCY_S,
)

__all__ = ["Generation", "cluster_entries", "cluster_spec", "cluster_yaml", "comment_text"]

# One NVLink (NVLink 2, 3 and 4): 25 GB/s per direction (V100, A100, H100 white papers);
# NVLink 5 (Blackwell): 50 GB/s, 18 links making 900 GB/s (Blackwell technical brief).
NVLINK_LINK_BYTES_PER_S = 25e9
NVLINK5_LINK_BYTES_PER_S = 50e9
# Two-socket link when the dump cannot say: three UPI links at 11.2 GT/s, 2 bytes per
# transfer each way (3rd Gen Xeon Scalable product brief), 67.2 GB/s per direction.
DEFAULT_CPU_BYTES_PER_S = 3 * 11.2e9 * 2


@dataclass(frozen=True, slots=True)
class Generation:
    """What a GPU architecture implies where a dump is silent: the GPU model with
    NVSwitch / without, the PCIe generation of its host link, the NIC of its era's DGX, and
    whether its NVSwitch reduces in the switch (NVLink SHARP, third-generation NVSwitch)."""

    name: str
    gpu_sxm: str
    gpu_pcie: str
    pcie_bytes_per_s: float
    pcie_name: str
    nic_bytes_per_s: float
    nic_name: str
    nvls: bool
    cpu_bytes_per_s: float  # the inter-socket link of the era's DGX
    cpu_name: str
    nvlink_link_bytes_per_s: float = NVLINK_LINK_BYTES_PER_S  # one link, one direction
    nvlink_name: str = "NVLink 2-4"


# Volta, Ampere, Hopper: the V100/A100/H100 datasheets and the DGX-1/DGX A100/DGX H100
# user guides (EDR, HDR and NDR InfiniBand; their CPUs' socket links as topology.presets
# derives them: 2 QPI at 9.6 GT/s, 4 xGMI-2 at 16 GT/s, 4 UPI 2.0 at 16 GT/s).
GENERATIONS = {
    70: Generation("Volta", "V100-SXM2-32GB", "V100-PCIe-32GB", PCIE_GEN3_X16_BYTES_PER_S,
                   "PCIe Gen3 x16", 100e9 / 8, "EDR 100 Gb/s", False, 2 * 9.6e9 * 2,
                   "DGX-1's 2 QPI links"),
    80: Generation("Ampere", "A100-SXM4-80GB", "A100-PCIe-80GB", PCIE_GEN4_X16_BYTES_PER_S,
                   "PCIe Gen4 x16", 200e9 / 8, "HDR 200 Gb/s", False, 4 * 32e9,
                   "DGX A100's 4 xGMI-2 links"),
    90: Generation("Hopper", "H100-SXM5-80GB", "H100-PCIe-80GB", PCIE_GEN5_X16_BYTES_PER_S,
                   "PCIe Gen5 x16", 400e9 / 8, "NDR 400 Gb/s", True, 4 * 16e9 * 2,
                   "DGX H100's 4 UPI 2.0 links"),
    # DGX B200 and HGX B300 datasheets, as topology.presets_blackwell builds them (no PCIe
    # card of either exists: a dump without NVLink names no model).
    100: Generation("Blackwell", "B200-180GB", "unknown GPU", PCIE_GEN5_X16_BYTES_PER_S,
                    "PCIe Gen5 x16", 400e9 / 8, "ConnectX-7 NDR 400 Gb/s", True,
                    4 * 20e9 * 2, "DGX B200's 4 UPI 2.0 links", NVLINK5_LINK_BYTES_PER_S,
                    "NVLink 5"),
    103: Generation("Blackwell Ultra", "B300-288GB", "unknown GPU", PCIE_GEN5_X16_BYTES_PER_S,
                    "PCIe Gen5 x16", 800e9 / 8, "ConnectX-8 800 Gb/s", True, 6 * 24e9 * 2,
                    "HGX B300's 6 UPI 2.0 links", NVLINK5_LINK_BYTES_PER_S, "NVLink 5"),
}
_UNKNOWN = Generation("unknown", "unknown GPU", "unknown GPU", PCIE_GEN4_X16_BYTES_PER_S,
                      "PCIe Gen4 x16", 200e9 / 8, "HDR 200 Gb/s", False,
                      DEFAULT_CPU_BYTES_PER_S, "3 UPI links at 11.2 GT/s")

#: One top-level entry of the file: key, value, comment.
Entry = tuple[str, Any, str]


def _generation(layout: NodeLayout) -> tuple[Generation, str]:
    gen = GENERATIONS.get(layout.sm or 0)
    if gen is None:
        known = ", ".join(f"{sm} ({g.name})" for sm, g in GENERATIONS.items())
        return _UNKNOWN, ("not in the dump" if not layout.sm else
                          f"sm {layout.sm}, which distsim does not know (it knows {known}): "
                          "set gpu.model and the NVLink figure by hand")
    how = "stated (sm)" if layout.kind.startswith("NCCL") else "inferred from its NVLinks"
    return gen, f"{gen.name}, {how}"


def _figure(bandwidth: float, latency: float) -> dict[str, float]:
    return {"bandwidth": bandwidth, "latency": latency}


def _nvlink_entry(layout: NodeLayout, gen: Generation) -> Entry | None:
    link = gen.nvlink_link_bytes_per_s
    per_link = f"{format_bandwidth(link)} per direction ({gen.nvlink_name}, {gen.name})"
    if layout.nvswitch:
        return ("nvlink", _figure(layout.links_per_gpu * link, NVLINK_HOP_LATENCY_S),
                f"each GPU to the NVSwitch: {layout.links_per_gpu} links (dump) x "
                f"{per_link}; latency default, NCCL's NVLink hop / 2")
    if layout.nvlink_pairs:
        return ("nvlink", _figure(link, NVLINK_DIRECT_LATENCY_S),
                f"one NVLink of the mesh: {per_link}; latency default, NCCL's NVLink hop")
    return None


def _cpu_entry(layout: NodeLayout, gen: Generation, gen_how: str) -> Entry:
    """The socket link: an NVLink box's is its era's DGX's; a PCIe server's a generic one."""
    if layout.has_nvlink and gen is not _UNKNOWN:
        bandwidth, why = gen.cpu_bytes_per_s, f"{gen.cpu_name} ({gen_how})"
    else:
        bandwidth, why = DEFAULT_CPU_BYTES_PER_S, "3 UPI links at 11.2 GT/s"
    return ("cpu", _figure(bandwidth, INTER_SOCKET_LATENCY_S),
            f"not in the dump: default {why}, {format_bandwidth(bandwidth)} per direction")


def cluster_entries(layout: NodeLayout, *, nodes: int = 1) -> list[Entry]:
    """The file's top-level entries with their comments."""
    gen, gen_how = _generation(layout)
    node: dict[str, Any] = {"gpu_pcie_switch": list(layout.gpu_pcie_switch),
                            "nic_pcie_switch": list(layout.nic_pcie_switch),
                            "pcie_switch_cpu": list(layout.pcie_switch_cpu)}
    if layout.nvswitch:
        node["nvswitch"] = True
        node["nvswitch_sharp"] = gen.nvls
    elif layout.nvlink_pairs:
        node["nvlink_pairs"] = [list(p) for p in layout.nvlink_pairs]
    pcie = layout.pcie_bandwidth_bytes_per_s
    nic = layout.nic_bandwidth_bytes_per_s
    entries: list[Entry] = [
        ("name", f"imported {os.path.basename(layout.source)}", ""),
        ("node", node, "; ".join((f"GPUs {', '.join(layout.gpu_names)}; NICs "
                                  f"{', '.join(layout.nic_names) or 'none'}",
                                  *layout.notes,
                                  *([f"NVLink SHARP {'on' if gen.nvls else 'off'}: default "
                                     f"for {gen.name}"] if layout.nvswitch else [])))),
        ("nodes", nodes, "the dump shows one node: set how many the cluster has"),
        ("gpu", {"model": gen.gpu_sxm if layout.has_nvlink else gen.gpu_pcie},
         f"architecture {gen_how}; the exact model is not in the dump"),
    ]
    nvlink = _nvlink_entry(layout, gen)
    if nvlink is not None:
        entries.append(nvlink)
    entries += [
        ("pcie", _figure(pcie or gen.pcie_bytes_per_s, PCIE_HOP_LATENCY_S),
         (f"{format_bandwidth(pcie)} stated by the dump" if pcie else
          f"default {gen.pcie_name} ({gen_how})") + "; latency default, NCCL's PCI hop / 2"),
        _cpu_entry(layout, gen, gen_how),
        ("nic", {"model": gen.nic_name if not nic else "imported NIC",
                 "count": len(layout.nic_names), "bandwidth": nic or gen.nic_bytes_per_s,
                 "latency": NIC_LATENCY_S},
         (f"{format_bandwidth(nic)} stated by the dump" if nic else
          f"speed not in the dump: default {gen.nic_name} ({gen_how})")
         + "; latency default (ConnectX: half of sub-600 ns)"),
        ("fabric", {"kind": "fat-tree"},
         "not in the dump: default non-blocking fat-tree (or import ibnetdiscover output)"),
    ]
    if not layout.nic_names:
        entries = [e for e in entries if e[0] != "nic"]
    return entries


def cluster_spec(layout: NodeLayout, *, nodes: int = 1) -> dict[str, Any]:
    """The cluster mapping (what :func:`~topology.cluster.build_cluster` takes)."""
    return {key: value for key, value, _ in cluster_entries(layout, nodes=nodes)}


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    return text.removesuffix("\n...\n").strip()  # a bare scalar ends its "document"


def comment_text(text: str) -> str:
    """``text`` safe inside a one-line YAML comment: control characters, line breaks
    (YAML counts U+0085, U+2028 and U+2029 as breaks too) and every other non-ASCII
    character escaped as JSON escapes them."""
    return json.dumps(str(text))[1:-1]


def cluster_yaml(layout: NodeLayout, *, nodes: int = 1) -> str:
    """The cluster file's text: a header, then one entry per line with its comment."""
    lines = [f"# Cluster imported by `distsim topology import` from "
             f"{comment_text(layout.source)}",
             f"# ({layout.kind}).  Figures the dump states are used as stated; every other "
             "one is a",
             "# default named in its comment.  Bandwidths in bytes/s per direction, "
             "latencies in s.",
             "# Edit freely: this is an ordinary cluster file (nodes, fabric, any figure)."]
    for key, value, comment in cluster_entries(layout, nodes=nodes):
        if comment:
            lines.extend(textwrap.wrap(f"{key}: {comment}", 94, initial_indent="# ",
                                       subsequent_indent="#   "))
        if key == "node":
            lines.append("node:")
            lines.extend(f"  {k}: {_flow(v)}" for k, v in value.items())
        else:
            lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"
