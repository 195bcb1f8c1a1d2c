"""Every node preset by name: the boxes of :mod:`topology.presets`, the Blackwell and
rack-scale ones of :mod:`topology.presets_blackwell`, and the synthetic ``switch``."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from distsim_gpu.topology.presets import BOXES, SWITCH, NodePreset, SwitchPreset
from distsim_gpu.topology.presets_blackwell import BLACKWELL_BOXES

__all__ = ["NODE_PRESETS", "PRESETS"]

#: The presets made of real boxes and racks, by name (read-only).
NODE_PRESETS: Mapping[str, NodePreset] = MappingProxyType(
    {p.name: p for p in (*BOXES, *BLACKWELL_BOXES)})
#: Every preset by name, the synthetic ``switch`` included (read-only).
PRESETS: Mapping[str, NodePreset | SwitchPreset] = MappingProxyType(
    {**NODE_PRESETS, SWITCH.name: SWITCH})
