"""Predict CSCS Alps' nccl-tests all-reduce from 1 to 512 GH200 nodes and hold it against the
measurements.

Reads the per-run CSVs of ../shared/data/nccl/alps_gh200/ (never edited: one file per job,
``<plugin>/job-n-<ranks>-N-<nodes>.csv``, nccl-tests' columns with commas), simulates every
size of every run on the Alps cluster of this folder (alps-gh200.yaml: quad-gh200 nodes on
a Slingshot dragonfly) with distsim's defaults, and prints Markdown tables:

* per run, the medians of |error| (bandwidth-bound ≥ 64 MiB, latency-bound ≤ 64 KiB, all),
  as ``distsim validate nccl`` prints them;
* bus bandwidth against node count at the summary sizes (1 MiB, 16 MiB, 256 MiB, 4 GiB),
  measured and predicted, with the error of the predicted time.

    python validation/alps/run_alps.py [--data DIR] [--algo ring] [--max-nodes N]
        [--table medians|busbw] [--plugin aws-ofi-1.13.0]

The measured time of a size is the mean of its out-of-place and in-place times, the
error ``100·(predicted − measured)/measured`` on time — as for every log in
docs/validation.md.  Nothing is fitted.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.nccl_log import NcclLog, NcclRow
from distsim_gpu.scenarios.fit.validate_nccl import NcclValidation, validate_nccl_log
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.topology import load_cluster

HERE = Path(__file__).resolve().parent
CLUSTER = HERE / "alps-gh200.yaml"
DEFAULT_DATA = HERE.parents[2] / "shared" / "data" / "nccl" / "alps_gh200"
#: The sizes of the data set's own summary (allreduce_summary_large_msgs.csv).
SUMMARY_SIZES = (2**20, 2**24, 2**28, 2**32)
_RUN_NAME = re.compile(r"^job-n-(\d+)-N-(\d+)\.csv$")
_COLUMNS = ["size", "count", "type", "redop", "root",
            "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"]


@dataclass(frozen=True, slots=True)
class AlpsRun:
    """One job's CSV: the aws-ofi-nccl plugin it ran with, its ranks and nodes."""

    plugin: str
    ranks: int
    nodes: int
    path: Path


def find_runs(data: Path) -> list[AlpsRun]:
    """Every ``<plugin>/job-n-<ranks>-N-<nodes>.csv`` under ``data``, by plugin then nodes."""
    runs = []
    for path in sorted(data.glob("*/job-n-*-N-*.csv")):
        match = _RUN_NAME.match(path.name)
        if match:
            runs.append(AlpsRun(path.parent.name, int(match[1]), int(match[2]), path))
    if not runs:
        raise ParseError("no job-n-<ranks>-N-<nodes>.csv files", source=str(data),
                         hint="point --data at nccl/alps_gh200 of the shared data")
    return sorted(runs, key=lambda r: (r.plugin, r.nodes))


def read_run(run: AlpsRun) -> NcclLog:
    """A run's CSV as the :class:`NcclLog` ``parse_nccl_log`` would give for its table."""
    with open(run.path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header != _COLUMNS:
            raise ParseError(f"unexpected columns {header}", source=str(run.path), line=1,
                             hint="expected " + ",".join(_COLUMNS))
        rows = tuple(_row(fields, line, run.path) for line, fields in enumerate(reader, 2))
    return NcclLog(source=str(run.path), op="all_reduce", num_ranks=run.ranks,
                   gpu_model="NVIDIA GH200 120GB", nccl_version="2.23.4", rows=rows,
                   avg_busbw_bytes_per_s=None)


def _row(fields: list[str], line: int, path: Path) -> NcclRow:
    if len(fields) != len(_COLUMNS):
        raise ParseError(f"{len(fields)} fields, expected {len(_COLUMNS)}", source=str(path),
                         line=line)
    try:
        size, count, root = int(fields[0]), int(fields[1]), int(fields[4])
        times = [float(fields[i]) * 1e-6 for i in (5, 9)]
        algbw = [float(fields[i]) * 1e9 for i in (6, 10)]
        busbw = [float(fields[i]) * 1e9 for i in (7, 11)]
    except ValueError as error:
        raise ParseError(f"not a number: {error}", source=str(path), line=line) from None
    return NcclRow(size, count, fields[2], fields[3], root, times[0], algbw[0], busbw[0],
                   times[1], algbw[1], busbw[1], line)


def validate_run(run: AlpsRun, params: CommParams, cluster: Path = CLUSTER) -> NcclValidation:
    """``distsim validate nccl`` on one run: its CSV against the cluster at its node count."""
    topology = load_cluster(cluster, nodes=run.nodes)
    return validate_nccl_log(read_run(run), topology, params=params)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def medians_table(results: dict[tuple[str, int], NcclValidation]) -> list[str]:
    """Nodes by plugin: the three medians of |error| of each run."""
    plugins = sorted({plugin for plugin, _ in results})
    lines = ["| nodes | GPUs | " + " | ".join(
        f"{p}: ≥ 64 MiB / ≤ 64 KiB / all" for p in plugins) + " |",
        "|---:|---:|" + "---|" * len(plugins)]
    for nodes in sorted({n for _, n in results}):
        cells = []
        for plugin in plugins:
            report = results.get((plugin, nodes))
            cells.append("–" if report is None else " / ".join(
                _pct(v) for v in (report.median_abs_error_large_pct,
                                  report.median_abs_error_small_pct,
                                  report.median_abs_error_all_pct)))
        ranks = next(r.num_ranks for (p, n), r in results.items() if n == nodes)
        lines.append(f"| {nodes} | {ranks} | " + " | ".join(cells) + " |")
    return lines


def busbw_table(results: dict[tuple[str, int], NcclValidation], plugin: str) -> list[str]:
    """Bus bandwidth (GB/s) against node count at the summary sizes, one plugin's runs."""
    names = ("1 MiB", "16 MiB", "256 MiB", "4 GiB")
    lines = ["| nodes | " + " | ".join(f"{n} meas | pred | err %" for n in names) + " |",
             "|---:|" + "---:|---:|---:|" * len(names)]
    for (p, nodes), report in sorted(results.items(), key=lambda item: item[0][1]):
        if p != plugin:
            continue
        by_size = {row.size_bytes: row for row in report.rows}
        cells = []
        for size in SUMMARY_SIZES:
            row = by_size.get(size)
            cells.append("– | – | –" if row is None else
                         f"{row.measured_busbw_bytes_per_s / 1e9:.2f} | "
                         f"{row.predicted_busbw_bytes_per_s / 1e9:.2f} "
                         f"({row.algorithm}/{row.protocol}) | {row.error_pct:+.1f}")
        lines.append(f"| {nodes} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--cluster", type=Path, default=CLUSTER)
    parser.add_argument("--algo", default="auto", help="collective algorithm (default auto)")
    parser.add_argument("--max-nodes", type=int, default=None, metavar="N")
    parser.add_argument("--table", choices=("all", "medians", "busbw"), default="all",
                        help="print one table alone, without its heading (the form "
                        "docs/validation.md holds and tests/test_docs_tables.py checks)")
    parser.add_argument("--plugin", default=None, help="busbw: this plugin's runs only")
    args = parser.parse_args(argv)
    params = CommParams(algorithm=args.algo)
    results: dict[tuple[str, int], NcclValidation] = {}
    for run in find_runs(args.data):
        if args.max_nodes is not None and run.nodes > args.max_nodes:
            continue
        start = time.perf_counter()
        results[(run.plugin, run.nodes)] = validate_run(run, params, args.cluster)
        print(f"# {run.plugin} {run.nodes} nodes: {time.perf_counter() - start:.1f} s",
              file=sys.stderr)
    plugins = sorted({p for p, _ in results if args.plugin in (None, p)})
    if args.table == "medians":
        print("\n".join(medians_table(results)))
    elif args.table == "busbw":
        print("\n\n".join("\n".join(busbw_table(results, plugin)) for plugin in plugins))
    else:
        print(f"Medians of |error| (algorithm {args.algo}):\n")
        print("\n".join(medians_table(results)))
        for plugin in plugins:
            print(f"\nBus bandwidth (GB/s) against node count, {plugin} "
                  f"(algorithm {args.algo}):\n")
            print("\n".join(busbw_table(results, plugin)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
