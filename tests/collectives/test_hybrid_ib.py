"""HybridEP across H100 nodes (validation/deepep/compare_hybrid_ib.py): the bytes its test
counts, and distsim's two-hop exchange there, bound by each GPU's NIC at 16–64 ranks."""

from __future__ import annotations

from math import comb

import pytest
from distsim_gpu.collectives.params import comm_params_for

from tests.conftest import load_script

compare = load_script("validation/deepep/compare_hybrid_ib.py", "compare_hybrid_ib")
TOKEN_BYTES = 4096 * 7168 * 2.0


@pytest.mark.parametrize("ranks", [16, 32, 64])
def test_the_figure_counts_every_node_a_token_reaches_its_own_included(ranks):
    nodes, experts = ranks // 8, 8 * ranks
    # P(a given node, experts/nodes of them, holds none of a token's 8), without replacement
    missed = comb(experts - experts // nodes, 8) / comb(experts, 8)
    assert compare.counted_bytes(ranks, 2.0) == pytest.approx(TOKEN_BYTES * nodes * (1 - missed))


@pytest.mark.parametrize("ranks", [16, 32, 64])
def test_the_exchange_runs_at_the_nics_rate(ranks):
    """A token crosses a NIC once per other node it reaches: the counted bytes, over
    nodes/(nodes−1) of them sent at 400 Gb/s times InfiniBand's efficiency, plus latency."""
    nodes = ranks // 8
    nic_bytes_per_s = 50e9 * comm_params_for("hopper").link_efficiency["network"]
    figure = compare.predicted_bandwidth(ranks, 2.0)
    assert figure == pytest.approx(nic_bytes_per_s * nodes / (nodes - 1), rel=0.03)
    assert figure < nic_bytes_per_s * nodes / (nodes - 1)
