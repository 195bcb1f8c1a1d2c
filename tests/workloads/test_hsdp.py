"""HSDP (FSDP's ``HYBRID_SHARD``; torchtitan's ``data_parallel_replicate_degree``):
``parallelism.dp_replicate`` groups of ``n_s = dp·cp / dp_replicate`` consecutive replicas
each shard the parameters, gradients and optimizer state; ZeRO-3's gathers and
reduce-scatters run within a shard group, and each reduced gradient shard is all-reduced
across the ``r = dp_replicate`` groups after its reduce-scatter.

Per GPU and step under a pipeline (parameters kept gathered, gradients reduced once), with
bf16 parameters and gradients of a stage of ``Ψ_s`` parameters, over rings:
``(n_s-1)/n_s·(2Ψ_s + 2Ψ_s)`` within the shard group plus ``2·(r-1)/r·2Ψ_s/n_s`` across
the replicate groups.  Memory: the optimizer state over ``n_s`` ranks, not ``dp·cp``.

Until 7 December HSDP was refused (``zero: 3`` sharded over the whole group)."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.scenarios.report.bottlenecks import link_summary
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.memory import memory_per_gpu
from distsim_gpu.workloads.cost.traffic import stage_params
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

from tests.workloads.bound_check import bound_and_simulation
from tests.workloads.layouts import check_layout

DP, REPLICATE = 8, 2
SHARD = DP // REPLICATE
RING = CommParams(protocol="simple", algorithm="ring")


def _parallel(pp: int = 2, replicate: int = REPLICATE) -> ParallelConfig:
    return ParallelConfig(dp=DP, pp=pp, fsdp=True, dp_replicate=replicate,
                          grad_reduce_precision="bf16")


def _dp_bytes_sent(result, gpu: str) -> float:
    rows = link_summary(result, top=4 * DP)["top_links_by_utilisation"]
    (row,) = [r for r in rows if r["link"] == f"{gpu}->n0.switch"]
    return row["bytes_by_traffic"]["dp"]


@pytest.mark.parametrize("microbatches", [1, 4])
def test_shard_group_gathers_and_reduces_and_replicas_all_reduce_the_shards(uniform,
                                                                            microbatches):
    topo = build_cluster({"preset": "switch", "gpus": 2 * DP, "link_bandwidth": "2 GB/s",
                          "link_latency": "0 us"})
    training = TrainingConfig(micro_batch=1, global_batch=DP * microbatches,
                              precision="bf16")
    result = uniform.run(topo, _parallel(), training, comm=RING)
    model = uniform.model
    # The tied embedding's bf16 gradients all-reduced between stage 0 and stage 1.
    tied = 2 * model.vocab * model.hidden
    # Ranks go dp fastest: stage 0 is GPUs 0-7, stage 1 GPUs 8-15.
    for stage, gpu in ((0, "n0.gpu0"), (1, "n0.gpu8")):
        psi = stage_params(model, _parallel(), stage)
        within = (SHARD - 1) / SHARD * (2 * psi + 2 * psi)
        across = 2 * (REPLICATE - 1) / REPLICATE * 2 * psi / SHARD
        assert _dp_bytes_sent(result, gpu) == pytest.approx(within + across + tied,
                                                            rel=1e-12), stage


def test_without_a_pipeline_every_micro_batch_reduces_within_and_across(uniform):
    """pp 1, one micro-batch: FSDP's ``(n_s-1)/n_s·2·(2Ψ + Ψ_layers)`` within the shard
    group (the forward gathers everything, the backward the layers again, every gradient
    reduce-scattered) and the shards' all-reduce, ``2·(r-1)/r·2Ψ/n_s``."""
    topo = build_cluster({"preset": "switch", "gpus": DP, "link_bandwidth": "2 GB/s",
                          "link_latency": "0 us"})
    training = TrainingConfig(micro_batch=1, global_batch=DP, precision="bf16")
    result = uniform.run(topo, _parallel(pp=1), training, comm=RING)
    model = uniform.model
    psi = model.total_params()
    layers = model.layers * (12 * model.hidden ** 2 + 13 * model.hidden)
    within = (SHARD - 1) / SHARD * 2 * (2 * psi + layers)
    across = 2 * (REPLICATE - 1) / REPLICATE * 2 * psi / SHARD
    assert _dp_bytes_sent(result, "n0.gpu0") == pytest.approx(within + across, rel=1e-12)


@pytest.mark.parametrize("pp", [1, 2])
def test_state_is_sharded_over_the_shard_group(uniform, pp):
    """The optimizer state (12 bytes a parameter) over ``n_s`` ranks; without a pipeline
    the 2-byte weights and gradients too; replication over all ``dp`` gives ``dp`` ranks."""
    training = TrainingConfig(micro_batch=1, global_batch=DP, precision="bf16")
    psi = stage_params(uniform.model, _parallel(pp), 0)
    hsdp = memory_per_gpu(uniform.model, _parallel(pp), training)
    fsdp = memory_per_gpu(uniform.model, _parallel(pp, replicate=1), training)
    assert hsdp.optimizer_bytes == pytest.approx(12 * psi / SHARD, rel=1e-12)
    assert fsdp.optimizer_bytes == pytest.approx(12 * psi / DP, rel=1e-12)
    weights = 2 * psi if pp > 1 else 2 * psi / SHARD
    assert hsdp.weights_bytes == pytest.approx(weights, rel=1e-12)


@pytest.mark.parametrize("pp", [1, 2])
def test_the_bound_stays_below_the_simulated_iteration(pp):
    lower, estimate, simulated = bound_and_simulation(
        "hsdp", {"tp": 1, "pp": pp, "dp": 8 // pp, "fsdp": True, "dp_replicate": 2})
    assert 0 < lower <= simulated
    assert lower <= estimate


@pytest.mark.parametrize(("changes", "words"), [
    ({"dp_replicate": 2}, "needs zero 3 or fsdp"),
    ({"dp_replicate": 3, "fsdp": True}, "does not divide dp 4"),
    ({"dp_replicate": 0, "fsdp": True}, "dp_replicate"),
])
def test_bad_dp_replicate_is_a_clear_error(changes, words):
    from distsim_gpu.workloads.strategy.parallel import parallel_from_mapping
    with pytest.raises(ConfigError) as error:
        parallel = parallel_from_mapping({"dp": 4, **changes}, source="s.yaml")
        check_layout(parallel, micro_batch=1, layers=8)
    assert words in str(error.value)
    assert "parallelism.dp_replicate" in str(error.value)
