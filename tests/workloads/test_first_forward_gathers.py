"""The lower bound (``workloads.cost.bounds``) counts ZeRO-3/FSDP's parameter gathers that a
forward waits for: under a pipeline each chunk's first forward gathers its stage's root
unit (embeddings, or final norm and output layer) and then its layers, one gather ahead
of the compute (``workloads.iteration.param_shards``), before any later pass finds them
gathered; without one every forward gathers the root before the embedding.  Before, the
bound left these out (a pipeline's first forwards took their compute alone), so a search
simulated ZeRO-3-under-PP candidates that it could have pruned.  The bound must still never
exceed the simulated iteration, with and without a pipeline or ``reshard_after_forward``.
"""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.bounds import IterationBounds
from distsim_gpu.workloads.cost.traffic import stage_params
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.workloads.bound_check import bound_and_simulation

BANDWIDTH = 2e9  # bytes/s of every switch link
RING = CommParams(protocol="simple", algorithm="ring").ideal()


def _bound_and_simulation(uniform, parallel: ParallelConfig, microbatches: int,
                          ) -> tuple[float, float]:
    """The bound and simulated iteration of ``uniform``'s model (1 ms forward and 2 ms
    backward a layer, nothing else) in bf16, on a latency-free 2 GB/s switch, ideal rings."""
    topology = build_cluster({"preset": "switch", "gpus": parallel.pp * parallel.dp,
                              "link_bandwidth": BANDWIDTH, "link_latency": 0})
    training = TrainingConfig(micro_batch=1, global_batch=parallel.dp * microbatches,
                              precision="bf16")
    lower, _estimate = IterationBounds(topology, uniform.model, uniform.costs,
                                       comm=RING).bound(parallel, training, microbatches)
    return lower, uniform.run(topology, parallel, training, comm=RING).iteration_time_s


def _layer_params(uniform) -> int:
    h = uniform.model.hidden
    return 12 * h * h + 13 * h  # QKV, projection, MLP weights and biases, two norms


@pytest.mark.parametrize("microbatches", [1, 4])
def test_a_pipelines_first_forwards_wait_for_their_gathers(uniform, microbatches):
    """pp 2 (4 layers a stage), 1F1B, dp 4: on a ring a GPU sends ``(n-1)/n`` of what it
    gathers or reduces, so a layer's gather and its gradients' reduce-scatter each take
    ``g = (n-1)/n·2P/B`` (9.4 ms, above a layer's 1 ms forward) and stage ``s``'s root
    ``(n-1)/n·2(Ψ_s - 4P)/B``.  The chain that binds: micro-batch 0's forward through both
    stages, stage 1's ``m`` forwards and backwards and its reductions, the gradient's way
    back, stage 0's last backward and reductions, the tied embedding's all-reduce.  Its
    first forwards, counted at their compute (4 ms) before, now take their gathers:
    ``root_s + 4g + 1 ms`` each (the last layer computes after the last gather), a rise of
    ``root_0 + root_1 + 8g - 6 ms``."""
    parallel = ParallelConfig(dp=4, pp=2, zero=3, fsdp=True, grad_reduce_precision="bf16")
    lower, simulated = _bound_and_simulation(uniform, parallel, microbatches)
    model, share, layer = uniform.model, 3 / 4, _layer_params(uniform)
    g = share * 2 * layer / BANDWIDTH
    roots = [share * 2 * (stage_params(model, parallel, s) - 4 * layer) / BANDWIDTH
             for s in range(2)]
    send = 2 * model.seq_len * model.hidden / BANDWIDTH  # an activation, either way
    tied = 2 * model.vocab * model.hidden / BANDWIDTH  # all-reduced by 2 GPUs: S/B each
    m, f, b = microbatches, 1e-3, 2e-3
    # Before: stage 1's passes after stage 0's first forward (4f) and the send; then the
    # reductions (4g), the gradient back, stage 0's last backward (4b) and its reductions.
    before = 4 * f + send + m * 4 * (f + b) + 4 * g + send + 4 * b + 4 * g + tied
    rise = sum(roots) + 8 * g - 6 * f
    assert rise > 0.1
    assert lower == pytest.approx((before + rise) * (1 - 1e-6), rel=1e-9)
    assert lower <= simulated


@pytest.mark.parametrize("microbatches", [1, 3])
def test_without_a_pipeline_every_forward_gathers_the_root(uniform, microbatches):
    """pp 1, dp 8, FSDP resharding after the forward: a GPU's uplink carries, each
    micro-batch, ``(n-1)/n·2`` bytes a parameter of the layers' gathers (forward and
    backward) and gradients (24P in all) and, now counted, the root's gather before the
    embedding: ``m·(n-1)/n·2·(24P + Ψ - 8P)/B``, the link chain binding."""
    parallel = ParallelConfig(dp=8, fsdp=True, grad_reduce_precision="bf16")
    lower, simulated = _bound_and_simulation(uniform, parallel, microbatches)
    layer, share = _layer_params(uniform), 7 / 8
    root = uniform.model.total_params() - 8 * layer
    expected = microbatches * share * 2 * (24 * layer + root) / BANDWIDTH
    assert lower == pytest.approx(expected * (1 - 1e-6), rel=1e-9)
    assert lower <= simulated


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(layout=st.sampled_from([(1, 1), (1, 2), (2, 2), (1, 4), (2, 1)]),
       schedule=st.sampled_from([("1f1b", 1), ("gpipe", 1), ("interleaved", 2)]),
       sharding=st.sampled_from(["zero3", "fsdp", "zero1"]),
       reshard=st.sampled_from([None, False]),
       recompute=st.sampled_from(["none", "full"]),
       global_batch=st.sampled_from([8, 16, 32]),
       bandwidth=st.sampled_from(["2 GB/s", "50 GB/s"]))
def test_the_bound_stays_below_the_simulated_iteration(layout, schedule, sharding, reshard,
                                                       recompute, global_batch, bandwidth):
    """ZeRO-3 and FSDP with and without a pipeline and ``reshard_after_forward``, slow and
    fast links, full recomputation, micro-batch counts (and ZeRO-1, whose pipelines share
    micro-batch 0's chain through every chunk)."""
    (tp, pp), (name, interleave) = layout, schedule
    assume(pp > 1 or name == "1f1b")
    assume(sharding != "zero1" or reshard is None)
    parallelism = {"tp": tp, "pp": pp, "dp": 8 // (tp * pp), "schedule": name,
                   "interleave": interleave, "zero": 1 if sharding == "zero1" else 3,
                   "fsdp": sharding == "fsdp"}
    if reshard is not None:
        parallelism["reshard_after_forward"] = reshard
    try:
        lower, _estimate, simulated = bound_and_simulation(
            "first-forward", parallelism, cluster={"link_bandwidth": bandwidth},
            training={"global_batch": global_batch, "recompute": recompute})
    except ConfigError:
        assume(False)
        return
    assert 0 < lower <= simulated
