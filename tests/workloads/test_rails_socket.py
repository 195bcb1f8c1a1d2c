"""No GPU byte crosses a CPU socket link on the DGX presets, for any tp/pp/dp split.

NCCL orders each node's ranks in a ring so that the ring enters beside the NIC of its
channel's rail and leaves through that NIC, forwarding over NVLink (PXN) where the
leaving GPU is not beside it; pipeline sends forward the same way to the receiver's rail.
The inter-socket link (``cpu`` kind, :mod:`topology.elements`) then carries nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster

PRESETS = {"dgx-a100": "a100-80gb", "dgx-h100": "h100-sxm"}
GPUS_PER_NODE = 8


def _splits() -> list[tuple[str, int, int, int]]:
    return [(preset, nodes, tp, pp) for preset in PRESETS for nodes in (2, 4)
            for tp in (1, 2, 4, 8) for pp in (1, 2, 4) if tp * pp <= nodes * GPUS_PER_NODE]


def _kind_bytes(result: Any, kind: str) -> float:
    """Bytes the run put on links of ``kind`` (``cpu``: the inter-socket links)."""
    topo = result.topology
    ids, _, carried, _, _ = result.simulation.network.link_stat_arrays()
    return sum(float(carried[i]) for i, link in enumerate(ids)
               if isinstance(link, tuple) and topo.link(*link).kind == kind)


def _run(tiny: Any, preset: str, nodes: int, tp: int, pp: int, **extra: Any) -> Any:
    dp = nodes * GPUS_PER_NODE // (tp * pp)
    data = tiny(
                parallelism={"tp": tp, "pp": pp, "dp": dp, "zero": extra.pop("zero", 0)},
                training={"global_batch": 4 * dp},
                compute={"gpu": PRESETS[preset]}, **extra)
    # The cluster replaced whole: the tiny one's keys (``gpus``) are the switch preset's.
    data["cluster"] = {"preset": preset, "nodes": nodes, "fabric": "fat-tree"}
    return run_scenario(scenario_from_mapping(data)).result


@pytest.mark.parametrize(("preset", "nodes", "tp", "pp"), _splits())
@pytest.mark.parametrize("algorithm", ["auto", "ring"])
def test_no_gpu_byte_crosses_a_socket_link(tiny, preset, nodes, tp, pp, algorithm):
    result = _run(tiny, preset, nodes, tp, pp, zero=1,
                  communication={"algorithm": algorithm})
    # The run did move bytes between nodes (so an empty network does not pass the test).
    assert _kind_bytes(result, "network") > 0
    assert _kind_bytes(result, "cpu") == 0.0


def test_two_dgx_h100_tp4_dp4_keeps_data_parallel_traffic_off_the_socket_link(tiny):
    """The DP ring {n0.gpu0, n0.gpu4, n1.gpu0, n1.gpu4} used to leave n0.gpu4 on rail 0 and
    cross n0's socket link to NIC 0: the run's busiest link, all DP traffic."""
    result = _run(tiny, "dgx-h100", 2, 4, 1, communication={"algorithm": "ring"})
    assert _kind_bytes(result, "network") > 0
    assert _kind_bytes(result, "cpu") == 0.0


def test_two_dgx_h100_tp4_dp4_ring_runs_at_its_rails_closed_form():
    """The DP all-reduce: two channels, each on its own rail (NIC 0 and NIC 4), so
    ``2(n-1)/n · S/e / (2·B_nic)`` plus the latency of one pass per step, where a hop
    across nodes is PXN's NVLink leg and network leg; and nothing on a socket link."""
    topo = build_cluster({"preset": "dgx-h100", "nodes": 2})
    params = CommParams(algorithm="ring", protocol="simple").on_architecture("hopper")
    group = ["n0.gpu0", "n0.gpu4", "n1.gpu0", "n1.gpu4"]
    size = float(2**30)
    sim = Simulation()
    comm = Communicator(sim, topo, params)
    process = comm.collective("all_reduce", group, size)
    sim.run()
    n = len(group)
    nic = topo.link(*topo.route("n0.gpu0", "n1.gpu0", rail=0).links[2])  # NIC -> leaf
    rate = nic.bandwidth_bytes_per_s * params.efficiency_of(nic.kind)
    hop = params.hop_latency_s["ring"]

    def latency(src: str, dst: str, rail: int | None = None) -> float:
        route = topo.route(src, dst, rail=rail)
        return hop[route.transport]["simple"] + route.latency_s

    # Channel on rail 0: n0.gpu0 -> n0.gpu4 -> (PXN: n0.gpu0) -> n1.gpu0 -> n1.gpu4 -> ...
    nvlink = latency("n0.gpu0", "n0.gpu4")
    across = latency("n0.gpu4", "n0.gpu0") + latency("n0.gpu0", "n1.gpu0", rail=0)
    hops = [nvlink, across, nvlink, across]
    per_step = (sum(hops) - max(hops)) / (n - 1)
    expected = (params.base_latency_s["ring"]["simple"] + 2 * (n - 1) * per_step
                + 2 * (n - 1) / n * size / params.protocol_efficiency["simple"] / (2 * rate))
    assert process.value.duration_s == pytest.approx(expected, rel=1e-9)
    for link in topo.links():
        if link.kind == "cpu":
            assert sim.network.link_bytes(link.id) == 0.0
    # Both rails carry the same share: each NIC sends 2(n-1)/n · S/e / 2 per node.
    sent = 2 * (n - 1) / n * size / params.protocol_efficiency["simple"] / 2
    for rail in (0, 4):
        out = topo.route(f"n0.gpu{rail}", f"n1.gpu{rail}", rail=rail).links[2]
        assert sim.network.link_bytes(out) == pytest.approx(sent)
