"""The loss's cross entropy: distsim's three implementations against Liger's benchmark of
Megatron's own functions on H100.

The table (``shared/data/kernels/liger_kernel``, ``megatron_cross_entropy``; Liger's
``benchmark/scripts/benchmark_megatron_cross_entropy.py``): bf16 logits of 2,048 × 4
tokens and a vocabulary of 4,096 to 131,072 (one rank, tp 1) through Megatron-Core's
``fused_vocab_parallel_cross_entropy`` ("megatron-fused", ``cross_entropy_loss_fusion``),
its ``vocab_parallel_cross_entropy`` ("megatron-unfused") and Liger's one-pass Triton
kernel, timed by ``triton.testing.do_bench`` around the call: "forward", and "backward",
which reruns the forward with each backward (the script says so) — so forward plus
backward.  distsim's operator for each (:mod:`~workloads.cost.compute.cross_entropy`:
``megatron_fused``, ``eager``, ``one_pass``) at the H100's HBM rate, forward and forward
plus backward.  Uncalibrated: the bytes are counted from the functions' tensor operations,
nothing is fitted::

    python validation/kernels/compare_cross_entropy.py [--data DIR] [--table]

``--table`` prints the summary docs/validation.md holds (tests/test_docs_tables.py checks
it) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from pathlib import Path

from distsim_gpu.workloads.cost.compute import STACKS, RooflineCosts
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping

HERE = Path(__file__).resolve().parent
#: Liger's provider name -> distsim's implementation.
IMPLEMENTATIONS = {"megatron-fused": "megatron_fused", "megatron-unfused": "eager",
                   "liger": "one_pass"}
#: Liger's mode -> what it times: the forward alone, or forward and backward.
MODES = {"forward": "forward", "backward": "forward + backward"}

Row = tuple[str, str, int, float, float]  # implementation, timed, vocab, measured, distsim


def predicted_s(implementation: str, tokens: int, vocab: int, timed: str) -> float:
    """distsim's seconds for the cross entropy operator alone (no GEMM, no norm)."""
    costs = RooflineCosts(get_gpu("h100-sxm"), cross_entropy=implementation,
                          stack=STACKS["megatron-core"])
    model = model_from_mapping({"name": "ce", "layers": 1, "hidden": 128, "heads": 1,
                                "seq_len": tokens, "vocab": vocab})
    work = costs.loss_work(model, micro_batch=1, seq_len=tokens)
    forward = work.kernels[-1]
    seconds = costs.kernel_time_s(forward)
    if timed == "forward + backward":
        (backward,) = [k for k in work.backward().kernels if k.name == "cross_entropy.bwd"]
        seconds += costs.kernel_time_s(backward)
    return seconds


def find_data(given: str | None) -> Path:
    """``--data``, else ``shared/data/kernels`` above the repository."""
    candidates = [Path(given)] if given else [
        parent / "shared" / "data" / "kernels" for parent in HERE.parents]
    for candidate in candidates:
        if (candidate / "liger_kernel" / "liger_speed_datacenter_gpus.csv").is_file():
            return candidate
    raise SystemExit("no liger_kernel/liger_speed_datacenter_gpus.csv found: pass --data DIR")


def compare(data: Path) -> list[Row]:
    """Every H100 row of Liger's Megatron cross-entropy benchmark against distsim."""
    path = data / "liger_kernel" / "liger_speed_datacenter_gpus.csv"
    out = []
    with open(path, newline="", encoding="utf-8") as handle:
        for r in csv.DictReader(handle):
            if (r["kernel_name"] != "megatron_cross_entropy"
                    or r["kernel_operation_mode"] not in MODES
                    or r["kernel_provider"] not in IMPLEMENTATIONS):
                continue
            config = {k: int(v) for k, v in
                      (item.split(": ") for item in
                       r["extra_benchmark_config_str"].strip("{}").replace('"', "")
                       .split(", "))}
            tokens, vocab = config["S"] * config["B"], int(r["x_value"])
            implementation = IMPLEMENTATIONS[r["kernel_provider"]]
            timed = MODES[r["kernel_operation_mode"]]
            out.append((implementation, timed, vocab, float(r["y_value_50"]) * 1e-3,
                        predicted_s(implementation, tokens, vocab, timed)))
    return out


def _cell(rows: Sequence[Row]) -> str:
    signed = [100 * (p / m - 1) for *_r, m, p in rows]
    low, high = (f"{v:+.0f}".replace("-", "−") for v in (min(signed), max(signed)))
    return f"{statistics.median(map(abs, signed)):.1f} % ({low} … {high} %)"


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md: per implementation and what was timed,
    the median |error| and its signed range over the vocabularies."""
    rows = compare(data)
    lines = ["| Megatron's function (distsim's name) | timed | rows | median \\|error\\| "
             "(signed range) |", "|---|---|---:|---|"]
    names = {v: k for k, v in IMPLEMENTATIONS.items()}
    for implementation in IMPLEMENTATIONS.values():
        for timed in MODES.values():
            group = [r for r in rows if r[:2] == (implementation, timed)]
            lines.append(f"| {names[implementation]} (`{implementation}`) | {timed} | "
                         f"{len(group)} | {_cell(group)} |")
    lines.append(f"| all | | {len(rows)} | {_cell(rows)} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the kernels data folder")
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    args = parser.parse_args(argv)
    data = find_data(args.data)
    if args.table:
        print("\n".join(summary_table(data)))
        return 0
    print(f"{'implementation':15} {'timed':19} {'vocab':>7} {'measured':>9} {'distsim':>8} "
          f"{'error':>7}")
    for implementation, timed, vocab, measured, predicted in compare(data):
        print(f"{implementation:15} {timed:19} {vocab:7d} {measured * 1e3:6.3f} ms "
              f"{predicted * 1e3:6.3f} {predicted / measured - 1:+7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
