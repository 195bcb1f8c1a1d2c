"""GPU presets carry their datasheet numbers; names and aliases resolve, bad ones explain."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.workloads.specs.gpus import (
    GPU_PRESETS,
    STATIC_POWER_FRACTION,
    GpuSpec,
    get_gpu,
    gpu_from_mapping,
    list_gpus,
    same_compute,
)

GiB = 2**30
T = 1e12

# name: (bf16 or fp16 tensor TFLOP/s dense, fp32 TFLOP/s, memory GiB, bandwidth GB/s, SMs)
# V100 SXM2 datasheet; A100 datasheet; H100 whitepaper Table 3 (SXM5); H200 datasheet;
# AMD Instinct MI300X data sheet (304 compute units in the SM column); GH200 datasheet
# (96 GB HBM3); Blackwell technical brief (HGX B200, 1000 W) and DGX B200 datasheet.
DATASHEET = {
    "v100-16gb": (125.0, 15.7, 16, 900, 80),
    "v100-32gb": (125.0, 15.7, 32, 900, 80),
    "a100-40gb": (312.0, 19.5, 40, 1555, 108),
    "a100-80gb": (312.0, 19.5, 80, 2039, 108),
    "a100-pcie-80gb": (312.0, 19.5, 80, 1935, 108),
    "h100-sxm": (989.4, 66.9, 80, 3350, 132),
    # H100 PCIe datasheet (sparse tensor rates halved), 114 SMs (architecture whitepaper).
    "h100-pcie": (756.0, 51.0, 80, 2000, 114),
    "h200": (989.4, 66.9, 141, 4800, 132),
    "mi300x": (1307.4, 163.4, 192, 5300, 304),
    "gh200": (989.4, 66.9, 96, 4000, 132),
    "b200": (2250.0, 80.0, 180, 8000, 148),
    # GB200 / GB300 NVL72 datasheets (rack over 72, sparse halved); HGX B300 datasheet; AMD
    # Instinct MI355X data sheet (256 compute units).
    "gb200": (2500.0, 90.0, 186, 8000, 148),
    "gb300": (2500.0, 90.0, 288, 8000, 160),
    "b300": (2250.0, 80.0, 288, 8000, 160),
    "mi355x": (2516.6, 157.3, 288, 8000, 256),
}


def test_blackwell_and_cdna4_fp8_is_twice_bf16_dense():
    for name in ("gb200", "gb300", "b300", "mi355x"):
        gpu = get_gpu(name)
        assert gpu.peak_flops("fp8") == pytest.approx(2 * gpu.peak_flops("bf16"), rel=1e-3)
    assert get_gpu("NVIDIA GB200").name == "gb200"
    assert get_gpu("AMD Instinct MI355X").architecture == "cdna4"


def test_presets_listed():
    assert list_gpus() == sorted(DATASHEET)


@pytest.mark.parametrize(("name", "figures"), sorted(DATASHEET.items()))
def test_datasheet_figures(name, figures):
    tensor, fp32, memory_gib, bandwidth_gbps, sms = figures
    gpu = get_gpu(name)
    assert gpu.peak_flops("fp16") == pytest.approx(tensor * T)
    assert gpu.peak_flops("fp32") == pytest.approx(fp32 * T)
    assert gpu.memory_bytes == memory_gib * GiB
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth_gbps * 1e9)
    assert gpu.sm_count == sms
    assert gpu.source


def test_hopper_fp8_is_twice_bf16_dense():
    for name in ("h100-sxm", "h200", "gh200"):
        gpu = get_gpu(name)
        assert gpu.peak_flops("fp8") == pytest.approx(2 * gpu.peak_flops("bf16"), rel=1e-3)
        assert gpu.peak_flops("tf32") == pytest.approx(gpu.peak_flops("bf16") / 2, rel=1e-3)


def test_h200_has_h100_compute():
    assert dict(get_gpu("h200").peak_flops_per_s) == dict(get_gpu("h100").peak_flops_per_s)


def test_v100_has_no_bf16():
    with pytest.raises(ConfigError) as info:
        get_gpu("v100").peak_flops("bf16")
    assert "v100-32gb has no 'bf16' rate" in str(info.value)
    assert "fp16" in str(info.value)


@pytest.mark.parametrize(("alias", "name"), [
    ("a100", "a100-80gb"), ("A100", "a100-80gb"), ("h100", "h100-sxm"),
    ("H100-SXM5", "h100-sxm"), ("v100", "v100-32gb"), (" h200 ", "h200"),
    ("AMD Instinct MI300X", "mi300x"), ("MI300X", "mi300x"),
    ("NVIDIA GH200 120GB", "gh200"), ("NVIDIA B200", "b200"),
    ("A100-PCIe-80GB", "a100-pcie-80gb"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
])
def test_aliases(alias, name):
    assert get_gpu(alias) is GPU_PRESETS[name]


def test_unknown_gpu_lists_valid_names():
    with pytest.raises(ConfigError) as info:
        get_gpu("h10", key="cluster.gpu")
    text = str(info.value)
    assert text.startswith("cluster.gpu: unknown GPU 'h10'")
    assert "h100-sxm" in text and "a100-40gb" in text


def test_unknown_gpu_lists_the_presets_not_every_device_name():
    """The ~50 aliases (mostly driver device names) used to bury the 15 presets."""
    with pytest.raises(ConfigError) as info:
        get_gpu("h300", key="compute.gpu")
    hint = info.value.hint
    assert "valid: " + ", ".join(list_gpus()) + ", or an alias of one" in hint
    assert "tesla v100-sxm2-16gb" not in hint and "did you mean 'h800'?" in hint


def test_same_compute_is_silicon_peaks_and_rated_power():
    assert same_compute(get_gpu("h200"), get_gpu("h100-sxm"))
    assert same_compute(get_gpu("a100-40gb"), get_gpu("a100-80gb"))
    assert not same_compute(get_gpu("a100-pcie-80gb"), get_gpu("a100-80gb"))  # 300 W
    assert not same_compute(get_gpu("b300"), get_gpu("b200"))  # 160 SMs, not 148
    assert not same_compute(get_gpu("gb200"), get_gpu("b200"))  # 2.5 PFLOP/s, not 2.25


def test_gpu_from_mapping_overrides():
    gpu = gpu_from_mapping({"preset": "h100", "memory": "96 GiB",
                            "memory_bandwidth": "4 TB/s", "peak_flops": {"bf16": "900 TFLOP/s"}})
    assert gpu.memory_bytes == 96 * GiB
    assert gpu.memory_bandwidth_bytes_per_s == 4e12
    assert gpu.peak_flops("bf16") == 900e12
    assert gpu.peak_flops("fp8") == get_gpu("h100").peak_flops("fp8")


def test_gpu_from_mapping_custom_and_errors():
    gpu = gpu_from_mapping({"name": "x", "peak_flops": {"bf16": 1e15}, "memory": "8 GiB",
                            "memory_bandwidth": "1 TB/s", "sm_count": 10})
    assert gpu.name == "x" and gpu.sm_count == 10
    with pytest.raises(ConfigError, match="gpu: missing memory_bandwidth, sm_count"):
        gpu_from_mapping({"peak_flops": {"bf16": 1e15}, "memory": "8 GiB"})
    with pytest.raises(ConfigError, match="did you mean 'memory_bandwidth'"):
        gpu_from_mapping({"preset": "h100", "memory_bandwith": "1 TB/s"})
    with pytest.raises(ConfigError) as info:
        gpu_from_mapping({"preset": "h100", "peak_flops": {"bf61": 1}}, source="c.yaml")
    assert str(info.value).startswith("c.yaml: gpu.peak_flops.bf61: unknown precision 'bf61' "
                                      "(did you mean 'bf16'?")
    assert gpu_from_mapping("a100-40gb") is GPU_PRESETS["a100-40gb"]


def test_spec_validation():
    with pytest.raises(ConfigError, match="sm_count"):
        GpuSpec("x", {"bf16": 1.0}, 1.0, 1.0, 0)
    with pytest.raises(ConfigError, match="memory_bandwidth_bytes_per_s: must be a finite "
                                          r"number > 0, got -1\.0"):
        GpuSpec("x", {"bf16": 1.0}, 1.0, -1.0, 1)
    with pytest.raises(ConfigError, match=r"peak_flops\.bf16: must be a finite number > 0, "
                                          "got inf"):
        GpuSpec("x", {"bf16": float("inf")}, 1.0, 1.0, 1)
    with pytest.raises(ConfigError) as info:
        GpuSpec("x", {"fp9": 1.0}, 1.0, 1.0, 1)
    assert str(info.value).startswith("peak_flops.fp9: unknown precision 'fp9' (did you mean")


def test_spec_is_frozen_and_hashable():
    gpu = get_gpu("a100")
    with pytest.raises(AttributeError):
        gpu.sm_count = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        gpu.peak_flops_per_s["bf16"] = 1.0  # type: ignore[index]
    assert hash(gpu) == hash(get_gpu("a100-80gb"))


def test_presets_name_their_architecture_and_custom_gpus_may():
    assert {name: get_gpu(name).architecture for name in ("v100", "a100", "h100", "h200",
                                                          "gh200", "b200", "mi300x")} == {
        "v100": "volta", "a100": "ampere", "h100": "hopper", "h200": "hopper",
        "gh200": "hopper", "b200": "blackwell", "mi300x": "cdna3"}
    assert gpu_from_mapping({"preset": "h100", "memory": "96 GiB"}).architecture == "hopper"
    custom = {"peak_flops": {"bf16": "100 TFLOP/s"}, "memory": "16 GiB",
              "memory_bandwidth": "1 TB/s", "sm_count": 10}
    assert gpu_from_mapping(custom).architecture == ""
    assert gpu_from_mapping({**custom, "architecture": "ampere"}).to_dict()[
        "architecture"] == "ampere"
    assert gpu_from_mapping({**custom, "architecture": "Hopper"}).architecture == "hopper"
    with pytest.raises(ConfigError, match=r"gpu\.architecture: unknown architecture "
                                          r"'pascal' \(valid: ampere, blackwell"):
        gpu_from_mapping({**custom, "architecture": "pascal"})


def test_power_limit_scales_the_compute_clock_as_the_cube_root_of_dynamic_power():
    h100 = get_gpu("h100")
    assert h100.tdp_w == 700.0 and h100.clock_fraction == 1.0
    capped = gpu_from_mapping({"preset": "h100", "power_limit": "500 W"})
    static_w = STATIC_POWER_FRACTION * 700.0
    assert capped.clock_fraction == pytest.approx(((500 - static_w) / (700 - static_w)) ** (1 / 3))
    assert capped.peak_flops("bf16") == h100.peak_flops("bf16")  # the datasheet stays
    assert capped.memory_bandwidth_bytes_per_s == h100.memory_bandwidth_bytes_per_s
    assert gpu_from_mapping({"preset": "h100", "power_limit": "700 W"}).clock_fraction == 1.0


@pytest.mark.parametrize("gpu, message", [
    ({"preset": "h100", "power_limit": "800 W"}, r"compute\.gpu\.power_limit: must be above "
                                                 r"the static power 105 W and at most"),
    ({"preset": "h100", "power_limit": "100 W"}, r"compute\.gpu\.power_limit: must be above"),
    ({"preset": "gh200", "power_limit": "500 W"}, r"gh200 has no rated board power"),
    ({"preset": "h100", "power_limit": "lots"}, r"cannot read 'lots' as a power"),
    ({"preset": "h100", "tdp": "-1 W"}, r"compute\.gpu\.tdp: power must be positive"),
])
def test_bad_power_settings_name_the_key(gpu, message):
    with pytest.raises(DistsimError, match=message):
        gpu_from_mapping(gpu, prefix="compute.gpu")


def test_every_cluster_presets_gpu_is_a_known_spec():
    """A run on a preset that gives no compute.gpu takes the preset's GPU: each preset's
    GPU model resolves to a spec (the PCIe node's A100 80GB PCIe among them)."""
    from distsim_gpu.topology.preset_registry import NODE_PRESETS

    for name, preset in NODE_PRESETS.items():
        assert get_gpu(preset.gpu_model).name, name
    assert get_gpu(NODE_PRESETS["pcie-8gpu"].gpu_model).tdp_w == 300.0
