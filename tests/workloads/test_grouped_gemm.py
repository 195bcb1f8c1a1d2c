"""Grouped GEMMs (a MoE layer's local experts in one launch): closed forms of their tiles
and waves, never slower than one GEMM per expert, and one launch for every group."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.compute.operators import gemm, layer_work
from distsim_gpu.workloads.cost.compute.roofline import matmul_efficiency
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import get_model
from hypothesis import given, settings
from hypothesis import strategies as st

ONE_TILE = ((128, 128, 1.0),)


def test_groups_of_whole_tiles_are_one_gemm_of_their_rows() -> None:
    """4 groups of 512 rows on 132 SMs: the tiles of one 2,048-row GEMM, same waves."""
    grouped = matmul_efficiency(512, 4096, 4096, sm_count=132, tiles=ONE_TILE, groups=4)
    dense = matmul_efficiency(2048, 4096, 4096, sm_count=132, tiles=ONE_TILE)
    assert grouped == pytest.approx(dense)


def test_each_group_pads_to_the_tile_on_its_own() -> None:
    """8 groups of 64 rows pad to 8 tiles of 128: half the rate of 4 groups of 128."""
    small = matmul_efficiency(64, 8448, 4096, sm_count=132, tiles=ONE_TILE, groups=8)
    whole = matmul_efficiency(128, 8448, 4096, sm_count=132, tiles=ONE_TILE, groups=4)
    assert small == pytest.approx(whole / 2)


@settings(max_examples=60, deadline=None)
@given(groups=st.integers(1, 64), m=st.integers(1, 4096), n=st.sampled_from([768, 2048, 7168]))
def test_grouped_is_never_slower_than_one_gemm_per_group(groups, m, n) -> None:
    """⌈G·t/S⌉ waves never exceed G·⌈t/S⌉: sharing the waves can only help."""
    costs = RooflineCosts(get_gpu("h100-sxm"))
    one = gemm("e", (m, n, 2048), 2, 2, groups)
    assert costs.kernel_time_s(replace(one, grouped=True)) <= costs.kernel_time_s(one) + 1e-15


def test_a_grouped_gemm_is_one_launch() -> None:
    """The compute of every group, and one launch overhead (not one per group)."""
    costs = RooflineCosts(get_gpu("h100-sxm"), launch_overhead_s=1e-3)
    small = gemm("e", (8, 8, 8), 2, 2, 16)  # latency-bound: the launches dominate
    assert costs.kernel_time_s(replace(small, grouped=True)) < 2e-3
    assert costs.kernel_time_s(small) >= 16e-3


def test_the_experts_run_grouped_and_so_do_their_gradients() -> None:
    model = get_model("deepseek-v3")
    shard = LayerShard(1, 4096, ep=64, layer_index=5)
    forward = layer_work("fwd", model, shard)
    assert forward.kernel("expert_fc1").grouped
    assert forward.kernel("expert_fc1").count == 4  # 256 experts over 64 ranks
    backward = forward.backward()
    assert backward.kernel("expert_fc1.dgrad").grouped
    assert backward.kernel("expert_fc1.wgrad").grouped
    assert not forward.kernel("shared_fc1").grouped
