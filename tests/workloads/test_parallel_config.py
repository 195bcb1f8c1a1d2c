"""Reading and checking a parallel strategy: every named choice (schedule, partition,
gradient precision, placement order, recompute mode, precision) is checked with the
key it was written at and what would be valid; mappings reject unknown keys."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.simcore.errors import ConfigError, ParseError
from distsim_gpu.workloads.cost import traffic
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_ep_split,
    check_strategy,
    check_tp_split,
    parallel_from_mapping,
    training_from_mapping,
)
from distsim_gpu.workloads.strategy.precision import GRAD_REDUCE_PRECISIONS

from tests.workloads.layouts import shape_model

_MODEL = shape_model(layers=8, heads=8, kv_heads=8)


def _check(parallel: ParallelConfig, training: TrainingConfig | None = None) -> int:
    training = training or TrainingConfig(micro_batch=1, global_batch=8)
    return check_strategy(_MODEL, parallel, training, num_gpus=8, source="s.yaml")


def test_a_valid_strategy_passes() -> None:
    assert _check(ParallelConfig(tp=2, pp=2, dp=2)) == 4


@pytest.mark.parametrize(("change", "text"), [
    ({"schedule": "1f1"}, "s.yaml: parallelism.schedule: unknown schedule '1f1' "
                          "(did you mean '1f1b'? valid: 1f1b, dualpipe, dualpipev, gpipe, "
                          "interleaved)"),
    ({"partition": "even"}, "s.yaml: parallelism.partition: unknown partition 'even' "
                            "(valid: embedding, uniform)"),
    ({"grad_reduce_precision": "fp8"}, "s.yaml: parallelism.grad_reduce_precision: unknown "
                                       "gradient precision 'fp8' (valid: bf16, fp16, fp32)"),
    ({"order": "tp-pp"}, "s.yaml: parallelism.order: unknown placement order 'tp-pp' "
                         "(did you mean"),
])
def test_an_unknown_parallel_choice_names_its_key(change, text) -> None:
    with pytest.raises(ConfigError) as info:
        _check(replace(ParallelConfig(dp=8), **change))
    assert str(info.value).startswith(text)


@pytest.mark.parametrize(("change", "text"), [
    ({"recompute": "ful"}, "s.yaml: training.recompute: unknown recompute mode 'ful' "
                           "(did you mean 'full'? valid: full, none, op, selective)"),
    ({"precision": "bf61"}, "s.yaml: training.precision: unknown precision 'bf61' "
                            "(did you mean 'bf16'?"),
])
def test_an_unknown_training_choice_names_its_key(change, text) -> None:
    with pytest.raises(ConfigError) as info:
        _check(ParallelConfig(dp=8), TrainingConfig(micro_batch=1, global_batch=8, **change))
    assert str(info.value).startswith(text)


def test_placement_checks_its_order() -> None:
    with pytest.raises(ConfigError) as info:
        Placement(ParallelConfig(order="dp-tp"))
    assert str(info.value).startswith("parallelism.order: unknown placement order 'dp-tp'")


def test_gradient_precisions_are_the_ones_traffic_can_size() -> None:
    assert set(GRAD_REDUCE_PRECISIONS) == set(traffic.GRAD_BYTES)


def test_from_mapping_reads_known_keys() -> None:
    assert parallel_from_mapping(None) == ParallelConfig()
    assert parallel_from_mapping({"tp": 2, "schedule": "GPipe"}) == ParallelConfig(
        tp=2, schedule="gpipe")
    assert training_from_mapping({"global_batch": 16}).global_batch == 16


def test_from_mapping_rejects_unknown_keys_and_non_mappings() -> None:
    with pytest.raises(ConfigError) as info:
        parallel_from_mapping({"tpp": 2}, source="s.yaml")
    assert str(info.value).startswith("s.yaml: parallelism.tpp: unknown key (did you mean "
                                      "'tp'?")
    with pytest.raises(ConfigError) as info:
        training_from_mapping([1], source="s.yaml")  # type: ignore[arg-type]
    assert str(info.value) == "s.yaml: training: expected a mapping, got list [1]"


@pytest.mark.parametrize(("parallel", "training", "text"), [
    (ParallelConfig(tp=0, dp=8), None, "s.yaml: parallelism.tp: must be a whole number >= 1, "
                                       "got 0"),
    (ParallelConfig(dp=8, interleave=True), None, "s.yaml: parallelism.interleave: must be "
                                                  "a whole number >= 1, got True"),
    (ParallelConfig(dp=8), TrainingConfig(micro_batch=1, global_batch=8, seq_len=0),
     "s.yaml: training.seq_len: must be a whole number >= 1, got 0"),
])
def test_degrees_and_batch_sizes_are_whole_numbers(parallel, training, text) -> None:
    with pytest.raises(ConfigError) as info:
        _check(parallel, training)
    assert str(info.value).startswith(text)


@pytest.mark.parametrize(("parallel", "text"), [
    (ParallelConfig(dp=8, zero=4), "s.yaml: parallelism.zero: must be 0, 1, 2 or 3, got 4"),
    (ParallelConfig(dp=8, zero=1, fsdp=True), "s.yaml: parallelism.zero: fsdp shards like "
                                              "ZeRO-3; zero 1 contradicts it (use zero 0 or 3 "
                                              "with fsdp)"),
    (ParallelConfig(dp=8, interleave=2), "s.yaml: parallelism.interleave: interleave 2 needs "
                                         "schedule: interleaved"),
    (ParallelConfig(pp=2, dp=4, schedule="interleaved"), "s.yaml: parallelism.interleave: the "
                                                         "interleaved schedule needs "
                                                         "interleave >= 2"),
    (ParallelConfig(pp=8, dp=1, interleave=2, schedule="interleaved"),
     "s.yaml: parallelism.pp: 8 layers do not split into pp·interleave = 16 equal chunks"),
    (ParallelConfig(dp=8, ep=2), "s.yaml: parallelism.ep: ep = 2 needs a MoE model"),
])
def test_sharding_and_pipeline_checks_name_the_key(parallel, text) -> None:
    with pytest.raises(ConfigError) as info:
        _check(parallel)
    assert str(info.value).startswith(text)


def test_tp_and_ep_splits() -> None:
    check_tp_split(heads=32, kv_heads=4, tp=8)  # fewer KV heads than tp: replicated
    check_ep_split(experts=8, ep=4)
    with pytest.raises(ConfigError) as info:
        check_tp_split(heads=32, kv_heads=8, tp=3)
    assert str(info.value) == ("tp: 32 attention heads do not split over tp = 3 (tp must "
                               "divide 32: tensor parallelism splits whole attention heads)")
    with pytest.raises(ConfigError, match="tp: 6 key/value heads do not split over tp = 4"):
        check_tp_split(heads=32, kv_heads=6, tp=4)
    with pytest.raises(ConfigError, match="ep: 8 experts do not split over ep = 3"):
        check_ep_split(experts=8, ep=3)


@pytest.mark.parametrize(("section", "data", "key"), [
    ("parallelism", {"tp": "4"}, "parallelism.tp"),
    ("parallelism", {"pp": 2.0}, "parallelism.pp"),
    ("parallelism", {"dp": True}, "parallelism.dp"),
    ("parallelism", {"zero": -1}, "parallelism.zero"),
    ("parallelism", {"interleave": 0}, "parallelism.interleave"),
    ("training", {"micro_batch": "2"}, "training.micro_batch"),
    ("training", {"seq_len": "4k"}, "training.seq_len"),
])
def test_the_typed_configs_hold_whole_numbers_from_the_start(section, data, key):
    read = parallel_from_mapping if section == "parallelism" else training_from_mapping
    with pytest.raises(ConfigError) as info:
        read(data, source="job.yaml")
    assert info.value.key == key and "whole number" in str(info.value)
    assert info.value.source == "job.yaml"


def test_zero_stage_0_and_the_models_sequence_are_valid_values():
    assert parallel_from_mapping({"zero": 0, "tp": 2}).tp == 2
    assert training_from_mapping({"seq_len": None}).seq_len is None


@pytest.mark.parametrize(("given", "params"), [("40M", 40_000_000), ("2.5M", 2_500_000),
                                                (4e7, 40_000_000)])
def test_bucket_params_is_a_decimal_count_of_parameters(given, params):
    # Megatron's and DeepSpeed's bucket sizes count elements: "40M" is 4e7, not 40 * 2^20.
    assert parallel_from_mapping({"bucket_params": given}).bucket_params == params


def test_bucket_params_refuses_a_fraction_of_a_parameter():
    with pytest.raises(ParseError, match=r"parallelism\.bucket_params.*whole"):
        parallel_from_mapping({"bucket_params": 1.5})
