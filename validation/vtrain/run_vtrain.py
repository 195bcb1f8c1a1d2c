"""Predict vTrain's measured Megatron-DeepSpeed iterations on A100 and compare.

Reads ``ground_truth_multi.csv`` (109 runs, 64-512 GPUs) and ``ground_truth_single.csv``
(1,440 runs on 2/4/8 GPUs of one node) from ../shared/data/training/vtrain (never edited),
turns each row into a scenario (``vtrain-a100.yaml`` beside this file with the row's
model shape and strategy), simulates one iteration and prints the error table, then mean
and max |error| and the Spearman rank correlation within each model size.

    python validation/vtrain/run_vtrain.py multi [--every N] [--stack NAME]
    python validation/vtrain/run_vtrain.py single [--every N]

Nothing is fitted: the cluster, GPU and compute stack are the documented defaults.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parents[2] / "shared" / "data" / "training" / "vtrain"
FILES = {"multi": "ground_truth_multi.csv", "single": "ground_truth_single.csv"}


def base_scenario() -> dict[str, Any]:
    """The scenario every row starts from."""
    with open(HERE / "vtrain-a100.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The CSV's rows as numbers, with the model-size label each row belongs to."""
    rows = []
    with open(path, encoding="utf-8", newline="") as handle:
        for number, raw in enumerate(csv.DictReader(handle), start=2):
            row = {"line": number,
                   "gpus": int(raw["# GPUs"]), "gbs": int(raw["global batch"]),
                   "mbs": int(raw["micro batch"]), "hidden": int(raw["hidden size"]),
                   "heads": int(raw["attention heads"]), "layers": int(raw["# layers"]),
                   "seq": int(raw["sequence length"]),
                   "tp": int(raw["tensor parallelism"]),
                   "dp": int(raw["data parallelism"]),
                   "pp": int(raw["pipeline parallelism"]),
                   "measured_s": float(raw["iteration time (ms)"]) / 1e3}
            row["size"] = raw.get("Parameters (billion)") or \
                f"h{row['hidden']}·l{row['layers']}"
            rows.append(row)
    return rows


def scenario_for(row: dict[str, Any], stack: str | None) -> dict[str, Any]:
    """The base scenario with a row's model shape and strategy."""
    data = base_scenario()
    data["name"] = f"vtrain-line{row['line']}"
    if row["gpus"] >= 8:
        data["cluster"]["nodes"] = row["gpus"] // 8
    else:  # 2 or 4 GPUs of one node: NVSwitch ports, 300 GB/s per GPU and direction
        data["cluster"] = {"preset": "switch", "gpus": row["gpus"],
                           "link_bandwidth": "300 GB/s"}
    data["model"].update(layers=row["layers"], hidden=row["hidden"], heads=row["heads"],
                         seq_len=row["seq"])
    data["parallelism"].update(tp=row["tp"], pp=row["pp"], dp=row["dp"])
    data["training"].update(micro_batch=row["mbs"], global_batch=row["gbs"])
    if stack:
        data["compute"]["stack"] = stack
    return data


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); nan under 3 points."""
    if len(xs) < 3:
        return float("nan")

    def ranks(values: Sequence[float]) -> list[float]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    var = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return cov / var if var else float("nan")


def predict(row: dict[str, Any], stack: str | None) -> float:
    """Simulated seconds per iteration of one row."""
    scenario = scenario_from_mapping(scenario_for(row, stack), source="vtrain",
                                     base_dir=HERE)
    return run_scenario(scenario, allow_oom=True).iteration_time_s


def summarise(results: list[tuple[dict[str, Any], float]]) -> list[str]:
    """Mean/max |error| and Spearman per model size, and over all rows."""
    groups: dict[str, list[tuple[dict[str, Any], float]]] = defaultdict(list)
    for row, predicted in results:
        groups[row["size"]].append((row, predicted))
    lines = ["| model size | runs | mean \\|err\\| | max \\|err\\| | Spearman |",
             "|---|---:|---:|---:|---:|"]
    for size, items in [*sorted(groups.items(), key=lambda kv: _size_key(kv[0])),
                        ("all", results)]:
        errors = [abs(p / r["measured_s"] - 1) * 100 for r, p in items]
        rho = spearman([r["measured_s"] for r, _ in items], [p for _, p in items])
        lines.append(f"| {size} | {len(items)} | {statistics.fmean(errors):.1f} % | "
                     f"{max(errors):.1f} % | {rho:.2f} |")
    return lines


def _size_key(size: str) -> tuple[float, str]:
    try:
        return float(size), size
    except ValueError:
        return 0.0, size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=tuple(FILES))
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--every", type=int, default=1, help="simulate every N-th row")
    parser.add_argument("--stack", default=None, help="compute.stack (default: the file's)")
    parser.add_argument("--rows", action="store_true", help="print every row")
    args = parser.parse_args(argv)
    rows = read_rows(args.data / FILES[args.which])[::args.every]
    results = []
    started = time.perf_counter()
    if args.rows:
        print("| line | size | GPUs | tp·pp·dp | mbs | gbs | measured (s) | predicted (s) "
              "| error |\n|---:|---|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        predicted = predict(row, args.stack)
        results.append((row, predicted))
        if args.rows:
            error = 100 * (predicted / row["measured_s"] - 1)
            print(f"| {row['line']} | {row['size']} | {row['gpus']} | "
                  f"{row['tp']}·{row['pp']}·{row['dp']} | {row['mbs']} | {row['gbs']} | "
                  f"{row['measured_s']:.3f} | {predicted:.3f} | {error:+.1f} % |",
                  flush=True)
    print("\n".join(summarise(results)))
    print(f"\n{len(results)} runs simulated in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
