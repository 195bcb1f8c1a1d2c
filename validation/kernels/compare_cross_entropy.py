"""The loss's cross entropy: distsim's implementations against Liger's benchmarks of
Megatron's own functions on H100 and of PyTorch's loss on B200.

The tables (``shared/data/kernels/liger_kernel``):

* ``megatron_cross_entropy`` (Liger's ``benchmark_megatron_cross_entropy.py``, H100): bf16
  logits of 2,048 × 4 tokens and a vocabulary of 4,096 to 131,072 (one rank, tp 1) through
  Megatron-Core's ``fused_vocab_parallel_cross_entropy`` ("megatron-fused",
  ``cross_entropy_loss_fusion``), its ``vocab_parallel_cross_entropy`` ("megatron-unfused")
  and Liger's one-pass Triton kernel, timed by ``triton.testing.do_bench`` around the call:
  "forward", and "backward", which reruns the forward with each backward (the script says
  so) — so forward plus backward.
* ``cross_entropy`` on B200 (``benchmark_cross_entropy.py``, the cuTile comparison's
  file): fp32 logits (``torch.randn`` without a dtype) of 1,024 to 8,192 tokens × 128,256
  through PyTorch's ``CrossEntropyLoss`` ("torch") and Liger's Triton kernel, "forward",
  "backward" (alone: ``retain_graph``) and "full".

distsim's operator for each (:mod:`~workloads.cost.compute.cross_entropy`:
``megatron_fused``, ``eager``, ``torch``, ``one_pass``) at the GPU's HBM rate.
Uncalibrated: the bytes are counted from the functions' tensor operations, nothing is
fitted::

    python validation/kernels/compare_cross_entropy.py [--data DIR] [--table]

``--table`` prints the summary docs/validation.md holds (tests/test_docs_tables.py checks
it) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from distsim_gpu.workloads.cost.compute import STACKS, RooflineCosts
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Table:
    """One benchmark in the Liger file: its kernel, GPU and logit width, the providers it
    times (-> distsim's implementation) and what each of its modes times."""

    kernel: str
    gpu: str
    distsim_gpu: str
    precision: str
    providers: dict[str, str]
    modes: dict[str, str]
    source: str = ""


TABLES = (
    Table("megatron_cross_entropy", "NVIDIA H100 80GB HBM3", "h100-sxm", "bf16",
          {"megatron-fused": "megatron_fused", "megatron-unfused": "eager",
           "liger": "one_pass"},
          {"forward": "forward", "backward": "forward + backward"}),
    Table("cross_entropy", "NVIDIA B200", "b200", "fp32",
          {"torch": "torch", "liger_triton": "one_pass"},
          {"forward": "forward", "backward": "backward", "full": "forward + backward"},
          source="all_benchmark_data_cutile.csv"),
)

#: GPU, Liger's provider, distsim's implementation, timed, tokens, vocab, measured s, distsim s.
Row = tuple[str, str, str, str, int, int, float, float]


def predicted_s(table: Table, implementation: str, tokens: int, vocab: int,
                timed: str) -> float:
    """distsim's seconds for the cross entropy operator alone (no GEMM, no norm)."""
    costs = RooflineCosts(get_gpu(table.distsim_gpu), precision=table.precision,
                          cross_entropy=implementation, stack=STACKS["megatron-core"])
    model = model_from_mapping({"name": "ce", "layers": 1, "hidden": 128, "heads": 1,
                                "seq_len": tokens, "vocab": vocab})
    work = costs.loss_work(model, micro_batch=1, seq_len=tokens)
    (backward,) = [k for k in work.backward().kernels if k.name == "cross_entropy.bwd"]
    forward_s, backward_s = (costs.kernel_time_s(k) for k in (work.kernels[-1], backward))
    return {"forward": forward_s, "backward": backward_s,
            "forward + backward": forward_s + backward_s}[timed]


def find_data(given: str | None) -> Path:
    """``--data``, else ``shared/data/kernels`` above the repository."""
    candidates = [Path(given)] if given else [
        parent / "shared" / "data" / "kernels" for parent in HERE.parents]
    for candidate in candidates:
        if (candidate / "liger_kernel" / "liger_speed_datacenter_gpus.csv").is_file():
            return candidate
    raise SystemExit("no liger_kernel/liger_speed_datacenter_gpus.csv found: pass --data DIR")


def _shape(table: Table, row: dict[str, str]) -> tuple[int, int]:
    """(tokens, vocabulary) of a row: its swept value and its fixed configuration."""
    config = json.loads(row["extra_benchmark_config_str"])
    if table.kernel == "megatron_cross_entropy":
        return config["S"] * config["B"], int(row["x_value"])
    return int(row["x_value"]), config["vocab_size"]


def compare(data: Path) -> list[Row]:
    """Every row of the two benchmarks against distsim."""
    path = data / "liger_kernel" / "liger_speed_datacenter_gpus.csv"
    out = []
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for table in TABLES:
        for r in rows:
            if (r["kernel_name"] != table.kernel or r["gpu_name"] != table.gpu
                    or r["kernel_operation_mode"] not in table.modes
                    or r["kernel_provider"] not in table.providers
                    or not r["source_file"].endswith(table.source)
                    or (table.source and r["x_name"] != "BT")):
                continue
            tokens, vocab = _shape(table, r)
            implementation = table.providers[r["kernel_provider"]]
            timed = table.modes[r["kernel_operation_mode"]]
            out.append((table.distsim_gpu, r["kernel_provider"], implementation, timed,
                        tokens, vocab, float(r["y_value_50"]) * 1e-3,
                        predicted_s(table, implementation, tokens, vocab, timed)))
    return out


def _cell(rows: Sequence[Row]) -> str:
    signed = [100 * (p / m - 1) for *_r, m, p in rows]
    low, high = (f"{v:+.0f}".replace("-", "−") for v in (min(signed), max(signed)))
    return f"{statistics.median(map(abs, signed)):.1f} % ({low} … {high} %)"


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md: per GPU, function and what was timed,
    the median |error| and its signed range."""
    rows = compare(data)
    lines = ["| GPU | function (distsim's name) | timed | rows | median \\|error\\| "
             "(signed range) |", "|---|---|---|---:|---|"]
    groups: dict[tuple[str, str, str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault(row[:4], []).append(row)
    timings = ("forward", "backward", "forward + backward")
    for (gpu, provider, implementation, timed), group in sorted(
            groups.items(), key=lambda item: (item[0][0] != "h100-sxm", item[0][2] == "one_pass",
                                              item[0][2], timings.index(item[0][3]))):
        lines.append(f"| {gpu} | {provider} (`{implementation}`) | {timed} | {len(group)} | "
                     f"{_cell(group)} |")
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
    print(f"{'gpu':9} {'implementation':15} {'timed':19} {'tokens':>6} {'vocab':>7} "
          f"{'measured':>9} {'distsim':>8} {'error':>7}")
    for gpu, _provider, implementation, timed, tokens, vocab, measured, predicted in \
            compare(data):
        print(f"{gpu:9} {implementation:15} {timed:19} {tokens:6d} {vocab:7d} "
              f"{measured * 1e3:6.3f} ms {predicted * 1e3:6.3f} {predicted / measured - 1:+7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
