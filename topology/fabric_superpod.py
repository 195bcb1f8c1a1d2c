"""DGX SuperPOD compute fabrics: rail-optimized scalable units joined by spines (and cores).

A SuperPOD is built from *scalable units* (SUs): a fixed number of DGX nodes whose NIC *i*
(rail *i*) all plug into the SU's leaf switch of rail *i*, so same-rail traffic inside an
SU crosses one switch.  Each leaf has as many uplinks as downlinks (non-blocking).  Up to
a generation's two-tier limit every leaf joins every spine; beyond it each SU becomes a pod
with its own spines, and spine *s* of every SU joins core plane *s*.  Every switch has the
generation's radix (ports), and each tier is sized by its port count:

* spines (two tiers) = ``SUs * rails * nodes_per_SU / radix``;
* spines per SU (three tiers) = ``rails * nodes_per_SU / (radix / 2)``, cores per plane =
  ``SUs * (radix / 2) / radix``.

Figures and where they come from:

* ``a100`` — NVIDIA DGX SuperPOD reference architecture with DGX A100 (RA-09950-001,
  2020): 20 DGX A100 per SU, 8 HDR leaf switches per SU (one per rail), HDR InfiniBand at
  200 Gb/s; the reference design stops at 7 SUs (140 nodes).  Switches: NVIDIA Quantum
  QM8790, 40 HDR ports (datasheet), so a leaf has 20 ports down and 20 up.  The RA groups
  the spine switches in spine groups; taken here as a non-blocking two-tier tree of
  40-port spines, 4 per SU (28 at 140 nodes): the leaf uplinks divided by the spine radix;
  from 6 SUs on there are more spines than a leaf's 20 uplinks, and each leaf cables one
  port to each of 20 spines, the leaves taking turns round them (every spine's 40 ports
  used).  An assumption where the RA's exact cabling is not reproduced: it has the RA's
  switch and port counts and a non-blocking bisection.
* ``h100`` — NVIDIA DGX SuperPOD reference architecture with DGX H100 (RA-11333-001) and
  its "larger SuperPOD component counts" table (repeated in the DGX B200 RA): 32 DGX H100
  per SU, 8 NDR leaf switches per SU (NVIDIA Quantum-2 QM9700, 64 NDR 400 Gb/s ports:
  32 down, 32 up); 2/4/8 SUs: 16/32/64 leaves and 8/16/32 spines, no core; 16/32/64 SUs:
  128/256/512 leaves, 128/256/512 spines and 64/128/256 cores — the counts the formulas
  above give.  Between 8 and 16 SUs (not in the table) the three-tier rule is used.

A partly filled last SU keeps its full set of leaves and cables, as the RAs require
("design the fabric to support the full SU and leave the missing nodes' ports unused").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology.fabric_clos import TreePlan, build_tree, rail_leaves
from distsim_gpu.topology.fabric_spec import Fabric, FabricSpec, SuperPodShape, attach_nic
from distsim_gpu.topology.presets import NodePreset

__all__ = ["GENERATIONS", "PRESET_GENERATION", "SuperPodGeneration", "build_superpod",
           "parse_superpod", "superpod_port"]


@dataclass(frozen=True, slots=True)
class SuperPodGeneration:
    """One SuperPOD generation's published building blocks."""

    name: str
    nodes_per_su: int
    port_bytes_per_s: float
    switch_ports: int
    max_two_tier_sus: int
    max_sus: int

    def sus(self, nodes: int) -> int:
        """The scalable units ``nodes`` nodes fill (the last one possibly in part)."""
        return math.ceil(nodes / self.nodes_per_su)


#: SuperPOD generations by name (read-only); figures in the module docstring.
GENERATIONS: Mapping[str, SuperPodGeneration] = MappingProxyType({
    "a100": SuperPodGeneration("a100", nodes_per_su=20, port_bytes_per_s=200e9 / 8,
                               switch_ports=40, max_two_tier_sus=7, max_sus=7),
    "h100": SuperPodGeneration("h100", nodes_per_su=32, port_bytes_per_s=400e9 / 8,
                               switch_ports=64, max_two_tier_sus=8, max_sus=64),
})
#: The generation a node preset's SuperPOD is, when the fabric does not say.
#: DGX H200 SuperPODs are cabled as the H100 generation's (the same chassis, ConnectX-7 NDR
#: ports and scalable units of 32 nodes: NVIDIA's DGX SuperPOD reference architecture for
#: DGX H100 and H200).
PRESET_GENERATION: Mapping[str, str] = MappingProxyType({"dgx-a100": "a100",
                                                         "dgx-h100": "h100",
                                                         "dgx-h200": "h100"})


def _plan(generation: SuperPodGeneration, sus: int, rails: int, port: float) -> TreePlan:
    down = generation.nodes_per_su  # each leaf: one port per node of its SU, as many up
    if sus <= generation.max_two_tier_sus:
        spines = math.ceil(sus * rails * down / generation.switch_ports)
        return TreePlan(sus * rails, down, port, spines=spines)
    half = generation.switch_ports // 2  # a spine: half its ports down, half up
    spines_per_su = math.ceil(rails * down / half)
    cores_per_plane = math.ceil(sus * half / generation.switch_ports)
    return TreePlan(sus * rails, down, port, spines=spines_per_su, leaves_per_pod=rails,
                    cores_per_plane=cores_per_plane)


def build_superpod(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
                   nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """The SuperPOD compute fabric joining ``nics`` (per node, in rail order)."""
    if not isinstance(spec.shape, SuperPodShape):
        raise ConfigError("a superpod fabric needs its generation", key="fabric.generation",
                          hint="valid: " + ", ".join(GENERATIONS))
    name = check_choice(spec.shape.generation, GENERATIONS, key="fabric.generation",
                        what="SuperPOD generation")
    generation = GENERATIONS[name]
    sus = generation.sus(len(nics))
    if sus > generation.max_sus:
        most = generation.max_sus * generation.nodes_per_su
        raise ConfigError(
            f"a DGX SuperPOD ({name}) holds at most {generation.max_sus} scalable units of "
            f"{generation.nodes_per_su} nodes ({most} nodes), got {len(nics)} nodes",
            key="fabric.kind", hint="use fewer nodes, or the three-tier or rail-optimized "
                                    "fabric for a larger cluster")
    leaf_of = rail_leaves(nics, generation.nodes_per_su)
    rails = max((len(node) for node in nics), default=0)
    tree = build_tree(_plan(generation, sus, rails, spec.link_bandwidth_bytes_per_s), spec)
    port = min(nic_bandwidth_bytes_per_s, spec.link_bandwidth_bytes_per_s)
    links = [link for nic, k in leaf_of.items()
             for link in attach_nic(nic, f"leaf{k}", port, nic_latency_s, spec)]
    return Fabric(tuple(tree.devices), (*links, *tree.links), {"generation": name})


def parse_superpod(mapping: Mapping[Any, Any], preset: NodePreset,
                   source: str | None) -> SuperPodShape:
    """A SuperPOD's generation: the one given, else the node preset's."""
    generation = mapping.get("generation", PRESET_GENERATION.get(preset.name))
    if generation is None:
        raise ConfigError(f"preset {preset.name!r} has no DGX SuperPOD design: say which "
                          "one", key="fabric.generation", source=source,
                          hint="valid: " + ", ".join(GENERATIONS))
    return SuperPodShape(check_choice(generation, GENERATIONS, key="fabric.generation",
                                      source=source, what="SuperPOD generation"))


def superpod_port(shape: object, nic_bandwidth_bytes_per_s: float) -> float:
    """A SuperPOD port's bandwidth unless given: its generation's published port speed."""
    assert isinstance(shape, SuperPodShape)
    return GENERATIONS[shape.generation].port_bytes_per_s
