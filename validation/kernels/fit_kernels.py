"""Fit the roofline's per-operator efficiencies to published kernel microbenchmarks.

GEMM: ``t = 2·b·m·n·k / (peak · e_inf · tiles_and_waves(b·m, n, k) · k/(k + k_half))``
(:func:`~distsim_gpu.workloads.cost.compute.roofline.matmul_efficiency`), fitted per GPU
architecture and dtype (16-bit, FP8).  Fused attention: ``t = FLOP / (peak · e_inf ·
s/(s + s_half) · d/(d + d_half))`` per kernel and architecture, on forward+backward where
the data has it, else forward.  Memory-bound: ``t = bytes / (bw · e)`` per GPU on rows
moving at least ``MEMORY_MIN_BYTES``.  Each fit minimises the squared log time error:
for a fixed shape parameter the scale ``e_inf`` is closed form (the geometric mean of the
per-row ratios), the shape parameters are a grid search.  Cross-validation holds out whole
shape groups (5 folds, or one group at a time when fewer).  Prints, per data set, the
median and p90 |predicted/measured - 1| with the shipped constants ("before") and with
the fit ("cv" = each row predicted by the fold that did not see it).

    python validation/kernels/fit_kernels.py [--data shared/data] [--table]

``--table`` prints the summary that docs/validation.md holds (and tests/test_docs_tables.py
checks): the data sets and families of ``DOC_ROWS``, under their names there.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from distsim_gpu.workloads.cost.compute import kernel_tables as kt
from distsim_gpu.workloads.cost.compute import roofline as rf
from distsim_gpu.workloads.cost.compute.stacks import FP8_MATMUL_EFFICIENCY
from distsim_gpu.workloads.specs.gpus import get_gpu

R = TypeVar("R")
DEFAULT_DATA = Path(os.environ.get("DISTSIM_SHARED_DATA",
                                   Path(__file__).resolve().parents[2].parent / "shared/data"))
FOLDS = 5
K_HALF_GRID = (0.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0,
               512.0)
SEQ_HALF_GRID = (0.0, 64.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0,
                 2048.0)
DIM_HALF_GRID = (0.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0)
MEMORY_MIN_BYTES = 64 * 2 ** 20
# GEMMs with a dimension under this are latency bound (a 256^3 GEMM is a few µs, where the
# roofline's launch overhead, not its efficiency, decides): left out of the GEMM fit.
GEMM_MIN_DIM = 1024
# Multi-kernel eager references (PyTorch, torch.compile norms) move more bytes than the
# logical count their GB/s is printed against: only fused kernels calibrate HBM efficiency.
MEMORY_UNFUSED = ("pytorch", "torch_compile")
# DeepGEMM's block-scaled FP8 pays CUDA-core scale promotion the per-tensor FP8 GEMM the
# model prices does not: reported, not fitted.
GEMM_EVAL_ONLY = frozenset({"deepgemm-block"})
# The constants the roofline shipped before this fit ("before" in the table): asymptotic GEMM
# efficiency by architecture (0.8 otherwise), the stack's FP8 efficiency, k half point 64,
# attention by (kernel, architecture) (0.5 otherwise), memory 0.8.
BASELINE_MATMUL = {"ampere": 0.8, "hopper": 0.745}
BASELINE_FP8 = FP8_MATMUL_EFFICIENCY
BASELINE_K_HALF = 64.0
BASELINE_ATTENTION = {("fa2", "ampere"): 0.5, ("fa2", "hopper"): 0.35,
                      ("fa2", "blackwell"): 0.35, ("cudnn", "ampere"): 0.5,
                      ("cudnn", "hopper"): 0.5, ("cudnn", "blackwell"): 0.5}
BASELINE_MEMORY = 0.8
# The shape at which the runtime's single attention efficiency is the fitted curve's value.
ATTENTION_REFERENCE = (4096, 128)


@dataclass(frozen=True, slots=True)
class Fit:
    """A fitted scale and shape parameters, and the rows it saw."""

    scale: float
    shape: tuple[float, ...]
    rows: int


def fit_scale(unit_times: Sequence[float], measured: Sequence[float]) -> float:
    """The ``e`` minimising ``Σ log²(unit/e / measured)``: ``exp(mean log(unit/measured))``."""
    return math.exp(statistics.fmean(math.log(u / t) for u, t in zip(unit_times, measured,
                                                                      strict=True)))


def grid_fit(rows: Sequence[R], unit_time: Callable[[R, tuple[float, ...]], float],
             measured: Callable[[R], float], grid: Sequence[tuple[float, ...]]) -> Fit:
    """Best (scale, shape) over ``grid``: ``unit_time(row, shape)`` is the time at scale 1."""
    best: tuple[float, Fit] | None = None
    times = [measured(r) for r in rows]
    for shape in grid:
        units = [unit_time(r, shape) for r in rows]
        scale = fit_scale(units, times)
        loss = sum(math.log(u / scale / t) ** 2 for u, t in zip(units, times, strict=True))
        if best is None or loss < best[0] - 1e-12:
            best = (loss, Fit(scale, shape, len(rows)))
    assert best is not None
    return best[1]


def folds(rows: Sequence[R], group: Callable[[R], Hashable]) -> list[list[int]]:
    """Row indices per fold, whole groups together (seeded shuffle of the sorted groups)."""
    groups = sorted({group(r) for r in rows}, key=repr)
    random.Random(0).shuffle(groups)
    count = min(FOLDS, len(groups))
    fold_of = {g: i % count for i, g in enumerate(groups)}
    out: list[list[int]] = [[] for _ in range(count)]
    for index, row in enumerate(rows):
        out[fold_of[group(row)]].append(index)
    return out


def cross_validated(rows: Sequence[R], unit_time: Callable[[R, tuple[float, ...]], float],
                    measured: Callable[[R], float], grid: Sequence[tuple[float, ...]],
                    group: Callable[[R], Hashable]) -> list[float]:
    """Each row's predicted time from a fit on the folds that do not hold its group."""
    predicted = [math.nan] * len(rows)
    parts = folds(rows, group)
    if len(parts) < 2:
        return predicted
    for held in parts:
        held_set = set(held)
        train = [r for i, r in enumerate(rows) if i not in held_set]
        fit = grid_fit(train, unit_time, measured, grid)
        for i in held:
            predicted[i] = unit_time(rows[i], fit.shape) / fit.scale
    return predicted


def errors(predicted: Sequence[float], measured: Sequence[float]) -> tuple[float, float]:
    """Median and p90 of ``|predicted/measured - 1|`` (NaN predictions left out)."""
    values = sorted(abs(p / t - 1) for p, t in zip(predicted, measured, strict=True)
                    if not math.isnan(p))
    if not values:
        return math.nan, math.nan
    return statistics.median(values), values[min(len(values) - 1, int(0.9 * len(values)))]


def architecture(gpu: str) -> str:
    return get_gpu(gpu).architecture


def gemm_dtype(record: kt.GemmRecord) -> str:
    return "fp8" if record.dtype == "fp8" else "16-bit"


def gemm_unit_time(record: kt.GemmRecord, shape: tuple[float, ...]) -> float:
    """Seconds at asymptotic efficiency 1, small-k half point ``shape[0]``."""
    gpu = get_gpu(record.gpu)
    peak = gpu.peak_flops("fp8" if record.dtype == "fp8" else "bf16")
    eff = rf.matmul_efficiency(record.b * record.m, record.n, record.k, sm_count=gpu.sm_count,
                               asymptotic_efficiency=1.0, k_half=shape[0])
    return record.flops / (peak * eff)


def gemm_before(record: kt.GemmRecord) -> float:
    """Seconds with the baseline constants (the stack's FP8 efficiency for FP8)."""
    scale = (BASELINE_FP8 if record.dtype == "fp8"
             else BASELINE_MATMUL.get(architecture(record.gpu), 0.8))
    return gemm_unit_time(record, (BASELINE_K_HALF,)) / scale


def attention_unit_time(record: kt.AttentionRecord, shape: tuple[float, ...]) -> float:
    """Seconds at ``e_inf`` 1 with ``(s_half, d_half) = shape``."""
    s_half, d_half = shape
    factor = (record.seq_len / (record.seq_len + s_half)
              * record.head_dim / (record.head_dim + d_half))
    return record.flops / (get_gpu(record.gpu).peak_flops("bf16") * factor)


def attention_before(record: kt.AttentionRecord) -> float:
    scale = BASELINE_ATTENTION.get((record.kernel, architecture(record.gpu)), 0.5)
    return record.flops / (get_gpu(record.gpu).peak_flops("bf16") * scale)


def memory_unit_time(record: kt.MemoryRecord, shape: tuple[float, ...]) -> float:
    del shape
    return record.bytes_moved / get_gpu(record.gpu).memory_bandwidth_bytes_per_s


def _measured(record: kt.GemmRecord | kt.AttentionRecord | kt.MemoryRecord) -> float:
    return record.time_s


@dataclass(frozen=True, slots=True)
class Result:
    """One fitted family: its key, fit, and per-data-set error lines."""

    family: str
    key: tuple[str, str]
    fit: Fit
    cv_median: float
    lines: list[tuple[str, int, tuple[float, float], tuple[float, float]]]


def _report(family: str, key: tuple[str, str], rows: Sequence[R], fit: Fit,
            cv: Sequence[float], before: Callable[[R], float],
            label: Callable[[R], str]) -> Result:
    by_set: dict[str, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        by_set[label(row)].append(i)
    lines = []
    for name, idx in sorted(by_set.items()):
        measured = [_measured(rows[i]) for i in idx]  # type: ignore[arg-type]
        lines.append((name, len(idx), errors([before(rows[i]) for i in idx], measured),
                      errors([cv[i] for i in idx], measured)))
    all_measured = [_measured(r) for r in rows]  # type: ignore[arg-type]
    return Result(family, key, fit, errors(cv, all_measured)[0], lines)


def fit_gemms(records: Sequence[kt.GemmRecord]) -> list[Result]:
    """One fit per (architecture, 16-bit | fp8); rows of GEMM_EVAL_ONLY kernels are
    predicted by it but not fitted."""
    families: dict[tuple[str, str], list[kt.GemmRecord]] = defaultdict(list)
    for r in records:
        if min(r.b * r.m, r.n, r.k) >= GEMM_MIN_DIM:
            families[(architecture(r.gpu), gemm_dtype(r))].append(r)
    out = []
    grid = [(k,) for k in K_HALF_GRID]
    for key, rows in sorted(families.items()):
        train = [r for r in rows if r.kernel not in GEMM_EVAL_ONLY]
        if len(train) < 2:
            continue
        fit = grid_fit(train, gemm_unit_time, _measured, grid)
        cv = cross_validated(train, gemm_unit_time, _measured, grid,
                             lambda r: (r.m, r.n, r.k))
        evaluated = train + [r for r in rows if r.kernel in GEMM_EVAL_ONLY]
        cv += [gemm_unit_time(r, fit.shape) / fit.scale for r in evaluated[len(train):]]
        out.append(_report("gemm", key, evaluated, fit, cv, gemm_before,
                           lambda r: f"{r.source}/{r.gpu}/{r.dtype}/{r.kernel}"))
    return out


def fit_attention(records: Sequence[kt.AttentionRecord]) -> list[Result]:
    """One fit per (kernel, architecture), on fwd+bwd rows where there are any, else fwd."""
    families: dict[tuple[str, str], list[kt.AttentionRecord]] = defaultdict(list)
    for r in records:
        families[(r.kernel, architecture(r.gpu))].append(r)
    grid = [(s, d) for s in SEQ_HALF_GRID for d in DIM_HALF_GRID]
    out = []
    for key, rows in sorted(families.items()):
        passes = "fwd+bwd" if any(r.pass_ == "fwd+bwd" for r in rows) else "fwd"
        train = [r for r in rows if r.pass_ == passes]
        fit = grid_fit(train, attention_unit_time, _measured, grid)
        cv = cross_validated(train, attention_unit_time, _measured, grid,
                             lambda r: (r.seq_len, r.head_dim))
        out.append(_report("attention", key, train, fit, cv, attention_before,
                           lambda r: f"{r.source}/{r.gpu}/{r.pass_}"))
    return out


def fit_memory(records: Sequence[kt.MemoryRecord]) -> list[Result]:
    """One efficiency per GPU over its bandwidth-bound rows (>= MEMORY_MIN_BYTES)."""
    families: dict[tuple[str, str], list[kt.MemoryRecord]] = defaultdict(list)
    for r in records:
        if r.bytes_moved >= MEMORY_MIN_BYTES and not any(f".{b}." in r.op
                                                         for b in MEMORY_UNFUSED):
            families[(r.gpu, "hbm")].append(r)
    out = []
    for key, rows in sorted(families.items()):
        fit = grid_fit(rows, memory_unit_time, _measured, [()])
        cv = cross_validated(rows, memory_unit_time, _measured, [()],
                             lambda r: (r.source, r.op.split(".")[0]))
        out.append(_report("memory", key, rows, fit, cv,
                           lambda r: memory_unit_time(r, ()) / BASELINE_MEMORY,
                           lambda r: f"{r.source}/{r.gpu}/{r.op.split('.')[0]}"))
    return out


def attention_at_reference(fit: Fit) -> float:
    """The fitted attention curve at :data:`ATTENTION_REFERENCE` (s, d)."""
    (s, d), (s_half, d_half) = ATTENTION_REFERENCE, fit.shape
    return fit.scale * s / (s + s_half) * d / (d + d_half)


def fit_all(data_dir: Path) -> list[Result]:
    """Every family's fit on the tables under ``data_dir``."""
    gemms, _ = kt.load_gemms(data_dir)
    attention, _ = kt.load_attention(data_dir)
    memory, _ = kt.load_memory(data_dir)
    return fit_gemms(gemms) + fit_attention(attention) + fit_memory(memory)


def _print(results: Sequence[Result]) -> None:
    print("family     key                    rows  scale   shape              cv-median")
    for res in results:
        extra = ""
        if res.family == "attention":
            extra = f"  at s,d={ATTENTION_REFERENCE}: {attention_at_reference(res.fit):.3f}"
        print(f"{res.family:10s} {'/'.join(res.key):22s} {res.fit.rows:5d}  "
              f"{res.fit.scale:.3f}  {res.fit.shape!s:18s} {res.cv_median:7.1%}{extra}")
    print("\ndata set                                             rows  before med/p90"
          "      after (cv) med/p90")
    for res in results:
        for name, n, (bm, bp), (am, ap) in res.lines:
            print(f"{name:52s} {n:5d}  {bm:6.1%} / {bp:6.1%}   {am:6.1%} / {ap:6.1%}")


#: docs/validation.md's rows: (label, a data set's name as the fit reports it, or a
#: family's "family:architecture/dtype" for its cross-validated median alone).
DOC_ROWS = (
    ("XLA H100 BF16", "xla_matmul_perf_table/h100-sxm/bf16/xla"),
    ("XLA B200 BF16", "xla_matmul_perf_table/b200/bf16/xla"),
    ("XLA B200 FP8 e4m3", "xla_matmul_perf_table/b200/fp8/xla"),
    ("XLA MI300X BF16", "xla_matmul_perf_table/mi300x/bf16/xla"),
    ("XLA MI300X FP8", "xla_matmul_perf_table/mi300x/fp8/xla"),
    ("Azure cuBLASLt FP8 H100", "azure_ai_benchmarking_guide/h100-sxm/fp8/cublaslt"),
    ("Azure cuBLASLt FP8 H200", "azure_ai_benchmarking_guide/h200/fp8/cublaslt"),
    ("Azure hipBLASLt FP8 MI300X", "azure_ai_benchmarking_guide/mi300x/fp8/hipblaslt"),
    ("Azure cuBLASLt FP16 A100", "azure_ai_benchmarking_guide/a100-80gb/fp16/cublaslt"),
    ("DeepGEMM H800 dense (evaluated, not fitted)", "deepgemm_h800/h100-sxm/fp8/deepgemm-block"),
    ("FA2 figure A100 fwd+bwd", "flash_attention/a100-80gb/fwd+bwd"),
    ("FA2 figure H100 fwd+bwd", "flash_attention/h100-sxm/fwd+bwd"),
    ("FA3 figure H100 fwd (FA3, cuDNN, FA2 pooled by kernel)", "flash_attention/h100-sxm/fwd"),
    ("cuDNN SDPA H200 BF16 fwd+bwd", "cudnn_frontend_sdpa_norms/h200/fwd+bwd"),
    ("cuDNN SDPA GB200 and GB300 BF16 fwd, bwd", "attention:cudnn/blackwell"),
    ("GEMMs Blackwell BF16 (XLA B200; MAMF B200, B300, GB200; a GitHub thread's B200)",
     "gemm:blackwell/16-bit"),
    ("GEMMs CDNA 4 BF16 (XLA gfx950, MAMF MI355X)", "gemm:cdna4/16-bit"),
    ("HBM H100 BabelStream", "azure_ai_benchmarking_guide/h100-sxm/babelstream"),
    ("HBM H100 Liger LayerNorm", "liger_kernel/h100-sxm/layer_norm"),
    ("HBM H100 Liger RMSNorm (Megatron's)", "liger_kernel/h100-sxm/megatron_rms_norm"),
    ("HBM H100 Liger SwiGLU (Megatron's)", "liger_kernel/h100-sxm/megatron_swiglu"),
    ("HBM H200 BabelStream", "azure_ai_benchmarking_guide/h200/babelstream"),
    ("HBM H200 cuDNN RMSNorm", "cudnn_frontend_sdpa_norms/h200/rms_norm"),
)


def doc_table(results: Sequence[Result]) -> list[str]:
    """The Markdown table of docs/validation.md's "Kernel fits" (see ``DOC_ROWS``)."""
    sets = {name: (n, before, after) for res in results for name, n, before, after in res.lines}
    families = {f"{res.family}:{'/'.join(res.key)}": res for res in results}
    lines = ["| data set | rows | before median / p90 | after (CV) median / p90 |",
             "|---|---:|---|---|"]
    unknown = [name for _label, name in DOC_ROWS if name not in families and name not in sets]
    if unknown:
        raise SystemExit(f"the fit has no data set or family {', '.join(unknown)}: the "
                         "kernel tables changed; update DOC_ROWS")
    for label, name in DOC_ROWS:
        if name in families:
            res = families[name]
            lines.append(f"| {label} | {res.fit.rows} | — | {res.cv_median:.1%} median |")
            continue
        n, (bm, bp), (am, ap) = sets[name]
        lines.append(f"| {label} | {n} | {bm:.1%} / {bp:.1%} | {am:.1%} / {ap:.1%} |")
    return [line.replace("%", " %") for line in lines]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="shared/data (holding kernels/)")
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    args = parser.parse_args(argv)
    if not (args.data / "kernels").is_dir():
        print(f"no kernel tables under {args.data}", file=sys.stderr)
        return 1
    results = fit_all(args.data)
    if args.table:
        print("\n".join(doc_table(results)))
    else:
        _print(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
