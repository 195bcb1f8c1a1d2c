"""What an iteration's transfers carry (``workloads.cost.traffic``), against closed forms: a GPT
layer's parameters, gradient and activation bytes by precision, the tensor-parallel,
pipeline and expert messages, the gradient reduction by ZeRO stage, and the buckets."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost import traffic
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import given
from hypothesis import strategies as st

H = 512
GPT = model_from_mapping({"name": "gpt", "layers": 6, "hidden": H, "heads": 8,
                          "seq_len": 256, "vocab": 1000})
MOE = model_from_mapping({"name": "moe", "layers": 4, "hidden": H, "heads": 8,
                          "seq_len": 256, "vocab": 1000, "experts": 8, "top_k": 2})


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_gpt_layer_parameters_are_12h2_plus_13h_split_by_tp(tp):
    # Attention 4h² + 4h biases, MLP 8h² + 5h biases, two LayerNorms 4h: 12h² + 13h.
    # Tensor parallelism splits the matrices and the column-parallel biases (QKV 3h, FC1
    # 4h) and replicates the row-parallel ones (out h, FC2 h) and the norms.
    expected = (12 * H * H + 7 * H) / tp + 6 * H
    assert traffic.layer_params(GPT, 0, ParallelConfig(tp=tp)) == expected
    if tp == 1:
        assert expected == 12 * H * H + 13 * H == GPT.layer_params(0)


@pytest.mark.parametrize("ep", [1, 2, 8])
def test_moe_layer_holds_its_share_of_the_experts(ep):
    # Attention and norms (4h² + 8h), the router (h·experts), experts/ep MLPs of 8h² + 5h.
    expected = 4 * H * H + 8 * H + H * 8 + 8 / ep * (8 * H * H + 5 * H)
    assert traffic.layer_params(MOE, 0, ParallelConfig(ep=ep)) == expected


@pytest.mark.parametrize(("precision", "size"), [("fp32", 4), ("bf16", 2), ("fp16", 2)])
def test_gradient_bytes_follow_the_reduction_precision(precision, size):
    parallel = ParallelConfig(tp=2, grad_reduce_precision=precision)
    params = traffic.layer_params(GPT, 3, parallel)
    assert traffic.grad_bytes_per_element(precision) == size
    assert traffic.layer_grad_bytes(GPT, 3, parallel) == params * size
    assert traffic.bucket_bytes(parallel) == parallel.bucket_params * size
    assert traffic.word_embedding_grad_bytes(GPT, parallel) == 1000 * H / 2 * size


@pytest.mark.parametrize(("precision", "size"),
                         [("fp32", 4), ("bf16", 2), ("fp16", 2), ("fp8", 2)])
def test_activations_and_gathered_parameters_travel_at_the_training_precision(precision,
                                                                              size):
    # fp8 training keeps 16-bit activations and weights: 2 bytes on the wire.
    training = TrainingConfig(micro_batch=2, precision=precision)
    parallel = ParallelConfig(tp=4)
    assert traffic.activation_bytes_per_element(precision) == size
    assert traffic.tp_message_bytes(GPT, training) == 2 * 256 * H * size
    assert traffic.pipeline_message_bytes(GPT, parallel, training) == 2 * 256 * H * size / 4
    assert traffic.layer_param_bytes(GPT, 0, parallel, training) == (
        traffic.layer_params(GPT, 0, parallel) * size)


def test_sequence_length_of_the_training_overrides_the_models():
    assert traffic.seq_len_of(GPT, TrainingConfig()) == 256
    assert traffic.tp_message_bytes(GPT, TrainingConfig(seq_len=64)) == 64 * H * 2


@pytest.mark.parametrize("sp", [False, True])
def test_alltoall_carries_top_k_copies_of_each_token(sp):
    training = TrainingConfig(micro_batch=4)
    parallel = ParallelConfig(tp=2, sequence_parallel=sp)
    expected = 4 * 256 * 2 * H * 2 / (2 if sp else 1)
    assert traffic.alltoall_bytes(MOE, parallel, training) == expected


def test_tensor_parallel_collectives_per_block():
    assert traffic.tp_collective_kinds(ParallelConfig(tp=1)) == ()
    assert traffic.tp_collective_kinds(ParallelConfig(tp=1, sequence_parallel=True)) == ()
    assert traffic.tp_collective_kinds(ParallelConfig(tp=2)) == ("all_reduce",)
    assert traffic.tp_collective_kinds(ParallelConfig(tp=2, sequence_parallel=True)) == (
        "all_gather", "reduce_scatter")


@pytest.mark.parametrize(("zero", "op"), [(0, "all_reduce"), (1, "reduce_scatter"),
                                          (2, "reduce_scatter"), (3, "reduce_scatter")])
def test_gradients_are_reduce_scattered_once_optimizer_state_is_sharded(zero, op):
    parallel = ParallelConfig(dp=4, zero=zero)
    assert traffic.gradient_reduce_op(parallel) == op
    assert traffic.gathers_layer_params(parallel) == (zero == 3)


def test_fsdp_gathers_layers_and_updates_a_shard():
    parallel = ParallelConfig(dp=4, fsdp=True)
    assert traffic.gathers_layer_params(parallel)
    assert traffic.optimizer_params(GPT, parallel, 0) == traffic.stage_params(
        GPT, parallel, 0) / 4


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_optimizer_updates_the_stage_or_its_zero_shard(zero):
    parallel = ParallelConfig(pp=2, dp=4, zero=zero)
    stage = traffic.stage_params(GPT, parallel, 1)
    # Stage 1 of 2: three layers, the final norm and the tied output layer's copy.
    assert stage == 3 * GPT.layer_params(0) + 2 * H + 1000 * H
    assert traffic.optimizer_params(GPT, parallel, 1) == (stage / 4 if zero else stage)
    training = TrainingConfig(precision="bf16")
    assert traffic.stage_param_bytes(GPT, parallel, training, 1) == stage * 2
    assert traffic.stage_grad_bytes(GPT, parallel, 1) == stage * 4


def test_buckets_fill_in_backward_order_and_the_rest_goes_with_the_embedding():
    per_layer = traffic.layer_params(GPT, 0, ParallelConfig())
    parallel = ParallelConfig(dp=2, bucket_params=int(2 * per_layer))  # two layers a bucket
    grads = per_layer * 4
    embedding = (1000 + 256) * H * 4  # the word and the learned position embeddings
    buckets = traffic.gradient_buckets(GPT, parallel, [4, 3, 2, 1, 0], first_chunk=True,
                                       head_bytes=0.0)
    assert buckets == (traffic.GradientBucket(2 * grads, 2),
                       traffic.GradientBucket(2 * grads, 4),
                       traffic.GradientBucket(grads + embedding, None))
    later = traffic.gradient_buckets(GPT, parallel, [5, 4], first_chunk=False, head_bytes=0.0)
    assert later == (traffic.GradientBucket(2 * grads, 2),)
    # The last chunk's output layer opens its first bucket.
    head = traffic.gradient_buckets(GPT, parallel, [5, 4], first_chunk=False, head_bytes=7.0)
    assert head == (traffic.GradientBucket(2 * grads + 7.0, 2),)
    # One bucket per layer once a layer alone fills one; the embedding alone at the end.
    small = ParallelConfig(dp=2, bucket_params=1)
    assert [b.after_layers for b in traffic.gradient_buckets(
        GPT, small, [1, 0], first_chunk=True, head_bytes=0.0)] == [1, 2, None]


@given(bucket_params=st.integers(1, 10**8), layers=st.integers(1, 6),
       first=st.booleans(), precision=st.sampled_from(["fp32", "bf16"]))
def test_buckets_carry_every_gradient_once(bucket_params, layers, first, precision):
    parallel = ParallelConfig(dp=2, bucket_params=bucket_params,
                              grad_reduce_precision=precision)
    order = list(reversed(range(layers)))
    buckets = traffic.gradient_buckets(GPT, parallel, order, first_chunk=first,
                                       head_bytes=0.0)
    total = sum(traffic.layer_grad_bytes(GPT, layer, parallel) for layer in order)
    if first:
        total += traffic.entry_grad_bytes(GPT, parallel)
    assert sum(b.size_bytes for b in buckets) == pytest.approx(total, rel=1e-12)
    launched = [b.after_layers for b in buckets if b.after_layers is not None]
    assert launched == sorted(set(launched)) and all(1 <= k <= layers for k in launched)
    # Every bucket launched during the pass holds at least the threshold.
    threshold = traffic.bucket_bytes(parallel)
    assert all(b.size_bytes >= threshold for b in buckets if b.after_layers is not None)


@pytest.mark.parametrize(("call", "key", "words"), [
    (lambda: traffic.activation_bytes_per_element("fp6"), "training.precision",
     "unknown precision 'fp6'"),
    (lambda: traffic.grad_bytes_per_element("fp8"), "parallelism.grad_reduce_precision",
     "unknown gradient precision 'fp8'"),
])
def test_unknown_precision_names_the_key_and_the_valid_ones(call, key, words):
    with pytest.raises(ConfigError) as error:
        call()
    assert error.value.key == key
    assert words in str(error.value) and "fp32" in str(error.value)
