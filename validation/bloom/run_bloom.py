"""Predict BLOOM-176B training iterations on Jean Zay and hold them against the measurements.

Reads the BigScience tables in ../shared/data/tables (never edited), turns every row whose
configuration is fully stated into a scenario (bloom-176b.yaml and jean-zay.yaml beside
this file, with the row's model shape and strategy), simulates one iteration and prints a
Markdown table: measured and predicted seconds per iteration and the error.

    python validation/bloom/run_bloom.py [--data ../shared/data/tables] [--quick] [--fit]

Rows not simulated, and why, are listed after the table.  Nothing here is fitted: the
cluster, GPU and cost model are the defaults the rest of distsim uses.  ``--fit`` instead
fits the ``megatron-deepspeed`` stack's physical knobs (GEMM and memory efficiency, launch
gap, host seconds per kernel) to the rows with ``distsim validate runs``' machinery and
prints uncalibrated, fitted and 3-fold cross-validated errors.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.fit.validate_runs import (
    DEFAULT_FIT,
    RunsReport,
    format_runs_report,
    validate_scenarios,
)
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import DistsimError

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parents[2] / "shared" / "data" / "tables"
VOCAB = 250680  # the BLOOM tokenizer (the tables write "250k" for the prequel runs)


def base_scenario() -> dict[str, Any]:
    with open(HERE / "bloom-176b.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def scenario_for(row: dict[str, Any]) -> dict[str, Any]:
    """The BLOOM scenario with a row's nodes, model shape and strategy."""
    data = base_scenario()
    data["name"] = row["label"]
    data["cluster"] = {**yaml.safe_load((HERE / "jean-zay.yaml").read_text()),
                       "nodes": row["nodes"]}
    model = data["model"]
    model.update(layers=row["layers"], hidden=row["hidden"], heads=row["heads"])
    parallel = data["parallelism"]
    parallel.update(tp=row["tp"], pp=row["pp"], dp=row["dp"], zero=row["zero"])
    if row["layers"] % row["pp"] == 0:
        parallel["partition"] = "uniform"
    data["training"].update(micro_batch=row["mbs"], global_batch=row["gbs"],
                            precision=row["precision"])
    return data


def _run_name(text: str) -> str:
    """A run's name: its description up to the first comma outside parentheses
    ("BLOOM-176B early (GBS=16, MBS=2), iteration 3707 log line" → the part before
    ", iteration")."""
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            return text[:i]
    return text


def production_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    rows, skipped = [], []
    with open(path, encoding="utf-8", newline="") as handle:
        for raw in csv.DictReader(handle):
            label = _run_name(raw["run"])
            try:
                measured = float(raw["sec_per_iter"])
            except ValueError:
                skipped.append(f"{label}: time {raw['sec_per_iter']!r} is approximate")
                continue
            heads = int(raw["nheads"])
            precision = "fp16" if " fp16 " in f" {raw['run']} " else "bf16"
            rows.append({
                "label": label, "source": path.name, "nodes": int(raw["nodes"]),
                "tp": int(raw["tp"]), "pp": int(raw["pp"]), "dp": int(raw["dp"]),
                "mbs": int(raw["mbs"]), "gbs": int(raw["gbs"]),
                "layers": int(raw["nlayers"]), "hidden": int(raw["nhidden"]),
                "heads": heads, "zero": 1, "precision": precision, "measured": measured})
    return rows, skipped


def sweep_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of the 3D-topology sweep whose hidden size is stated.

    The table gives the model size ("200B") and, for the tile-and-wave rows, the hidden
    size; the layer count is then the one that matches the size with pp dividing it
    (80 for both 14400 and 13824: 12·80·h² + V·h = 202.7B and 187.0B).  Heads are not
    stated; 96 (as the prequel's 200B runs) is assumed — it changes no FLOP count.
    """
    rows, skipped = [], []
    with open(path, encoding="utf-8", newline="") as handle:
        for number, raw in enumerate(csv.DictReader(handle), start=2):
            label = f"{raw['section']} row {number}: {raw['size']} dp{raw['dp']} " \
                    f"tp{raw['tp']} pp{raw['pp']} mbs{raw['mbs']}"
            if not raw["nhidden"]:
                skipped.append(f"{label}: hidden size and layer count not stated")
                continue
            hidden = int(raw["nhidden"])
            size = float(re.sub(r"[^0-9.]", "", raw["size"])) * 1e9
            pp = int(raw["pp"])
            layers = min((n for n in range(pp, 200, pp)),
                         key=lambda n: abs(12 * n * hidden**2 + VOCAB * hidden - size))
            rows.append({
                "label": label, "source": path.name, "nodes": int(raw["nodes"]),
                "tp": int(raw["tp"]), "pp": pp, "dp": int(raw["dp"]),
                "mbs": int(raw["mbs"]), "gbs": int(raw["gbs"]), "layers": layers,
                "hidden": hidden, "heads": 96, "zero": int(raw["zero_stage"] or 1),
                "precision": "bf16", "measured": float(raw["sec_per_iter"])})
    return rows, skipped


# What --fit moves (bounds; log scale): validate runs' default knobs and the host's
# seconds per kernel, as vtrain-multi.yaml.
FIT = {**DEFAULT_FIT, "compute.host_overhead": (1e-6, 3e-4, True)}


def fit_report(rows: list[dict[str, Any]]) -> RunsReport:
    """The rows' uncalibrated, fitted and cross-validated errors (module docstring)."""
    runs = [(row["label"], "prequel" if "prequel" in row["label"] else "BLOOM",
             scenario_for(row), row["measured"]) for row in rows]
    return validate_scenarios(runs, source=str(Path(__file__)), base_dir=str(HERE),
                              fit=FIT, folds=3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--quick", action="store_true",
                        help="skip the runs that take more than a minute")
    parser.add_argument("--fit", action="store_true",
                        help="fit the stack's knobs to the rows, cross-validated")
    parser.add_argument("--json", action="store_true",
                        help="with --fit: print the report as one JSON object (what "
                        "validation/training_tables.py reads)")
    parser.add_argument("--table", action="store_true",
                        help="the table alone, without host times or the rows not "
                        "simulated (docs/validation.md holds it; tests/test_docs_tables.py "
                        "checks it)")
    args = parser.parse_args()
    rows, skipped = production_rows(args.data / "bloom_176b_production_and_scaling.csv")
    more, more_skipped = sweep_rows(args.data / "bloom_jeanzay_3d_topology_benchmarks.csv")
    rows += more
    skipped += more_skipped
    if args.fit:
        report = fit_report(rows)
        print(json.dumps(report.to_dict(), indent=1) if args.json
              else format_runs_report(report), end="\n" if args.json else "")
        return 0
    host_column = not args.table
    print("| run | GPUs | tp·pp·dp | mbs | gbs | layers × hidden | measured (s) | "
          "predicted (s) | error | MFU (pred.) |" + (" host (s) |" if host_column else ""))
    print("|---|---:|---|---:|---:|---|---:|---:|---:|---:|" + ("---:|" if host_column else ""))
    errors = []
    for row in rows:
        if args.quick and row["tp"] < 8 and row["gbs"] > 64:
            skipped.append(f"{row['label']}: skipped by --quick")
            continue
        scenario = scenario_from_mapping(scenario_for(row), source=row["source"],
                                         base_dir=HERE)
        started = time.perf_counter()
        report = run_scenario(scenario, allow_oom=True)
        host = time.perf_counter() - started
        error = 100 * (report.iteration_time_s - row["measured"]) / row["measured"]
        errors.append(abs(error))
        gpus = row["tp"] * row["pp"] * row["dp"]
        print(f"| {row['label']} | {gpus} | {row['tp']}·{row['pp']}·{row['dp']} | "
              f"{row['mbs']} | {row['gbs']} | {row['layers']} × {row['hidden']} | "
              f"{row['measured']:.2f} | {report.iteration_time_s:.2f} | {error:+.1f} % | "
              f"{100 * report.mfu:.1f} % |" + (f" {host:.0f} |" if host_column else ""),
              flush=True)
    if args.table:
        return 0
    if errors:
        errors.sort()
        print(f"\nmedian |error| over {len(errors)} rows: {errors[len(errors) // 2]:.1f} %")
    for line in skipped:
        print(f"- not simulated: {line}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DistsimError as error:  # a bad option or table: one line, no traceback
        sys.exit(f"run_bloom.py: error: {error}")
