"""Blackwell's training precisions: MXFP8 (``fp8_recipe: mxfp8``) and NVFP4 (``precision:
fp4``) as Transformer Engine runs them — which GEMMs at which rate, what the casts move,
which layers stay 16-bit — in closed form on small cases, and the errors for GPUs without
the hardware."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import STACKS, RooflineCosts
from distsim_gpu.workloads.cost.compute import fp8_recipes as fr
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.precision import check_fp8_recipe

GB200 = get_gpu("gb200")
MODEL = ModelSpec("gpt-small", layers=8, hidden=4096, heads=32, seq_len=4096, vocab=32000)
SHARD = LayerShard(micro_batch=1, seq_len=4096, tp=1)


def _costs(precision: str, recipe: str | None) -> RooflineCosts:
    return RooflineCosts(GB200, precision,
                         stack=STACKS["transformer-engine"].with_fp8_recipe(recipe))


def _ops(costs: RooflineCosts, pass_: str, layer: int = 0) -> dict:
    shard = LayerShard(micro_batch=1, seq_len=4096, tp=1, layer_index=layer)
    work = costs.layer_work(pass_, MODEL, shard)
    return {op.name: op for op in work.kernels}, costs.operator_times_s(work)


def test_mxfp8_gemms_run_at_torchaos_measured_rate_and_the_wgrad_below_it():
    delayed, mx = _costs("fp8", "delayed"), _costs("fp8", "mxfp8")
    _, t_delayed = _ops(delayed, "fwd")
    _, t_mx = _ops(mx, "fwd")
    # the same FP8 peak, the same shape factor: only the asymptotic fraction differs
    ratio = delayed.resolved_low_precision_matmul_efficiency / fr.MXFP8_GEMM_EFFICIENCY
    launch = mx.launch_overhead_s  # per kernel, outside the roofline
    assert t_mx["mlp_fc1"] - launch == pytest.approx((t_delayed["mlp_fc1"] - launch) * ratio,
                                                     rel=1e-9)
    ops, _ = _ops(mx, "bwd")
    wgrad = ops["mlp_fc1.wgrad"]
    assert wgrad.efficiency_factor == fr.MXFP8_WGRAD_EFFICIENCY
    at_full_rate = mx.kernel_time_s(replace(wgrad, efficiency_factor=1.0))
    assert mx.kernel_time_s(wgrad) - launch == pytest.approx(
        (at_full_rate - launch) / fr.MXFP8_WGRAD_EFFICIENCY, rel=1e-9)


def test_mxfp8_casts_write_two_blocked_copies_at_the_measured_bandwidth():
    costs = _costs("fp8", "mxfp8")
    ops, _ = _ops(costs, "fwd")
    cast = ops["cast_qkv"]  # no norm fusion: each GEMM input is a kernel of its own
    elements = 4096 * 4096  # T·k of qkv
    assert cast.cast and cast.bytes_moved == pytest.approx(elements * (2 + 2 + 2 / 32))
    assert costs.kernel_time_s(cast) == pytest.approx(
        cast.bytes_moved / (GB200.memory_bandwidth_bytes_per_s
                            * fr.MXFP8_CAST_MEMORY_EFFICIENCY) + costs.launch_overhead_s,
        rel=1e-6)


def test_nvfp4_runs_fp4_gemms_with_amax_passes_and_keeps_the_last_layers_16_bit():
    fp4, mx = _costs("fp4", None), _costs("fp8", "mxfp8")
    assert fp4.stack.fp8.name == "nvfp4"
    ops, t_fp4 = _ops(fp4, "fwd")
    _, t_mx = _ops(mx, "fwd")
    # 10 PFLOP/s of FP4 against 5 of FP8, the same fraction of each
    launch = fp4.launch_overhead_s
    assert t_fp4["mlp_fc2"] - launch == pytest.approx((t_mx["mlp_fc2"] - launch) / 2, rel=1e-9)
    elements = 4096 * 4096
    assert ops["cast_qkv"].bytes_moved == pytest.approx(elements * (4 + 2 * 0.5 + 2 / 16))
    assert ops["qkv"].bytes_moved < _ops(mx, "fwd")[0]["qkv"].bytes_moved
    # round(0.15 · 8) = 1: layer 7 keeps BF16 GEMMs and casts nothing
    last, _ = _ops(fp4, "fwd", layer=7)
    assert not last["qkv"].fp8 and "cast_qkv" not in last
    assert ops["qkv"].fp8


def test_each_precision_is_faster_than_the_one_above_it_on_gb200():
    layer = {p: sum(RooflineCosts(GB200, p, stack=STACKS["transformer-engine"].with_fp8_recipe(
        r)).layer_time_s(pass_, MODEL, SHARD) for pass_ in ("fwd", "bwd"))
        for p, r in (("bf16", None), ("fp8", "mxfp8"), ("fp4", None))}
    assert layer["bf16"] > layer["fp8"] > layer["fp4"]


@pytest.mark.parametrize(("precision", "recipe", "gpu", "words"), [
    ("fp8", "mxfp8", "h100-sxm", "needs a blackwell GPU; h100-sxm is hopper"),
    ("fp4", None, "h100-sxm", "has no 'fp4' rate"),
    ("fp4", "nvfp4", "mi300x", "has no 'fp4' rate"),
])
def test_a_precision_without_its_hardware_is_an_error_naming_the_gpu(precision, recipe, gpu,
                                                                     words):
    with pytest.raises(ConfigError, match=words):
        RooflineCosts(get_gpu(gpu), precision,
                      stack=STACKS["transformer-engine"].with_fp8_recipe(recipe))


def test_a_recipe_without_its_hardware_names_the_training_key(tmp_path, tiny, write_scenario):
    """The scenario's error names ``training.fp8_recipe``, where the recipe is written."""
    from distsim_gpu.scenarios.scenario import load_scenario

    path = write_scenario(tmp_path / "s.yaml", tiny(
        cluster="dgx-h100", compute={"gpu": "h100-sxm"},
        parallelism={"tp": 1, "pp": 1, "dp": 8},
        training={"precision": "fp8", "fp8_recipe": "mxfp8", "global_batch": 8}))
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    assert info.value.key == "training.fp8_recipe"
    assert "needs a blackwell GPU" in str(info.value)


def test_recipes_belong_to_their_precision():
    check_fp8_recipe("mxfp8", "fp8")
    check_fp8_recipe("nvfp4", "fp4")
    with pytest.raises(ConfigError, match=re.escape(
            "an FP4 recipe ('nvfp4') needs training.precision fp4, not 'fp8'")):
        check_fp8_recipe("nvfp4", "fp8")
    with pytest.raises(ConfigError, match="fp4 recipes: nvfp4"):
        check_fp8_recipe("delayed", "fp4")


def test_an_fp4_scenario_runs_on_a_gb200_rack():
    scenario = scenario_from_mapping({
        "name": "fp4", "cluster": {"preset": "gb200-nvl72", "nvlink_domain": 8},
        "model": {"name": "small", "layers": 8, "hidden": 4096, "heads": 32,
                  "seq_len": 4096, "vocab": 32000},
        "parallelism": {"tp": 8},
        "training": {"micro_batch": 1, "global_batch": 4, "precision": "fp4"},
        "compute": {"gpu": "gb200", "stack": "transformer-engine"}})
    assert scenario.roofline.stack.fp8.name == "nvfp4"
    assert scenario.resolved()["training"]["precision"] == "fp4"


def test_the_figures_no_kernel_table_measured_are_run_notes():
    """NVFP4's GEMM rate is MXFP8's, and Blackwell's per-tensor FP8 rate the generic 0.6:
    each run that uses them says so; Hopper's fitted FP8 and MXFP8's measured rate do not."""
    (fp4,) = _costs("fp4", None).notes
    assert fp4.kind == "defaulted" and fp4.key == "training.precision"
    assert "0.654 of the FP4 peak" in fp4.message and "last 15% of the layers" in fp4.message
    (fp8,) = _costs("fp8", "delayed").notes
    assert "0.6 of the FP8 peak" in fp8.message and "blackwell" in fp8.message
    assert _costs("fp8", "mxfp8").notes == ()
    assert _costs("bf16", None).notes == ()
    assert RooflineCosts(get_gpu("h100-sxm"), "fp8").notes == ()


def test_an_fp4_run_prints_its_assumption(capsys, tmp_path):
    import yaml
    from distsim_gpu.scenarios.cli.main import main
    path = tmp_path / "fp4.yaml"
    path.write_text(yaml.safe_dump({
        "name": "fp4", "cluster": {"preset": "gb200-nvl72", "nvlink_domain": 8},
        "model": {"name": "small", "layers": 8, "hidden": 4096, "heads": 32,
                  "seq_len": 4096, "vocab": 32000},
        "parallelism": {"tp": 8, "sequence_parallel": True},
        "training": {"micro_batch": 1, "global_batch": 4, "precision": "fp4"},
        "compute": {"gpu": "gb200", "stack": "transformer-engine"}}))
    assert main(["run", str(path)]) == 0
    assert "note: defaulted [training.precision]: NVFP4 GEMMs run at 0.654" in \
        capsys.readouterr().out
