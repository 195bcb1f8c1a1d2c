"""A GPU's kernel rates taken from another GPU's tables, or from the generic figures, are run
notes; the FP8 rate of a generation without a fit is no closer to its peak than its BF16."""

from __future__ import annotations

import pytest
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.compute.kernel_fits import kernel_fit_notes
from distsim_gpu.workloads.cost.compute.operator_record import gemm
from distsim_gpu.workloads.cost.compute.roofline import (
    FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE,
    MATMUL_EFFICIENCY_BY_ARCHITECTURE,
)
from distsim_gpu.workloads.specs.gpus import GPU_PRESETS, get_gpu, gpu_from_mapping


def _keys(gpu, **knobs) -> dict[str, str]:
    costs = RooflineCosts(get_gpu(gpu) if isinstance(gpu, str) else gpu, **knobs)
    return {note.key: note.message for note in kernel_fit_notes(costs)}


@pytest.mark.parametrize("gpu", ["a100-80gb", "a100-40gb", "h100-sxm", "h200"])
def test_a_gpu_whose_tables_gave_every_rate_has_no_note(gpu):
    assert _keys(gpu) == {}


def test_blackwell_ultra_borrows_b200s_gemm_rate_and_says_whose():
    keys = _keys("b300")
    assert "0.639 of their peak" in keys["compute.matmul_efficiency"]
    assert "kernel tables of b200 and gb200, none of b300's" in keys[
        "compute.matmul_efficiency"]
    assert "gb200 and gb300" in keys["compute.attention_efficiency"]
    assert "0.8 of its HBM bandwidth, the generic figure" in keys["compute.memory_efficiency"]


def test_generic_figures_are_named_as_such():
    assert "0.5 of its peak, the generic figure: no cudnn table of cdna3 GPUs" in _keys(
        "mi300x")["compute.attention_efficiency"]
    assert "0.8 of their peak, the generic figure: no GEMM table of volta GPUs" in _keys(
        "v100-32gb", precision="fp16")["compute.matmul_efficiency"]
    assert set(_keys("gb200")) == {"compute.memory_efficiency"}


def test_a_figure_the_scenario_sets_is_not_noted():
    assert _keys("b300", matmul_asymptotic_efficiency=0.7, attention_efficiency=0.6,
                 memory_efficiency=0.85) == {}
    assert "compute.attention_efficiency" not in _keys("mi300x", attention="unfused")


def test_a_preset_renamed_or_with_other_memory_computes_as_the_preset():
    """torchtitan's H100 with 96 GB HBM2e: its GEMMs and attention are H100's, measured;
    its memory rate is the generic one, as the roofline looks it up by name."""
    teton = gpu_from_mapping({"preset": "h100-sxm", "name": "h100-96gb-hbm2e",
                              "memory": "96 GiB", "memory_bandwidth": "2.4 TB/s"})
    assert set(_keys(teton)) == {"compute.memory_efficiency"}
    assert "compute.matmul_efficiency" in _keys(
        gpu_from_mapping({"preset": "h100-sxm", "peak_flops": {"bf16": "900 TFLOP/s"}}))


def test_a_run_prints_the_notes(tiny):
    report = run_scenario(scenario_from_mapping(tiny(compute={"gpu": "b300"})))
    assert {"compute.matmul_efficiency", "compute.memory_efficiency"} <= {
        note.key for note in report.notes}


def test_fp8_gemms_gain_no_more_than_the_peak_ratio_without_a_fit():
    """A large compute-bound GEMM in FP8 over BF16, on every GPU with FP8 and no FP8 fit: at
    most the FP8/BF16 peak ratio (MI300X ran it 2.49 times faster on a 2.0 peak ratio)."""
    big = (8192, 8192, 8192)
    unfitted = [gpu for gpu in GPU_PRESETS.values() if "fp8" in gpu.peak_flops_per_s
                and gpu.architecture not in FP8_MATMUL_EFFICIENCY_BY_ARCHITECTURE]
    assert {gpu.architecture for gpu in unfitted} == {"blackwell", "cdna3", "cdna4"}
    for gpu in unfitted:
        bf16 = RooflineCosts(gpu, "bf16").kernel_time_s(gemm("g", big, 2, 2))
        fp8 = RooflineCosts(gpu, "fp8").kernel_time_s(gemm("g", big, 1, 2, fp8=True))
        ratio = gpu.peak_flops("fp8") / gpu.peak_flops("bf16")
        assert bf16 / fp8 <= ratio * (1 + 1e-9), gpu.name


def test_cdna_fp8_takes_its_bf16_fraction_and_says_it():
    mi300x = RooflineCosts(get_gpu("mi300x"), "fp8")
    assert mi300x.resolved_fp8_matmul_efficiency == MATMUL_EFFICIENCY_BY_ARCHITECTURE["cdna3"]
    (note,) = mi300x.notes
    assert "FP8 GEMMs run at 0.481 of the FP8 peak" in note.message
    assert RooflineCosts(get_gpu("b200"), "fp8").resolved_fp8_matmul_efficiency == 0.6


def test_fp4_on_a_gpu_without_nvfp4_names_the_precision_not_a_recipe():
    with pytest.raises(ConfigError) as info:
        RooflineCosts(get_gpu("mi355x"), "fp4")
    error = info.value
    assert error.key == "training.precision"
    assert "NVFP4 recipe, which needs a blackwell GPU; mi355x is cdna4" in error.message
    assert "fp8 or bf16 run on mi355x" in error.hint


def test_a_resolved_file_leaves_the_noted_rates_out_and_notes_them_again(tiny):
    scenario = scenario_from_mapping(tiny(compute={"gpu": "b300"}))
    compute = scenario.resolved()["compute"]
    assert "matmul_efficiency" not in compute and "memory_efficiency" not in compute
    assert scenario.resolved(with_assumed=True)["compute"]["matmul_efficiency"] == 0.639
    again = scenario_from_mapping(scenario.resolved())
    assert kernel_fit_notes(again.roofline) == kernel_fit_notes(scenario.roofline) != ()
