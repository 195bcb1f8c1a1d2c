"""Topology.node_legs: a route's links inside nodes, found without walking the fabric.

It must be exactly the in-node part of :meth:`Topology.route` for every GPU pair and rail,
on every preset and fabric (and around faults), or None where a route is not shaped as
GPU -> NIC -> fabric -> NIC -> GPU; the iteration's TP-exclusivity check relies on it.
"""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import TopologyError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.faults import apply_faults, faults_from_list
from hypothesis import given, settings
from hypothesis import strategies as st

PRESETS = ["dgx-a100", "dgx-h100", "pcie-8gpu", "dgx1-v100", "mi300x", "quad-gh200"]
FABRICS = ["fat-tree", "rail-optimized", "three-tier", "single-switch", "multi-plane",
           "dragonfly"]


def in_node_part(topo, src, dst, rail):
    return tuple(link for link in topo.route(src, dst, rail=rail).links
                 if topo.device(link[0]).node is not None
                 and topo.device(link[0]).node == topo.device(link[1]).node)


@settings(max_examples=40, deadline=None)
@given(preset=st.sampled_from(PRESETS), kind=st.sampled_from(FABRICS),
       routing=st.sampled_from(["dmodk", "adaptive", "ecmp"]), data=st.data())
def test_node_legs_are_the_routes_links_inside_nodes(preset, kind, routing, data):
    topo = build_cluster({"preset": preset, "nodes": 4,
                          "fabric": {"kind": kind, "routing": routing}})
    gpus = topo.gpus
    src = data.draw(st.sampled_from(gpus))
    dst = data.draw(st.sampled_from(gpus))
    rail = data.draw(st.one_of(st.none(), st.integers(0, 9)))
    legs = topo.node_legs(src, dst, rail=rail)
    assert legs is not None  # every preset is nodes with NICs
    assert legs == in_node_part(topo, src, dst, rail)
    assert all(topo.in_node(link) for link in legs)


def test_an_inter_node_route_has_two_legs_and_a_fabric_part():
    """DGX A100 on a rail-optimized fabric: GPU -> PCIe switch -> NIC on each side; the
    NIC -> leaf hops are the fabric's, not legs."""
    topo = build_cluster({"preset": "dgx-a100", "nodes": 4, "fabric": "rail-optimized"})
    src, dst = topo.gpus_on_node(0)[0], topo.gpus_on_node(3)[5]
    route = topo.route(src, dst, rail=2)
    legs = topo.node_legs(src, dst, rail=2)
    assert legs == in_node_part(topo, src, dst, 2)
    assert legs[0][0] == src and legs[-1][1] == dst
    assert 0 < len(legs) < len(route.links)
    fabric = [link for link in route.links if link not in legs]
    assert fabric and not any(topo.in_node(link) for link in fabric)


def test_inside_one_node_the_legs_are_the_whole_route():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2, "fabric": "fat-tree"})
    a, b = topo.gpus_on_node(1)[:2]
    assert topo.node_legs(a, b) == topo.route(a, b).links
    assert topo.node_legs(a, a) == ()


def test_a_lost_nic_remaps_the_legs_as_the_route_does():
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": "fat-tree"})
    nic = topo.nics_on_node(0)[0]
    down = [{"target": "nic", "name": nic, "kind": "down"}]
    hurt = apply_faults(topo, faults_from_list(down, topo))
    src, dst = hurt.gpus_on_node(0)[0], hurt.gpus_on_node(1)[0]
    legs = hurt.node_legs(src, dst, rail=0)
    assert legs == in_node_part(hurt, src, dst, 0)
    assert all(nic not in link for link in legs)


def test_a_fabric_device_is_not_a_gpu():
    topo = build_cluster({"preset": "dgx-a100", "nodes": 2, "fabric": "fat-tree"})
    switch = next(d.name for d in topo.devices() if d.kind == "switch")
    with pytest.raises(TopologyError):
        topo.node_legs(switch, topo.gpus[0])
