"""Custom clusters: a cluster written out device by device and link by link.

The custom form of a cluster spec (:mod:`topology.cluster`): ``devices`` (list of {name,
kind, node?, index?, sharp?}; ``sharp`` marks a switch that reduces in the network),
``links`` (list of {src, dst, bandwidth, latency?, kind, duplex?}; ``duplex`` defaults to
true, one cable = two directed links) and ``routing`` (a policy name, or {policy,
qps_per_connection, hash_seed}; default ecmp over whatever shortest paths the links
offer).  Every entry is checked, errors name it by its index (``links[3].dst``), and the
result must join every GPU to every other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from distsim_gpu.simcore.config import check_bool, check_choice, check_keys, check_mapping, describe
from distsim_gpu.simcore.errors import ConfigError, TopologyError, closest
from distsim_gpu.topology.cluster_fabric import custom_routing
from distsim_gpu.topology.model import DEVICE_KINDS, LINK_KINDS, Device, Link, Topology
from distsim_gpu.topology.spec_values import (
    read_bandwidth,
    read_count,
    read_latency,
    read_string,
)

__all__ = ["CUSTOM_KEYS", "build_custom"]

#: The keys of a custom cluster spec.
CUSTOM_KEYS = ("name", "devices", "links", "routing")
_DEVICE_KEYS = ("name", "kind", "node", "index", "sharp")
_LINK_KEYS = ("src", "dst", "bandwidth", "latency", "kind", "duplex")
# Custom clusters up to this many GPUs are checked pair by pair; larger ones GPU by GPU
# against the first GPU (both directions), which keeps loading linear.
_ALL_PAIRS_CHECK_MAX_GPUS = 64


def _sequence(value: object, key: str, source: str | None) -> Sequence[Any]:
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"expected a list, got {describe(value)}", key=key, source=source)
    return value


def build_custom(spec: Mapping[Any, Any], source: str | None) -> Topology:
    """The :class:`Topology` a custom cluster spec describes."""
    check_keys(spec, CUSTOM_KEYS, source=source, context=" for a custom cluster")
    if "devices" not in spec:
        raise ConfigError("a custom cluster needs a 'devices' list", key="devices",
                          source=source)
    raw_devices = _sequence(spec["devices"], "devices", source)
    raw_links = _sequence(spec.get("links", []), "links", source)
    devices, first_at = _parse_devices(raw_devices, source)
    links, link_config = _parse_links(raw_links, first_at, source)

    name = read_string(spec.get("name", "custom"), "name", source)
    routing = custom_routing(spec.get("routing", "ecmp"), source)
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


def _parse_devices(raw_devices: Sequence[Any],
                   source: str | None) -> tuple[list[Device], dict[str, int]]:
    """The devices, and each name's entry index (for duplicate and link-end errors)."""
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
        name = read_string(entry["name"], f"{at}.name", source)
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
            node = read_count(node, f"{at}.node", source, minimum=0)
        elif kind != "switch":
            raise ConfigError(f"a {kind} must belong to a node (node: 0, 1, …)",
                              key=f"{at}.node", source=source)
        if "index" in entry:
            index = read_count(entry["index"], f"{at}.index", source, minimum=0)
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
    return devices, first_at


def _parse_links(raw_links: Sequence[Any], first_at: Mapping[str, int],
                 source: str | None) -> tuple[list[Link], list[dict[str, Any]]]:
    """The directed links (two per duplex entry) and each entry as the config records it."""
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
        bandwidth = read_bandwidth(entry["bandwidth"], f"{at}.bandwidth", source)
        latency = read_latency(entry.get("latency", 0.0), f"{at}.latency", source)
        duplex = check_bool(entry.get("duplex", True), key=f"{at}.duplex", source=source)
        for a, b in ((src, dst), (dst, src)) if duplex else ((src, dst),):
            if (a, b) in link_at:
                raise ConfigError(f"link {a} -> {b} is already given by links[{link_at[a, b]}]",
                                  key=at, source=source)
            link_at[(a, b)] = i
            links.append(Link(a, b, bandwidth, latency, kind))
        link_config.append({"src": src, "dst": dst, "bandwidth": bandwidth,
                            "latency": latency, "kind": kind, "duplex": duplex})
    return links, link_config


def _check_reachable(topology: Topology) -> None:
    """Every GPU must reach every other; route() raises TopologyError naming both GPUs."""
    gpus = topology.gpus
    if len(gpus) <= _ALL_PAIRS_CHECK_MAX_GPUS:
        pairs: Iterable[tuple[str, str]] = ((a, b) for a in gpus for b in gpus)
    else:
        pairs = ((a, b) for g in gpus[1:] for a, b in ((gpus[0], g), (g, gpus[0])))
    for a, b in pairs:
        topology.route(a, b)

