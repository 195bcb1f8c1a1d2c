"""Published kernel microbenchmarks as typed records: GEMMs, fused attention and memory-bound
operators, each with the GPU preset it ran on and its measured seconds.

The tables are third-party measurements kept under ``shared/data/kernels`` (each folder's
README names its source); this module only reads them, for the calibration script
``validation/kernels/fit_kernels.py`` and its tests.  Nothing at simulation time needs it:
the fitted figures are constants in :mod:`~distsim_gpu.workloads.cost.compute.roofline`.

Every loader returns ``(records, skipped)``: a row that is flagged, on a GPU without a
preset in :mod:`~distsim_gpu.workloads.specs.gpus`, or of a kernel the cost model has no
counterpart for becomes a :class:`Skipped` with the reason, never a silent drop.  FLOP
counts follow the cost model's conventions (GEMM ``2·b·m·n·k``; attention forward
``4·b·s²·h·d``, halved when causal, backward 2.5× forward), so a record's time and the
model's prediction compare like for like.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from distsim_gpu.simcore.errors import ConfigError

__all__ = [
    "DEEPGEMM_README_COMMIT",
    "AttentionRecord",
    "GemmRecord",
    "MemoryRecord",
    "Skipped",
    "attention_flops",
    "deepgemm_gemms",
    "gpu_preset",
    "load_attention",
    "load_gemms",
    "load_memory",
]

# Backward of a fused attention runs 5 matmuls to the forward's 2 (FlashAttention-2 paper
# §4.1 and its benchmark script's flops(): bwd = 2.5 x fwd).
ATTENTION_BWD_OVER_FWD = 2.5
# BabelStream's defaults (UoB-HPC/BabelStream README): 2^25 double-precision elements per
# array; Copy and Mul touch two arrays, Add and Triad three, Dot reads two.
BABELSTREAM_ELEMENTS = 2 ** 25
BABELSTREAM_ARRAYS = {"Copy": 2, "Mul": 2, "Add": 3, "Triad": 3, "Dot": 2}


@dataclass(frozen=True, slots=True)
class GemmRecord:
    """One measured dense GEMM ``b × (m×k · k×n)`` on preset ``gpu`` at ``dtype``
    (``bf16``, ``fp16``, ``fp8``), by ``kernel`` (the library or implementation)."""

    source: str
    gpu: str
    dtype: str
    kernel: str
    b: int
    m: int
    n: int
    k: int
    time_s: float

    @property
    def flops(self) -> float:
        """``2·b·m·n·k``."""
        return 2.0 * self.b * self.m * self.n * self.k


@dataclass(frozen=True, slots=True)
class AttentionRecord:
    """One measured fused attention pass (``fwd``, ``bwd`` or ``fwd+bwd``) of ``kernel``
    (``fa2``, ``fa3``, ``cudnn``) at ``seq_len`` and ``head_dim``; ``flops`` in the cost
    model's convention (:func:`attention_flops`)."""

    source: str
    gpu: str
    kernel: str
    pass_: str
    causal: bool
    seq_len: int
    head_dim: int
    flops: float
    time_s: float


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory-bound operator moving ``bytes_moved`` bytes of HBM traffic in ``time_s``."""

    source: str
    gpu: str
    op: str
    bytes_moved: float
    time_s: float


@dataclass(frozen=True, slots=True)
class Skipped:
    """A row left out, where from and why."""

    source: str
    reason: str


# (substring of the lower-cased GPU text, preset or "" for none).  First match wins, so a
# more specific name comes before one it contains (gh200 before h200, gb200 before b200).
_GPU_RULES: tuple[tuple[str, str], ...] = (
    ("pcie", ""),           # A100/H100 PCIe: lower clocks and power than the SXM presets
    ("gh200", "gh200"),
    ("gb200", "gb200"),     # 2500 TFLOP/s dense BF16, not b200's 2250
    ("gb300", "gb300"),
    ("b300", "b300"),
    ("h800", "h100-sxm"),   # H100 SXM5's export part: same SMs and tensor-core peak
    ("h200", "h200"),
    ("h100", "h100-sxm"),
    ("sm_90", "h100-sxm"),
    ("b200", "b200"),
    ("a100", "a100-80gb"),
    ("mi300x", "mi300x"),
    ("gfx942", "mi300x"),
    ("mi355x", "mi355x"),
    ("gfx950", "mi355x"),
)


def gpu_preset(text: str) -> str:
    """The GPU preset a table's GPU name means, or "" when no preset matches it (an A100
    with "40GB" in its name is the 40 GB part)."""
    low = text.lower()
    for needle, preset in _GPU_RULES:
        if needle in low:
            if preset == "a100-80gb" and "40gb" in low:
                return "a100-40gb"
            return preset
    return ""


def attention_flops(pass_: str, *, batch: int, heads: int, seq_len: int, head_dim_qk: int,
                    head_dim_vo: int | None = None, causal: bool) -> float:
    """Cost-model FLOP of one attention pass: forward ``2·b·h·s²·(d_qk + d_vo)`` (=
    ``4·b·h·s²·d``), halved when causal; ``bwd`` 2.5×, ``fwd+bwd`` 3.5× that."""
    d_vo = head_dim_qk if head_dim_vo is None else head_dim_vo
    fwd = 2.0 * batch * heads * seq_len ** 2 * (head_dim_qk + d_vo) * (0.5 if causal else 1.0)
    factors = {"fwd": 1.0, "bwd": ATTENTION_BWD_OVER_FWD, "fwd+bwd": 1 + ATTENTION_BWD_OVER_FWD}
    if pass_ not in factors:
        raise ConfigError(f"unknown pass {pass_!r}", key="pass", hint="fwd, bwd or fwd+bwd")
    return fwd * factors[pass_]


def _rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="") as handle:
        yield from csv.DictReader(handle)


def _kernels_dir(data_dir: Path) -> Path:
    """``data_dir`` may be ``shared/data`` or ``shared/data/kernels``."""
    return data_dir / "kernels" if (data_dir / "kernels").is_dir() else data_dir


def _tflops_to_s(flops: float, tflops: float) -> float:
    return flops / (tflops * 1e12)


# XLA's dtype keys -> our precision; others are skipped (F32 runs TF32 under XLA's default
# precision, which the table does not pin; BF16 in with F32 out and e5m2 operands duplicate
# shapes the kept keys already cover).
_XLA_DTYPES = {"bf16xbf16->bf16": "bf16", "f8e4m3fnxf8e4m3fn->bf16": "fp8",
               "f8e4m3fnuzxf8e4m3fnuz->bf16": "fp8"}


def _xla(folder: Path) -> tuple[list[GemmRecord], list[Skipped]]:
    out, skipped = [], []
    src = "xla_matmul_perf_table"
    for row in _rows(folder / src / "xla_matmul_perf_table.csv"):
        gpu, dtype = gpu_preset(row["device_key"]), _XLA_DTYPES.get(row["dtype"])
        if not gpu:
            skipped.append(Skipped(src, f"no GPU preset for {row['device_key']}"))
        elif dtype is None:
            skipped.append(Skipped(src, f"dtype {row['dtype']} not fitted"))
        elif gpu == "h100-sxm" and dtype == "fp8":
            skipped.append(Skipped(src, "H100 FP8 rows flagged: some exceed the FP8 peak"))
        else:
            b, m, n, k = (int(row[c]) for c in ("b", "m", "n", "k"))
            flops = 2.0 * b * m * n * k
            out.append(GemmRecord(src, gpu, dtype, "xla", b, m, n, k,
                                  flops / float(row["flops_per_s"])))
    return out, skipped


_MAMF_DTYPES = {"bf16": "bf16", "fp8_e4m3fn": "fp8"}


def _mamf(folder: Path) -> tuple[list[GemmRecord], list[Skipped]]:
    out, skipped = [], []
    src = "mamf_finder"
    for row in _rows(folder / src / "mamf_best.csv"):
        gpu = gpu_preset(row["accelerator"])
        if not gpu:
            skipped.append(Skipped(src, f"no GPU preset for {row['accelerator']}"))
            continue
        m, n, k = int(row["M"]), int(row["N"]), int(row["K"])
        out.append(GemmRecord(src, gpu, _MAMF_DTYPES[row["dtype"]], "torch.mm", 1, m, n, k,
                              _tflops_to_s(2.0 * m * n * k, float(row["mamf_tflops"]))))
    return out, skipped


def _azure_gemm(folder: Path) -> tuple[list[GemmRecord], list[Skipped]]:
    out, skipped = [], []
    src = "azure_ai_benchmarking_guide"
    for row in _rows(folder / src / "gemm_blaslt.csv"):
        gpu = gpu_preset(row["gpu"])
        if not gpu:
            skipped.append(Skipped(src, f"no GPU preset for {row['gpu']}"))
            continue
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        out.append(GemmRecord(src, gpu, row["dtype"].lower(), row["library"].lower(), 1, m,
                              n, k, _tflops_to_s(2.0 * m * n * k, float(row["tflops"]))))
    return out, skipped


def _thread_gemm(folder: Path) -> tuple[list[GemmRecord], list[Skipped]]:
    out, skipped = [], []
    src = "github_thread_gemm_tables"
    for row in _rows(folder / src / "gemm_thread_tables.csv"):
        gpu = gpu_preset(row["gpu"])
        if row["groups"]:
            skipped.append(Skipped(src, "grouped GEMM: not a dense GEMM"))
        elif not gpu:
            skipped.append(Skipped(src, f"GPU not named as a preset: {row['gpu']}"))
        elif row["implementation"] != "torch-bf16":
            skipped.append(Skipped(src, "block-scaled FP8 of vLLM: not the per-tensor "
                                        "FP8 GEMM the model prices"))
        else:
            m, n, k = int(row["M"]), int(row["N"]), int(row["K"])
            out.append(GemmRecord(src, gpu, "bf16", "torch.mm", 1, m, n, k,
                                  _tflops_to_s(2.0 * m * n * k, float(row["tflops"]))))
    return out, skipped


# The 2025-03-25 README is the released kernel; the earlier table and the PR before/after
# tile experiments measure superseded code.
DEEPGEMM_README_COMMIT = "55ab91f72f76"


def deepgemm_gemms(folder: Path) -> tuple[list[GemmRecord], list[Skipped]]:
    """DeepGEMM's dense block-scaled GEMMs of its released README (kernel
    ``deepgemm-block``), and why the other rows of its tables are left out."""
    out, skipped = [], []
    src = "deepgemm_h800"
    for row in _rows(folder / src / "deepgemm_readme_h800_fp8.csv"):
        if row["kernel"] != "normal_gemm":
            skipped.append(Skipped(src, "grouped MoE GEMM: not a dense GEMM"))
        elif row["commit"] != DEEPGEMM_README_COMMIT:
            skipped.append(Skipped(src, "superseded by the 2025-03-25 README table"))
        else:
            m, n, k = int(row["m_per_group"]), int(row["n"]), int(row["k"])
            out.append(GemmRecord(src, "h100-sxm", "fp8", "deepgemm-block", 1, m, n, k,
                                  _tflops_to_s(2.0 * m * n * k, float(row["tflops"]))))
    skipped.extend(Skipped(src, "PR/issue before-after table: superseded or unreleased code")
                   for _ in _rows(folder / src / "deepgemm_pr_tables_fp8.csv"))
    return out, skipped


def load_gemms(data_dir: Path) -> tuple[list[GemmRecord], list[Skipped]]:
    """Dense GEMMs from the XLA perf table, MAMF, Azure's cuBLASLt/hipBLASLt runs, the
    vLLM thread's cuBLAS rows and DeepGEMM's released dense table."""
    folder = _kernels_dir(data_dir)
    records: list[GemmRecord] = []
    skipped: list[Skipped] = []
    for reader in (_xla, _mamf, _azure_gemm, _thread_gemm, deepgemm_gemms):
        got, left = reader(folder)
        records += got
        skipped += left
    return records, skipped


_ATTENTION_KERNELS = {"FlashAttention-2": "fa2", "Flash Attention 2.0": "fa2",
                      "FlashAttention-3": "fa3", "cuDNN": "cudnn", "cudnn": "cudnn"}


def _flash_figures(folder: Path) -> tuple[list[AttentionRecord], list[Skipped]]:
    out, skipped = [], []
    src = "flash_attention"
    for row in _rows(folder / src / "flash_attention_figures_transcribed.csv"):
        kernel = _ATTENTION_KERNELS.get(row["implementation"])
        if kernel is None:
            skipped.append(Skipped(src, f"{row['implementation']}: no such kernel in the "
                                        "model"))
        elif not row["tflops"]:
            skipped.append(Skipped(src, "label hidden in the figure"))
        else:
            causal = row["causal"] == "yes"
            seq, batch = int(row["seqlen"]), int(row["batch"])
            heads, dim = int(row["nheads"]), int(row["head_dim"])
            flops = attention_flops(row["pass"], batch=batch, heads=heads, seq_len=seq,
                                    head_dim_qk=dim, causal=causal)
            out.append(AttentionRecord(src, gpu_preset(row["gpu"]), kernel, row["pass"],
                                       causal, seq, dim, flops,
                                       _tflops_to_s(flops, float(row["tflops"]))))
    return out, skipped


def _sdpa_passes(row: dict[str, str]) -> Iterator[tuple[str, float]]:
    """(pass, milliseconds) of a cuDNN SDPA row in either file layout."""
    if row["profile_pass"] == "both":
        yield "fwd", float(row["fwd_time_ms"])
        yield "bwd", float(row["bwd_time_ms"])
    else:
        yield row["profile_pass"], float(row["time_ms"])


def _cudnn_sdpa(folder: Path) -> tuple[list[AttentionRecord], list[Skipped]]:
    out, skipped = [], []
    src = "cudnn_frontend_sdpa_norms"
    for path in sorted((folder / src / "sdpa").glob("*.csv")):
        for row in _rows(path):
            gpu = gpu_preset(row["gpu_name"])
            if row["success"] != "True":
                skipped.append(Skipped(src, "failed run (success = False)"))
            elif not gpu:
                skipped.append(Skipped(src, f"no GPU preset for {row['gpu_name']}"))
            elif row["data_type"] != "bfloat16":
                skipped.append(Skipped(src, f"{row['data_type']} attention: the model "
                                            "runs attention at 16 bits"))
            elif row["sliding_window_size"] or row["q_seqlen"] != row["kv_seqlen"]:
                skipped.append(Skipped(src, "sliding window or cross attention"))
            else:
                out += _sdpa_records(src, gpu, row)
    return out, skipped


def _sdpa_records(src: str, gpu: str, row: dict[str, str]) -> list[AttentionRecord]:
    causal = row["attn_mask"] == "top_left"
    seq, dim_qk = int(row["q_seqlen"]), int(row["head_dim_qk"])
    out = []
    total_ms = 0.0
    for pass_, ms in _sdpa_passes(row):
        total_ms += ms
        flops = attention_flops(pass_, batch=int(row["batch_size"]),
                                heads=int(row["num_q_heads"]), seq_len=seq,
                                head_dim_qk=dim_qk, head_dim_vo=int(row["head_dim_vo"]),
                                causal=causal)
        out.append(AttentionRecord(src, gpu, "cudnn", pass_, causal, seq,
                                   (dim_qk + int(row["head_dim_vo"])) // 2, flops, ms * 1e-3))
    if len(out) == 2:  # both passes timed: their sum is the training step's attention
        both = out[0].flops + out[1].flops
        out.append(AttentionRecord(src, gpu, "cudnn", "fwd+bwd", causal, seq,
                                   out[0].head_dim, both, total_ms * 1e-3))
    return out


def _azure_fa2(folder: Path) -> tuple[list[AttentionRecord], list[Skipped]]:
    src = "azure_ai_benchmarking_guide"
    skipped = [Skipped(src, "FA2 at one shape; which pass and mask it reports is not "
                            "stated") for _ in _rows(folder / src / "flash_attention2.csv")]
    return [], skipped


def load_attention(data_dir: Path) -> tuple[list[AttentionRecord], list[Skipped]]:
    """FlashAttention figures (FA2, FA3, cuDNN; hand-transcribed) and cuDNN's SDPA
    benchmark (BF16, full causal or non-causal self-attention)."""
    folder = _kernels_dir(data_dir)
    records: list[AttentionRecord] = []
    skipped: list[Skipped] = []
    for reader in (_flash_figures, _cudnn_sdpa, _azure_fa2):
        got, left = reader(folder)
        records += got
        skipped += left
    return records, skipped


def _babelstream(folder: Path) -> tuple[list[MemoryRecord], list[Skipped]]:
    out, skipped = [], []
    src = "azure_ai_benchmarking_guide"
    for row in _rows(folder / src / "hbm_babelstream.csv"):
        gpu = gpu_preset(row["gpu"])
        if not gpu or not row["tb_per_s"]:
            skipped.append(Skipped(src, "no GPU preset or no value"))
            continue
        moved = 8.0 * BABELSTREAM_ELEMENTS * BABELSTREAM_ARRAYS[row["kernel"]]
        out.append(MemoryRecord(src, gpu, f"babelstream.{row['kernel'].lower()}", moved,
                                moved / (float(row["tb_per_s"]) * 1e12)))
    return out, skipped


def _cudnn_norms(folder: Path) -> tuple[list[MemoryRecord], list[Skipped]]:
    out, skipped = [], []
    src = "cudnn_frontend_sdpa_norms"
    for path in sorted((folder / src / "norms").glob("*.csv")):
        for row in _rows(path):
            gpu = gpu_preset(row["gpu_name"])
            if row["success"] != "True" or not gpu:
                skipped.append(Skipped(src, "failed run or no GPU preset"))
                continue
            for pass_ in ("fwd", "bwd"):
                seconds = float(row[f"{pass_}_time_ms"]) * 1e-3
                out.append(MemoryRecord(
                    src, gpu, f"{row['norm_type']}.{row['backend']}.{pass_}",
                    float(row[f"{pass_}_gbps"]) * 1e9 * seconds, seconds))
    return out, skipped


# Liger forward operators whose HBM traffic is a read of the input and a write of the output
# (norm weights are negligible): (kernel, provider) -> input elements read per output
# element; the element size comes from the benchmark's dtype.
_LIGER_FORWARD = {("rms_norm", "liger"): 1, ("layer_norm", "liger"): 1,
                  ("layer_norm", "liger_triton"): 1, ("megatron_rms_norm", "liger"): 1,
                  ("megatron_swiglu", "liger"): 2}


def _liger_bytes(row: dict[str, str], reads: int) -> float:
    """Bytes of one forward: ``reads`` input elements per output element, one output."""
    config = json.loads(row["extra_benchmark_config_str"])
    x = float(row["x_value"])
    element = 4.0 if config.get("dtype") == "torch.float32" else 2.0
    rows = config.get("M") or config.get("S", 1) * config.get("B", 1)
    if row["x_name"] == "T":
        rows, x = x, float(config["hidden_size"])
    return rows * x * element * (reads + 1)


def _liger(folder: Path) -> tuple[list[MemoryRecord], list[Skipped]]:
    out, skipped = [], []
    src = "liger_kernel"
    for row in _rows(folder / src / "liger_speed_datacenter_gpus.csv"):
        reads = _LIGER_FORWARD.get((row["kernel_name"], row["kernel_provider"]))
        gpu = gpu_preset(row["gpu_name"])
        if reads is None or row["kernel_operation_mode"] != "forward" or not gpu:
            skipped.append(Skipped(src, "not a fused single-pass forward of a norm or "
                                        "activation (or no GPU preset)"))
            continue
        out.append(MemoryRecord(src, gpu, f"{row['kernel_name']}.fwd",
                                _liger_bytes(row, reads), float(row["y_value_50"]) * 1e-3))
    return out, skipped


def load_memory(data_dir: Path) -> tuple[list[MemoryRecord], list[Skipped]]:
    """BabelStream HBM runs, cuDNN's norm benchmark and Liger's fused norm/SwiGLU
    forwards."""
    folder = _kernels_dir(data_dir)
    records: list[MemoryRecord] = []
    skipped: list[Skipped] = []
    for reader in (_babelstream, _cudnn_norms, _liger):
        got, left = reader(folder)
        records += got
        skipped += left
    return records, skipped
