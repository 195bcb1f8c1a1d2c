"""distsim's block-scaled FP8 GEMMs (``training.fp8_recipe: blockwise``) against DeepGEMM's
published Hopper timings, and the fit of their one constant.

The model (:mod:`~distsim_gpu.workloads.cost.compute.fp8_recipes`): a DeepGEMM kernel runs
its main loop at ``BLOCKWISE_GEMM_EFFICIENCY`` of the FP8 peak (tiles and waves counted,
:func:`~distsim_gpu.workloads.cost.compute.roofline.matmul_efficiency` with no small-k
half point), then writes its output — 2 bytes a bf16 element, 8 an fp32 weight-gradient
element it reads and accumulates into — at HBM bandwidth.

Fitted on the kernel authors' tables (``shared/data/kernels/deepgemm_h800``): the released
README of 2025-03-25 (its six M = 4,096 dense GEMMs; the M = 64 and 128 decode rows are
memory-bound, out of scope) and the weight-gradient tables of PR #95 (nine dense, and the
five k-grouped rows the PR published, as issue #107 quotes them).  Evaluated, not fitted:
a user's H200 measurement of the k-grouped kernel (issue #107, an older nvcc) and
torchao's H100 run of DeepGEMM's grouped GEMMs for DeepSeek-V3's experts
(``torchao_lowp_kernels``).  The constant minimises the squared log time error (a grid
of 0.001); "cv" predicts each row from the fit without it.

    python validation/kernels/compare_blockwise.py [--data shared/data] [--fit]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distsim_gpu.workloads.cost.compute.fp8_recipes import BLOCKWISE_GEMM_EFFICIENCY
from distsim_gpu.workloads.cost.compute.kernel_tables import deepgemm_gemms
from distsim_gpu.workloads.cost.compute.roofline import matmul_efficiency
from distsim_gpu.workloads.specs.gpus import get_gpu

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
#: bf16 output written; fp32 weight gradient read and written.
OUTPUT_BYTES = {"forward": 2.0, "wgrad": 8.0}
GRID = [step / 1000 for step in range(300, 950)]
# torchao's README table, "H100 results (balanced tokens, M=32768, E=8)": DeepSeek-V3's
# expert FFN (N 2048, K 7168) over 8 experts of 4,096 tokens.
TORCHAO_TABLE = "torchao_lowp_kernels/h100_blockwise_fp8_moe_deepgemm_grouped_and_quant.csv"


@dataclass(frozen=True, slots=True)
class Row:
    """One published kernel timing: ``groups`` GEMMs of ``m×k·k×n``."""

    source: str
    gpu: str
    kind: str
    groups: int
    m: int
    n: int
    k: int
    time_s: float
    fitted: bool

    @property
    def flops(self) -> float:
        return 2.0 * self.groups * self.m * self.n * self.k


def _timed(flops: float, tflops: str) -> float:
    return flops / (float(tflops) * 1e12)


def load_rows(data: Path) -> list[Row]:
    """The fitted and evaluated rows (module docstring)."""
    folder = data / "kernels"
    rows = [Row("DeepGEMM README", g.gpu, "forward", 1, g.m, g.n, g.k, g.time_s, True)
            for g in deepgemm_gemms(folder)[0] if g.m >= 1024]
    with open(folder / "deepgemm_h800" / "deepgemm_pr_tables_fp8.csv") as handle:
        for r in csv.DictReader(handle):
            if "wgrad" not in r["kernel"]:
                continue
            g, m, n, k = (int(r[key]) for key in ("num_groups", "m", "n", "k"))
            user = r["source"] == "issue#107"  # the H200 reporter's own measurement
            rows.append(Row("DeepGEMM issue #107 (H200)" if user else "DeepGEMM PR #95",
                            "h200" if user else "h100-sxm", "wgrad", g, m, n, k,
                            _timed(2.0 * g * m * n * k, r["tflops"]), not user))
    with open(folder / TORCHAO_TABLE) as handle:
        times = {r["kernel"]: float(r["us"]) * 1e-6 for r in csv.DictReader(handle)}
    for kind, key, (m, n, k) in (("forward", "fwd: deepgemm_grouped_mm", (4096, 2048, 7168)),
                                 ("forward", "bwd: deepgemm_grouped_mm_dgrad",
                                  (4096, 7168, 2048)),
                                 ("wgrad", "bwd: deepgemm_grouped_mm_wgrad", (7168, 2048, 4096))):
        rows.append(Row("torchao (H100)", "h100-sxm", kind, 8, m, n, k, times[key], False))
    return rows


def parts_s(row: Row) -> tuple[float, float]:
    """(main loop seconds at efficiency 1, output seconds) of ``row`` on its GPU."""
    gpu = get_gpu(row.gpu)
    shape = matmul_efficiency(row.m, row.n, row.k, sm_count=gpu.sm_count,
                              asymptotic_efficiency=1.0, k_half=0.0, groups=row.groups)
    main = row.flops / (gpu.peak_flops("fp8") * shape)
    out = row.groups * row.m * row.n * OUTPUT_BYTES[row.kind] / gpu.memory_bandwidth_bytes_per_s
    return main, out


def predicted_s(row: Row, efficiency: float) -> float:
    main, out = parts_s(row)
    return main / efficiency + out


def fit(rows: Sequence[Row]) -> float:
    """The grid's efficiency with the least squared log error over ``rows``."""
    def loss(e: float) -> float:
        return sum(math.log(predicted_s(r, e) / r.time_s) ** 2 for r in rows)
    return min(GRID, key=loss)


def fit_efficiency(data: Path) -> float:
    """The constant the fitted rows give (``BLOCKWISE_GEMM_EFFICIENCY`` ships it)."""
    return fit([r for r in load_rows(data) if r.fitted])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--fit", action="store_true", help="print the fitted constant only")
    args = parser.parse_args(argv)
    if not (args.data / "kernels" / "deepgemm_h800").is_dir():
        print(f"no DeepGEMM tables under {args.data}", file=sys.stderr)
        return 1
    rows = load_rows(args.data)
    fitted = [r for r in rows if r.fitted]
    efficiency = fit(fitted)
    if args.fit:
        print(f"{efficiency:.3f}")
        return 0
    print(f"{'source':27s} {'kind':7s} {'G':>2s} {'m':>6s} {'n':>6s} {'k':>6s} "
          f"{'TFLOP/s':>8s} {'shipped':>8s} {'cv':>7s}")
    errors: dict[str, list[float]] = {"fitted": [], "evaluated": []}
    for row in rows:
        shipped = predicted_s(row, BLOCKWISE_GEMM_EFFICIENCY) / row.time_s - 1
        if row.fitted:
            held_out = fit([r for r in fitted if r is not row])
            cv = predicted_s(row, held_out) / row.time_s - 1
        else:
            cv = shipped
        errors["fitted" if row.fitted else "evaluated"].append(abs(cv))
        print(f"{row.source:27s} {row.kind:7s} {row.groups:2d} {row.m:6d} {row.n:6d} "
              f"{row.k:6d} {row.flops / row.time_s / 1e12:8.0f} {shipped:+8.1%} {cv:+7.1%}")
    print(f"fit: {efficiency:.3f} (shipped {BLOCKWISE_GEMM_EFFICIENCY}); fitted rows "
          f"{len(errors['fitted'])}, cv median {statistics.median(errors['fitted']):.1%}, "
          f"max {max(errors['fitted']):.1%}; evaluated rows {len(errors['evaluated'])}, "
          f"median {statistics.median(errors['evaluated']):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
