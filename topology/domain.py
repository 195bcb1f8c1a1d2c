"""The NVLink domain: how many GPUs share one NVSwitch fabric, as a parameter.

A distsim node is an NVLink domain — the GPUs that reach each other over NVLink; rails,
NCCL's ring search, folding and tensor-parallel placement all key off it.  A rack-scale
system (GB200 NVL72) is one node of 72 GPUs made of *boards* (compute trays of 4 GPUs and 2
Grace CPUs) under one switch system; an HGX box is one board of 8.  :func:`tile` builds a
node of ``copies`` identical boards; :func:`with_domain` rebuilds a preset's node with
another number of GPUs on NVLink (``nvlink_domain`` in a cluster file), so "what if the
domain were 72 — or 8?" is one key: each board keeps its own PCIe switches, sockets, NICs
and host, boards' sockets stay apart, and every GPU keeps its NVLink bandwidth (the switch
system is taken as non-blocking at any size, which the NVL72 and NVL576 designs are).
"""

from __future__ import annotations

import dataclasses

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology.presets import HostFigure, NodePreset

__all__ = ["board_gpus", "tile", "with_domain"]


def board_gpus(preset: NodePreset) -> int:
    """GPUs on one of the preset's boards (its tiling unit)."""
    return preset.gpus // preset.boards


def _first_board(preset: NodePreset) -> NodePreset:
    """The preset's first board as a one-board preset (boards are identical by build)."""
    gpus, switches = board_gpus(preset), len(preset.pcie_switch_cpu) // preset.boards
    layouts = tuple(layout[:len(layout) // preset.boards] for layout in preset.nic_layouts)
    host = preset.host
    if host is not None:
        host = dataclasses.replace(host, memory_bytes=host.memory_bytes / preset.boards,
                                   drives=host.drives // preset.boards)
    return dataclasses.replace(preset, gpu_pcie_switch=preset.gpu_pcie_switch[:gpus],
                               nic_layouts=layouts,
                               pcie_switch_cpu=preset.pcie_switch_cpu[:switches],
                               cpus=preset.cpus // preset.boards, boards=1, host=host)


def _scaled_host(host: HostFigure | None, copies: int) -> HostFigure | None:
    """A node's host is its boards' hosts together: memory and drives add up; one socket's
    memory bandwidth stays one socket's."""
    if host is None:
        return None
    return dataclasses.replace(host, memory_bytes=host.memory_bytes * copies,
                               drives=host.drives * copies)


def tile(board: NodePreset, copies: int, **fields: object) -> NodePreset:
    """A node of ``copies`` of the one-board preset ``board`` under its NVSwitch: board b's
    PCIe switches, NICs and sockets are numbered after board b-1's.  ``fields`` replace
    others (name, description, inventory...)."""
    switches, cpus = len(board.pcie_switch_cpu), board.cpus
    return dataclasses.replace(
        board,
        gpu_pcie_switch=tuple(k + b * switches for b in range(copies)
                              for k in board.gpu_pcie_switch),
        nic_layouts=tuple(tuple(k + b * switches for b in range(copies) for k in layout)
                          for layout in board.nic_layouts),
        pcie_switch_cpu=tuple(c + b * cpus for b in range(copies)
                              for c in board.pcie_switch_cpu),
        cpus=cpus * copies, boards=copies, host=_scaled_host(board.host, copies), **fields)


def with_domain(preset: NodePreset, gpus: int, *, key: str = "nvlink_domain",
                source: str | None = None) -> NodePreset:
    """``preset`` rebuilt with ``gpus`` GPUs per NVLink domain (a whole number of its
    boards); ConfigError where the preset has no NVSwitch to grow or shrink."""
    if gpus == preset.gpus:
        return preset
    if preset.nvlink is None or preset.mesh:
        shape = "no NVLink" if preset.nvlink is None else "GPUs cabled to each other (a mesh)"
        raise ConfigError(f"preset {preset.name!r} has {shape}: its NVLink domain is its "
                          f"{preset.gpus} GPUs and cannot change", key=key, source=source,
                          hint="nvlink_domain applies to NVSwitch presets (dgx-h100, "
                               "gb200-nvl72, ...)")
    unit = board_gpus(preset)
    if gpus < unit or gpus % unit:
        raise ConfigError(f"must be a multiple of the {unit} GPUs of one {preset.name} board, "
                          f"got {gpus}", key=key, source=source,
                          hint=_domain_examples(unit, preset.gpus))
    return tile(_first_board(preset), gpus // unit)


def _domain_examples(unit: int, own: int) -> str:
    """A hint of valid domain sizes: one board, two, and the preset's own size, each once
    (on an 8-GPU box one board is the preset's own)."""
    sizes = [f"{unit}", f"{2 * unit}"]
    if own == unit:
        sizes[0] += " (the preset's own)"
    elif own != 2 * unit:
        sizes.append(f"{own} (the preset's own)")
    else:
        sizes[1] += " (the preset's own)"
    return "e.g. " + ", ".join(sizes)
