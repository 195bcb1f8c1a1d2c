"""Where the DeepSeek-V3 trace's compute time goes, by class of kernel, against distsim's
operators of the same classes: one MoE layer, forward, input and weight gradients.

``distsim validate trace --operators`` sets each annotated scope (``attn(F)``, ``mlp(W)``,
…) against the operators distsim puts in it; this script splits the same time by what
the kernels do — GEMMs, flash attention, FP8 casts and transposes, casts back to 16 bits,
norms, rotary embeddings, the token permutations around the all-to-alls, SwiGLU, copies —
so that a scope's miss can be traced to a class of kernel.  Measured: the median over the
trace's four layers of each class's GPU time in the six attention and MLP scopes (kernel
durations summed: two streams' kernels running at once count twice here, unlike in the
scope's own measure).  Predicted: the roofline time of the scenario's operators, each
class by the operator's kind and name.  Nothing is fitted.

    python validation/deepseek/kernel_classes.py [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.fit.validate_operators import (
    COMM_KERNELS,
    pass_operators,
    scenario_layer_work,
)
from distsim_gpu.scenarios.scenario import load_scenario
from distsim_gpu.workloads.cost.compute.blocks import block_operators
from distsim_gpu.workloads.traces.measured_costs import scope_kernels

REPO = Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "data" / "traces" / "deepseek" / "train.json.gz"
SCENARIO = REPO / "validation" / "deepseek" / "deepseek-v3-ep64.yaml"
SCOPES = ("attn(F)", "attn(B)", "attn(W)", "mlp(F)", "mlp(B)", "mlp(W)")
#: Kernel classes by name, first match wins (DeepSeek's kernels and PyTorch's).
KERNEL_CLASSES = (
    ("gemm", r"GemmKernel|xmma_gemm"), ("attention", r"flash::"),
    ("cast back", r"cast_back"), ("cast", r"cast|transpose"), ("norm", r"layer_norm"),
    ("rotary", r"rotary"),
    ("permutation", r"expand_to_fused|reduce_fused|fused_mapping|clean_and_count"),
    ("activation", r"swiglu"), ("copy", r"copy|Memcpy"), ("other", r"."))


def kernel_class(name: str) -> str:
    """The class of a trace kernel by its name."""
    return next(label for label, pattern in KERNEL_CLASSES if re.search(pattern, name))


def operator_class(item) -> str:
    """The class of one of distsim's operators."""
    name = item.name
    if item.cast:  # a cache's cast back is its backward
        return "cast back" if name.endswith(".bwd") else "cast"
    if item.kind in ("gemm", "bmm"):
        return "gemm"
    if item.kind == "attention":
        return "attention"
    for label, part in (("norm", "norm"), ("rotary", "rope"), ("permutation", "moe_"),
                        ("activation", "_act")):
        if part in name:
            return label
    return "other"


def measured_classes(trace_path: Path) -> dict[str, float]:
    """Median over the layers of each class's seconds in the six scopes."""
    found = scope_kernels(load_traces([trace_path]),
                          "^(?:" + "|".join(re.escape(s) for s in SCOPES) + ")$")
    layers = min(len(found[scope]) for scope in SCOPES)
    per_layer = []
    for index in range(layers):
        totals: dict[str, float] = dict.fromkeys((label for label, _ in KERNEL_CLASSES), 0.0)
        for scope in SCOPES:
            for kernel in found[scope][index]:
                if not re.search(COMM_KERNELS, kernel.name):
                    totals[kernel_class(kernel.name)] += kernel.duration_s
        per_layer.append(totals)
    return {label: statistics.median(t[label] for t in per_layer)
            for label, _ in KERNEL_CLASSES}


def predicted_classes(scenario_path: Path) -> dict[str, float]:
    """Each class's seconds of the scenario's operators in the six scopes."""
    scenario = load_scenario(scenario_path)
    shape, work = scenario_layer_work(scenario)
    moe = scenario.model.is_moe_layer(shape["layer_index"])
    totals = dict.fromkeys((label for label, _ in KERNEL_CLASSES), 0.0)
    for scope in SCOPES:
        block, pass_ = scope[:-3], scope[-2]
        for item in pass_operators(work, block_operators(block, moe), pass_):
            totals[operator_class(item)] += scenario.roofline.kernel_time_s(item)
    return totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        print(f"no trace at {args.trace} (../shared/data is not on this machine)",
              file=sys.stderr)
        return 1
    measured, predicted = measured_classes(args.trace), predicted_classes(args.scenario)
    rows = [{"class": label, "measured_s": measured[label], "predicted_s": predicted[label]}
            for label, _ in KERNEL_CLASSES]
    total = {"measured_s": sum(measured.values()), "predicted_s": sum(predicted.values())}
    if args.json:
        print(json.dumps({"rows": rows, "total": total}, indent=1))
        return 0
    print(f"{'class':12s} {'measured (ms)':>14s} {'predicted (ms)':>15s}")
    for row in [*rows, {"class": "total", **total}]:
        print(f"{row['class']:12s} {row['measured_s'] * 1e3:14.3f} "
              f"{row['predicted_s'] * 1e3:15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
