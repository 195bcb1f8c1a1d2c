"""A framework's name for a setting (Megatron-Core's, DeepSpeed's, FSDP's, torchtitan's)
written into a scenario is refused with the key that sets it here, or with what distsim
does instead; a framework named as a compute stack names its stack."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.compute_section import COMPUTE_KEYS
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute.stacks import STACKS, get_stack
from distsim_gpu.workloads.strategy.framework_names import (
    COMPUTE_NAMES,
    PARALLELISM_NAMES,
    STACK_NAMES,
    TRAINING_NAMES,
)
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    parallel_from_mapping,
    training_from_mapping,
)

PARALLEL_KEYS = tuple(ParallelConfig.__dataclass_fields__)
TRAINING_KEYS = tuple(TrainingConfig.__dataclass_fields__)
SECTIONS = [(PARALLELISM_NAMES, PARALLEL_KEYS), (TRAINING_NAMES, TRAINING_KEYS),
            (COMPUTE_NAMES, COMPUTE_KEYS)]


@pytest.mark.parametrize(("names", "keys"), SECTIONS)
def test_a_framework_name_never_shadows_a_key_and_names_real_keys(names, keys):
    for name, text in names.items():
        assert name not in keys, name
        if text.startswith("set "):  # "set interleave (…)", "set zero: 1 (…)"
            key = text.removeprefix("set ").split()[0].rstrip(":,")
            assert key.split(".")[0] in keys or key.startswith("parallelism."), (name, key)


@pytest.mark.parametrize(("parse", "name", "words"), [
    (parallel_from_mapping, "virtual_pipeline_model_parallel_size", "set interleave"),
    (parallel_from_mapping, "reduce_bucket_size", "set bucket_params"),
    (parallel_from_mapping, "overlap_grad_reduce", "set bucket_params"),
    (parallel_from_mapping, "sharding_strategy", "HSDP"),
    (parallel_from_mapping, "use_distributed_optimizer", "set zero: 1"),
    (training_from_mapping, "recompute_granularity", "set recompute"),
    (training_from_mapping, "gradient_accumulation_steps", "set global_batch"),
])
def test_a_framework_key_is_refused_with_the_key_to_write(parse, name, words):
    with pytest.raises(ConfigError) as caught:
        parse({name: 2}, source="job.yaml")
    text = str(caught.value)
    assert f".{name}: unknown key" in text and words in text and "job.yaml" in text


def test_an_unknown_key_still_gets_the_closest_spelling():
    with pytest.raises(ConfigError, match="did you mean 'fsdp'"):
        parallel_from_mapping({"fsdpp": True})


@pytest.mark.parametrize(("name", "stack"), [("deepspeed", "megatron-deepspeed"),
                                             ("torchtitan", "torch-compile"),
                                             ("FSDP", "torch-eager"), ("nemo2", "nemo")])
def test_a_framework_named_as_a_stack_names_its_stack(name, stack):
    # Before, 'deepspeed' was answered "did you mean 'deepseek'?".
    with pytest.raises(ConfigError, match=f"its stack is {stack}"):
        get_stack(name)


def test_every_stack_a_framework_name_gives_exists():
    for text in STACK_NAMES.values():
        assert text.split()[0] in STACKS, text
