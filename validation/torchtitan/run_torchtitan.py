"""Predict torchtitan's published Llama 3.1 throughput on H100 and compare.

Reads ``torchtitan_llama3_h100_202412.csv`` from ../shared/data/training/torchtitan
(never edited), turns each row into a scenario (``grand-teton-h100.yaml`` beside this file
with the row's model, strategy, sequence and batch; the stack by the row's technique:
``FSDP`` = ``torch-eager``, ``+torch.compile`` = ``torch-compile``, ``+Float8`` = fp8 linear
layers), simulates one iteration and prints measured and predicted tokens/s per GPU.

    python validation/torchtitan/run_torchtitan.py [--tables 1,3,4,h200,asynctp]

Tables 1-6 are torchtitan's December 2024 benchmark (Grand Teton, H100 96 GB at 500 W).
``h200`` is Trainy's June 2025 run of Llama 3.1 8B on 4 and 8 hosts of 8 × H200 at the
700 W default (``torchtitan_llama3_8b_h200_202506_trainy.csv``: FSDP, torch.compile,
float8 linears, local batch 2, sequence 8192).  ``asynctp`` is the vanilla-TP baseline
of torchtitan's June 2025 async-TP benchmark (``torchtitan_asynctp_h100_202506.csv``,
Grand Teton again; its sequence length is not stated, the configs' default 8192 is
used; the float8 rowwise rows are left out, their baseline being a known slow kernel,
torchtitan issue 1207).

Nothing is fitted unless ``--fit`` asks: then the torch stacks' physical knobs (GEMM,
attention and memory-bandwidth efficiency) are fitted to the chosen rows by
``distsim validate runs``' machinery and cross-validated over ``--folds`` folds, and the
table says uncalibrated, fitted and cross-validated errors on iteration time.  Rows with
context parallelism need ``parallelism.cp`` (with torchtitan's rotate method then,
``cp_comm_type: torch_allgather``); async TP is not modelled (its rows are
simulated as plain TP and say so).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.fit.validate_runs import (
    RunsReport,
    format_runs_report,
    validate_scenarios,
)
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import DistsimError

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE.parents[2] / "shared" / "data" / "training" / "torchtitan"
MODELS = {"Llama3.1-8B": "llama3-8b", "Llama3.1-70B": "llama3-70b",
          "Llama3.1-405B": "llama3.1-405b", "Llama3-8B": "llama3-8b",
          "Llama3-70B": "llama3-70b"}
# torchtitan's "selective" is its per-operator policy (selective_ac_option "op"), distsim's `op`.
RECOMPUTE = {"selective": "op", "full": "full", "per-op-SAC": "op"}


def scenario_for(row: dict[str, str]) -> dict[str, Any]:
    """The base scenario with a row's model, strategy and technique."""
    data = yaml.safe_load((HERE / "grand-teton-h100.yaml").read_text(encoding="utf-8"))
    gpus, tp, pp, cp = (int(row[k]) for k in ("gpus", "tp", "pp", "cp"))
    fsdp = int(row["fsdp"])
    technique = row["technique"]
    data["name"] = f"{row['source_table']} {technique}"
    data["cluster"]["nodes"] = max(1, gpus // 8)
    data["model"] = {"preset": MODELS[row["model"]]}
    data["parallelism"] = {"tp": tp, "pp": pp, "dp": fsdp, "zero": 3, "fsdp": True,
                           "sequence_parallel": tp > 1}
    if cp > 1:
        # torchtitan's --experimental.context_parallel_rotate_method defaulted to
        # "allgather" (torchtitan/config_manager.py, December 2024), as PyTorch's
        # _ContextParallelOptions.rotate_method (torch/distributed/tensor/experimental/
        # _attention.py): K/V all-gathered once, dK/dV rotated in fp32.
        data["parallelism"].update(cp=cp, cp_comm_type="torch_allgather")
    if pp > 1:
        interleaved = row["pp_schedule"].lower().startswith("interleaved")
        data["parallelism"]["schedule"] = "interleaved" if interleaved else "1f1b"
        if interleaved:  # generate_split_points' default for a multi-stage schedule
            data["parallelism"]["interleave"] = 2
        # torchtitan's generate_split_points: the first and last chunk a layer short (the
        # embedding and output layer), 405B's 126 layers as 15, 16 x 6, 15 on 8 stages
        # (7, 8 x 14, 7 on 16): Megatron-DeepSpeed's split, embedding and head as layers.
        data["parallelism"]["partition"] = "embedding"
    local = int(row["local_batch_size"])
    # Under PP torchtitan (December 2024) splits the local batch into
    # pipeline_parallel_microbatches, by default the PP degree: pp micro-batches.
    data["training"] = {"micro_batch": local // pp if pp > 1 else local,
                        "global_batch": local * fsdp, "seq_len": int(row["seq_len"]),
                        "recompute": RECOMPUTE[row["activation_checkpointing"]],
                        "precision": "fp8" if "Float8" in technique else "bf16"}
    data["compute"]["stack"] = "torch-compile" if "compile" in technique else "torch-eager"
    if row.get("gpu") == "H200":
        data["compute"]["gpu"] = "h200"  # the 700 W part with its HBM3e
    return data


def _h200_rows(path: Path) -> list[dict[str, str]]:
    """Trainy's H200 runs as rows of the December 2024 table's form."""
    with open(path, encoding="utf-8") as handle:
        return [{"source_table": "h200", "model": row["model"], "gpus": row["gpus"],
                 "gpu": row["gpu"], "fsdp": row["gpus"], "tp": "1", "pp": "1", "cp": "1",
                 "seq_len": row["seq_len"], "local_batch_size": row["local_batch_size"],
                 "activation_checkpointing": row["activation_checkpointing"],
                 "technique": "FSDP+torch.compile+Float8", "pp_schedule": "",
                 "tps_per_gpu": row["tps_per_gpu"]} for row in csv.DictReader(handle)]


def _asynctp_rows(path: Path) -> list[dict[str, str]]:
    """The async-TP benchmark's vanilla-TP rows (bf16 and float8 tensorwise)."""
    techniques = {"bf16": "FSDP+TP+torch.compile",
                  "float8_tensorwise": "FSDP+TP+torch.compile+Float8"}
    with open(path, encoding="utf-8") as handle:
        return [{"source_table": "asynctp", "model": row["model"], "gpus": row["gpus"],
                 "gpu": row["gpu"], "fsdp": row["fsdp"], "tp": row["tp"], "pp": "1",
                 "cp": "1", "seq_len": "8192", "local_batch_size": row["local_batch_size"],
                 "activation_checkpointing": row["activation_checkpointing"],
                 "technique": techniques[row["quantization"]], "pp_schedule": "",
                 "tps_per_gpu": row["vanilla_tp_tokens_per_s_per_gpu"]}
                for row in csv.DictReader(handle) if row["quantization"] in techniques]


def read_rows(data: Path, tables: set[str]) -> list[dict[str, str]]:
    """The rows of the chosen tables (``Table1``..``Table6``, ``h200``, ``asynctp``)."""
    with open(data / "torchtitan_llama3_h100_202412.csv", encoding="utf-8") as handle:
        rows = [row for row in csv.DictReader(handle) if row["source_table"] in tables]
    if "h200" in tables:
        rows += _h200_rows(data / "torchtitan_llama3_8b_h200_202506_trainy.csv")
    if "asynctp" in tables:
        rows += _asynctp_rows(data / "torchtitan_asynctp_h100_202506.csv")
    return rows


# The knobs --fit moves (bounds; log scale): the GPU-side figures the torch stacks share.
# Not the host's seconds per kernel: these rows' kernels are long (the host never binds),
# and one value would be forced on both the eager and the compiled stack.
FIT = {"compute.matmul_efficiency": (0.3, 1.0, False),
       "compute.attention_efficiency": (0.1, 1.0, False),
       "compute.memory_efficiency": (0.3, 1.0, False)}
def fit_report(rows: list[dict[str, str]], folds: int) -> RunsReport:
    """Uncalibrated, fitted and cross-validated errors on iteration time (module
    docstring): a row's measured seconds are its tokens per iteration over the measured
    tokens/s of all its GPUs."""
    runs = []
    for row in rows:
        tokens = int(row["local_batch_size"]) * int(row["fsdp"]) * int(row["seq_len"])
        runs.append((f"{row['technique']} ({row['gpus']} GPUs)", row["source_table"],
                     scenario_for(row), tokens / (float(row["tps_per_gpu"]) * int(row["gpus"]))))
    return validate_scenarios(runs, source=str(Path(__file__)), base_dir=str(HERE),
                              fit=FIT, folds=folds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--tables", default="1,3,4", help="source tables to simulate")
    parser.add_argument("--fit", action="store_true",
                        help="fit the stacks' knobs to the rows, cross-validated")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--json", action="store_true",
                        help="with --fit: print the report as one JSON object (what "
                        "validation/training_tables.py reads)")
    args = parser.parse_args(argv)
    names = [t.strip() for t in args.tables.split(",")]
    tables = {name if name in ("h200", "asynctp") else f"Table{name}" for name in names}
    if args.fit:
        report = fit_report(read_rows(args.data, tables), args.folds)
        print(json.dumps(report.to_dict(), indent=1) if args.json
              else format_runs_report(report), end="\n" if args.json else "")
        return 0
    print("| table | model | GPUs | fsdp·tp·pp·cp | technique | measured tok/s/GPU | "
          "predicted | error |\n|---|---|---:|---|---|---:|---:|---:|")
    errors = []
    for row in read_rows(args.data, tables):
        scenario = scenario_from_mapping(scenario_for(row), source=row["source_table"],
                                         base_dir=HERE)
        report = run_scenario(scenario, allow_oom=True)
        predicted = report.tokens_per_s / report.num_gpus
        measured = float(row["tps_per_gpu"])
        error = 100 * (predicted / measured - 1)
        errors.append(abs(error))
        schedule = f" ({row['pp_schedule']})" if row["pp_schedule"] else ""
        print(f"| {row['source_table']} | {row['model']} | {row['gpus']} | "
              f"{row['fsdp']}·{row['tp']}·{row['pp']}·{row['cp']} | {row['technique']}"
              f"{schedule} | "
              f"{measured:.0f} | {predicted:.0f} | {error:+.1f} % |", flush=True)
    if errors:
        print(f"\nmean |error| {statistics.fmean(errors):.1f} %, max {max(errors):.1f} % "
              f"over {len(errors)} rows")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DistsimError as error:  # a bad option or table: one line, no traceback
        sys.exit(f"run_torchtitan.py: error: {error}")
