"""Ring channels on rails (collectives.rails): entry beside the NIC, PXN out, no socket."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, ring_channels
from distsim_gpu.collectives.catalog import build_plan
from distsim_gpu.collectives.rails import channel_rails, pxn_proxy
from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

CLUSTERS = {(preset, nodes): build_cluster({"preset": preset, "nodes": nodes})
            for preset in ("dgx-a100", "dgx-h100") for nodes in (2, 3)}


def _group(nodes: int, local: list[int]) -> list[str]:
    return [f"n{n}.gpu{g}" for n in range(nodes) for g in local]


def _socket_streams(topo, plan) -> float:
    return sum(count for step in plan.steps for link, count in step.link_streams.items()
               if topo.link(*link).kind == "cpu")


def test_h100_dp_ring_of_gpu0_and_gpu4_runs_one_channel_per_nic_beside_them():
    topo = CLUSTERS["dgx-h100", 2]
    channels = ring_channels(topo, _group(2, [0, 4]))
    assert channels == [
        (("n0.gpu0", "n0.gpu4", "n1.gpu0", "n1.gpu4"), (None, 0, None, 0)),
        (("n0.gpu4", "n0.gpu0", "n1.gpu4", "n1.gpu0"), (None, 4, None, 4)),
    ]


def test_a100_dp_ring_of_gpu0_and_gpu4_uses_the_four_nics_beside_them():
    topo = CLUSTERS["dgx-a100", 2]
    rails = [hops[1] for _, hops in ring_channels(topo, _group(2, [0, 4]))]
    assert rails == [0, 1, 4, 5]


def test_ring_hop_forwards_through_the_groups_gpu_beside_the_nic():
    topo = CLUSTERS["dgx-h100", 2]
    among = ["n0.gpu0", "n0.gpu4"]
    assert pxn_proxy(topo, "n0.gpu4", "n1.gpu0", rail=0, among=among) == "n0.gpu0"
    assert pxn_proxy(topo, "n0.gpu0", "n1.gpu0", rail=0, among=among) is None  # beside
    assert pxn_proxy(topo, "n0.gpu4", "n1.gpu0", rail=1, among=among) is None  # none beside
    assert pxn_proxy(topo, "n0.gpu4", "n0.gpu0", rail=0, among=among) is None  # same node


def test_channel_rails_per_node_where_the_group_sits_differently():
    topo = CLUSTERS["dgx-h100", 2]
    assert channel_rails(topo, {0: ["n0.gpu0"], 1: ["n1.gpu4"]}) == [{0: 0, 1: 4}]
    assert channel_rails(topo, {0: ["n0.gpu0", "n0.gpu4"], 1: ["n1.gpu0"]}) == [{0: 0, 1: 0}]


def test_without_pxn_the_ring_leaves_from_its_gpu_across_the_socket():
    """NCCL_PXN_DISABLE=1: the GPU far from the NIC reaches it over PCIe and the CPUs."""
    topo = CLUSTERS["dgx-h100", 2]
    group = _group(2, [0, 4])
    on = build_plan(topo, group, "all_reduce", algorithm="ring", protocol="simple",
                    params=CommParams())
    off = build_plan(topo, group, "all_reduce", algorithm="ring", protocol="simple",
                     params=CommParams(pxn=False))
    assert _socket_streams(topo, on) == 0
    # Two channels, each with one hop per node from the far GPU: 4 streams per direction.
    assert _socket_streams(topo, off) == 4


@settings(max_examples=40, deadline=None)
@given(key=st.sampled_from(sorted(CLUSTERS)),
       local=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True),
       other=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True),
       op=st.sampled_from([("ring", "all_reduce"), ("tree", "all_reduce"),
                           ("ring", "reduce"), ("ring", "broadcast")]))
def test_no_collective_stream_crosses_a_socket_link(key, local, other, op):
    """Any group — alike on every node or not — keeps its streams off the socket links,
    and a group alike on every node enters each node beside its channel's NIC."""
    topo = CLUSTERS[key]
    nodes = key[1]
    group = [*_group(nodes - 1, local), *(f"n{nodes - 1}.gpu{g}" for g in other)]
    algorithm, name = op
    plan = build_plan(topo, group, name, algorithm=algorithm, protocol="simple",
                      params=CommParams())
    assert _socket_streams(topo, plan) == 0
    if sorted(local) == sorted(other):
        for order, hops in ring_channels(topo, group):
            for i, rail in enumerate(hops):
                if rail is not None:
                    assert rail in topo.local_rails(order[(i + 1) % len(order)])


@pytest.mark.parametrize("preset", ["dgx-a100", "dgx-h100"])
def test_full_node_ring_keeps_one_rail_per_channel(preset):
    topo = CLUSTERS[preset, 3]
    for _order, hops in ring_channels(topo, list(topo.gpus)):
        assert len({r for r in hops if r is not None}) == 1
        assert sum(r is not None for r in hops) == 3
