"""Topology._dist_map shares one search among destinations entered from the same devices.

Every destination's map must equal its own breadth-first search at every device, on every
preset and fabric, whichever destination of a set is searched first; and on a fat tree the
leaves under one set of spines must share a search (else the fabric costs one search per
leaf: quadratic in switches at 16,384 GPUs).
"""

from __future__ import annotations

from distsim_gpu.topology import build_cluster
from hypothesis import given, settings
from hypothesis import strategies as st

PRESETS = ["dgx-a100", "dgx-h100", "pcie-8gpu", "dgx1-v100", "mi300x", "quad-gh200"]
FABRICS = ["fat-tree", "rail-optimized", "three-tier", "single-switch", "multi-plane",
           "dragonfly"]


@settings(max_examples=30, deadline=None)
@given(preset=st.sampled_from(PRESETS), kind=st.sampled_from(FABRICS),
       fabric_only=st.booleans(), data=st.data())
def test_every_shared_map_is_the_destinations_own_search(preset, kind, fabric_only, data):
    topo = build_cluster({"preset": preset, "nodes": 16, "fabric": {"kind": kind}})
    devices = list(topo._devices)
    order = data.draw(st.permutations(devices))
    for target in order:
        shared, own = topo._dist_map(target, fabric_only=fabric_only), topo._bfs_map(
            target, fabric_only)
        assert {y: shared.get(y) for y in devices} == {y: own.get(y) for y in devices}
        assert dict(shared) == own


def test_leaves_under_the_same_spines_share_one_search():
    topo = build_cluster({"preset": "dgx-a100", "nodes": 16, "fabric": {"kind": "fat-tree"}})
    leaves = {n for n, d in topo._devices.items() if d.kind == "switch"
              and any(topo._devices[w].kind == "nic" for w, _ in topo._pred[n])}
    assert len(leaves) > 1
    for leaf in leaves:
        topo._dist_map(leaf, fabric_only=True)
    searched = {topo._twin_targets[key] for key in topo._twin_targets if key[1]}
    assert len(searched & leaves) < len(leaves)
    # A leaf's map seen from another leaf: up to a spine and down, two hops.
    a, b = sorted(leaves)[:2]
    assert topo._dist_map(a, fabric_only=True).get(b) == 2
