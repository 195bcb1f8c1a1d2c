"""A node's shape written out in a cluster file (``node:``), for boxes no preset describes.

A cluster file names a node preset (``preset: dgx-h100``) or, with ``node:``, states the
shape itself — what :class:`~topology.presets.NodePreset` holds — so that the rest of the
preset form (``nodes``, ``fabric``, the ``nvlink`` / ``pcie`` / ``cpu`` / ``nic`` figures)
works for it unchanged.  ``distsim topology import`` writes this form from a machine's own
topology dump (:mod:`topology.importers`)::

    node:
      gpu_pcie_switch: [0, 0, 1, 1]   # PCIe switch of each GPU (their count is the GPUs)
      nic_pcie_switch: [0, 1]         # PCIe switch of each NIC
      pcie_switch_cpu: [0, 1]         # CPU socket of each PCIe switch
      nvswitch: true                  # GPUs meet at an NVSwitch; or
      nvlink_pairs: [[0, 1, 2], ...]  # a mesh: GPU pairs cabled with this many links
      nvswitch_sharp: false           # the NVSwitch reduces in the switch (NVLS)
      technology: infiniband          # what the NICs speak (sets the fabric's routing)

A node with NVLink takes its figure from the cluster's ``nvlink`` key: per GPU's link to
the NVSwitch, or per single link of a mesh (as the presets do).  Figures not written take
the defaults below, each a published figure.
"""

from __future__ import annotations

from typing import Any

from distsim_gpu.simcore.config import check_bool, check_keys, check_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology.presets import (
    IB_SWITCH_LATENCY_S,
    INTER_SOCKET_LATENCY_S,
    NIC_LATENCY_S,
    NVLINK_HOP_LATENCY_S,
    PCIE_GEN4_X16_BYTES_PER_S,
    PCIE_HOP_LATENCY_S,
    LinkFigure,
    NodePreset,
)
from distsim_gpu.topology.routing import check_technology

__all__ = ["NODE_KEYS", "node_config", "parse_node"]

NODE_KEYS = ("gpu_pcie_switch", "nic_pcie_switch", "pcie_switch_cpu", "nvswitch",
             "nvlink_pairs", "nvswitch_sharp", "technology")

# The models are the cluster's gpu.model and nic.model keys; these stand in when unset.
_GPU_MODEL, _NIC_MODEL = "unknown GPU", "unknown NIC"
# Defaults of a written-out node, used only where the cluster file gives no figure:
# one NVLink (NVLink 2, 3 and 4 alike): 25 GB/s per direction (V100/A100/H100 white papers);
_NVLINK_LINK = LinkFigure(25e9, NVLINK_HOP_LATENCY_S)
# a GPU's links to an NVSwitch: an A100's twelve (A100 white paper);
_SWITCH_LINKS = 12
# PCIe Gen4 x16 (PCI Express Base Specification 4.0);
_PCIE = LinkFigure(PCIE_GEN4_X16_BYTES_PER_S, PCIE_HOP_LATENCY_S)
# one UPI 2.0 link at 16 GT/s, 2 bytes per transfer (4th Gen Xeon Scalable brief): a
# lower bound for two sockets, which have at least one;
_CPU = LinkFigure(16e9 * 2, INTER_SOCKET_LATENCY_S)
# InfiniBand HDR 200 Gb/s (ConnectX-6 datasheet).
_NIC = LinkFigure(200e9 / 8, NIC_LATENCY_S)


def _indices(value: object, key: str, source: str | None, *, what: str,
             below: int | None = None, empty: bool = False) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)) or (not value and not empty):
        raise ConfigError(f"expected a {'' if empty else 'non-empty '}list of {what} "
                          f"numbers, got {value!r}", key=key, source=source)
    result = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or item < 0 or (
                below is not None and item >= below):
            bound = f"0..{below - 1}" if below is not None else ">= 0"
            raise ConfigError(f"{what} number must be a whole number {bound}, got {item!r}",
                              key=f"{key}[{i}]", source=source)
        result.append(item)
    return tuple(result)


def _pairs(value: object, gpus: int, source: str | None) -> tuple[tuple[int, int, int], ...]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"expected a list of [gpu, gpu, links], got {value!r}",
                          key="node.nvlink_pairs", source=source)
    pairs: dict[tuple[int, int], int] = {}
    for i, item in enumerate(value):
        key = f"node.nvlink_pairs[{i}]"
        a, b, count = (_indices(item, key, source, what="GPU or link") if
                       isinstance(item, (list, tuple)) and len(item) == 3 else (None,) * 3)
        if a is None or b is None or count is None:
            raise ConfigError(f"expected [gpu, gpu, links], got {item!r}", key=key,
                              source=source)
        if a >= gpus or b >= gpus or a == b or count < 1:
            raise ConfigError(f"pair {list(item)} needs two different GPUs 0..{gpus - 1} "
                              "and at least one link", key=key, source=source)
        if (min(a, b), max(a, b)) in pairs:
            raise ConfigError(f"GPUs {a} and {b} are paired twice", key=key, source=source)
        pairs[(min(a, b), max(a, b))] = count
    return tuple((a, b, n) for (a, b), n in pairs.items())


def parse_node(value: object, *, source: str | None = None) -> NodePreset:
    """The :class:`NodePreset` a cluster file's ``node:`` mapping describes."""
    mapping = check_mapping(value, key="node", source=source)
    check_keys(mapping, NODE_KEYS, prefix="node", source=source)
    for required in ("gpu_pcie_switch", "pcie_switch_cpu"):
        if required not in mapping:
            raise ConfigError(f"a node needs {required!r}", key="node", source=source,
                              hint="see topology.node_shape, or write one with "
                                   "'distsim topology import'")
    cpus_of = _indices(mapping["pcie_switch_cpu"], "node.pcie_switch_cpu", source,
                       what="CPU")
    unused = sorted(set(range(max(cpus_of) + 1)) - set(cpus_of))
    if unused:  # (sockets with no switch would be built as CPUs joined to nothing)
        raise ConfigError(f"CPU {max(cpus_of)} is named but CPU(s) "
                          f"{', '.join(map(str, unused))} hold no PCIe switch",
                          key="node.pcie_switch_cpu", source=source,
                          hint="number the sockets 0 to N-1, e.g. [0, 0, 1, 1] for two")
    switches = len(cpus_of)
    gpus_at = _indices(mapping["gpu_pcie_switch"], "node.gpu_pcie_switch", source,
                       what="PCIe switch", below=switches)
    nics_at = _indices(mapping.get("nic_pcie_switch", [0]), "node.nic_pcie_switch", source,
                       what="PCIe switch", below=switches)
    nvswitch = check_bool(mapping.get("nvswitch", False), key="node.nvswitch", source=source)
    pairs = _pairs(mapping.get("nvlink_pairs", []), len(gpus_at), source)
    if nvswitch and pairs:
        raise ConfigError("a node has an NVSwitch or an NVLink mesh, not both",
                          key="node.nvlink_pairs", source=source)
    sharp = check_bool(mapping.get("nvswitch_sharp", False), key="node.nvswitch_sharp",
                       source=source)
    technology = check_technology(mapping.get("technology", "infiniband"),
                                  key="node.technology", source=source)
    has_nvlink = nvswitch or bool(pairs)
    return NodePreset(
        name="node", description="a node written out in the cluster file",
        gpu_model=_GPU_MODEL, nic_model=_NIC_MODEL,
        gpu_pcie_switch=gpus_at, nic_layouts=(nics_at,), pcie_switch_cpu=cpus_of,
        cpus=max(cpus_of) + 1,
        nvlink=(LinkFigure(_NVLINK_LINK.bandwidth_bytes_per_s * (1 if pairs else _SWITCH_LINKS),
                           _NVLINK_LINK.latency_s) if has_nvlink else None),
        pcie=_PCIE, cpu=_CPU, nic=_NIC, switch_latency_s=IB_SWITCH_LATENCY_S,
        gpu_links=pairs, fabric_technology=technology, nvswitch_sharp=sharp and nvswitch)


def node_config(preset: NodePreset) -> dict[str, Any]:
    """The ``node:`` mapping of a shape (what :func:`parse_node` reads back)."""
    config: dict[str, Any] = {
        "gpu_pcie_switch": list(preset.gpu_pcie_switch),
        "nic_pcie_switch": list(preset.nic_layouts[0]),
        "pcie_switch_cpu": list(preset.pcie_switch_cpu),
    }
    if preset.mesh:
        config["nvlink_pairs"] = [list(p) for p in preset.gpu_links]
    else:
        config["nvswitch"] = preset.nvlink is not None
        config["nvswitch_sharp"] = preset.nvswitch_sharp
    config["technology"] = preset.fabric_technology
    return config

