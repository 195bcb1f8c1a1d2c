"""Clusters: a node preset x a node count x a fabric, every figure overridable — or a custom
cluster written out device by device.

Two spec forms, as Python mappings or YAML files (read with ``yaml.safe_load`` only):

* preset form::

      preset: dgx-h100          # a node preset (topology.list_presets() names them all)
      nodes: 4
      fabric: {kind: fat-tree, oversubscription: 2}   # or just "rail-optimized"
      nic: {bandwidth: 200 Gbps}
      nvlink: {bandwidth: 450 GB/s, latency: 0.3 us}

  groups ``gpu`` {model}, ``nvlink`` / ``pcie`` / ``cpu`` {bandwidth, latency} (``cpu`` is
  the inter-socket link), ``nic`` {model, count, bandwidth, latency}, ``fabric`` {kind,
  oversubscription, nics_per_leaf, spines, link_bandwidth, link_latency, switch_latency,
  sharp} (``sharp: true``: the switches aggregate in the network, InfiniBand SHARP);
  the ``switch`` preset takes ``gpus``, ``link_bandwidth``, ``link_latency`` instead.

  Fabric kinds and the keys each takes besides kind, link_bandwidth, link_latency,
  switch_latency (see :mod:`topology.fabrics`): ``single-switch``; ``fat-tree`` and
  ``rail-optimized`` {oversubscription, nics_per_leaf, spines}; ``three-tier``
  {nics_per_leaf, leaf_oversubscription, spine_oversubscription, leaves_per_pod,
  spines_per_pod, cores_per_plane}; ``multi-plane`` {planes, and per plane the
  rail-optimized keys}; ``superpod`` {generation: a100 or h100, by default the preset's};
  ``dragonfly`` {groups, routers_per_group, nics_per_router, global_links_per_router,
  local_link_bandwidth, global_link_bandwidth, nic_placement: rails or nodes}. Every kind
  also takes how it routes (:mod:`topology.routing`): ``technology`` (infiniband, the
  presets' default, or ethernet), ``routing`` (dmodk, adaptive, ecmp, spray, valiant or
  ugal; by default dmodk on InfiniBand, ecmp on Ethernet), ``qps_per_connection`` and
  ``hash_seed`` (ECMP's knobs).

* node form: the preset form with ``node:`` (the shape written out, see
  :mod:`topology.node_shape`) in place of ``preset:``, as ``distsim topology import``
  writes it from a machine's ``nvidia-smi topo -m`` or NCCL topology dump.

* custom form: ``devices`` (list of {name, kind, node?, index?, sharp?}; ``sharp`` marks a
  switch that reduces in the network) and ``links`` (list of
  {src, dst, bandwidth, latency?, kind, duplex?}; ``duplex`` defaults to true, one cable =
  two directed links); ``routing`` (a policy name, or {policy, qps_per_connection,
  hash_seed}; default ecmp over whatever shortest paths the links offer).

Every key is checked against this schema and a wrong one is named by its dotted path
(``fabric.oversubscription``, ``links[3].dst``) with the closest valid key; YAML files add
the line.  Bandwidths and durations are numbers (SI) or unit strings (``"200 Gbps"``,
``"1 us"``), parsed once here by :mod:`simcore.units`.  The built :class:`Topology` carries
the fully resolved configuration (``Topology.config``: every default filled in, SI floats)
which :func:`build_cluster` accepts back to build the same cluster.
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_whole,
    describe,
    parse_assignment,
    path_key,
    set_path,
)
from distsim_gpu.simcore.errors import ConfigError, DistsimError, TopologyError, closest
from distsim_gpu.simcore.units import parse_bandwidth, parse_duration
from distsim_gpu.simcore.yamlfile import line_of, read_yaml
from distsim_gpu.topology.fabric_dragonfly import NIC_PLACEMENTS
from distsim_gpu.topology.fabric_superpod import GENERATIONS, PRESET_GENERATION
from distsim_gpu.topology.fabrics import (
    FABRIC_ALIASES,
    FABRIC_KINDS,
    DragonflyShape,
    FabricSpec,
    MultiPlaneShape,
    SuperPodShape,
    ThreeTierShape,
    build_fabric,
)
from distsim_gpu.topology.model import DEVICE_KINDS, LINK_KINDS, Device, Link, Topology
from distsim_gpu.topology.node_shape import node_config, parse_node
from distsim_gpu.topology.presets import (
    PRESETS,
    LinkFigure,
    NodePreset,
    SwitchPreset,
    build_node,
    build_switch_node,
)
from distsim_gpu.topology.routing import DEFAULT_POLICY, POLICIES, TECHNOLOGIES, RoutingSpec

__all__ = ["apply_overrides", "build_cluster", "list_presets", "load_cluster"]

DEFAULT_FABRIC = "fat-tree"
# 32 NICs per leaf: a 64-port switch (Quantum QM8700 40 ports HDR / Quantum-2 QM9700 64 ports
# NDR) with half its ports down and half up at 1:1, and the 32-node "scalable unit" of a
# DGX SuperPOD rail-optimized fabric.
DEFAULT_NICS_PER_LEAF = 32

_BOX_KEYS = ("preset", "name", "nodes", "gpu", "nvlink", "pcie", "cpu", "nic", "fabric")
_SWITCH_KEYS = ("preset", "name", "nodes", "gpus", "link_bandwidth", "link_latency")
_CUSTOM_KEYS = ("name", "devices", "links", "routing")
_FIGURE_KEYS = ("bandwidth", "latency")
_GPU_KEYS = ("model",)
_NIC_KEYS = ("model", "count", "bandwidth", "latency")
# How the fabric routes (topology.routing): every fabric kind takes these.
_ROUTING_KEYS = ("technology", "routing", "qps_per_connection", "hash_seed")
_CUSTOM_ROUTING_KEYS = ("policy", "qps_per_connection", "hash_seed")
_FABRIC_COMMON = ("kind", "link_bandwidth", "link_latency", "switch_latency", *_ROUTING_KEYS,
                  "sharp")
_FABRIC_TIERED = (*_FABRIC_COMMON, "oversubscription", "nics_per_leaf", "spines")
_FABRIC_KEYS = {
    "single-switch": _FABRIC_COMMON, "fat-tree": _FABRIC_TIERED,
    "rail-optimized": _FABRIC_TIERED,
    "three-tier": (*_FABRIC_COMMON, "nics_per_leaf", "leaf_oversubscription",
                   "spine_oversubscription", "leaves_per_pod", "spines_per_pod",
                   "cores_per_plane"),
    "multi-plane": (*_FABRIC_TIERED, "planes"),
    "superpod": (*_FABRIC_COMMON, "generation"),
    "dragonfly": (*_FABRIC_COMMON, "groups", "routers_per_group", "nics_per_router",
                  "global_links_per_router", "local_link_bandwidth", "global_link_bandwidth",
                  "nic_placement"),
}
_DEVICE_KEYS = ("name", "kind", "node", "index", "sharp")
_LINK_KEYS = ("src", "dst", "bandwidth", "latency", "kind", "duplex")
# Custom clusters up to this many GPUs are checked pair by pair; larger ones GPU by GPU
# against the first GPU (both directions), which keeps loading linear.
_ALL_PAIRS_CHECK_MAX_GPUS = 64


def list_presets() -> dict[str, str]:
    """Preset names with a one-line description each, for CLI help (a fresh dict)."""
    return {name: preset.description for name, preset in PRESETS.items()}


# --------------------------------------------------------------------------- values


#: Nodes a cluster may have: 16,384 (131,072 GPUs in 8-GPU boxes), past the largest
#: training clusters built (about 100,000 GPUs).  The bound is there so that a typo
#: (``nodes: 1.0e+30``, ``--nodes 100000``) is an error instead of an endless build.
MAX_NODES = 16_384
#: Any other count in a cluster spec (GPUs of a switch node, spines, NICs per leaf, ...).
MAX_COUNT = 2**20


def _int(value: object, key: str, source: str | None, *, minimum: int,
         maximum: int = MAX_COUNT) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # YAML's 4.0 is the count 4
    return check_whole(value, key=key, minimum=minimum, maximum=maximum, source=source,
                       too_big="more than distsim builds")


#: Planes a multi-plane fabric may have: NICs split into at most this many ports.
MAX_PLANES = 16

_RATIO = re.compile(r"^\s*([0-9.eE+-]+)\s*:\s*([0-9.eE+-]+)\s*$")


def _ratio(value: object, key: str, source: str | None) -> float:
    """A ratio >= 1 from a number or an ``"N:M"`` string (``"2:1"``)."""
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        match = _RATIO.match(value)
        try:
            number = (float(match.group(1)) / float(match.group(2)) if match
                      else float(value))
        except (ValueError, ZeroDivisionError):
            number = None
    if number is None or not math.isfinite(number) or number < 1:
        raise ConfigError(f"oversubscription must be a ratio >= 1, got {value!r}", key=key,
                          source=source, hint='e.g. 1 (non-blocking), 2 or "2:1"')
    return number


def _string(value: object, key: str, source: str | None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"expected a non-empty string, got {describe(value)}", key=key,
                          source=source)
    return value


def _bandwidth(value: object, key: str, source: str | None) -> float:
    return parse_bandwidth(value, key=key, source=source)


def _latency(value: object, key: str, source: str | None) -> float:
    return parse_duration(value, key=key, source=source)


def _figure(value: object, default: LinkFigure, group: str,
            source: str | None) -> LinkFigure:
    if value is None:
        return default
    mapping = check_mapping(value, key=group, source=source)
    check_keys(mapping, _FIGURE_KEYS, prefix=group, source=source)
    return LinkFigure(
        _bandwidth(mapping.get("bandwidth", default.bandwidth_bytes_per_s),
                   f"{group}.bandwidth", source),
        _latency(mapping.get("latency", default.latency_s), f"{group}.latency", source),
    )


def _figure_config(figure: LinkFigure) -> dict[str, float]:
    return {"bandwidth": figure.bandwidth_bytes_per_s, "latency": figure.latency_s}


# --------------------------------------------------------------------------- routing


def _routing_spec(mapping: Mapping[Any, Any], technology: str, prefix: str,
                  source: str | None, *, policy_key: str = "routing") -> RoutingSpec:
    """The routing a fabric mapping asks for; the policy defaults by ``technology``."""
    policy = check_choice(mapping.get(policy_key, DEFAULT_POLICY[technology]), POLICIES,
                          key=f"{prefix}.{policy_key}", source=source, what="routing policy")
    return RoutingSpec(
        policy,
        qps_per_connection=_int(mapping.get("qps_per_connection", 1),
                                f"{prefix}.qps_per_connection", source, minimum=1),
        hash_seed=_int(mapping.get("hash_seed", 0), f"{prefix}.hash_seed", source, minimum=0,
                       maximum=2**63 - 1),
    )


def _fabric_routing(value: object, preset: NodePreset,
                    source: str | None) -> tuple[str, RoutingSpec]:
    """The technology and routing of a preset cluster's ``fabric`` (a kind or a mapping)."""
    mapping = value if isinstance(value, Mapping) else {}
    technology = check_choice(mapping.get("technology", preset.fabric_technology),
                              TECHNOLOGIES, key="fabric.technology", source=source,
                              what="fabric technology")
    return technology, _routing_spec(mapping, technology, "fabric", source)


def _custom_routing(value: object, source: str | None) -> RoutingSpec:
    """A custom cluster's ``routing``: a policy name or {policy, qps_per_connection,
    hash_seed}; ECMP over whatever shortest paths exist unless stated."""
    if isinstance(value, str):
        value = {"policy": value}
    mapping = check_mapping(value, key="routing", source=source)
    check_keys(mapping, _CUSTOM_ROUTING_KEYS, prefix="routing", source=source)
    return _routing_spec(mapping, "ethernet", "routing", source, policy_key="policy")


def _routing_config(spec: RoutingSpec) -> dict[str, Any]:
    return {"routing": spec.policy, "qps_per_connection": spec.qps_per_connection,
            "hash_seed": spec.hash_seed}


def _fabric_sharp(value: object, source: str | None) -> bool:
    """``fabric.sharp``: whether the fabric's switches aggregate (InfiniBand SHARP), which
    the CollNet collectives need (NCCL with the SHARP plugin, NCCL_COLLNET_ENABLE=1)."""
    mapping = value if isinstance(value, Mapping) else {}
    return check_bool(mapping.get("sharp", False), key="fabric.sharp", source=source)


def _sharp_switches(devices: Iterable[Device]) -> list[Device]:
    """The fabric's devices with every switch marked as reducing in the network."""
    return [replace(d, sharp=True) if d.kind == "switch" else d for d in devices]


# --------------------------------------------------------------------------- presets


def _fabric_spec(value: object, nic_bandwidth: float, preset: NodePreset,
                 source: str | None) -> FabricSpec:
    key_of_kind = "fabric"
    if isinstance(value, str):
        value = {"kind": value}
    else:
        key_of_kind = "fabric.kind"
    mapping = check_mapping(value, key="fabric", source=source)
    raw_kind = check_choice(mapping.get("kind", DEFAULT_FABRIC),
                            (*FABRIC_KINDS, *FABRIC_ALIASES), key=key_of_kind, source=source,
                            what="fabric kind")
    kind = FABRIC_ALIASES.get(raw_kind, raw_kind)
    check_keys(mapping, _FABRIC_KEYS[kind], prefix="fabric", source=source,
               context=f" for fabric {kind!r}")
    shape = _fabric_shape(kind, mapping, preset, source)
    link_bandwidth = _bandwidth(mapping.get("link_bandwidth", _port_default(shape, nic_bandwidth)),
                                "fabric.link_bandwidth", source)
    link_latency = _latency(mapping.get("link_latency", preset.cable_latency_s),
                            "fabric.link_latency", source)
    switch_latency = _latency(mapping.get("switch_latency", preset.switch_latency_s),
                              "fabric.switch_latency", source)
    if kind in ("single-switch", "superpod", "dragonfly"):
        return FabricSpec(kind, link_bandwidth, link_latency, switch_latency, shape=shape)
    # The leaf tier's ratio: "oversubscription" in two-tier kinds, named per tier in three.
    ratio_key = "leaf_oversubscription" if kind == "three-tier" else "oversubscription"
    return FabricSpec(
        kind, link_bandwidth, link_latency, switch_latency,
        oversubscription=_ratio(mapping.get(ratio_key, 1.0), f"fabric.{ratio_key}", source),
        nics_per_leaf=_int(mapping.get("nics_per_leaf", DEFAULT_NICS_PER_LEAF),
                           "fabric.nics_per_leaf", source, minimum=1),
        spines=_optional_int(mapping, "spines", source, minimum=0),
        shape=shape,
    )


def _optional_int(mapping: Mapping[Any, Any], name: str, source: str | None, *,
                  minimum: int) -> int | None:
    value = mapping.get(name)
    return None if value is None else _int(value, f"fabric.{name}", source, minimum=minimum)


def _fabric_shape(kind: str, mapping: Mapping[Any, Any], preset: NodePreset,
                  source: str | None
                  ) -> ThreeTierShape | MultiPlaneShape | SuperPodShape | DragonflyShape | None:
    """The figures of the kinds that need more than the leaf tier's (fabric_spec)."""
    if kind == "three-tier":
        return ThreeTierShape(
            _ratio(mapping.get("spine_oversubscription", 1.0), "fabric.spine_oversubscription",
                   source),
            leaves_per_pod=_optional_int(mapping, "leaves_per_pod", source, minimum=1),
            spines_per_pod=_optional_int(mapping, "spines_per_pod", source, minimum=0),
            cores_per_plane=_optional_int(mapping, "cores_per_plane", source, minimum=0))
    if kind == "multi-plane":
        planes = _int(mapping.get("planes", 2), "fabric.planes", source, minimum=1)
        if planes > MAX_PLANES:  # each plane is a whole fabric: bound what a file can ask
            raise ConfigError(f"{planes} planes is more than a NIC has ports for "
                              f"(at most {MAX_PLANES})", key="fabric.planes", source=source,
                              hint="multi-plane designs use 2 to 8 planes")
        return MultiPlaneShape(planes)
    if kind == "superpod":
        generation = mapping.get("generation", PRESET_GENERATION.get(preset.name))
        if generation is None:
            raise ConfigError(f"preset {preset.name!r} has no DGX SuperPOD design: say which "
                              "one", key="fabric.generation", source=source,
                              hint="valid: " + ", ".join(GENERATIONS))
        return SuperPodShape(check_choice(generation, GENERATIONS, key="fabric.generation",
                                          source=source, what="SuperPOD generation"))
    if kind == "dragonfly":
        return _dragonfly_shape(mapping, source)
    return None


def _dragonfly_shape(mapping: Mapping[Any, Any], source: str | None) -> DragonflyShape:
    default = DragonflyShape()

    def bandwidth(name: str) -> float | None:
        value = mapping.get(name)
        return None if value is None else _bandwidth(value, f"fabric.{name}", source)

    return DragonflyShape(
        groups=_optional_int(mapping, "groups", source, minimum=1),
        routers_per_group=_int(mapping.get("routers_per_group", default.routers_per_group),
                               "fabric.routers_per_group", source, minimum=1),
        nics_per_router=_int(mapping.get("nics_per_router", default.nics_per_router),
                             "fabric.nics_per_router", source, minimum=1),
        global_links_per_router=_int(
            mapping.get("global_links_per_router", default.global_links_per_router),
            "fabric.global_links_per_router", source, minimum=0),
        local_link_bandwidth_bytes_per_s=bandwidth("local_link_bandwidth"),
        global_link_bandwidth_bytes_per_s=bandwidth("global_link_bandwidth"),
        nic_placement=check_choice(mapping.get("nic_placement", default.nic_placement),
                                   NIC_PLACEMENTS, key="fabric.nic_placement", source=source,
                                   what="NIC placement"))


def _port_default(shape: object, nic_bandwidth: float) -> float:
    """A fabric port's bandwidth unless given: the NIC's, split over the planes of a
    multi-plane fabric, the published port speed of a SuperPOD generation."""
    if isinstance(shape, MultiPlaneShape):
        return nic_bandwidth / shape.planes
    if isinstance(shape, SuperPodShape):
        return GENERATIONS[shape.generation].port_bytes_per_s
    return nic_bandwidth


def _build_box(spec: Mapping[Any, Any], preset: NodePreset, source: str | None, *,
               written_out: bool = False) -> Topology:
    """A preset cluster; ``written_out``: the node is the file's ``node:``, not a preset."""
    if preset.nvlink is None and "nvlink" in spec:
        raise ConfigError(f"preset {preset.name!r} has no NVLink to configure", key="nvlink",
                          source=source, hint="its GPUs talk over PCIe: set pcie.bandwidth")
    valid = tuple("node" if k == "preset" and written_out else k for k in _BOX_KEYS
                  if k != "nvlink" or preset.nvlink is not None)
    check_keys(spec, valid, source=source, context=f" for preset {preset.name!r}")
    nodes = _int(spec.get("nodes", 1), "nodes", source, minimum=1, maximum=MAX_NODES)

    gpu = spec.get("gpu", {})
    if isinstance(gpu, str):
        gpu = {"model": gpu}
    gpu = check_mapping(gpu, key="gpu", source=source)
    check_keys(gpu, _GPU_KEYS, prefix="gpu", source=source)
    gpu_model = _string(gpu.get("model", preset.gpu_model), "gpu.model", source)

    nvlink = (_figure(spec.get("nvlink"), preset.nvlink, "nvlink", source)
              if preset.nvlink is not None else None)
    pcie = _figure(spec.get("pcie"), preset.pcie, "pcie", source)
    cpu = _figure(spec.get("cpu"), preset.cpu, "cpu", source)

    nic_spec = check_mapping(spec.get("nic", {}), key="nic", source=source)
    check_keys(nic_spec, _NIC_KEYS, prefix="nic", source=source)
    nic_model = _string(nic_spec.get("model", preset.nic_model), "nic.model", source)
    nic_count = _int(nic_spec.get("count", preset.nic_counts[0]), "nic.count", source,
                     minimum=1)
    layout = preset.nic_layout(nic_count)
    if layout is None:
        raise ConfigError(
            f"preset {preset.name!r} cannot have {nic_count} NICs per node", key="nic.count",
            source=source, hint="valid: " + ", ".join(str(n) for n in preset.nic_counts))
    nic = LinkFigure(
        _bandwidth(nic_spec.get("bandwidth", preset.nic.bandwidth_bytes_per_s),
                   "nic.bandwidth", source),
        _latency(nic_spec.get("latency", preset.nic.latency_s), "nic.latency", source),
    )
    fabric = _fabric_spec(spec.get("fabric", DEFAULT_FABRIC), nic.bandwidth_bytes_per_s,
                          preset, source)
    technology, routing = _fabric_routing(spec.get("fabric"), preset, source)
    sharp = _fabric_sharp(spec.get("fabric"), source)

    devices: list[Device] = []
    links: list[Link] = []
    for node in range(nodes):
        node_devices, node_links = build_node(node, preset, nic_layout=layout, nvlink=nvlink,
                                              pcie=pcie, cpu=cpu)
        devices.extend(node_devices)
        links.extend(node_links)
    nics = [[f"n{node}.nic{j}" for j in range(len(layout))] for node in range(nodes)]
    built = build_fabric(fabric, nics, nic_bandwidth_bytes_per_s=nic.bandwidth_bytes_per_s,
                         nic_latency_s=nic.latency_s)
    devices.extend(_sharp_switches(built.devices) if sharp else built.devices)
    links.extend(built.links)

    fabric_config: dict[str, Any] = {
        "kind": fabric.kind,
        "link_bandwidth": fabric.link_bandwidth_bytes_per_s,
        "link_latency": fabric.link_latency_s,
        "switch_latency": fabric.switch_latency_s,
    }
    fabric_config.update(built.config)  # the kind's own figures, derived ones resolved
    fabric_config.update(technology=technology, **_routing_config(routing), sharp=sharp)
    name = _string(spec.get("name", f"{preset.name} x{nodes} {fabric.kind}"), "name", source)
    shape = {"node": node_config(preset)} if written_out else {"preset": preset.name}
    config: dict[str, Any] = {"name": name, **shape, "nodes": nodes,
                              "gpu": {"model": gpu_model}}
    if nvlink is not None:
        config["nvlink"] = _figure_config(nvlink)
    config["pcie"] = _figure_config(pcie)
    config["cpu"] = _figure_config(cpu)
    config["nic"] = {"model": nic_model, "count": nic_count, **_figure_config(nic)}
    config["fabric"] = fabric_config
    return Topology(name, devices, links, config=config, routing=routing)


def _build_switch(spec: Mapping[Any, Any], preset: SwitchPreset,
                  source: str | None) -> Topology:
    check_keys(spec, _SWITCH_KEYS, source=source, context=f" for preset {preset.name!r}")
    nodes = _int(spec.get("nodes", 1), "nodes", source, minimum=1)
    if nodes != 1:
        raise ConfigError(f"preset {preset.name!r} is a single node, got nodes={nodes}",
                          key="nodes", source=source,
                          hint="set gpus for more GPUs, or use a box preset for many nodes")
    gpus = _int(spec.get("gpus", preset.gpus), "gpus", source, minimum=1)
    link = LinkFigure(
        _bandwidth(spec.get("link_bandwidth", preset.link.bandwidth_bytes_per_s),
                   "link_bandwidth", source),
        _latency(spec.get("link_latency", preset.link.latency_s), "link_latency", source),
    )
    name = _string(spec.get("name", f"{preset.name} x{gpus}"), "name", source)
    devices, links = build_switch_node(gpus, link)
    config = {"name": name, "preset": preset.name, "nodes": 1, "gpus": gpus,
              "link_bandwidth": link.bandwidth_bytes_per_s, "link_latency": link.latency_s}
    return Topology(name, devices, links, config=config)


# --------------------------------------------------------------------------- custom


def _sequence(value: object, key: str, source: str | None) -> Sequence[Any]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"expected a list, got {describe(value)}", key=key, source=source)
    return value


def _build_custom(spec: Mapping[Any, Any], source: str | None) -> Topology:
    check_keys(spec, _CUSTOM_KEYS, source=source, context=" for a custom cluster")
    if "devices" not in spec:
        raise ConfigError("a custom cluster needs a 'devices' list", key="devices",
                          source=source)
    raw_devices = _sequence(spec["devices"], "devices", source)
    raw_links = _sequence(spec.get("links", []), "links", source)

    devices: list[Device] = []
    first_at: dict[str, int] = {}
    slot_at: dict[tuple[int | None, str, int], int] = {}
    next_index: dict[tuple[int | None, str], int] = {}
    for i, raw in enumerate(raw_devices):
        at = f"devices[{i}]"
        entry = check_mapping(raw, key=at, source=source)
        check_keys(entry, _DEVICE_KEYS, prefix=at, source=source)
        for required in ("name", "kind"):
            if required not in entry:
                raise ConfigError(f"device has no {required!r}", key=at, source=source)
        name = _string(entry["name"], f"{at}.name", source)
        kind = check_choice(entry["kind"], DEVICE_KINDS, key=f"{at}.kind", source=source,
                            what="device kind")
        if name in first_at:
            raise TopologyError(f"duplicate device name {name!r} (first at "
                                f"devices[{first_at[name]}])", key=f"{at}.name",
                                source=source)
        first_at[name] = i
        # Fabric switches belong to no node; everything else defaults to node 0, so a
        # single box can be written without node numbers.
        node = entry.get("node", None if kind == "switch" else 0)
        if node is not None:
            node = _int(node, f"{at}.node", source, minimum=0)
        elif kind != "switch":
            raise ConfigError(f"a {kind} must belong to a node (node: 0, 1, …)",
                              key=f"{at}.node", source=source)
        if "index" in entry:
            index = _int(entry["index"], f"{at}.index", source, minimum=0)
        else:
            index = next_index.get((node, kind), 0)
        next_index[(node, kind)] = max(next_index.get((node, kind), 0), index + 1)
        slot = (node, kind, index)
        if slot in slot_at:
            raise ConfigError(f"{kind} index {index} on node {node} is taken by "
                              f"devices[{slot_at[slot]}]", key=f"{at}.index", source=source)
        slot_at[slot] = i
        sharp = check_bool(entry.get("sharp", False), key=f"{at}.sharp", source=source)
        if sharp and kind not in ("nvswitch", "switch"):
            raise ConfigError(f"a {kind} cannot reduce in the network", key=f"{at}.sharp",
                              source=source, hint="sharp applies to kinds nvswitch and switch")
        devices.append(Device(name, kind, node, index, sharp))

    links: list[Link] = []
    link_config: list[dict[str, Any]] = []
    link_at: dict[tuple[str, str], int] = {}
    for i, raw in enumerate(raw_links):
        at = f"links[{i}]"
        entry = check_mapping(raw, key=at, source=source)
        check_keys(entry, _LINK_KEYS, prefix=at, source=source)
        for required in ("src", "dst", "bandwidth", "kind"):
            if required not in entry:
                raise ConfigError(f"link has no {required!r}", key=at, source=source)
        ends = []
        for end in ("src", "dst"):
            name = entry[end]
            if not isinstance(name, str) or name not in first_at:
                raise TopologyError(f"link end {name!r} is not a device", key=f"{at}.{end}",
                                    source=source, hint=closest(str(name), first_at))
            ends.append(name)
        src, dst = ends
        if src == dst:
            raise ConfigError(f"link joins {src!r} to itself", key=at, source=source)
        kind = check_choice(entry["kind"], LINK_KINDS, key=f"{at}.kind", source=source,
                            what="link kind")
        bandwidth = _bandwidth(entry["bandwidth"], f"{at}.bandwidth", source)
        latency = _latency(entry.get("latency", 0.0), f"{at}.latency", source)
        duplex = check_bool(entry.get("duplex", True), key=f"{at}.duplex", source=source)
        for a, b in ((src, dst), (dst, src)) if duplex else ((src, dst),):
            if (a, b) in link_at:
                raise ConfigError(f"link {a} -> {b} is already given by links[{link_at[a, b]}]",
                                  key=at, source=source)
            link_at[(a, b)] = i
            links.append(Link(a, b, bandwidth, latency, kind))
        link_config.append({"src": src, "dst": dst, "bandwidth": bandwidth,
                            "latency": latency, "kind": kind, "duplex": duplex})

    name = _string(spec.get("name", "custom"), "name", source)
    routing = _custom_routing(spec.get("routing", "ecmp"), source)
    config = {
        "name": name,
        "devices": [{"name": d.name, "kind": d.kind, "node": d.node, "index": d.index,
                     **({"sharp": True} if d.sharp else {})} for d in devices],
        "links": link_config,
        "routing": {"policy": routing.policy, "qps_per_connection": routing.qps_per_connection,
                    "hash_seed": routing.hash_seed},
    }
    topology = Topology(name, devices, links, config=config, routing=routing)
    if not topology.gpus:
        raise TopologyError("a cluster needs at least one GPU", key="devices", source=source)
    _check_reachable(topology)
    return topology


def _check_reachable(topology: Topology) -> None:
    """Every GPU must reach every other; route() raises TopologyError naming both GPUs."""
    gpus = topology.gpus
    if len(gpus) <= _ALL_PAIRS_CHECK_MAX_GPUS:
        pairs: Iterable[tuple[str, str]] = ((a, b) for a in gpus for b in gpus)
    else:
        pairs = ((a, b) for g in gpus[1:] for a, b in ((gpus[0], g), (g, gpus[0])))
    for a, b in pairs:
        topology.route(a, b)


# --------------------------------------------------------------------------- entry points


def build_cluster(spec: Mapping[str, Any], *, source: str | None = None) -> Topology:
    """The :class:`Topology` a cluster spec describes (preset form or custom form).

    ``source`` (a file name) is put on every error.  Raises ConfigError / ParseError /
    TopologyError naming the dotted key that is wrong.
    """
    try:
        mapping = check_mapping(spec, key=None, source=source)
        if "preset" in mapping:
            preset = PRESETS[check_choice(mapping["preset"], PRESETS, key="preset",
                                          source=source)]
            if isinstance(preset, SwitchPreset):
                return _build_switch(mapping, preset, source)
            return _build_box(mapping, preset, source)
        if "node" in mapping:  # a node written out (topology.node_shape), not a preset
            return _build_box(mapping, parse_node(mapping["node"], source=source), source,
                              written_out=True)
        if "devices" in mapping or "links" in mapping:
            return _build_custom(mapping, source)
        raise ConfigError(
            "a cluster needs 'preset' (a node preset) or 'devices' and 'links' (custom)",
            source=source, hint="presets: " + ", ".join(PRESETS))
    except DistsimError as error:
        if error.source is None and source is not None:
            error.source = source
        raise


def _parse_override(item: object, source: str) -> tuple[str, object]:
    if isinstance(item, str):
        return parse_assignment(item, source=source)
    if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str):
        return item[0].strip(), item[1]
    raise ConfigError(f"override {item!r} is neither 'KEY=VALUE' nor (key, value)",
                      source=source)


# A group written as a bare string is shorthand for its main key.
_SHORTHAND = {"fabric": "kind", "gpu": "model", "routing": "policy"}


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return copy.copy(value)


def apply_overrides(spec: Mapping[str, Any],
                    overrides: Iterable[str] | Iterable[tuple[str, object]], *,
                    source: str = "--set") -> dict[str, Any]:
    """A copy of ``spec`` with dotted-path overrides applied (``spec`` is not changed).

    Each override is ``"nic.bandwidth=200 Gbps"`` (the value read as YAML, so ``2`` is a
    number, ``true`` a bool, ``200 Gbps`` stays a string) or a ``(path, value)`` pair;
    paths may index lists (``links.3.bandwidth`` or ``links[3].bandwidth``).  Values are
    validated when the result is built (:func:`build_cluster`); only the paths are checked
    here (:func:`simcore.config.set_path`).
    """
    result = _plain(spec)
    if not isinstance(result, dict):
        raise ConfigError(f"expected a mapping to override, got {describe(spec)}",
                          source=source)
    for item in overrides:
        path, value = _parse_override(item, source)
        set_path(result, path, value, source=source, shorthand=_SHORTHAND)
    return result


def _read_cluster_file(path: str) -> tuple[dict[str, Any], dict[str, int]]:
    data, lines = read_yaml(path, "cluster")
    if not isinstance(data, dict):
        raise ConfigError(f"a cluster file holds a mapping, got {describe(data)}", source=path,
                          hint="e.g. 'preset: dgx-a100' and 'nodes: 2', or 'devices:' and "
                               "'links:'")
    return data, lines


def load_cluster(preset_or_path: str | os.PathLike[str], *, nodes: int | None = None,
                 overrides: Iterable[str] | Iterable[tuple[str, object]] = ()) -> Topology:
    """A cluster from a preset name or a YAML file, with ``nodes`` and overrides applied.

    Errors name the file, the dotted key and, for keys read from the file, its line;
    errors in an override name ``--set`` as their source.
    """
    name = os.fspath(preset_or_path)
    lines: dict[str, int] = {}
    source: str | None = None
    if name in PRESETS:
        spec: dict[str, Any] = {"preset": name}
    elif os.path.isfile(name):
        source = name
        spec, lines = _read_cluster_file(name)
    else:
        raise ConfigError(f"no preset or cluster file named {name!r}",
                          hint=closest(name, PRESETS) + "; or give the path of a YAML file")
    if nodes is not None:
        if "preset" not in spec and "node" not in spec:
            raise ConfigError("nodes applies to preset clusters, not custom ones",
                              key="nodes", source=source)
        spec["nodes"] = nodes
    overrides = list(overrides)
    overridden = [path_key(_parse_override(item, "--set")[0]) for item in overrides]
    if overrides:
        spec = apply_overrides(spec, overrides)
    try:
        return build_cluster(spec, source=source)
    except DistsimError as error:
        key = error.key or ""
        if any(key == p or key.startswith((p + ".", p + "[")) for p in overridden):
            error.source, error.line = "--set", None
        elif (error.line is None and error.source == source
              and not (nodes is not None and key == "nodes")):
            error.line = line_of(key, lines)
        raise
