"""Reading a cluster's network: the ``fabric`` group of a preset cluster and the ``routing``
of a custom one, into a :class:`FabricSpec` and a :class:`RoutingSpec`.

The fabric's kind, allowed keys and shape come from the registry (:mod:`topology.fabrics`);
what is read here is what every kind shares: the port figures, the leaf tier of the tree
kinds, how the fabric routes and whether its switches aggregate (SHARP).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from distsim_gpu.simcore.config import check_bool, check_choice, check_keys, check_mapping
from distsim_gpu.topology.fabrics import FabricSpec, fabric_kind
from distsim_gpu.topology.model import Device
from distsim_gpu.topology.presets import NodePreset
from distsim_gpu.topology.routing import (
    DEFAULT_POLICY,
    POLICIES,
    RoutingSpec,
    check_technology,
)
from distsim_gpu.topology.spec_values import (
    read_bandwidth,
    read_count,
    read_latency,
    read_optional_count,
    read_ratio,
)

__all__ = [
    "DEFAULT_FABRIC",
    "DEFAULT_NICS_PER_LEAF",
    "custom_routing",
    "fabric_routing",
    "fabric_sharp",
    "parse_fabric",
    "routing_config",
    "sharp_switches",
]

DEFAULT_FABRIC = "fat-tree"
# 32 NICs per leaf: a 64-port switch (Quantum QM8700 40 ports HDR / Quantum-2 QM9700 64 ports
# NDR) with half its ports down and half up at 1:1, and the 32-node "scalable unit" of a
# DGX SuperPOD rail-optimized fabric.
DEFAULT_NICS_PER_LEAF = 32

_CUSTOM_ROUTING_KEYS = ("policy", "qps_per_connection", "hash_seed")


def parse_fabric(value: object, nic_bandwidth: float, preset: NodePreset,
                 source: str | None) -> FabricSpec:
    """A preset cluster's ``fabric`` (a kind name or a mapping) as a :class:`FabricSpec`."""
    key_of_kind = "fabric"
    if isinstance(value, str):
        value = {"kind": value}
    else:
        key_of_kind = "fabric.kind"
    mapping = check_mapping(value, key="fabric", source=source)
    kind = fabric_kind(mapping.get("kind", DEFAULT_FABRIC), key=key_of_kind, source=source)
    check_keys(mapping, kind.allowed_keys, prefix="fabric", source=source,
               context=f" for fabric {kind.name!r}")
    shape = kind.parse_shape(mapping, preset, source)
    link_bandwidth = read_bandwidth(
        mapping.get("link_bandwidth", kind.port_default(shape, nic_bandwidth)),
        "fabric.link_bandwidth", source)
    link_latency = read_latency(mapping.get("link_latency", preset.cable_latency_s),
                                "fabric.link_latency", source)
    switch_latency = read_latency(mapping.get("switch_latency", preset.switch_latency_s),
                                  "fabric.switch_latency", source)
    if kind.leaf_ratio_key is None:
        return FabricSpec(kind.name, link_bandwidth, link_latency, switch_latency, shape=shape)
    ratio_key = kind.leaf_ratio_key
    return FabricSpec(
        kind.name, link_bandwidth, link_latency, switch_latency,
        oversubscription=read_ratio(mapping.get(ratio_key, 1.0), f"fabric.{ratio_key}",
                                    source),
        nics_per_leaf=read_count(mapping.get("nics_per_leaf", DEFAULT_NICS_PER_LEAF),
                                 "fabric.nics_per_leaf", source, minimum=1),
        spines=read_optional_count(mapping, "spines", source, minimum=0),
        shape=shape,
    )


def _routing_spec(mapping: Mapping[Any, Any], technology: str, prefix: str,
                  source: str | None, *, policy_key: str = "routing") -> RoutingSpec:
    """The routing a fabric mapping asks for; the policy defaults by ``technology``."""
    policy = check_choice(mapping.get(policy_key, DEFAULT_POLICY[technology]), POLICIES,
                          key=f"{prefix}.{policy_key}", source=source, what="routing policy")
    return RoutingSpec(
        policy,
        qps_per_connection=read_count(mapping.get("qps_per_connection", 1),
                                      f"{prefix}.qps_per_connection", source, minimum=1),
        hash_seed=read_count(mapping.get("hash_seed", 0), f"{prefix}.hash_seed", source,
                             minimum=0, maximum=2**63 - 1),
    )


def fabric_routing(value: object, preset: NodePreset,
                   source: str | None) -> tuple[str, RoutingSpec]:
    """The technology and routing of a preset cluster's ``fabric`` (a kind or a mapping)."""
    mapping = value if isinstance(value, Mapping) else {}
    technology = check_technology(mapping.get("technology", preset.fabric_technology),
                                  key="fabric.technology", source=source)
    return technology, _routing_spec(mapping, technology, "fabric", source)


def custom_routing(value: object, source: str | None) -> RoutingSpec:
    """A custom cluster's ``routing``: a policy name or {policy, qps_per_connection,
    hash_seed}; ECMP over whatever shortest paths exist unless stated."""
    if isinstance(value, str):
        value = {"policy": value}
    mapping = check_mapping(value, key="routing", source=source)
    check_keys(mapping, _CUSTOM_ROUTING_KEYS, prefix="routing", source=source)
    return _routing_spec(mapping, "ethernet", "routing", source, policy_key="policy")


def routing_config(spec: RoutingSpec) -> dict[str, Any]:
    """The routing figures a preset cluster's resolved ``fabric`` records."""
    return {"routing": spec.policy, "qps_per_connection": spec.qps_per_connection,
            "hash_seed": spec.hash_seed}


def fabric_sharp(value: object, source: str | None) -> bool:
    """``fabric.sharp``: whether the fabric's switches aggregate (InfiniBand SHARP), which
    the CollNet collectives need (NCCL with the SHARP plugin, NCCL_COLLNET_ENABLE=1)."""
    mapping = value if isinstance(value, Mapping) else {}
    return check_bool(mapping.get("sharp", False), key="fabric.sharp", source=source)


def sharp_switches(devices: Iterable[Device]) -> list[Device]:
    """The fabric's devices with every switch marked as reducing in the network."""
    return [replace(d, sharp=True) if d.kind == "switch" else d for d in devices]
