"""Clusters: a node preset x a node count x a fabric, every figure overridable — or a custom
cluster written out device by device.

Two spec forms, as Python mappings or YAML files (read with ``yaml.safe_load`` only):

* preset form::

      preset: dgx-h100          # a node preset (topology.list_presets() names them all)
      nodes: 4
      fabric: {kind: fat-tree, oversubscription: 2}   # or just "rail-optimized"
      nic: {bandwidth: 200 Gbps}
      nvlink: {bandwidth: 450 GB/s, latency: 0.3 us}

  ``nvlink_domain`` (NVSwitch presets: GPUs per NVLink domain, a whole number of the
  preset's boards — 8 for an HGX box, 4 for a GB200 tray; :mod:`topology.domain`; a node
  is one domain, so the cluster has ``nodes x nvlink_domain`` GPUs), groups ``gpu``
  {model}, ``nvlink`` / ``pcie`` / ``cpu`` {bandwidth, latency} (``cpu`` is
  the inter-socket link), ``nic`` {model, count, bandwidth, latency}, ``fabric`` {kind,
  oversubscription, nics_per_leaf, spines, link_bandwidth, link_latency, switch_latency,
  sharp} (``sharp: true``: the switches aggregate in the network, InfiniBand SHARP);
  the ``switch`` preset takes ``gpus``, ``link_bandwidth``, ``link_latency`` instead.

  Fabric kinds and the keys each takes besides kind, link_bandwidth, link_latency,
  switch_latency (the registry :mod:`topology.fabrics` holds them; the ``fabric`` group is
  read by :mod:`topology.cluster_fabric`): ``single-switch``; ``fat-tree`` and
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
  hash_seed}; default ecmp over whatever shortest paths the links offer); read by
  :mod:`topology.cluster_custom`.

Every key is checked against this schema and a wrong one is named by its dotted path
(``fabric.oversubscription``, ``links[3].dst``) with the closest valid key; YAML files add
the line.  Bandwidths and durations are numbers (SI) or unit strings (``"200 Gbps"``,
``"1 us"``), parsed once here by :mod:`simcore.units`.  The built :class:`Topology` carries
the fully resolved configuration (``Topology.config``: every default filled in, SI floats)
which :func:`build_cluster` accepts back to build the same cluster.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from typing import Any

from distsim_gpu.simcore.config import (
    check_choice,
    check_keys,
    check_mapping,
    describe,
    parse_assignment,
    path_key,
    set_path,
)
from distsim_gpu.simcore.errors import ConfigError, DistsimError, closest
from distsim_gpu.simcore.yamlfile import line_of, read_yaml
from distsim_gpu.topology.cluster_custom import build_custom
from distsim_gpu.topology.cluster_fabric import (
    DEFAULT_FABRIC,
    fabric_routing,
    fabric_sharp,
    parse_fabric,
    routing_config,
    sharp_switches,
)
from distsim_gpu.topology.domain import with_domain
from distsim_gpu.topology.fabric_spec import FabricSpec
from distsim_gpu.topology.fabrics import build_fabric
from distsim_gpu.topology.model import Device, Link, Topology
from distsim_gpu.topology.node_shape import node_config, parse_node
from distsim_gpu.topology.preset_registry import PRESETS
from distsim_gpu.topology.presets import (
    LinkFigure,
    NodePreset,
    SwitchPreset,
    build_node,
    build_switch_node,
)
from distsim_gpu.topology.routing import RoutingSpec
from distsim_gpu.topology.spec_values import (
    MAX_GPUS,
    MAX_NODES,
    MAX_NVLINK_DOMAIN,
    read_bandwidth,
    read_count,
    read_latency,
    read_string,
)

__all__ = ["apply_overrides", "build_cluster", "list_presets", "load_cluster"]

_BOX_KEYS = ("preset", "name", "nodes", "nvlink_domain", "gpu", "nvlink", "pcie", "cpu", "nic",
             "fabric")
_SWITCH_KEYS = ("preset", "name", "nodes", "gpus", "link_bandwidth", "link_latency")
_FIGURE_KEYS = ("bandwidth", "latency")
_GPU_KEYS = ("model",)
_NIC_KEYS = ("model", "count", "bandwidth", "latency")


def list_presets() -> dict[str, str]:
    """Preset names with a one-line description each, for CLI help (a fresh dict)."""
    return {name: preset.description for name, preset in PRESETS.items()}


def _figure(value: object, default: LinkFigure, group: str,
            source: str | None) -> LinkFigure:
    if value is None:
        return default
    mapping = check_mapping(value, key=group, source=source)
    check_keys(mapping, _FIGURE_KEYS, prefix=group, source=source)
    return LinkFigure(
        read_bandwidth(mapping.get("bandwidth", default.bandwidth_bytes_per_s),
                       f"{group}.bandwidth", source),
        read_latency(mapping.get("latency", default.latency_s), f"{group}.latency", source),
    )


def _figure_config(figure: LinkFigure) -> dict[str, float]:
    return {"bandwidth": figure.bandwidth_bytes_per_s, "latency": figure.latency_s}


# --------------------------------------------------------------------------- presets


def _build_box(spec: Mapping[Any, Any], preset: NodePreset, source: str | None, *,
               written_out: bool = False) -> Topology:
    """A preset cluster; ``written_out``: the node is the file's ``node:``, not a preset."""
    if preset.nvlink is None and "nvlink" in spec:
        raise ConfigError(f"preset {preset.name!r} has no NVLink to configure", key="nvlink",
                          source=source, hint="its GPUs talk over PCIe: set pcie.bandwidth")
    valid = tuple("node" if k == "preset" and written_out else k for k in _BOX_KEYS
                  if k != "nvlink" or preset.nvlink is not None)
    check_keys(spec, valid, source=source, context=f" for preset {preset.name!r}")
    nodes = read_count(spec.get("nodes", 1), "nodes", source, minimum=1, maximum=MAX_NODES)
    if "nvlink_domain" in spec:
        preset = with_domain(preset, read_count(spec["nvlink_domain"], "nvlink_domain", source,
                                                minimum=1, maximum=MAX_NVLINK_DOMAIN),
                             source=source)
    if nodes * preset.gpus > MAX_GPUS:
        raise ConfigError(f"{nodes:,} nodes of {preset.gpus} GPUs are {nodes * preset.gpus:,} "
                          f"GPUs, more than distsim builds ({MAX_GPUS:,})", key="nodes",
                          source=source)

    gpu_model = _box_gpu_model(spec, preset, source)
    nvlink = (_figure(spec.get("nvlink"), preset.nvlink, "nvlink", source)
              if preset.nvlink is not None else None)
    pcie = _figure(spec.get("pcie"), preset.pcie, "pcie", source)
    cpu = _figure(spec.get("cpu"), preset.cpu, "cpu", source)
    nic_model, nic_count, layout, nic = _box_nic(spec, preset, source, written_out)
    fabric = parse_fabric(spec.get("fabric", DEFAULT_FABRIC), nic.bandwidth_bytes_per_s,
                          preset, source)
    technology, routing = fabric_routing(spec.get("fabric"), preset, source)
    sharp = fabric_sharp(spec.get("fabric"), source)

    devices, links = _box_nodes(nodes, preset, layout, nvlink, pcie, cpu)
    nics = [[f"n{node}.nic{j}" for j in range(len(layout))] for node in range(nodes)]
    built = build_fabric(fabric, nics, nic_bandwidth_bytes_per_s=nic.bandwidth_bytes_per_s,
                         nic_latency_s=nic.latency_s)
    devices.extend(sharp_switches(built.devices) if sharp else built.devices)
    links.extend(built.links)

    name = read_string(spec.get("name", f"{preset.name} x{nodes} {fabric.kind}"), "name", source)
    shape = {"node": node_config(preset)} if written_out else {"preset": preset.name}
    domain = {"nvlink_domain": preset.gpus} if "nvlink_domain" in spec else {}
    config: dict[str, Any] = {"name": name, **shape, "nodes": nodes, **domain,
                              "gpu": {"model": gpu_model}}
    if nvlink is not None:
        config["nvlink"] = _figure_config(nvlink)
    config["pcie"] = _figure_config(pcie)
    config["cpu"] = _figure_config(cpu)
    config["nic"] = {"model": nic_model, "count": nic_count, **_figure_config(nic)}
    config["fabric"] = _fabric_config(fabric, built.config, technology, routing, sharp)
    return Topology(name, devices, links, config=config, routing=routing)


def _box_gpu_model(spec: Mapping[Any, Any], preset: NodePreset, source: str | None) -> str:
    """``gpu`` (a model name or {model}): the GPU model, by default the preset's."""
    gpu = spec.get("gpu", {})
    if isinstance(gpu, str):
        gpu = {"model": gpu}
    gpu = check_mapping(gpu, key="gpu", source=source)
    check_keys(gpu, _GPU_KEYS, prefix="gpu", source=source)
    return read_string(gpu.get("model", preset.gpu_model), "gpu.model", source)


def _box_nic(spec: Mapping[Any, Any], preset: NodePreset, source: str | None,
             written_out: bool = False) -> tuple[str, int, tuple[int, ...], LinkFigure]:
    """``nic``: the NICs' model, count per node, layout over the node, and link figure;
    ``written_out``: the node is the file's ``node:``, whose NICs ``nic_pcie_switch`` lists
    (its error then names that key, not a preset the file never named)."""
    nic_spec = check_mapping(spec.get("nic", {}), key="nic", source=source)
    check_keys(nic_spec, _NIC_KEYS, prefix="nic", source=source)
    nic_model = read_string(nic_spec.get("model", preset.nic_model), "nic.model", source)
    nic_count = read_count(nic_spec.get("count", preset.nic_counts[0]), "nic.count", source,
                           minimum=1)
    layout = preset.nic_layout(nic_count)
    if layout is None and written_out:
        slots = preset.nic_counts[0]
        raise ConfigError(
            f"nic.count is {nic_count} but node.nic_pcie_switch places {slots} NIC(s) a node",
            key="nic.count", source=source,
            hint=f"give node.nic_pcie_switch {nic_count} entries (the PCIe switch of each NIC),"
                 f" or nic.count {slots}")
    if layout is None:
        raise ConfigError(
            f"preset {preset.name!r} cannot have {nic_count} NICs per node", key="nic.count",
            source=source, hint="valid: " + ", ".join(str(n) for n in preset.nic_counts))
    nic = LinkFigure(
        read_bandwidth(nic_spec.get("bandwidth", preset.nic.bandwidth_bytes_per_s),
                       "nic.bandwidth", source),
        read_latency(nic_spec.get("latency", preset.nic.latency_s), "nic.latency", source),
    )
    if "model" not in nic_spec and nic.bandwidth_bytes_per_s != preset.nic.bandwidth_bytes_per_s:
        # A what-if's rate on the preset's NIC: its product name alone would read as the
        # rate the run did not use (a "200Gb/s" part carrying 800 Gb/s).
        nic_model += f" (run at {nic.bandwidth_bytes_per_s * 8 / 1e9:.4g} Gb/s)"
    return nic_model, nic_count, layout, nic


def _box_nodes(nodes: int, preset: NodePreset, layout: tuple[int, ...],
               nvlink: LinkFigure | None, pcie: LinkFigure,
               cpu: LinkFigure) -> tuple[list[Device], list[Link]]:
    """The devices and links of ``nodes`` nodes of ``preset``, node by node."""
    devices: list[Device] = []
    links: list[Link] = []
    for node in range(nodes):
        node_devices, node_links = build_node(node, preset, nic_layout=layout, nvlink=nvlink,
                                              pcie=pcie, cpu=cpu)
        devices.extend(node_devices)
        links.extend(node_links)
    return devices, links


def _fabric_config(fabric: FabricSpec, built: Mapping[str, Any], technology: str,
                   routing: RoutingSpec, sharp: bool) -> dict[str, Any]:
    """The resolved ``fabric`` a preset cluster records (every default filled in)."""
    fabric_config: dict[str, Any] = {
        "kind": fabric.kind,
        "link_bandwidth": fabric.link_bandwidth_bytes_per_s,
        "link_latency": fabric.link_latency_s,
        "switch_latency": fabric.switch_latency_s,
    }
    fabric_config.update(built)  # the kind's own figures, derived ones resolved
    fabric_config.update(technology=technology, **routing_config(routing), sharp=sharp)
    return fabric_config


def _build_switch(spec: Mapping[Any, Any], preset: SwitchPreset,
                  source: str | None) -> Topology:
    check_keys(spec, _SWITCH_KEYS, source=source, context=f" for preset {preset.name!r}")
    nodes = read_count(spec.get("nodes", 1), "nodes", source, minimum=1)
    if nodes != 1:
        raise ConfigError(f"preset {preset.name!r} is a single node, got nodes={nodes}",
                          key="nodes", source=source,
                          hint="set gpus for more GPUs, or use a box preset for many nodes")
    gpus = read_count(spec.get("gpus", preset.gpus), "gpus", source, minimum=1)
    link = LinkFigure(
        read_bandwidth(spec.get("link_bandwidth", preset.link.bandwidth_bytes_per_s),
                       "link_bandwidth", source),
        read_latency(spec.get("link_latency", preset.link.latency_s), "link_latency", source),
    )
    name = read_string(spec.get("name", f"{preset.name} x{gpus}"), "name", source)
    devices, links = build_switch_node(gpus, link)
    config = {"name": name, "preset": preset.name, "nodes": 1, "gpus": gpus,
              "link_bandwidth": link.bandwidth_bytes_per_s, "link_latency": link.latency_s}
    return Topology(name, devices, links, config=config)


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
            return build_custom(mapping, source)
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
        got = "an empty file" if data is None else describe(data)
        raise ConfigError(f"a cluster file holds a mapping, got {got}", source=path,
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
