"""TP collectives folded while data-parallel traffic is in flight, where it never shares
their links (workloads.iteration.folding.dp_apart_from_tp): same iteration time."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.workloads.iteration import simulator
from distsim_gpu.workloads.iteration.folding import dp_apart_from_tp


def _mapping(tp: int, dp: int, cp: int = 1) -> dict:
    return {
        "name": "dp-apart",
        "cluster": {"preset": "dgx-h100", "nodes": 4, "fabric": {"kind": "rail-optimized"}},
        "model": {"preset": "llama3-8b"},
        "parallelism": {"tp": tp, "pp": 32 // (tp * dp * cp), "dp": dp, "cp": cp,
                        "sequence_parallel": True, "zero": 1,
                        "tp_comm_overlap": True, "overlap_param_gather": True},
        "training": {"micro_batch": 1, "global_batch": 4 * dp, "precision": "bf16"},
        "compute": {"gpu": "h100-sxm", "stack": "nemo"},
    }


def _run(mapping: dict, apart: bool | None, monkeypatch: pytest.MonkeyPatch) -> tuple:
    seen: list[bool] = []

    def check(comm, groups, par):
        seen.append(dp_apart_from_tp(comm, groups, par))
        return seen[-1] if apart is None else apart

    monkeypatch.setattr(simulator, "dp_apart", check)
    result = simulator.simulate_iteration(scenario_from_mapping(mapping, source="t").spec)
    return result.iteration_time_s, seen[0]


def test_dp_across_nodes_is_apart_and_folding_it_changes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # tp 8 fills a node: every DP peer is on another node, reached over the NIC rails.
    mapping = _mapping(8, 2)
    folded_s, apart = _run(mapping, None, monkeypatch)
    flows_s, _ = _run(mapping, False, monkeypatch)
    assert apart
    assert folded_s == pytest.approx(flows_s, rel=1e-12)


def test_dp_peers_in_one_node_share_its_nvlink_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    # tp 4 in an 8-GPU node: two replicas per node, their DP ring hops over NVLink.
    _, apart = _run(_mapping(4, 2), None, monkeypatch)
    assert not apart


def test_dp_over_a_context_parallel_rings_replicas_is_apart_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # tp 8 · cp 2 · dp 2: the gradients reduce over the four replicas, one a node.
    mapping = _mapping(8, 2, cp=2)
    folded_s, apart = _run(mapping, None, monkeypatch)
    flows_s, _ = _run(mapping, False, monkeypatch)
    assert apart
    assert folded_s == pytest.approx(flows_s, rel=1e-12)

