"""Flat and hierarchical (HetuMoE) all-to-all: bytes on NVLink and on the NICs against
closed forms, skewed receive weights, and which one the closed-form cost prefers."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator, comm_params_from_mapping
from distsim_gpu.collectives.algorithms import _Builder
from distsim_gpu.collectives.alltoall_hier import (
    flat_alltoall_plan,
    hierarchical_alltoall_plan,
    link_bytes,
)
from distsim_gpu.collectives.catalog import build_plan, candidates
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.node_shape import node_config
from distsim_gpu.topology.presets import DGX_H100

S = 64e6  # bytes per GPU per call


def ideal() -> CommParams:
    return replace(CommParams(protocol="simple").ideal())


@pytest.fixture(scope="module", params=[2, 4])
def dgx(request):
    return build_cluster({"preset": "dgx-h100", "nodes": request.param,
                          "fabric": "rail-optimized"})


def split(topo, carried):
    """(bytes GPUs put on NVLink, bytes NICs put on the fabric), per link too."""
    nvlink, nics = {}, {}
    for (src, dst), size in carried.items():
        kind = topo.link(src, dst).kind
        if kind == "nvlink" and topo.device(src).kind == "gpu":
            nvlink[src] = nvlink.get(src, 0.0) + size
        elif kind == "network" and topo.device(src).kind == "nic":
            nics[src] = nics.get(src, 0.0) + size
    return nvlink, nics


def builder(topo):
    return _Builder(topo, ideal(), "ring", "simple")


def test_flat_bytes_closed_form(dgx):
    gpus = dgx.gpus
    n, g = len(gpus), 8
    nodes = n // g
    nvlink, nics = split(dgx, link_bytes(flat_alltoall_plan(builder(dgx), gpus), S))
    # PXN on rails: every GPU sends S/n to each of its g-1 node peers and forwards to
    # each of them its (nodes-1) remote sends on their rails over NVLink, and its NIC
    # carries the g·(nodes-1) sends to its rail from its node.
    assert sorted(nvlink.values()) == pytest.approx([(g - 1) * nodes * S / n] * n)
    assert len(nics) == n
    assert sorted(nics.values()) == pytest.approx([g * (nodes - 1) * S / n] * n)


def test_flat_equals_the_plain_alltoall(dgx):
    flat = flat_alltoall_plan(builder(dgx), dgx.gpus)
    (algorithm,) = candidates(dgx, dgx.gpus, "alltoall", ideal())
    plain = build_plan(dgx, dgx.gpus, "alltoall", algorithm=algorithm, protocol="simple",
                       params=ideal())
    assert link_bytes(flat, S) == pytest.approx(link_bytes(plain, S))
    assert flat.latency_s == pytest.approx(plain.latency_s)


def test_hierarchical_bytes_closed_form(dgx):
    gpus = dgx.gpus
    n, g = len(gpus), 8
    nodes = n // g
    plan = hierarchical_alltoall_plan(builder(dgx), gpus)
    assert len(plan.steps) == 1  # the three legs pipelined
    nvlink, nics = split(dgx, link_bytes(plan, S))
    # NICs: one message of g·g·S/n per ordered node pair, each pair on its own rail.
    assert sorted(nics.values()) == pytest.approx([g * g * S / n] * (nodes * (nodes - 1)))
    # NVLink, per node: the node's own pairs g(g-1)·S/n, then the gather and the scatter
    # each (g-1)(nodes-1)·g·S/n.
    per_node = (g * (g - 1) + 2 * (g - 1) * (nodes - 1) * g) * S / n
    for node in range(nodes):
        on_node = sum(v for gpu, v in nvlink.items() if gpu.startswith(f"n{node}."))
        assert on_node == pytest.approx(per_node)
    # Total remote bytes are the flat all-to-all's.
    _, flat_nics = split(dgx, link_bytes(flat_alltoall_plan(builder(dgx), gpus), S))
    assert sum(nics.values()) == pytest.approx(sum(flat_nics.values()))


def test_weights_move_bytes_to_the_hot_rank():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2, "fabric": "rail-optimized"})
    gpus = topo.gpus
    n = len(gpus)
    weights = [3.0] + [1.0] * (n - 1)  # rank 0 receives three times the uniform share
    direct = _Builder(topo, replace(ideal(), pxn=False), "ring", "simple")
    carried = link_bytes(flat_alltoall_plan(direct, gpus, weights), S)
    into_hot = sum(size for (src, dst), size in carried.items() if dst == gpus[0])
    # n-1 senders each put 3·S/n on the hot GPU's incoming link(s).
    assert into_hot == pytest.approx((n - 1) * 3 * S / n)
    hier = link_bytes(hierarchical_alltoall_plan(builder(topo), gpus, weights), S)
    _, nics = split(topo, hier)
    # Node 1 -> node 0 carries 8 senders x (3 + 7)·S/n; node 0 -> node 1 8 x 8·S/n.
    assert sorted(nics.values()) == pytest.approx(sorted([8 * 10 * S / n, 8 * 8 * S / n]))


def test_one_node_hierarchical_is_flat():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 1})
    hier = hierarchical_alltoall_plan(builder(topo), topo.gpus)
    flat = flat_alltoall_plan(builder(topo), topo.gpus)
    assert link_bytes(hier, S) == pytest.approx(link_bytes(flat, S))


def test_wrong_weight_count_is_a_clear_error():
    topo = build_cluster({"preset": "dgx-h100", "nodes": 1})
    with pytest.raises(ConfigError, match="one weight per rank"):
        flat_alltoall_plan(builder(topo), topo.gpus, [1.0, 2.0])


def dgx_with_nics(nics: int, nodes: int = 4):
    """DGX H100 nodes with ``nics`` NICs of 400 Gb/s (one per GPU, or one per node)."""
    node = node_config(DGX_H100)
    node["nic_pcie_switch"] = list(range(nics))
    return build_cluster({"node": node, "nodes": nodes, "nic": {"bandwidth": "400 Gbps"},
                          "fabric": {"kind": "rail-optimized"}})


def test_nic_count_decides():
    """Fewer network peers make the hierarchical form win at small messages.  At large
    ones, with one NIC per node both forms put the same bytes through it and the
    hierarchical one still wins by its peers' latency; with a NIC per GPU on four nodes
    it exchanges on three rails of eight and the flat form (PXN, every NIC busy) wins by
    more than 2x."""
    params = CommParams(protocol="simple")

    def times(topo, size):
        b = _Builder(topo, params, "ring", "simple")
        cap = {link.id: link.bandwidth_bytes_per_s * params.efficiency_of(link.kind)
               for link in topo.links()}
        return (flat_alltoall_plan(b, topo.gpus).uncontended_time_s(size, cap),
                hierarchical_alltoall_plan(b, topo.gpus).uncontended_time_s(size, cap))

    one, eight = dgx_with_nics(1), dgx_with_nics(8)
    for topo in (one, eight):
        flat, hier = times(topo, 100e3)
        assert hier < 0.7 * flat
    flat, hier = times(one, 100e6)
    assert hier < flat
    # The NIC's bytes are the same: the difference is (n-g-1) network peers' latency
    # against (nodes-1)'s.
    peer = params.peer_latency_s["net"]["simple"]
    assert flat - hier == pytest.approx((32 - 8 - 3) * peer, rel=0.2)
    flat, hier = times(eight, 100e6)
    assert hier > 2 * flat


def test_communicator_runs_the_mode_and_auto_takes_the_faster():
    topo = dgx_with_nics(1)
    gpus = topo.gpus
    times = {}
    for mode in ("flat", "hierarchical", "auto"):
        # Step fidelity: each of the three steps its own flows, as the closed form sums.
        params = replace(CommParams(protocol="simple", fidelity="step"), all_to_all=mode)
        sim = Simulation()
        comm = Communicator(sim, topo, params)
        plan = comm.choose("alltoall", gpus, 100e3)
        process = comm.collective("alltoall", gpus, 100e3)
        sim.run()
        times[mode] = process.value.duration_s
        # Alone on the network, the simulated call takes its closed-form time.
        assert times[mode] == pytest.approx(comm.time_s(plan, 100e3), rel=1e-9)
        # flat with uniform weights is the plain path (ring here: one NIC, no PXN); at
        # 100 kB the hierarchical form's fewer network peers win.
        assert plan.algorithm == ("ring" if mode == "flat" else "hierarchical")
    assert times["auto"] == pytest.approx(min(times["flat"], times["hierarchical"]))


def test_uniform_flat_keeps_the_plain_plan():
    topo = dgx_with_nics(8, nodes=2)
    comm = Communicator(Simulation(), topo, CommParams())
    assert comm.choose("alltoall", topo.gpus, 1e6).algorithm == "pxn"
    skewed = replace(CommParams(), alltoall_weights=(2.0,) + (1.0,) * 15)
    comm = Communicator(Simulation(), topo, skewed)
    assert comm.choose("alltoall", topo.gpus, 1e6).algorithm == "flat"


def test_all_to_all_key():
    assert comm_params_from_mapping({"all_to_all": "Auto"}).all_to_all == "auto"
    with pytest.raises(ConfigError) as info:
        comm_params_from_mapping({"all_to_all": "tree"}, prefix="communication")
    assert info.value.key == "communication.all_to_all"
