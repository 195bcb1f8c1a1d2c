"""Goodput: the sampled renewal process against its closed form, the best checkpoint
interval against Young/Daly, the accounting, determinism."""

from __future__ import annotations

import math

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.job.goodput import (
    checkpoint_sweep,
    checkpoint_time_s,
    daly_interval_s,
    goodput,
    system_mtbf_s,
    young_interval_s,
)
from hypothesis import given, settings
from hypothesis import strategies as st

HOUR = 3600.0


def expected_goodput(t, k, delta, restart, mtbf):
    """Kept work per failure cycle over its mean length: a cycle of mean M + R completes
    E[floor(X / L)] = q / (1 - q) segments of k iterations, q = exp(-L / M)."""
    q = math.exp(-(k * t + delta) / mtbf)
    return k * t * q / (1 - q) / (mtbf + restart)


@pytest.mark.parametrize(("k", "delta", "mtbf"), [(100, 60.0, 8 * HOUR), (500, 30.0, 2 * HOUR),
                                                  (20, 120.0, 24 * HOUR)])
def test_sampled_goodput_matches_the_renewal_closed_form(k, delta, mtbf):
    result = goodput(4.0, k, delta, 600.0, mtbf, 20_000 * mtbf, seed=3)
    assert result.goodput == pytest.approx(expected_goodput(4.0, k, delta, 600.0, mtbf),
                                           rel=0.01)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(1, 2000), delta=st.floats(1, 600), restart=st.floats(0, 3600),
       mtbf=st.floats(HOUR, 100 * HOUR), seed=st.integers(0, 1000))
def test_the_wall_time_is_kept_lost_checkpoint_and_restart(k, delta, restart, mtbf, seed):
    r = goodput(2.5, k, delta, restart, mtbf, 200 * mtbf, seed=seed)
    assert r.kept_s + r.lost_s + r.checkpoint_s + r.restart_s == pytest.approx(r.wall_s,
                                                                               rel=1e-9)
    assert r.lost_s >= -1e-6 * r.wall_s
    assert 0 <= r.goodput <= k * 2.5 / (k * 2.5 + delta)
    assert r == goodput(2.5, k, delta, restart, mtbf, 200 * mtbf, seed=seed)  # same seed


@pytest.mark.parametrize(("delta", "mtbf", "seed"), [(60.0, 8 * HOUR, 0), (30.0, 4 * HOUR, 1),
                                                     (300.0, 48 * HOUR, 2)])
def test_best_interval_is_near_young_daly_where_delta_is_small_against_mtbf(delta, mtbf, seed):
    sweep = checkpoint_sweep(2.0, delta, 600.0, mtbf, 5000 * mtbf, seed=seed, points=61)
    assert sweep.daly_s < sweep.young_s
    # The grid steps by ~7 %; the goodput curve is flat at its top: within 20 % of Daly.
    assert sweep.best.interval_s == pytest.approx(sweep.daly_s, rel=0.2)
    # And Young's interval loses almost nothing against the best.
    at_young = goodput(2.0, round(sweep.young_s / 2.0), delta, 600.0, mtbf, 5000 * mtbf,
                       seed=seed)
    assert at_young.goodput == pytest.approx(sweep.best.goodput, rel=5e-3)


def test_closed_forms_and_inputs():
    assert young_interval_s(50.0, 10_000.0) == pytest.approx(1000.0)
    assert daly_interval_s(50.0, 10_000.0) == pytest.approx(
        1000.0 * (1 + math.sqrt(50 / 20_000) / 3 + 50 / 180_000) - 50)
    assert daly_interval_s(30_000.0, 10_000.0) == 10_000.0
    # 1000 GPUs at 50,000 h and 125 nodes at 25,000 h: rate 1/50 + 1/200 per hour.
    assert system_mtbf_s({"gpu": (1000, 50_000 * HOUR), "node": (125, 25_000 * HOUR)}) == \
        pytest.approx(HOUR / (1000 / 50_000 + 125 / 25_000))
    assert math.isinf(system_mtbf_s({"gpu": (0, HOUR)}))
    # 1 TB to storage at 100 GB/s, or through 4 nodes' 50 GB/s each if that is slower.
    assert checkpoint_time_s(1e12, 100e9) == pytest.approx(10.0)
    assert checkpoint_time_s(1e12, 100e9, [50e9] * 4) == pytest.approx(10.0)
    assert checkpoint_time_s(1e12, 100e9, [10e9] * 4) == pytest.approx(25.0)
    with pytest.raises(ConfigError):
        system_mtbf_s({"gpu": (8, 0.0)})
    with pytest.raises(ConfigError):
        checkpoint_time_s(1e12, 0.0)
    with pytest.raises(ConfigError):
        goodput(1.0, 0, 10.0, 10.0, HOUR, 10 * HOUR)


def test_checkpoint_as_flows_is_bound_by_the_storage_nodes_nics():
    from distsim_gpu.collectives import CommParams
    from distsim_gpu.topology import build_cluster
    from distsim_gpu.workloads.job.goodput import checkpoint_flows_s

    topo = build_cluster({"preset": "dgx-a100", "nodes": 4, "fabric": "fat-tree"})
    writers = [g for g in topo.gpus if topo.node_of(g) < 3]
    storage = list(topo.gpus_on_node(3))
    size = 24 * 2**30
    nic = topo.link("leaf0", "n3.nic0").bandwidth_bytes_per_s
    ideal = CommParams(protocol="simple").ideal()
    # 24 writers, 3 per rail into one storage node: its 8 NICs take all the bytes.
    t = checkpoint_flows_s(topo, writers, storage, size, ideal)
    assert t == pytest.approx(size / (8 * nic), rel=1e-3)
    # Two storage nodes take it twice as fast (the writers' NICs are not the limit).
    two = list(topo.gpus_on_node(2)) + storage
    t2 = checkpoint_flows_s(topo, [g for g in topo.gpus if topo.node_of(g) < 2], two, size,
                            ideal)
    assert t2 == pytest.approx(size / (16 * nic), rel=1e-3)
    with pytest.raises(ConfigError):
        checkpoint_flows_s(topo, writers, [], size)
