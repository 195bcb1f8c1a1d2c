"""Property tests: monotonicity and conservation over families of inputs."""

from __future__ import annotations

import pytest
from distsim_gpu.workloads.cost.compute import Kernel, RooflineCosts, matmul_efficiency
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import (
    activation_bytes_per_layer,
    memory_per_gpu,
    params_on_gpu,
)
from distsim_gpu.workloads.specs.gpus import GPU_PRESETS, get_gpu
from distsim_gpu.workloads.specs.models import MODEL_PRESETS, ModelSpec, get_model
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import given, settings
from hypothesis import strategies as st

FAST = settings(max_examples=60, deadline=None)
presets = st.sampled_from(sorted(MODEL_PRESETS))


@FAST
@given(presets, st.integers(1, 16), st.integers(1, 16),
       st.sampled_from(["none", "selective", "full"]), st.booleans())
def test_memory_monotone_in_micro_batch(name, b1, b2, recompute, sp):
    model = get_model(name)
    tp = 4 if model.heads % 4 == 0 else 1
    low, high = sorted((b1, b2))
    parallel = ParallelConfig(tp=tp, sequence_parallel=sp)
    a = memory_per_gpu(model, parallel, TrainingConfig(micro_batch=low, recompute=recompute,
                                                       seq_len=1024), num_microbatches=8)
    b = memory_per_gpu(model, parallel, TrainingConfig(micro_batch=high, recompute=recompute,
                                                       seq_len=1024), num_microbatches=8)
    assert a.activations_bytes <= b.activations_bytes
    assert a.weights_bytes == b.weights_bytes
    # Activations are linear in the micro-batch.
    assert b.activations_bytes * low == pytest.approx(
        a.activations_bytes * high, rel=1e-9)


@FAST
@given(presets, st.sampled_from([1, 2, 4, 8]))
def test_recompute_never_increases_per_layer_activations(name, tp):
    model = get_model(name)
    if model.heads % tp:
        tp = 1
    sizes = [activation_bytes_per_layer(model, LayerShard(micro_batch=1, seq_len=512, tp=tp,
                                                          recompute=mode))
             for mode in ("none", "selective", "full")]
    assert sizes[0] >= sizes[1] >= sizes[2] > 0


@FAST
@given(presets, st.integers(0, 3), st.sampled_from([1, 2, 8, 64]))
def test_zero_never_increases_memory(name, stage, dp):
    model = get_model(name)
    base = memory_per_gpu(model, ParallelConfig(dp=dp))
    sharded = memory_per_gpu(model, ParallelConfig(dp=dp, zero=stage))
    assert sharded.total_bytes <= base.total_bytes
    assert sharded.total_bytes == (sharded.weights_bytes + sharded.gradients_bytes
                                   + sharded.optimizer_bytes + sharded.activations_bytes)


@FAST
@given(st.sampled_from(sorted(GPU_PRESETS)), st.floats(1e3, 1e15), st.floats(1.0, 1e4),
       st.floats(1.0, 1e10), st.integers(1, 8192), st.integers(1, 8192),
       st.integers(1, 8192))
def test_roofline_time_monotone_in_flops(gpu_name, flops, factor, bytes_moved, m, n, k):
    gpu = get_gpu(gpu_name)
    costs = RooflineCosts(gpu, precision="fp16")
    for kind in ("gemm", "attention"):
        small = Kernel("a", kind, flops, bytes_moved, m, n, k)
        big = Kernel("b", kind, flops * factor, bytes_moved, m, n, k)
        assert costs.kernel_time_s(small) <= costs.kernel_time_s(big)
        assert costs.kernel_time_s(small) >= costs.launch_overhead_s


@FAST
@given(st.integers(1, 20000), st.integers(1, 20000), st.integers(1, 20000),
       st.sampled_from([80, 108, 132]))
def test_matmul_efficiency_bounded(m, n, k, sms):
    eff = matmul_efficiency(m, n, k, sm_count=sms)
    assert 0 < eff <= 0.8


@FAST
@given(st.integers(1, 8), st.sampled_from([64, 128, 256]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([1, 2, 4]), st.integers(1, 4), st.booleans(), st.booleans())
def test_params_conserved_over_pipeline_stages(layers_per_stage, hidden, heads, pp,
                                               moe_every, tied, moe):
    model = ModelSpec("p", layers=layers_per_stage * pp * moe_every, hidden=hidden,
                      heads=heads, seq_len=32, vocab=1000, tied_embeddings=tied,
                      experts=4 if moe else 1, top_k=2 if moe else 1, moe_every=moe_every)
    total = sum(params_on_gpu(model, pp=pp, stage=r).total for r in range(pp))
    copy = model.vocab * model.hidden if tied and pp > 1 else 0
    assert total == model.total_params() + copy
    assert model.active_params() <= model.total_params()
