"""A tensor-parallel group that leaves its node is said in the run's notes."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.tp_span_notes import tp_span_notes
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.strategy.parallel import ParallelConfig


def _rack(domain: int, nodes: int):
    return build_cluster({"preset": "gb200-nvl72", "nodes": nodes, "nvlink_domain": domain})


@pytest.mark.parametrize(("tp", "dp", "split"), [
    (16, 9, 1),   # 144 GPUs in 72-GPU domains: ranks 64-79 straddle the two
    (8, 18, 0),   # 8 divides 72
    (24, 6, 0),   # 24 divides 72
    (48, 3, 1),   # 48-95 straddles
])
def test_groups_across_a_domain_are_counted_by_closed_form(tp, dp, split):
    notes = tp_span_notes(ParallelConfig(tp=tp, dp=dp), _rack(72, 2))
    assert len(notes) == (1 if split else 0)
    if split:
        (note,) = notes
        assert note.kind == "headline" and note.key == "parallelism.tp"
        assert note.message.startswith(f"{split} of {dp} tensor-parallel groups span")
        assert f"tp {tp} does not divide a node's 72 GPUs" in note.message


def test_an_order_that_puts_data_parallelism_inside_is_named():
    """tp 8 divides a node of 8, but with dp innermost each TP group takes one GPU a node."""
    topology = build_cluster({"preset": "dgx-h100", "nodes": 2})
    (note,) = tp_span_notes(ParallelConfig(tp=8, dp=2, order="dp-tp-pp"), topology)
    assert note.message.startswith("2 of 2 tensor-parallel groups span")
    assert "'dp-tp-pp'" in note.message
    assert tp_span_notes(ParallelConfig(tp=8, dp=2), topology) == []


def test_one_tensor_rank_or_another_jobs_layout_says_nothing():
    topology = build_cluster({"preset": "dgx-h100", "nodes": 2})
    assert tp_span_notes(ParallelConfig(tp=1, dp=16), topology) == []
    assert tp_span_notes(ParallelConfig(tp=16, dp=2), topology) == []  # 32 ranks, 16 GPUs
