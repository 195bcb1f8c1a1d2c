"""Per-operator sharding (OSDP, ``parallelism.operator_sharding``): bytes per iteration
against closed forms, the two extreme plans against plain DP and ZeRO-3, memory by hand,
and the combinations refused."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.bounds import IterationBounds
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import layer_params_local, memory_of_strategy
from distsim_gpu.workloads.iteration.ops import Collective, Compute
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy.operator_sharding import (
    SHARDABLE_OPERATORS,
    OperatorSharding,
    operator_params,
    operator_sharding_from_mapping,
    split_extra_s,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    parallel_from_mapping,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workloads.layouts import shape_model

H, L, V, DP, M = 1024, 3, 50_000, 4, 2
# What no layer holds: the (tied) word embedding, the learned position embedding of the
# 512-token sequence, the final LayerNorm.
OUTSIDE = V * H + 512 * H + 2 * H
GPT = model_from_mapping({"name": "gpt", "layers": L, "hidden": H, "heads": 16,
                          "seq_len": 512, "vocab": V})
TRAINING = TrainingConfig(micro_batch=1, global_batch=M * DP, precision="bf16")
COSTS = RooflineCosts(get_gpu("a100-80gb"), precision="bf16")


def _plan(**data) -> OperatorSharding:
    return operator_sharding_from_mapping(data)


def _stream(parallel: ParallelConfig, model=GPT) -> list:
    return StreamBuilder(model, parallel, TRAINING, COSTS, microbatches=M).stage_stream(0)


def _dp_bytes(stream: list, op: str) -> float:
    return sum(o.size_bytes for o in stream
               if isinstance(o, Collective) and o.group == "dp" and o.op == op)


# ----------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("spec", [{}, {"gated_mlp": True, "ffn_hidden": 2816},
                                  {"attention_bias": False, "mlp_bias": False},
                                  {"kv_heads": 4}])
@pytest.mark.parametrize("tp", [1, 2, 4])
def test_operator_parameters_add_up_to_the_layer(spec, tp):
    model = model_from_mapping({"name": "m", "layers": 2, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 1000, **spec})
    params = operator_params(model, tp)
    assert sum(params.values()) == pytest.approx(layer_params_local(model, 0, tp, 1)[0],
                                                 rel=1e-12)


def test_gpt_operators_by_hand():
    p = operator_params(GPT, 1)  # 4h² MLP width, biases on
    assert p == {"input_norm": 2 * H, "qkv": 3 * H * H + 3 * H, "attn_out": H * H + H,
                 "post_attn_norm": 2 * H, "mlp_fc1": 4 * H * H + 4 * H,
                 "mlp_fc2": 4 * H * H + H}


# ----------------------------------------------------------------------------- bytes


def test_mixed_plan_bytes_per_iteration_are_the_closed_forms():
    """Sharded fc1/fc2: all-gathered twice (forward, backward) and reduce-scattered once
    per micro-batch and layer; the rest all-reduced once, with the embeddings and the
    final norm."""
    plan = _plan(sharded=["mlp_fc1", "mlp_fc2"])
    stream = _stream(ParallelConfig(dp=DP, operator_sharding=plan))
    p = operator_params(GPT, 1)
    sharded = p["mlp_fc1"] + p["mlp_fc2"]
    rest = sum(p.values()) - sharded
    assert _dp_bytes(stream, "all_gather") == pytest.approx(2 * M * L * sharded * 2)
    assert _dp_bytes(stream, "reduce_scatter") == pytest.approx(M * L * sharded * 4)
    assert _dp_bytes(stream, "all_reduce") == pytest.approx((L * rest + OUTSIDE) * 4)
    # On the wire per GPU a ring moves (dp-1)/dp of each: 3 sharded passes' worth.
    wire = (_dp_bytes(stream, "all_gather") + _dp_bytes(stream, "reduce_scatter")) * (
        DP - 1) / DP
    assert wire == pytest.approx(M * L * sharded * (2 * 2 + 4) * (DP - 1) / DP)


@settings(max_examples=25, deadline=None)
@given(st.sets(st.sampled_from(SHARDABLE_OPERATORS)), st.sampled_from(["replicated",
                                                                       "sharded"]))
def test_every_gradient_is_reduced_once_whatever_the_plan(chosen, default):
    """Sharded and replicated gradients together are one copy of the layers' gradients,
    once per micro-batch for the sharded part and once per iteration for the rest."""
    other = "replicated" if default == "sharded" else "sharded"
    plan = _plan(default=default, **{other: sorted(chosen)})
    stream = _stream(ParallelConfig(dp=DP, operator_sharding=plan))
    p = operator_params(GPT, 1)
    sharded = sum(p[op] for op in plan.sharded_operators)
    rest = sum(p.values()) - sharded
    # The embeddings and the final norm travel with the buckets; sharded throughout,
    # they are reduce-scattered every micro-batch like a layer, and gathered once (FSDP's
    # root unit, kept from the forward through the backward).
    words = OUTSIDE if rest else 0.0
    scattered_words = 0.0 if rest else M * OUTSIDE
    assert _dp_bytes(stream, "reduce_scatter") == pytest.approx(
        (M * L * sharded + scattered_words) * 4)
    assert _dp_bytes(stream, "all_reduce") == pytest.approx((L * rest + words) * 4)
    assert _dp_bytes(stream, "all_gather") == pytest.approx(
        2 * M * L * sharded * 2 + scattered_words * 2)


@pytest.mark.parametrize(("default", "today"), [("replicated", {}), ("sharded", {"zero": 3})])
def test_the_extreme_plans_are_plain_dp_and_zero_3(default, today):
    plan = ParallelConfig(dp=DP, operator_sharding=_plan(default=default))
    assert _stream(plan) == _stream(ParallelConfig(dp=DP, **today))


# ----------------------------------------------------------------------------- memory


def test_memory_by_hand():
    """bf16 Adam with fp32 main gradients (the default grad_reduce_precision): 2 + 4 + 12
    bytes per parameter; sharded ones /dp; plus fc1's gathered weights /4 (its split), the
    largest live."""
    plan = _plan(sharded=["mlp_fc1", "mlp_fc2"], split={"mlp_fc1": 4})
    parallel = ParallelConfig(dp=DP, operator_sharding=plan)
    kw = {"seq_len": 512, "microbatches": M, "stage": 0, "flash_attention": True}
    got = memory_of_strategy(GPT, parallel, TRAINING, **kw)
    plain = memory_of_strategy(GPT, ParallelConfig(dp=DP), TRAINING, **kw)
    p = operator_params(GPT, 1)
    sharded = L * (p["mlp_fc1"] + p["mlp_fc2"])
    total = GPT.total_params()
    held = total - sharded + sharded / DP
    peak = max(p["mlp_fc1"] / 4, p["mlp_fc2"])  # fc2 unsplit is the larger
    assert got.weights_bytes == pytest.approx(2 * held + 2 * peak, rel=1e-12)
    assert got.gradients_bytes == pytest.approx(4 * held, rel=1e-12)
    assert got.optimizer_bytes == pytest.approx(12 * held, rel=1e-12)
    assert got.activations_bytes == plain.activations_bytes


def test_splitting_lowers_the_gathered_peak():
    kw = {"seq_len": 512, "microbatches": M, "stage": 0, "flash_attention": True}

    def weights(split):
        plan = _plan(sharded=["mlp_fc1"], split=split)
        return memory_of_strategy(GPT, ParallelConfig(dp=DP, operator_sharding=plan),
                                  TRAINING, **kw).weights_bytes
    fc1 = operator_params(GPT, 1)["mlp_fc1"]
    assert weights({}) - weights({"mlp_fc1": 4}) == pytest.approx(2 * fc1 * 3 / 4)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("data", "words"), [
    ({"sharded": ["mlp_fc3"]}, ["mlp_fc3", "did you mean 'mlp_fc"]),
    ({"split": {"qkvv": 2}}, ["qkvv", "did you mean 'qkv'"]),
    ({"sharded": ["qkv"], "split": {"qkv": 0}}, ["split.qkv", ">= 1"]),
    ({"default": "half"}, ["default", "half"]),
    ({"sharded": "qkv"}, ["must be a list"]),
    ({"sharded": ["qkv"], "replicated": ["qkv"]}, ["both"]),
    ({"shard": ["qkv"]}, ["shard", "did you mean 'sharded'"]),
])
def test_bad_plans_are_clear_errors(data, words):
    with pytest.raises(ConfigError) as err:
        parallel_from_mapping({"dp": 4, "operator_sharding": data}, source="s.yaml")
    text = str(err.value)
    assert "s.yaml" in text and "parallelism.operator_sharding" in text
    for word in words:
        assert word in text


@pytest.mark.parametrize(("extra", "words"), [
    ({"zero": 3}, "zero/fsdp"), ({"fsdp": True}, "zero/fsdp"),
    ({"tp": 4, "dp": 1, "tp_mode": "2d"}, "tp_mode 2d"),
    ({"pp": 2, "dp": 2}, "pipeline"),
])
def test_unsupported_combinations_are_refused(extra, words):
    parallel = replace(ParallelConfig(dp=4, operator_sharding=_plan(default="sharded")),
                       **extra)
    with pytest.raises(ConfigError, match=words):
        check_strategy(shape_model(layers=4), parallel,
                       TrainingConfig(micro_batch=1, global_batch=4), num_gpus=4)


def test_moe_and_unsharded_splits_are_refused():
    training = TrainingConfig(micro_batch=1, global_batch=4)
    parallel = ParallelConfig(dp=4, operator_sharding=_plan(sharded=["qkv"]))
    with pytest.raises(ConfigError, match="MoE"):
        check_strategy(shape_model(layers=4, experts=8), parallel, training, num_gpus=4)
    split_only = replace(parallel, operator_sharding=_plan(split={"mlp_fc1": 2}))
    with pytest.raises(ConfigError, match="split but not sharded"):
        check_strategy(shape_model(layers=4), split_only, training, num_gpus=4)


def test_splitting_costs_the_sliced_gemms_time_in_every_pass():
    """fc1 in 8 slices: each pass of each layer and micro-batch pays the roofline's time of
    8 GEMMs of n/8 over the one GEMM (smaller shapes run less efficiently: never faster)."""
    def compute_s(split):
        plan = _plan(sharded=["mlp_fc1"], split=split)
        return sum(o.duration_s for o in _stream(ParallelConfig(dp=DP, operator_sharding=plan))
                   if isinstance(o, Compute))
    shape = {"micro_batch": 1, "seq_len": 512, "tp": 1, "sequence_parallel": False,
             "layer_index": 0, "ep": 1}
    plan = _plan(sharded=["mlp_fc1"], split={"mlp_fc1": 8})
    extra = [split_extra_s(plan, COSTS, p, GPT, LayerShard(**shape)) for p in ("fwd", "bwd")]
    assert all(e > 0 for e in extra)
    assert compute_s({"mlp_fc1": 8}) - compute_s({}) == pytest.approx(M * L * sum(extra),
                                                                      rel=1e-9)
    assert split_extra_s(_plan(sharded=["mlp_fc1"]), COSTS, "fwd", GPT, LayerShard(**shape)) == 0.0


@pytest.mark.parametrize("data", [{"sharded": ["mlp_fc1", "mlp_fc2"]},
                                  {"default": "sharded", "replicated": ["qkv"]},
                                  {"sharded": ["qkv"], "split": {"qkv": 2}}])
def test_lower_bound_stays_below_the_simulated_iteration(data):
    topology = build_cluster({"preset": "switch", "gpus": 8, "link_bandwidth": "2 GB/s"})
    parallel = ParallelConfig(dp=8, operator_sharding=_plan(**data))
    training = TrainingConfig(micro_batch=1, global_batch=16)
    spec = IterationSpec(topology, GPT, parallel, training, COSTS, get_gpu("a100-80gb"),
                         comm=CommParams())
    simulated = simulate_iteration(spec).iteration_time_s
    lower, _ = IterationBounds(topology, GPT, COSTS, comm=CommParams()).bound(
        parallel, training, 2)
    assert 0 < lower <= simulated


def test_the_run_summary_names_the_plan():
    from distsim_gpu.scenarios.report.summary import _strategy
    plan = _plan(sharded=["mlp_fc1", "mlp_fc2"], split={"mlp_fc1": 4})
    parallel = ParallelConfig(dp=4, operator_sharding=plan)
    config = {"parallelism": parallel.to_dict()}
    training = TrainingConfig(recompute="none", precision="bf16")
    assert ("operators replicated but sharded mlp_fc1+mlp_fc2, mlp_fc1 split 4"
            in _strategy(parallel, training))
    again = parallel_from_mapping(config["parallelism"])  # resolved configs read back
    assert again.operator_sharding == plan
