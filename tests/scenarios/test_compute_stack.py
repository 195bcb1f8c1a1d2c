"""compute.stack in a scenario: parsed and checked, written back by resolved(), and the
stack's defaults for the gradient reduction the scenario leaves unsaid; training.fp8_recipe
setting the stack's FP8 recipe."""

from __future__ import annotations

import re

import pytest
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError


def spec(**compute):
    return {"name": "s", "cluster": {"preset": "dgx-a100", "nodes": 1},
            "model": {"name": "m", "layers": 4, "hidden": 1024, "heads": 16, "seq_len": 512,
                      "vocab": 1000},
            "parallelism": {"tp": 2, "pp": 1, "dp": 4},
            "training": {"micro_batch": 1, "global_batch": 8, "precision": "fp16"},
            "compute": {"gpu": "a100-80gb", **compute}}


def test_the_stack_and_its_gradient_defaults():
    plain = scenario_from_mapping(spec())
    assert plain.roofline.stack.name == "megatron-core"
    assert plain.parallel.grad_reduce_precision == "fp32"
    assert plain.parallel.bucket_params == 40_000_000
    ds = scenario_from_mapping(spec(stack="megatron-deepspeed"))
    assert ds.roofline.resolved_stack.attention == "unfused"
    # DeepSpeed's FP16 optimizer all-reduces the fp16 .grad, once, after the backward.
    assert ds.parallel.grad_reduce_precision == "fp16"
    assert ds.parallel.bucket_params >= 10**15
    # What the scenario says wins over the stack's defaults.
    data = spec(stack="megatron-deepspeed")
    data["parallelism"].update(grad_reduce_precision="fp32", bucket_params=1000)
    given = scenario_from_mapping(data)
    assert (given.parallel.grad_reduce_precision, given.parallel.bucket_params) == ("fp32",
                                                                                      1000)


def test_attention_overrides_the_stack_and_round_trips():
    flash = scenario_from_mapping(spec(stack="megatron-lm-2021", attention="flash"))
    assert flash.roofline.resolved_stack.attention == "flash"
    resolved = flash.resolved()
    assert resolved["compute"]["stack"] == "megatron-lm-2021"
    assert resolved["compute"]["attention"] == "flash"
    again = scenario_from_mapping(resolved)
    assert again.roofline.resolved_stack == flash.roofline.resolved_stack
    assert again.parallel == flash.parallel


@pytest.mark.parametrize(("compute", "precision", "message"), [
    ({"stack": "megatron"}, "fp16",
     "compute.stack: unknown stack 'megatron' (a framework's name: its stack is megatron-core"),
    ({"stack": 3}, "fp16", "compute.stack: must be a stack name, got 3"),
    ({"stack": "megatron-deepspeed"}, "fp8",
     "compute.stack: stack 'megatron-deepspeed' has no FP8 kernels"),
])
def test_bad_stacks_are_named(compute, precision, message):
    data = spec(**compute)
    data["training"]["precision"] = precision
    data["compute"]["gpu"] = "h100-sxm"
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(data)
    assert message in str(info.value)


def fp8_scenario(training):
    return {"name": "s", "cluster": {"preset": "dgx-h100", "nodes": 1},
            "model": {"name": "m", "layers": 4, "hidden": 1024, "heads": 16, "seq_len": 512,
                      "vocab": 1000},
            "parallelism": {"tp": 2, "pp": 1, "dp": 4},
            "training": {"micro_batch": 1, "global_batch": 8, **training},
            "compute": {"gpu": "h100-sxm"}}


def test_the_scenario_key_sets_the_stack_recipe_and_round_trips():
    plain = scenario_from_mapping(fp8_scenario({"precision": "fp8"}))
    assert plain.roofline.stack.fp8_recipe == "delayed"
    block = scenario_from_mapping(fp8_scenario({"precision": "fp8", "fp8_recipe": "Blockwise"}))
    assert block.roofline.stack.fp8_recipe == "blockwise"
    again = scenario_from_mapping(block.resolved())
    assert again.roofline.stack == block.roofline.stack
    with pytest.raises(ConfigError, match=re.escape(
            "training.fp8_recipe: an FP8 recipe")):
        scenario_from_mapping(fp8_scenario({"precision": "bf16", "fp8_recipe": "delayed"}))
    with pytest.raises(ConfigError, match="unknown FP8 recipe 'mx'"):
        scenario_from_mapping(fp8_scenario({"precision": "fp8", "fp8_recipe": "mx"}))
