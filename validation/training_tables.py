"""docs/validation.md's "Training iterations" tables from saved results, so none drifts.

The runs behind them take minutes (vTrain's 1,549 rows, the fits' many passes, BLOOM's
384-GPU runs), too long for the test suite, so each is saved once as JSON and the page's
tables are printed from those files; tests/test_docs_tables.py checks that the page holds
what this prints.  Rerun the saves after a change to the cost model
(``../shared/data`` beside the repository; ``V=../shared/data/training/vtrain``,
``M=scenarios/examples/validation``, ``R=validation/vtrain/results``)::

    distsim validate runs $V/ground_truth_multi.csv --map $M/vtrain-multi.yaml \\
        --workers 2 --json -q > $R/multi.json
    distsim validate runs $V/ground_truth_multi.csv --map $M/vtrain-multi-measured-comm.yaml \\
        --workers 2 --json -q > $R/multi-measured-comm.json
    distsim validate runs $V/ground_truth_multi.csv --map $M/vtrain-multi.yaml \\
        --fit --folds 3 --every 2 --workers 2 --json -q > $R/multi-fit.json
    distsim validate runs $V/ground_truth_single.csv --map $M/vtrain-single.yaml \\
        --workers 2 --json -q > $R/single.json
    distsim validate runs $V/ground_truth_single.csv --map $M/vtrain-single-measured-comm.yaml \\
        --workers 2 --json -q > $R/single-measured-comm.json
    distsim validate runs $V/ground_truth_single.csv --map $M/vtrain-single.yaml \\
        --fit --folds 3 --every 4 --workers 2 --json -q > $R/single-fit.json
    F="--set compute.matmul_efficiency=0.888867 --set compute.memory_efficiency=0.76963 \\
       --set compute.launch_overhead=3.00041e-06"      # single-fit.json's fragment
    H="--set compute.host_overhead=3.55397e-05"
    distsim validate runs $V/ground_truth_multi.csv --map $M/vtrain-multi.yaml $F $H \\
        --workers 2 --json -q > $R/multi-single-fit.json
    distsim validate runs $V/ground_truth_multi.csv --map $M/vtrain-multi.yaml $H \\
        --workers 2 --json -q > $R/multi-single-host.json
    python validation/bloom/run_bloom.py --fit --json > validation/bloom/results/fit.json
    python validation/torchtitan/run_torchtitan.py --tables 1,2,3,4,h200,asynctp \\
        --fit --json > validation/torchtitan/results/fit.json

then::

    python validation/training_tables.py summary      # the section's summary table
    python validation/training_tables.py fits         # the fitted stacks' table
    python validation/training_tables.py transfer     # the single-node fit, multi-node

Errors are 100·(predicted − measured)/measured on iteration time, except torchtitan's
summary rows, which are on tokens/s as its tables publish them (measured_s/predicted_s −
1: the same runs, the other sign and scale).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = {"multi": "vtrain/results/multi.json",
           "multi-comm": "vtrain/results/multi-measured-comm.json",
           "multi-fit": "vtrain/results/multi-fit.json",
           "single": "vtrain/results/single.json",
           "single-comm": "vtrain/results/single-measured-comm.json",
           "single-fit": "vtrain/results/single-fit.json",
           "multi-single-fit": "vtrain/results/multi-single-fit.json",
           "multi-single-host": "vtrain/results/multi-single-host.json",
           "bloom-fit": "bloom/results/fit.json",
           "torchtitan-fit": "torchtitan/results/fit.json"}
#: torchtitan's H100 tables at 500 W without context parallelism (the fit's groups).
TORCHTITAN_NO_CP = ("Table1", "Table3", "Table4")
#: Issue 12's targets for vTrain's multi-node table.
TARGET_MEAN_PCT, TARGET_MAX_PCT, TARGET_SPEARMAN = 5.0, 12.0, 0.9


def load(name: str, root: Path = HERE) -> dict[str, Any]:
    """One saved result by its name in :data:`RESULTS`, with a clear message if absent."""
    path = root / RESULTS[name]
    if not path.is_file():
        raise SystemExit(f"{path} is missing: save it with the command in this script's "
                         f"docstring")
    return json.loads(path.read_text(encoding="utf-8"))


def _pct(value: float) -> str:
    return f"{value:.1f} %"


def _spearman(summary: dict[str, Any], unit: str = "") -> str:
    """Spearman per group, groups in numeric order, with the groups named after."""
    groups = sorted(summary["spearman"], key=float)
    values = " / ".join("n/a" if summary["spearman"][g] is None
                        else f"{summary['spearman'][g]:.2f}" for g in groups)
    return f"{values} ({' / '.join(f'{g}{unit}' for g in groups)})"


def _targets(summary: dict[str, Any]) -> str:
    met = [g for g, rho in summary["spearman"].items()
           if rho is not None and rho >= TARGET_SPEARMAN]
    mean_ok = summary["mean_abs_error_pct"] <= TARGET_MEAN_PCT
    max_ok = summary["max_abs_error_pct"] <= TARGET_MAX_PCT
    sizes = ", ".join(f"{g}B" for g in sorted(met, key=float)) or "none"
    return (f"mean ≤ 5 %: {'met' if mean_ok else '**missed**'}; max ≤ 12 %: "
            f"{'met' if max_ok else '**missed**'}; Spearman ≥ 0.9: {sizes}")


def _errors(rows: Sequence[dict[str, Any]], column: str = "predicted_s",
            error: Callable[[float, float], float] | None = None) -> list[float]:
    """Signed errors (%) of the rows that ran, by ``error(measured, predicted)``."""
    error = error or (lambda m, p: 100 * (p / m - 1))
    return [error(r["measured_s"], r[column]) for r in rows if r.get(column) is not None]


def _throughput_error(measured_s: float, predicted_s: float) -> float:
    return 100 * (measured_s / predicted_s - 1)


def _row(label: str, runs: int, stack: str, mean: str, worst: str, spearman: str = "–",
         targets: str = "–") -> str:
    return f"| {label} | {runs:,} | {stack} | {mean} | {worst} | {spearman} | {targets} |"


def _vtrain_rows(root: Path) -> list[str]:
    lines = []
    for kind, label, unit, every in (("multi", "vTrain multi-node (A100, 64–512 GPUs)", "B", 2),
                                     ("single", "vTrain single-node (A100, 2–8 GPUs)",
                                      " wide", 4)):
        plain, comm, fit = (load(n, root) for n in (kind, f"{kind}-comm", f"{kind}-fit"))
        stack = "`megatron-deepspeed`"
        for what, summary in ((label, plain["uncalibrated"]),
                              ("same, collectives calibrated on the cluster's own "
                               "all-reduce table", comm["uncalibrated"])):
            lines.append(_row(what, summary["simulated"], stack,
                              f"**{_pct(summary['mean_abs_error_pct'])}**",
                              f"**{_pct(summary['max_abs_error_pct'])}**",
                              _spearman(summary, unit),
                              _targets(summary) if kind == "multi" else "–"))
        crossed = fit["cross_validated"]
        lines.append(_row(f"same, one fitted stack ({len(fit['fit']['values'])} knobs, every "
                          f"{every}th row, {fit['fit']['folds']}-fold cross-validated)"
                          .replace("every 2th", "every 2nd"),
                          crossed["simulated"], f"{stack} fitted",
                          _pct(crossed["mean_abs_error_pct"]),
                          _pct(crossed["max_abs_error_pct"]), _spearman(crossed, unit)))
    return lines


def _script_rows(root: Path) -> list[str]:
    bloom, titan = load("bloom-fit", root), load("torchtitan-fit", root)
    stack = "`megatron-deepspeed`"
    production = [r for r in bloom["rows"] if r["label"].startswith("BLOOM-176B production")]
    lines = [_row("BLOOM-176B production (384 A100)", len(production), stack,
                  " / ".join(f"{e:+.1f} %".replace("-", "−") for e in _errors(production)),
                  "–")]
    every = [abs(e) for e in _errors(bloom["rows"])]
    lines.append(_row("BLOOM and its 3D-topology sweep", len(every), stack,
                      f"median {_pct(statistics.median(every))}", _pct(max(every))))
    crossed = bloom["cross_validated"]
    lines.append(_row(f"same, one fitted stack ({len(bloom['fit']['values'])} knobs, "
                      f"{bloom['fit']['folds']}-fold cross-validated; iteration time)",
                      crossed["simulated"], f"{stack} fitted",
                      f"mean {_pct(crossed['mean_abs_error_pct'])}",
                      _pct(crossed["max_abs_error_pct"])))
    stacks = "`torch-eager` / `torch-compile`"
    for label, rows in (("torchtitan Llama 3.1 (H100 at 500 W, 8–256 GPUs, no CP; tokens/s)",
                         [r for r in titan["rows"] if r["group"] in TORCHTITAN_NO_CP]),
                        ("torchtitan, all three tables (H100 500 W, H200 700 W; CP, TP; "
                         "8–256 GPUs; tokens/s)", titan["rows"])):
        errors = [abs(e) for e in _errors(rows, error=_throughput_error)]
        lines.append(_row(label, len(errors), stacks, _pct(statistics.fmean(errors)),
                          _pct(max(errors))))
    crossed = titan["cross_validated"]
    lines.append(_row(f"same, one fitted stack ({len(titan['fit']['values'])} knobs, "
                      f"{titan['fit']['folds']}-fold cross-validated; iteration time)",
                      crossed["simulated"], "same, fitted",
                      _pct(crossed["mean_abs_error_pct"]), _pct(crossed["max_abs_error_pct"])))
    return lines


def summary_table(root: Path = HERE) -> list[str]:
    """The summary table of the "Training iterations" section."""
    return ["| data | runs | stack | mean \\|err\\| | max \\|err\\| | Spearman within group | "
            "targets (issue 12) |", "|---|---:|---|---:|---:|---|---|",
            *_vtrain_rows(root), *_script_rows(root)]


def _knobs(fit: dict[str, Any]) -> str:
    def short(key: str, value: float) -> str:
        name = key.rsplit(".", 1)[-1].removesuffix("_efficiency")
        if "overhead" in key or "launch" in key or key.endswith("_s"):
            return f"{name} {value * 1e6:.3g} µs"
        return f"{name} {value:.3g}"
    return ", ".join(f"{short(k, fit['start'][k])} → {short(k, v).split(' ', 1)[1]}"
                     for k, v in fit["values"].items())


def fits_table(root: Path = HERE) -> list[str]:
    """The fitted stacks' table: uncalibrated, fitted and cross-validated errors on
    iteration time, and the knobs each fit found."""
    lines = ["| fitted on | rows | uncalibrated | fitted | cross-validated | knobs fitted "
             "(default → fit) |", "|---|---:|---:|---:|---:|---|"]
    for name, label in (("single-fit", "vTrain single-node, every 4th row"),
                        ("multi-fit", "vTrain multi-node, every 2nd row"),
                        ("bloom-fit", "BLOOM and its sweep (`megatron-deepspeed`, A100)"),
                        ("torchtitan-fit", "torchtitan, all three tables (`torch-eager` / "
                         "`torch-compile`, H100 and H200)")):
        result = load(name, root)
        plain, fitted, crossed = (result[k] for k in ("uncalibrated", "fitted",
                                                      "cross_validated"))
        lines.append(f"| {label} | {plain['simulated']} | "
                     f"{_pct(plain['mean_abs_error_pct'])} (max "
                     f"{_pct(plain['max_abs_error_pct'])}) | {_pct(fitted['mean_abs_error_pct'])}"
                     f" | **{_pct(crossed['mean_abs_error_pct'])}** (max "
                     f"{_pct(crossed['max_abs_error_pct'])}) | {_knobs(result['fit'])} |")
    return lines


def _signed_mean(rows: Sequence[dict[str, Any]], group: str) -> str:
    errors = _errors([r for r in rows if r["group"] == group])
    return f"{statistics.fmean(errors):+.1f} %".replace("-", "−")


def transfer_table(root: Path = HERE) -> list[str]:
    """vTrain's multi-node table with the single-node fit's knobs: whether a fit carries
    from one table (the same machines, other sizes) to the other."""
    lines = ["| knobs on the 109 multi-node runs | mean \\|err\\| | max \\|err\\| | "
             "175B runs, mean signed error |", "|---|---:|---:|---:|"]
    for name, label in (("multi", "defaults (uncalibrated)"),
                        ("multi-single-fit", "the single-node fit, all four knobs"),
                        ("multi-single-host", "its host figure alone")):
        result = load(name, root)
        summary = result["uncalibrated"]
        lines.append(f"| {label} | {_pct(summary['mean_abs_error_pct'])} | "
                     f"{_pct(summary['max_abs_error_pct'])} | "
                     f"{_signed_mean(result['rows'], '175')} |")
    return lines


TABLES = {"summary": summary_table, "fits": fits_table, "transfer": transfer_table}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", choices=sorted(TABLES), help="which table to print")
    args = parser.parse_args(argv)
    print("\n".join(TABLES[args.table]()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
