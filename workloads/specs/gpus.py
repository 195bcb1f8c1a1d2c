"""GPU specs: peak compute by precision, memory capacity and bandwidth, SM count, architecture.

A :class:`GpuSpec` holds datasheet figures in SI units.  Peak compute is the dense
tensor-core rate (no structured sparsity) for ``tf32``, ``bf16``, ``fp16``, ``fp8`` and
``fp4`` (Blackwell's NVFP4, CDNA 4's MXFP4),
and the vector (CUDA-core) rate for ``fp32``; a precision the GPU lacks is simply absent.
What fraction of these peaks a kernel reaches is the cost model's business
(:mod:`workloads.cost.compute`), not this module's.

``architecture`` names the GPU's generation (``volta``, ``ampere``, ``hopper``, ``blackwell``,
``cdna3``): kernels written for one generation reach a different fraction of another's peak
(FlashAttention-2 uses none of Hopper's asynchronous tensor-core instructions), so the cost
model looks some efficiencies up by it (:mod:`workloads.cost.compute.roofline`).

Power: ``tdp_w`` is the board power the datasheet rates the part at (the default power
limit, at which the cost model's efficiency figures were measured); ``power_limit_w`` a lower
limit an operator set (``nvidia-smi -pl``).  Under a lower limit the GPU lowers its SM clock
until it fits: CMOS dynamic power is C·V²·f and, in the clock range a GPU scales over, the
voltage follows the clock, so dynamic power goes as f³ and a limit P runs compute-bound
kernels at ``clock_fraction = ((P - P_static) / (P_tdp - P_static))^(1/3)`` of their rate
at TDP.  ``P_static`` (leakage, HBM, board) is :data:`STATIC_POWER_FRACTION` of TDP — our
assumption; 0 % or 15 % give a 500 W limit on a 700 W part a clock 10.6 % or 12.8 % lower,
so little rides on it.  Memory bandwidth is not scaled: the HBM clock is not what a power
limit lowers.

Memory capacity: NVIDIA's "GB" for HBM capacity is binary (an A100 80GB reports
81920 MiB), so capacities are stored as GiB·2³⁰; nvidia-smi shows slightly less usable
memory (ECC and driver reservations).  Memory bandwidth is decimal (bytes/s), as quoted.

Sources:
 * V100: NVIDIA Tesla V100 datasheet (SXM2): 125 TFLOP/s tensor (fp16), 15.7 TFLOP/s
   fp32, 900 GB/s HBM2, 16 or 32 GB; 80 SMs (Volta architecture whitepaper).
 * A100: NVIDIA A100 datasheet (SXM): 312 TFLOP/s bf16/fp16 tensor, 156 tf32, 19.5 fp32;
   40GB HBM2 at 1555 GB/s, 80GB HBM2e at 2039 GB/s; 108 SMs (Ampere whitepaper).
 * H100 SXM5: NVIDIA H100 Tensor Core GPU architecture whitepaper, Table 3 (1830 MHz
   boost): 989.4 TFLOP/s bf16/fp16 dense, 1978.9 fp8 dense, 494.7 tf32 dense, 66.9 fp32;
   80 GB HBM3 at 3.35 TB/s (H100 datasheet); 132 SMs.
 * H200 SXM: NVIDIA H200 datasheet: same GH100 compute as H100 SXM (datasheet 1979 /
   3958 TFLOP/s bf16 / fp8 *with sparsity*, i.e. 989 / 1979 dense), 141 GB HBM3e at
   4.8 TB/s; 132 SMs.
 * GH200: NVIDIA GH200 Grace Hopper Superchip datasheet: the Hopper GPU's compute as H100
   SXM5 (3958 / 1979 TFLOP/s fp8 / bf16 *with sparsity*, i.e. 1979 / 989 dense; 67 fp32),
   96 GB HBM3 at 4 TB/s (the part CSCS Alps runs; nvidia-smi names it "NVIDIA GH200
   120GB"); 132 SMs.
 * B200: NVIDIA Blackwell architecture technical brief, HGX B200 at 1000 W: 2250 TFLOP/s
   bf16/fp16 dense, 4500 fp8 dense, 1100 tf32 dense, 80 fp32; NVIDIA DGX B200 datasheet:
   1,440 GB HBM3e at 64 TB/s for 8 GPUs, i.e. 180 GB at 8 TB/s each; 148 SMs.
 * GB200: NVIDIA GB200 NVL72 datasheet, per GPU (rack figures over 72, sparse figures
   halved): 2500 TFLOP/s bf16/fp16 dense, 5000 fp8, 1250 tf32; FP64 45 per GPU, fp32 taken
   as twice that (90, Blackwell's vector ratio on B200: 80 / 40); 13.4 TB HBM3e over 72 ->
   186 GB each at 8 TB/s; 148 SMs as B200; 1200 W.  NVIDIA's dgxc-benchmarking READMEs
   quote 2.45 / 4.9 PFLOP/s bf16 / fp8 for their MFU (a clock 2 % below the datasheet's).
 * GB300: NVIDIA GB300 NVL72 datasheet, per GPU: bf16/fp16 and fp8 as GB200 (2500 / 5000
   dense; Blackwell Ultra adds FP4, not 16-bit rate), tf32 1250; fp32 as GB200's (not
   published; an assumption); 20.7 TB HBM3e over 72 -> 288 GB at 8 TB/s; 160 SMs (Blackwell
   Ultra, NVIDIA technical blog "Inside NVIDIA Blackwell Ultra"); 1400 W.
 * B300: NVIDIA HGX B300 datasheet, per GPU: 2250 / 4500 TFLOP/s bf16 / fp8 dense (as B200;
   Bekman's MAMF table takes the same peaks), 1100 tf32, fp32 as B200 (an assumption); 2.3
   TB HBM3e over 8 -> 288 GB at 8 TB/s; 160 SMs; 1100 W.
 * MI355X: AMD Instinct MI355X data sheet (OAM, 1400 W): 2516.6 TFLOP/s bf16/fp16 dense
   matrix, 5033.2 fp8, 157.3 fp32 vector (no TF32 matrix rate: CDNA 4 drops it, so tf32
   runs at the fp32 rate here); 288 GB HBM3E at 8 TB/s; 256 compute units.
 * MI300X: AMD Instinct MI300X data sheet (OAM, 2100 MHz peak engine clock): 1307.4
   TFLOP/s bf16/fp16 dense matrix, 2614.9 fp8 dense, 653.7 tf32, 163.4 fp32; 192 GB HBM3
   (eight 24 GB stacks, binary GB as for NVIDIA) at 5.3 TB/s; 304 compute units, counted
   as ``sm_count``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from distsim_gpu.simcore.config import check_choice, check_keys, check_number, check_whole
from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.simcore.units import parse_bandwidth, parse_flops, parse_power, parse_size

__all__ = [
    "ARCHITECTURES",
    "GPU_ALIASES",
    "GPU_PRESETS",
    "PRECISIONS",
    "STATIC_POWER_FRACTION",
    "GpuSpec",
    "canonical_gpu_name",
    "get_gpu",
    "gpu_from_mapping",
    "list_gpus",
    "same_compute",
]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
# Share of board power that does not scale with the SM clock (module docstring; assumed).
STATIC_POWER_FRACTION = 0.15
# GPU generations the cost model tells apart ("" for a custom GPU that does not say).
ARCHITECTURES = ("volta", "ampere", "hopper", "blackwell", "cdna3", "cdna4")

_GiB = 2.0**30
_TFLOPS = 1e12
_GBPS = 1e9


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: ``peak_flops_per_s[precision]`` (FLOP/s), memory (bytes, bytes/s),
    its ``architecture`` (one of :data:`ARCHITECTURES`, or "" if unknown), its rated board
    power ``tdp_w`` and the ``power_limit_w`` it runs at (None: the TDP)."""

    name: str
    peak_flops_per_s: Mapping[str, float] = field(hash=False)
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    sm_count: int
    source: str = ""
    architecture: str = ""
    tdp_w: float | None = None
    power_limit_w: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"must be a non-empty string, got {self.name!r}", key="name")
        peaks = dict(self.peak_flops_per_s)
        if not peaks:
            raise ConfigError("needs at least one precision", key="peak_flops",
                              hint=f"valid: {', '.join(PRECISIONS)}")
        for precision, rate in peaks.items():
            check_choice(precision, PRECISIONS, key=f"peak_flops.{precision}",
                         what="precision")
            peaks[precision] = check_number(rate, key=f"peak_flops.{precision}", above=True)
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(peaks))
        for name in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
            object.__setattr__(self, name, check_number(getattr(self, name), key=name,
                                                        above=True))
        check_whole(self.sm_count, key="sm_count")
        if self.architecture:
            check_choice(self.architecture, ARCHITECTURES, key="architecture",
                         what="architecture")
        self._check_power()

    def _check_power(self) -> None:
        if self.tdp_w is not None:
            check_number(self.tdp_w, key="tdp", above=True)
        if self.power_limit_w is None:
            return
        if self.tdp_w is None:
            raise ConfigError(f"{self.name} has no rated board power to scale its clock "
                              "from", key="power_limit", hint='give tdp too, e.g. "700 W"')
        static_w = STATIC_POWER_FRACTION * self.tdp_w
        if not static_w < check_number(self.power_limit_w, key="power_limit") <= self.tdp_w:
            raise ConfigError(
                f"must be above the static power {static_w:g} W and at most the rated "
                f"{self.tdp_w:g} W, got {self.power_limit_w:g} W", key="power_limit",
                hint="a limit above TDP does not raise the clocks the figures assume")

    @property
    def clock_fraction(self) -> float:
        """Compute clock under ``power_limit_w`` over the clock at TDP (module docstring):
        1 without a limit."""
        if self.power_limit_w is None or self.tdp_w is None:
            return 1.0
        static_w = STATIC_POWER_FRACTION * self.tdp_w
        return ((self.power_limit_w - static_w) / (self.tdp_w - static_w)) ** (1.0 / 3.0)

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s at ``precision``; ConfigError naming the supported ones."""
        rate = self.peak_flops_per_s.get(precision)
        if rate is None:
            raise ConfigError(f"{self.name} has no {precision!r} rate", key="precision",
                              hint=closest(str(precision), self.peak_flops_per_s))
        return rate

    def to_dict(self) -> dict[str, Any]:
        """Resolved form, SI units (JSON/YAML-ready)."""
        return {
            "name": self.name,
            "peak_flops_per_s": dict(self.peak_flops_per_s),
            "memory_bytes": self.memory_bytes,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "sm_count": self.sm_count,
            "architecture": self.architecture,
            "tdp_w": self.tdp_w,
            "power_limit_w": self.power_limit_w,
            "source": self.source,
        }


def _peaks(**tflops: float) -> dict[str, float]:
    return {precision: rate * _TFLOPS for precision, rate in tflops.items()}


_V100_SRC = "NVIDIA Tesla V100 datasheet (SXM2, 300 W)"
_A100_SRC = "NVIDIA A100 datasheet (SXM, 400 W), dense tensor rates"
_A100_PCIE_SRC = "NVIDIA A100 datasheet (80GB PCIe, 300 W), dense tensor rates"
_H100_PCIE_SRC = ("NVIDIA H100 datasheet (PCIe, 350 W; dense: half its sparse tensor rates); "
                  "H100 architecture whitepaper (114 SMs)")
_H100_SRC = ("NVIDIA H100 architecture whitepaper Table 3 (SXM5, dense); H100 datasheet "
             "(SXM, up to 700 W)")
_H200_SRC = "NVIDIA H200 datasheet (SXM, up to 700 W); compute as H100 SXM5, dense"
_MI300X_SRC = "AMD Instinct MI300X data sheet (OAM, 750 W), dense matrix rates"
_GH200_SRC = "NVIDIA GH200 Grace Hopper Superchip datasheet (96 GB HBM3); compute as H100 SXM5"
_B200_SRC = ("NVIDIA Blackwell architecture technical brief (HGX B200, 1000 W), dense; "
             "DGX B200 datasheet (memory)")

_GB200_SRC = ("NVIDIA GB200 NVL72 datasheet, per GPU (rack over 72, dense); fp32 from FP64 x2 "
              "(assumed)")
_GB300_SRC = "NVIDIA GB300 NVL72 datasheet, per GPU (rack over 72, dense); fp32 assumed as GB200"
_B300_SRC = "NVIDIA HGX B300 datasheet, per GPU (dense); fp32 assumed as B200"
_MI355X_SRC = "AMD Instinct MI355X data sheet (OAM, 1400 W), dense matrix rates"
_BLACKWELL_72 = _peaks(fp32=90.0, tf32=1250.0, bf16=2500.0, fp16=2500.0, fp8=5000.0)
# Dense FP4 per GPU: B200 9 PFLOP/s (Blackwell technical brief, HGX B200); GB200 10 (GB200
# NVL72 datasheet, 720 PFLOP/s dense over 72); GB300 15.3 (GB300 NVL72 datasheet, 1,100
# over 72); B300 13.5 (HGX B300 datasheet, 108 over 8); MI355X MXFP4 10,066 TFLOP/s (AMD
# data sheet).
_FP4_TFLOPS = {"b200": 9000.0, "gb200": 10000.0, "gb300": 15278.0, "b300": 13500.0,
               "mi355x": 10066.4}

_HOPPER_PEAKS = _peaks(fp32=66.9, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9)

GPU_PRESETS: Mapping[str, GpuSpec] = MappingProxyType({
    "v100-16gb": GpuSpec("v100-16gb", _peaks(fp32=15.7, fp16=125.0), 16 * _GiB,
                         900 * _GBPS, 80, _V100_SRC, "volta", 300.0),
    "v100-32gb": GpuSpec("v100-32gb", _peaks(fp32=15.7, fp16=125.0), 32 * _GiB,
                         900 * _GBPS, 80, _V100_SRC, "volta", 300.0),
    "a100-40gb": GpuSpec("a100-40gb", _peaks(fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0),
                         40 * _GiB, 1555 * _GBPS, 108, _A100_SRC, "ampere", 400.0),
    "a100-80gb": GpuSpec("a100-80gb", _peaks(fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0),
                         80 * _GiB, 2039 * _GBPS, 108, _A100_SRC, "ampere", 400.0),
    "a100-pcie-80gb": GpuSpec("a100-pcie-80gb",
                              _peaks(fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0),
                              80 * _GiB, 1935 * _GBPS, 108, _A100_PCIE_SRC, "ampere", 300.0),
    "h100-sxm": GpuSpec("h100-sxm", _HOPPER_PEAKS, 80 * _GiB, 3350 * _GBPS, 132, _H100_SRC,
                         "hopper", 700.0),
    "h100-pcie": GpuSpec("h100-pcie", _peaks(fp32=51.0, tf32=378.0, bf16=756.0, fp16=756.0,
                                             fp8=1513.0),
                         80 * _GiB, 2000 * _GBPS, 114, _H100_PCIE_SRC, "hopper", 350.0),
    "h200": GpuSpec("h200", _HOPPER_PEAKS, 141 * _GiB, 4800 * _GBPS, 132, _H200_SRC, "hopper",
                     700.0),
    "gh200": GpuSpec("gh200", _HOPPER_PEAKS, 96 * _GiB, 4000 * _GBPS, 132, _GH200_SRC, "hopper"),
    "b200": GpuSpec("b200", _peaks(fp32=80.0, tf32=1100.0, bf16=2250.0, fp16=2250.0,
                                   fp8=4500.0, fp4=_FP4_TFLOPS["b200"]),
                    180 * _GiB, 8000 * _GBPS, 148, _B200_SRC, "blackwell", 1000.0),
    "gb200": GpuSpec("gb200", {**_BLACKWELL_72, **_peaks(fp4=_FP4_TFLOPS["gb200"])},
                     186 * _GiB, 8000 * _GBPS, 148, _GB200_SRC,
                     "blackwell", 1200.0),
    "gb300": GpuSpec("gb300", {**_BLACKWELL_72, **_peaks(fp4=_FP4_TFLOPS["gb300"])},
                     288 * _GiB, 8000 * _GBPS, 160, _GB300_SRC,
                     "blackwell", 1400.0),
    "b300": GpuSpec("b300", _peaks(fp32=80.0, tf32=1100.0, bf16=2250.0, fp16=2250.0,
                                   fp8=4500.0, fp4=_FP4_TFLOPS["b300"]),
                    288 * _GiB, 8000 * _GBPS, 160, _B300_SRC, "blackwell", 1100.0),
    "mi355x": GpuSpec("mi355x", _peaks(fp32=157.3, tf32=157.3, bf16=2516.6, fp16=2516.6,
                                       fp8=5033.2, fp4=_FP4_TFLOPS["mi355x"]),
                      288 * _GiB, 8000 * _GBPS, 256, _MI355X_SRC, "cdna4", 1400.0),
    "mi300x": GpuSpec("mi300x", _peaks(fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4,
                                       fp8=2614.9),
                      192 * _GiB, 5300 * _GBPS, 304, _MI300X_SRC, "cdna3", 750.0),
})
"""Preset name -> :class:`GpuSpec` (read-only)."""

# Short names.  "a100" means the 80GB SXM part, the one most training clusters (and
# Narayanan et al. 2021's Selene) use; the 40GB part must be named.  "v100" means the 32GB
# SXM2 part (DGX-2, DGX-1 refresh).  "h100" is the SXM5 part, not the PCIe card.
GPU_ALIASES: Mapping[str, str] = MappingProxyType({
    "v100": "v100-32gb",
    "v100-sxm2": "v100-32gb",
    "a100": "a100-80gb",
    "a100-sxm": "a100-80gb",
    "a100-40g": "a100-40gb",
    "a100-80g": "a100-80gb",
    "h100": "h100-sxm",
    "h100-sxm5": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "h200-sxm": "h200",
    # H100 SXM5's export part (DeepSeek's clusters): the same SMs, clocks, HBM3 and
    # tensor-core peaks; its narrower NVLink (400 GB/s) belongs to the cluster, not here.
    "h800": "h100-sxm",
    "h800-sxm": "h100-sxm",
    "nvidia h800": "h100-sxm",
    "h200-141gb": "h200",
    "h200-sxm5-141gb": "h200",  # the dgx-h200 preset's GPU model
    "nvidia h200": "h200",  # what nvidia-smi and PyTorch's device name call the SXM part
    "a100-pcie": "a100-pcie-80gb",
    "nvidia a100 80gb pcie": "a100-pcie-80gb",
    "h100-pcie-80gb": "h100-pcie",
    "nvidia h100 pcie": "h100-pcie",
    # The GPU models the cluster presets name (topology.presets).
    "a100-sxm4-40gb": "a100-40gb",
    "a100-sxm4-80gb": "a100-80gb",
    "h100-sxm5-80gb": "h100-sxm",
    # deviceProperties names as PyTorch profiler traces spell them.
    "tesla v100-sxm2-16gb": "v100-16gb",
    "tesla v100-sxm2-32gb": "v100-32gb",
    "v100-sxm2-16gb": "v100-16gb",
    "v100-sxm2-32gb": "v100-32gb",
    "nvidia a100-pg509-200": "a100-40gb",  # Meta's A100 SXM4 40 GB board (Zion/Grand Teton)
    "nvidia a100-sxm4-40gb": "a100-40gb",
    "nvidia a100-sxm4-80gb": "a100-80gb",
    "nvidia h100 80gb hbm3": "h100-sxm",
    "gh200-96gb": "gh200",
    "nvidia gh200 120gb": "gh200",  # what nvidia-smi and nccl-tests call Alps' part
    "b200-180gb": "b200",
    "nvidia b200": "b200",
    "nvidia gb200": "gb200",
    "gb200-186gb": "gb200",
    "nvidia gb300": "gb300",
    "gb300-288gb": "gb300",
    "nvidia b300 sxm6 ac": "b300",
    "b300-288gb": "b300",
    "amd instinct mi355x": "mi355x",
    "mi300x-oam": "mi300x",
    # PyTorch on ROCm records the marketing name; SR-IOV guests (cloud VMs) add " VF".
    "amd instinct mi300x": "mi300x",
    "amd instinct mi300x vf": "mi300x",
})


def list_gpus() -> list[str]:
    """Preset names, sorted (aliases not included)."""
    return sorted(GPU_PRESETS)


def canonical_gpu_name(name: str) -> str:
    """``name`` lower-cased with aliases resolved (unknown names come back lower-cased)."""
    text = str(name).strip().lower()
    return GPU_ALIASES.get(text, text)


def get_gpu(name: str, *, key: str | None = None, source: str | None = None) -> GpuSpec:
    """The preset (or alias) called ``name``, case-insensitive; ConfigError if unknown,
    naming the presets (the ~50 aliases, mostly device names as drivers spell them, would
    bury them) and the closest preset or alias."""
    text = canonical_gpu_name(name)
    if text in GPU_PRESETS:
        return GPU_PRESETS[text]
    near = difflib.get_close_matches(text, sorted({*GPU_PRESETS, *GPU_ALIASES}), n=1)
    raise ConfigError(f"unknown GPU {str(name).strip()!r}", key=key, source=source,
                      hint=(f"did you mean '{near[0]}'? " if near else "") + "valid: "
                      + ", ".join(list_gpus()) + ", or an alias of one (GPU_ALIASES in "
                      "workloads/specs/gpus.py: h100, a100, nvidia h200, ...)")


def same_compute(a: GpuSpec, b: GpuSpec) -> bool:
    """Whether two GPUs compute alike: the same generation, SMs, peaks and rated power (an
    H200 and an H100 SXM5, or two names for one part), whatever their memory.  A kernel
    rate measured on one holds for the other; a lower rated power (A100 PCIe's 300 W) runs
    other clocks."""
    return (a.architecture, a.sm_count, dict(a.peak_flops_per_s), a.tdp_w) == (
        b.architecture, b.sm_count, dict(b.peak_flops_per_s), b.tdp_w)


def gpu_from_mapping(data: Mapping[str, Any] | str, *, source: str | None = None,
                     prefix: str = "gpu") -> GpuSpec:
    """A :class:`GpuSpec` from a preset name or a YAML-style mapping.

    Mapping keys: ``preset`` (start from a preset), ``name``, ``peak_flops``
    (``{bf16: "989 TFLOP/s", ...}``, merged into the preset's), ``memory`` (``"80 GiB"``),
    ``memory_bandwidth`` (``"3.35 TB/s"``), ``sm_count``, ``architecture`` (optional:
    ``hopper`` ...; a preset's by default), ``tdp`` and ``power_limit`` (``"500 W"``:
    compute clocks scale as the module docstring says).  Without a preset every one of
    ``peak_flops``, ``memory``, ``memory_bandwidth``, ``sm_count`` must be given.
    """
    if isinstance(data, str):
        return get_gpu(data, key=prefix, source=source)
    if not isinstance(data, Mapping):
        raise ConfigError(f"must be a GPU name or a mapping, got {type(data).__name__}",
                          key=prefix, source=source)
    valid = ("preset", "name", "peak_flops", "memory", "memory_bandwidth", "sm_count",
             "architecture", "tdp", "power_limit")
    check_keys(data, valid, prefix=prefix, source=source)
    base: GpuSpec | None = None
    if "preset" in data:
        base = get_gpu(str(data["preset"]), key=f"{prefix}.preset", source=source)
    elif missing := [k for k in valid[2:6] if k not in data]:
        raise ConfigError(f"missing {', '.join(missing)}", key=prefix, source=source,
                          hint="give them, or start from a preset: " + ", ".join(list_gpus()))
    peaks = dict(base.peak_flops_per_s) if base else {}
    raw_peaks = data.get("peak_flops", {})
    if not isinstance(raw_peaks, Mapping):
        raise ConfigError("must be a mapping of precision to rate", key=f"{prefix}.peak_flops",
                          source=source, hint='e.g. {bf16: "989 TFLOP/s"}')
    for precision, rate in raw_peaks.items():
        path = f"{prefix}.peak_flops.{precision}"
        check_choice(precision, PRECISIONS, key=path, source=source, what="precision")
        peaks[str(precision)] = parse_flops(rate, key=path, source=source)
    memory = base.memory_bytes if base else 0.0
    if "memory" in data:
        memory = parse_size(data["memory"], key=f"{prefix}.memory", source=source,
                            allow_zero=False)
    bandwidth = base.memory_bandwidth_bytes_per_s if base else 0.0
    if "memory_bandwidth" in data:
        bandwidth = parse_bandwidth(data["memory_bandwidth"],
                                    key=f"{prefix}.memory_bandwidth", source=source)
    sm_count = check_whole(data.get("sm_count", base.sm_count if base else 0),
                           key=f"{prefix}.sm_count", source=source)
    name = str(data.get("name", base.name if base else "custom"))
    architecture = base.architecture if base else ""
    if "architecture" in data:
        architecture = check_choice(str(data["architecture"]), ARCHITECTURES,
                                    key=f"{prefix}.architecture", source=source,
                                    what="architecture", fold_case=True).lower()
    watts = {knob: parse_power(data[knob], key=f"{prefix}.{knob}", source=source)
             for knob in ("tdp", "power_limit") if knob in data}
    try:
        return GpuSpec(name, peaks, memory, bandwidth, sm_count,
                       source=(base.source if base else "") + (" (overridden)" if base else ""),
                       architecture=str(architecture),
                       tdp_w=watts.get("tdp", base.tdp_w if base else None),
                       power_limit_w=watts.get("power_limit"))
    except ConfigError as error:
        raise ConfigError(error.message, key=f"{prefix}.{error.key}" if error.key else prefix,
                          source=source, hint=error.hint) from None
