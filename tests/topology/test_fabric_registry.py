"""The fabric registry: one entry per kind carries its builder, keys, shape parser and doc;
a kind registered from outside the package is built, checked and named like a built-in."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.fabric_spec import Fabric, FabricSpec, attach_nic, switches
from distsim_gpu.topology.fabrics import (
    COMMON_KEYS,
    FABRIC_ALIASES,
    FABRIC_KINDS,
    FABRICS,
    FabricKind,
    fabric_aliases,
    register_fabric,
    unregister_fabric,
)
from distsim_gpu.topology.presets import NodePreset
from distsim_gpu.topology.spec_values import read_string


@dataclass(frozen=True, slots=True)
class HubShape:
    """The toy kind's one figure: its switch's name."""

    switch: str = "hub"


def _parse_hub(mapping: Mapping[Any, Any], preset: NodePreset, source: str | None) -> HubShape:
    return HubShape(read_string(mapping.get("switch", "hub"), "fabric.switch", source))


def _build_hub(spec: FabricSpec, nics: Sequence[Sequence[str]], *,
               nic_bandwidth_bytes_per_s: float, nic_latency_s: float) -> Fabric:
    """Every NIC cabled to one switch."""
    assert isinstance(spec.shape, HubShape)
    name = spec.shape.switch
    port = min(nic_bandwidth_bytes_per_s, spec.link_bandwidth_bytes_per_s)
    links = [link for node in nics for nic in node
             for link in attach_nic(nic, name, port, nic_latency_s, spec)]
    return Fabric(tuple(switches([name])), tuple(links), {"switch": name})


@pytest.fixture
def hub() -> Iterator[FabricKind]:
    kind = register_fabric(FabricKind("hub", "every NIC on one named switch", _build_hub,
                                      ("switch",), _parse_hub, aliases=("star",)))
    try:
        yield kind
    finally:
        unregister_fabric("hub")


def test_a_registered_kind_builds_a_cluster(hub: FabricKind) -> None:
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2,
                          "fabric": {"kind": "star", "switch": "core"}})
    assert [d.name for d in topo.devices() if d.kind == "switch"] == ["core"]
    assert topo.config["fabric"]["kind"] == "hub"
    assert topo.config["fabric"]["switch"] == "core"
    route = topo.route("n0.gpu0", "n1.gpu0")
    assert "core" in route.devices
    # The resolved configuration builds the same cluster again.
    again = build_cluster(topo.config)
    assert sorted(link.id for link in again.links()) == sorted(link.id for link in topo.links())


def test_a_registered_kind_checks_its_keys_and_is_named_in_errors(hub: FabricKind) -> None:
    with pytest.raises(ConfigError) as info:
        build_cluster({"preset": "dgx-h100", "nodes": 2,
                       "fabric": {"kind": "hub", "swich": "core"}})
    assert info.value.key == "fabric.swich"
    assert "for fabric 'hub'" in str(info.value) and "did you mean 'switch'?" in str(info.value)
    with pytest.raises(ConfigError, match="did you mean 'hub'"):
        build_cluster({"preset": "dgx-h100", "fabric": "hubb"})


def test_unregistering_removes_the_kind() -> None:
    register_fabric(FabricKind("hub", "every NIC on one named switch", _build_hub,
                               parse_shape=_parse_hub))
    unregister_fabric("hub")
    assert "hub" not in FABRICS
    with pytest.raises(ConfigError, match="unknown fabric kind 'hub'"):
        build_cluster({"preset": "dgx-h100", "fabric": "hub"})


def test_names_and_aliases_are_unique(hub: FabricKind) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_fabric(FabricKind("hub", "again", _build_hub))
    with pytest.raises(ValueError, match="already registered"):
        register_fabric(FabricKind("other", "an alias taken", _build_hub, aliases=("star",)))


def test_the_built_in_table() -> None:
    assert FABRIC_KINDS == ("single-switch", "fat-tree", "three-tier", "rail-optimized",
                            "multi-plane", "superpod", "dragonfly")
    assert dict(FABRIC_ALIASES) == {"leaf-spine": "fat-tree", "leaf-spine-core": "three-tier",
                                    "dual-plane": "multi-plane"}
    assert fabric_aliases() == dict(FABRIC_ALIASES)
    for kind in FABRICS.values():
        assert kind.doc and kind.allowed_keys[:len(COMMON_KEYS)] == COMMON_KEYS
