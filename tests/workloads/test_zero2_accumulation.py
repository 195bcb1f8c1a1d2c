"""ZeRO-2 under gradient accumulation: DeepSpeed's stage 2 keeps each GPU's gradients only
as its reduced shard, so every micro-batch's backward reduce-scatters its gradient
buckets (it has no ``no_sync``), where ZeRO-1 (Megatron-Core's distributed optimizer)
reduces the accumulated gradients once a step.  Per GPU and step, over ``n`` ranks of a
ring: ``m·(n-1)/n·2Ψ`` bytes of bf16 gradients reduce-scattered and ``(n-1)/n·2Ψ`` of
parameters all-gathered once.

Under a pipeline ZeRO-2 reduces once a step, on the last micro-batch: DeepSpeed refuses
stage 2 with pipeline parallelism, and PyTorch's pipeline stages run FSDP's backward
without gradient sync but for the last micro-batch (Llama 3's, torchtitan's recipe).

Until 7 December ``zero: 2`` reduced once a step, as ``zero: 1`` does: at ``m``
micro-batches a step it moved ``(m+1)/2`` times less than DeepSpeed does."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.scenarios.report.bottlenecks import link_summary
from distsim_gpu.scenarios.run_notes import zero2_pipeline_notes
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.memory import memory_per_gpu
from distsim_gpu.workloads.cost.parameters import Chunking, params_on_gpu
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

DP = 4
BANDWIDTH = 2e9  # bytes/s: slow enough that each micro-batch's reduction is exposed
RING = CommParams(protocol="simple", algorithm="ring")


def _run(uniform, zero: int, microbatches: int, pp: int = 1):
    topo = build_cluster({"preset": "switch", "gpus": DP * pp, "link_bandwidth": "2 GB/s",
                          "link_latency": "0 us"})
    parallel = ParallelConfig(dp=DP, pp=pp, zero=zero, grad_reduce_precision="bf16")
    training = TrainingConfig(micro_batch=1, global_batch=DP * microbatches,
                              precision="bf16")
    return uniform.run(topo, parallel, training, comm=RING)


def _dp_bytes_sent(result) -> float:
    rows = link_summary(result, top=4 * DP)["top_links_by_utilisation"]
    (row,) = [r for r in rows if r["link"] == "n0.gpu0->n0.switch"]
    return row["bytes_by_traffic"]["dp"]


@pytest.mark.parametrize("microbatches", [1, 2, 4])
def test_zero2_reduce_scatters_every_micro_batch(uniform, microbatches):
    """``m·(n-1)/n·2Ψ + (n-1)/n·2Ψ`` bytes a GPU sends a step (m = 1: ZeRO-1's)."""
    psi = uniform.model.total_params()
    share = (DP - 1) / DP
    expected = microbatches * share * 2 * psi + share * 2 * psi
    sent = _dp_bytes_sent(_run(uniform, 2, microbatches))
    assert sent == pytest.approx(expected, rel=1e-12)


def test_zero2_time_grows_with_micro_batches_where_the_reduction_is_exposed(uniform):
    """At 2 GB/s a micro-batch's reduce-scatter (~100 ms) outlasts its backward (~16 ms):
    the data-parallel stream carries ``m`` reductions and the gather in sequence, so
    the iteration lasts at least their closed-form time; one micro-batch a step runs as
    ZeRO-1, and each further one adds to ZeRO-2's lead."""
    psi = uniform.model.total_params()
    call_s = (DP - 1) / DP * 2 * psi / BANDWIDTH  # a ring's reduce-scatter or all-gather
    extra = []
    for m in (1, 2, 4):
        zero1 = _run(uniform, 1, m).iteration_time_s
        zero2 = _run(uniform, 2, m).iteration_time_s
        assert zero2 >= (m + 1) * call_s * (1 - 1e-9), m
        extra.append(zero2 - zero1)
    assert extra[0] == pytest.approx(0.0, abs=1e-12)
    assert extra[0] < extra[1] < extra[2]


def test_zero2_under_a_pipeline_reduces_once_a_step(uniform):
    """pp 2, 4 micro-batches: the first stage's GPU sends its stage's gradients once,
    reduce-scattered, and its parameters once, gathered — ZeRO-1's bytes, not (m+1)x."""
    result = _run(uniform, 2, 4, pp=2)
    zero1 = _run(uniform, 1, 4, pp=2)
    assert _dp_bytes_sent(result) == pytest.approx(_dp_bytes_sent(zero1), rel=1e-12)
    assert result.iteration_time_s == pytest.approx(zero1.iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("pp,sharded", [(1, True), (2, False)])
def test_zero2_gradients_are_held_whole_under_a_pipeline(uniform, pp, sharded):
    """A stage that reduces once a step holds its whole gradients until then (4 bytes a
    parameter of fp32 main gradients); without a pipeline ZeRO-2 keeps only the reduced
    shard, 1/dp of them.  The optimizer state is sharded either way.  Until 7 December
    the memory counted them sharded under a pipeline too."""
    parallel = ParallelConfig(dp=DP, pp=pp, zero=2)
    training = TrainingConfig(micro_batch=1, global_batch=4 * DP, precision="bf16")
    params = params_on_gpu(uniform.model, tp=1, pp=pp, ep=1, stage=0, etp=1,
                           chunking=Chunking.of(parallel)).total
    memory = memory_per_gpu(uniform.model, parallel, training, stage=0, num_microbatches=4)
    assert memory.gradients_bytes == pytest.approx(4 * params / (DP if sharded else 1),
                                                   rel=1e-12)
    assert memory.optimizer_bytes == pytest.approx(12 * params / DP, rel=1e-12)


def test_zero2_under_a_pipeline_says_it_runs_as_zero1():
    """The stage's name promises sharded gradients; the run's notes say what it ran."""
    (note,) = zero2_pipeline_notes(ParallelConfig(dp=DP, pp=2, zero=2))
    assert note.key == "parallelism.zero" and "ZeRO-1's" in note.message
    assert zero2_pipeline_notes(ParallelConfig(dp=DP, pp=1, zero=2)) == []
    assert zero2_pipeline_notes(ParallelConfig(dp=DP, pp=2, zero=1)) == []
