"""Expert-parallel all-to-all inside an NVL72 domain: the router's byte count behind the
HybridEP comparison (validation/deepep/compare_rack_a2a.py) and distsim's rate there, an
NVLink-bound exchange at any domain size."""

from __future__ import annotations

from math import comb

import pytest
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import comm_params_for
from distsim_gpu.topology import build_cluster

from tests.conftest import load_script

compare = load_script("validation/deepep/compare_rack_a2a.py", "compare_rack_a2a")


@pytest.mark.parametrize("ep", [2, 8, 36, 72])
def test_a_token_reaches_the_ranks_top_8_of_8_experts_each_implies(ep):
    # P(a given rank holds none of a token's 8 experts), without replacement
    missed = comb(8 * ep - 8, 8) / comb(8 * ep, 8)
    assert compare.remote_ranks(ep) == pytest.approx((ep - 1) * (1 - missed))
    assert compare.remote_ranks(ep) <= min(ep - 1, 8)


@pytest.mark.parametrize("ep", [8, 16, 36])
def test_hybrideps_figure_counts_the_ranks_own_tokens_too(ep):
    """The test behind the table divides ``dispatched_hidden.numel()`` — every token a rank
    receives, the sender's own among them — by the time: ep/(ep−1) of the remote bytes."""
    remote = 4096 * 7168 * 2.0 * compare.remote_ranks(ep)
    assert compare.counted_bytes(ep, 2.0) == pytest.approx(remote * ep / (ep - 1))


@pytest.mark.parametrize("ep", [8, 36, 72])
def test_an_alltoall_inside_a_domain_runs_at_each_gpus_nvlink_rate(ep):
    """Each GPU sends S·(n−1)/n over its own NVLink (900 GB/s at Blackwell's efficiency):
    time = latency + S·(n−1)/n / (B·e), the same rate at every domain size."""
    params = comm_params_for("blackwell")
    rate = 900e9 * params.link_efficiency["nvlink"]
    size = 64 * ep * 2**20
    (row,) = run_benchmark(build_cluster({"preset": "gb200-nvl72", "nvlink_domain": ep}),
                           "alltoall", [size], params=params, dtype="int8")
    transfer = size * (ep - 1) / ep / rate
    assert row.time_s == pytest.approx(transfer, rel=0.05)
    assert row.time_s > transfer
