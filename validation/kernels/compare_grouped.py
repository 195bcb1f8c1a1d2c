"""Grouped MoE GEMMs: distsim's grouped-GEMM rate against the published grouped kernels.

The tables (``shared/data/kernels``): DeepGEMM's released README (2025-03-25, H800,
block-scaled FP8): m-grouped contiguous GEMMs (4 or 8 groups of 4,096-8,192 rows) and
masked ones (1-4 groups of 256-1,024 rows), DeepSeek-V3's expert shapes; torchao's H100
benchmark of the same DeepGEMM kernels in training (8 experts of 4,096 tokens, N 2,048,
K 7,168): forward, data gradient and the k-grouped weight gradient.

distsim prices a grouped GEMM as one launch whose tiles — every group padded to the tile
on its own — share the waves (:func:`~distsim_gpu.workloads.cost.compute.roofline.
matmul_efficiency` with ``groups``), at the FP8 GEMM rate the kernel fits give Hopper;
the per-expert alternative is one GEMM per group, each with its own waves; "blockwise"
is the rate ``training.fp8_recipe: blockwise`` gives these block-scaled kernels
(DeepGEMM's main loop and output, fitted on its dense tables: compare_blockwise.py).
Uncalibrated; nothing here is fitted::

    python validation/kernels/compare_grouped.py [--data DIR] [--table]

``--table`` prints the summary by kernel layout that docs/validation.md holds (and
tests/test_docs_tables.py checks) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from distsim_gpu.workloads.cost.compute import STACKS, RooflineCosts
from distsim_gpu.workloads.cost.compute.kernel_tables import DEEPGEMM_README_COMMIT
from distsim_gpu.workloads.cost.compute.operators import gemm
from distsim_gpu.workloads.specs.gpus import get_gpu

HERE = Path(__file__).resolve().parent
RELEASED = DEEPGEMM_README_COMMIT  # DeepGEMM's README of 2025-03-25, the released kernels
#: torchao's H100 rows (blockwise FP8 training README): (kernel, groups, m, n, k, TFLOP/s).
TORCHAO_H100 = (("torchao fwd", 8, 4096, 2048, 7168, 1234.0),
                ("torchao dgrad", 8, 4096, 7168, 2048, 1236.0),
                ("torchao wgrad (k-grouped)", 8, 7168, 2048, 4096, 457.0))


def rows(data: Path) -> list[tuple[str, int, int, int, int, float]]:
    """(kernel, groups, m per group, n, k, measured TFLOP/s) of every grouped row."""
    out = []
    path = data / "deepgemm_h800" / "deepgemm_readme_h800_fp8.csv"
    with open(path, newline="", encoding="utf-8") as handle:
        for r in csv.DictReader(handle):
            if r["commit"] == RELEASED and r["kernel"] != "normal_gemm":
                out.append((r["kernel"], int(r["num_groups"]), int(r["m_per_group"]),
                            int(r["n"]), int(r["k"]), float(r["tflops"])))
    return out + list(TORCHAO_H100)


def predicted_tflops(groups: int, m: int, n: int, k: int, *, grouped: bool) -> float:
    """distsim's FP8 rate for ``groups`` GEMMs of ``m×k·k×n`` on an H100 (H800 compute)."""
    costs = RooflineCosts(get_gpu("h100-sxm"), "fp8")
    efficiency = costs.matmul_efficiency(m, n, k, fp8=True, groups=groups if grouped else 1)
    return efficiency * get_gpu("h100-sxm").peak_flops("fp8") / 1e12


def blockwise_tflops(kernel: str, groups: int, m: int, n: int, k: int) -> float:
    """The rate ``training.fp8_recipe: blockwise`` gives the same grouped kernel: DeepGEMM's
    main loop, then its output (bf16, or fp32 read and accumulated by a weight gradient)."""
    costs = RooflineCosts(get_gpu("h100-sxm"), "fp8", stack=STACKS["deepseek"],
                          launch_overhead_s=0.0)
    item = replace(gemm("g", (m, n, k), 1, 8.0 if "wgrad" in kernel else 2.0, groups,
                        fp8=True), grouped=True)
    return item.total_flops / costs.kernel_time_s(item) / 1e12


#: The summary's row groups: (label, kernels).
LAYOUTS = (("DeepGEMM contiguous (H800, FP8)", ("m_grouped_contiguous",)),
           ("DeepGEMM masked (H800, FP8)", ("m_grouped_masked",)),
           ("torchao's DeepGEMM forward and data gradient (H100)", ("torchao fwd",
                                                                     "torchao dgrad")),
           ("torchao's DeepGEMM k-grouped weight gradient (H100)",
            ("torchao wgrad (k-grouped)",)))


def _span(values: Sequence[float], form: str, sep: str = "–") -> str:
    """``low–high`` of ``values`` (one figure where they agree), each in ``form``."""
    low, high = (format(v, form).replace("-", "−") for v in (min(values), max(values)))
    return low if low == high else f"{low}{sep}{high}"


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md's "Grouped MoE GEMMs"."""
    lines = ["| rows | n | groups × m a group | measured TFLOP/s | distsim, grouped | error |",
             "|---|---:|---|---:|---:|---:|"]
    every = rows(data)
    errors = []
    for label, kernels in LAYOUTS:
        mine = [r for r in every if r[0] in kernels]
        got = [predicted_tflops(g, m, n, k, grouped=True) for _, g, m, n, k, _ in mine]
        errs = [100 * (p / r[5] - 1) for p, r in zip(got, mine)]
        errors += errs
        shape = (f"{_span([r[1] for r in mine], 'd')} × "
                 f"{_span([r[2] for r in mine], ',d')}")
        lines.append(f"| {label} | {len(mine)} | {shape} | "
                     f"{_span([r[5] for r in mine], ',.0f')} | {_span(got, ',.0f')} | "
                     f"{_span(errs, '+.0f', ' … ')} % |")
    median = statistics.median(abs(e) for e in errors)
    lines.append(f"| all | {len(errors)} | | | | median {median:.1f} % |")
    return lines


def find_data(given: str | None) -> Path:
    candidates = [Path(given)] if given else [parent / "shared" / "data" / "kernels"
                                              for parent in HERE.parents]
    for candidate in candidates:
        if (candidate / "deepgemm_h800").is_dir():
            return candidate
    raise SystemExit("no kernels data found: pass --data DIR (shared/data/kernels)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the shared/data/kernels folder")
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(summary_table(find_data(args.data))))
        return 0
    errors: dict[str, list[float]] = {"grouped": [], "per-expert": [], "blockwise": []}
    print(f"{'kernel':28} {'G':>2} {'m':>5} {'n':>5} {'k':>5} {'measured':>8} "
          f"{'grouped':>8} {'per-expert':>10} {'blockwise':>9}")
    for kernel, groups, m, n, k, measured in rows(find_data(args.data)):
        got = {"grouped": predicted_tflops(groups, m, n, k, grouped=True),
               "per-expert": predicted_tflops(groups, m, n, k, grouped=False),
               "blockwise": blockwise_tflops(kernel, groups, m, n, k)}
        for name, value in got.items():
            errors[name].append(value / measured - 1)
        print(f"{kernel:28} {groups:2d} {m:5d} {n:5d} {k:5d} {measured:8.0f} "
              f"{got['grouped']:8.0f} {got['per-expert']:10.0f} {got['blockwise']:9.0f}")
    for name, errs in errors.items():
        print(f"{name}: median |error| {statistics.median(abs(e) for e in errs):.1%}, "
              f"signed median {statistics.median(errs):+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
