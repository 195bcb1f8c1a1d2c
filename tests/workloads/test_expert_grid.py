"""Megatron-Core's expert rank grid: which GPUs form each expert, expert-tensor and expert
data-parallel group, as closed forms, for every layout it accepts; a clear error for the
ones it refuses; and the block of replicas the iteration simulates them in."""

from __future__ import annotations

import itertools

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.strategy.expert_grid import (
    ExpertGrid,
    check_expert_grid,
    expert_axes,
    expert_block,
    replica_of,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_strategy,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workloads.layouts import shape_model

DEGREES = st.sampled_from([1, 2, 4, 8])


def _accepted(grid: ExpertGrid) -> bool:
    try:
        check_expert_grid(grid)
    except ConfigError:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(tp=DEGREES, etp=DEGREES, cp=DEGREES, ep=DEGREES, dp=DEGREES, pp=st.sampled_from([1, 2, 3]))
def test_expert_groups_in_the_default_order_are_the_closed_form(tp, etp, cp, ep, dp, pp):
    """tp-cp-ep-dp-pp: stage p's expert group (e, d) is {p·S + e + etp·(k + ep·d)},
    S = tp·cp·dp; expert-tensor groups are etp consecutive ranks; expert data-parallel
    groups stride etp·ep; every rank is in exactly one group of each kind."""
    grid = ExpertGrid(tp=tp, etp=etp, cp=cp, ep=ep, dp=dp, pp=pp)
    if (tp * cp * dp) % (etp * ep):  # blamed on ep where ep alone does not divide
        culprit = "ep" if (tp * cp * dp) % ep else "expert_tp"
        with pytest.raises(ConfigError, match=rf"parallelism\.{culprit}: expert_tp·ep"):
            check_expert_grid(grid)
        return
    check_expert_grid(grid)  # pp outermost: Megatron-Core accepts every such layout
    stage, edp = tp * cp * dp, grid.edp
    assert edp * etp * ep == stage
    expected_ep = [tuple(p * stage + e + etp * (k + ep * d) for k in range(ep))
                   for p in range(pp) for d in range(edp) for e in range(etp)]
    assert grid.expert_groups("ep") == expected_ep
    assert grid.expert_groups("tp") == [
        tuple(p * stage + etp * (k + ep * d) + e for e in range(etp))
        for p in range(pp) for d in range(edp) for k in range(ep)]
    assert grid.expert_groups("dp") == [
        tuple(p * stage + e + etp * k + etp * ep * d for d in range(edp))
        for p in range(pp) for k in range(ep) for e in range(etp)]
    for dims in ("ep", "tp", "dp", "pp"):
        ranks = [r for g in grid.expert_groups(dims) for r in g]
        assert sorted(ranks) == list(range(grid.world))


def test_the_dense_grid_is_placements() -> None:
    """The dense grid's tp, cp and dp-cp groups are the ones Placement gives."""
    par = ParallelConfig(tp=2, cp=2, dp=3, pp=2, ep=2)
    grid, place = par.expert_grid(), Placement(par)
    assert grid.dense_groups("tp") == [place.tp_group(r, p) for p in range(2)
                                       for r in range(6)]
    assert grid.dense_groups("cp") == [place.cp_group(t, d, p) for p in range(2)
                                       for d in range(3) for t in range(2)]
    assert sorted(grid.dense_groups("cp", "dp")) == sorted(
        place.dp_group(t, p) for p in range(2) for t in range(2))


def test_ep_folds_over_cp_and_dp() -> None:
    """NVIDIA's Grok-1 on H100: tp 4, cp 2, ep 8, dp 8, pp 8.  expert_tp 4 (Megatron-Core's
    default): an expert group is one tensor rank of 8 consecutive (cp, dp) replicas, 4
    nodes of 8 GPUs; expert_tp 1: 8 consecutive GPUs, one node."""
    tied = ExpertGrid(tp=4, etp=4, cp=2, ep=8, dp=8, pp=8)
    assert tied.edp == 2
    assert tied.expert_groups("ep")[1] == (1, 5, 9, 13, 17, 21, 25, 29)
    assert expert_block(tied)[0] == 8
    assert len(expert_block(tied)[1]) == 4  # a lane per tensor rank
    whole = ExpertGrid(tp=4, etp=1, cp=2, ep=8, dp=8, pp=8)
    assert whole.edp == 8
    assert whole.expert_groups("ep")[1] == tuple(range(8, 16))
    assert expert_block(whole) == (2, (((0, 0), (0, 1), (0, 2), (0, 3),
                                        (1, 0), (1, 1), (1, 2), (1, 3)),))


@pytest.mark.parametrize("degrees", list(itertools.product([1, 2, 4], [1, 2, 4], [1, 2],
                                                             [1, 2, 4, 8], [1, 2, 4])))
def test_every_block_holds_whole_groups_and_covers_the_stage(degrees) -> None:
    """The iteration's block of replicas: each expert group inside one block, the first
    block's lanes shifted by whole blocks giving every group of the stage once."""
    tp, etp, cp, ep, dp = degrees
    grid = ExpertGrid(tp=tp, etp=etp, cp=cp, ep=ep, dp=dp, pp=2)
    if not _accepted(grid):
        return
    block, lanes = expert_block(grid)
    replicas = cp * dp
    assert replicas % block == 0
    stage0 = sorted(tuple(replica_of(grid, r)[1:] for r in g)
                    for g in grid.expert_groups("ep") if g[0] < tp * cp * dp)
    shifted = sorted(tuple((b * block + r, t) for r, t in lane)
                     for b in range(replicas // block) for lane in lanes)
    assert shifted == stage0
    assert all(len(lane) == ep for lane in lanes)


@pytest.mark.parametrize(("grid", "message"), [
    # ep 4 divides the stage's 4 GPUs; with the expert tp of 2 it does not.
    (ExpertGrid(tp=2, etp=2, cp=1, ep=4, dp=2, pp=1),
     r"parallelism\.expert_tp: expert_tp·ep = 2·4 = 8 does not divide the 4 GPUs of a "
     r"pipeline stage \(tp·cp·dp = 2·1·2\)"),
    (ExpertGrid(tp=2, etp=1, cp=1, ep=3, dp=2, pp=1),
     r"parallelism\.ep: expert_tp·ep = 1·3 = 3 does not divide the 4 GPUs"),
    # Megatron's tp-pp-dp mapping with expert data parallelism unlike dp.
    (ExpertGrid(tp=2, etp=2, cp=1, ep=2, dp=4, pp=2, axes=("tp", "cp", "pp", "dp")),
     r"parallelism\.order: with pipeline parallelism not outermost \(order tp-cp-pp-dp\) "
     r"the expert data parallelism 2 must equal dp = 4"),
    # ... and with the same expert dp but different pipeline groups.
    (ExpertGrid(tp=2, etp=4, cp=2, ep=1, dp=2, pp=2, axes=("tp", "pp", "cp", "dp")),
     r"parallelism\.order: the dense and the expert grid give different pipeline groups"),
])
def test_layouts_megatron_refuses_are_clear_errors(grid, message) -> None:
    with pytest.raises(ConfigError, match=message):
        check_expert_grid(grid)


def test_megatrons_tp_pp_dp_mapping_accepts_expert_tp_times_ep_equal_to_tp_cp() -> None:
    """tp-cp-ep-pp-dp: the pipeline groups agree when etp·ep = tp·cp."""
    grid = ExpertGrid(tp=4, etp=1, cp=2, ep=8, dp=4, pp=2, axes=("tp", "cp", "pp", "dp"))
    check_expert_grid(grid)
    assert expert_axes(grid.axes) == ("tp", "cp", "ep", "pp", "dp")
    assert grid.expert_groups("pp") == grid.dense_groups("pp")


@pytest.mark.parametrize(("parallel", "message"), [
    (ParallelConfig(tp=4, dp=3, ep=2, expert_tp=3, sequence_parallel=True),
     r"parallelism\.expert_tp: expert_tp 3 that does not divide tp 4 is not modelled"),
    (ParallelConfig(tp=4, dp=2, ep=2, expert_tp=2, sequence_parallel=True, order="dp-tp-pp"),
     r"parallelism\.expert_tp: expert_tp 2 between 1 and tp needs tp innermost"),
    (ParallelConfig(tp=2, dp=2, ep=2, expert_tp=0),
     r"parallelism\.expert_tp: must be a whole number"),
])
def test_expert_tp_distsim_does_not_run_is_a_clear_error(parallel, message) -> None:
    model = shape_model(layers=4, heads=32, kv_heads=8, experts=8)
    with pytest.raises(ConfigError, match=message):
        check_strategy(model, parallel, TrainingConfig(global_batch=16),
                       num_gpus=parallel.num_gpus)


def test_expert_tp_on_a_dense_model_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"parallelism\.expert_tp: expert_tp needs a MoE"):
        check_strategy(shape_model(layers=4, heads=32, kv_heads=8, experts=1),
                       ParallelConfig(tp=2, dp=2, expert_tp=1), TrainingConfig(global_batch=4),
                       num_gpus=4)
