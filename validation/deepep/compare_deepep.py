"""DeepEP's normal dispatch and combine on H800: distsim's ``all_to_all: deepep`` against
the bandwidths DeepEP's README publishes, EP 8 (one node) to EP 64 (eight nodes).

The source (``shared/data/kernels/deepep``): DeepEP's V1 normal kernels on H800 (NVLink
at DeepSeek's quoted ~160 GB/s, one ConnectX-7 400 Gb/s InfiniBand NIC per GPU), 4,096
tokens per rank, hidden 7,168, top-8 of 256 experts (its ``tests/test_internode.py``),
top-4 groups (node-limited routing to 4 nodes), FP8 dispatch (1 byte and one 4-byte
scale per 128 elements) and BF16 combine.  The README's figure is the bottleneck's: the
NVLink bytes a rank receives over the kernel's time at EP 8, the "RDMA" bytes at EP 16 and
more — as its test counts them, a token once per node it reaches, the sender's own node
included (:func:`bottleneck_bytes`).  Each README revision re-measured; every row is
compared.

distsim runs the same exchange on ``dgx-h100`` nodes with NVLink at H800's 200 GB/s per
direction (400 GB/s bidirectional) and the 400 Gb/s rails::

    python validation/deepep/compare_deepep.py [--data DIR] [--table | --fit]

and divides the closed-form bottleneck bytes (:func:`collectives.deepep.reach`) by the
simulated time: first uncalibrated (DeepEP's NVLink copies at the payload rate NCCL's
reach, ``deepep_nvlink_efficiency`` 1), then with distsim's default fraction, which
``--fit`` derives from the intranode (EP 8) rows alone — so EP 16 to 64 are predictions —
and, as a check of that choice, with the fraction fitted on every other EP size.
``--table`` prints the summary by EP size that docs/validation.md holds (and
tests/test_docs_tables.py checks) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from distsim_gpu.collectives.deepep import reach
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import CommParams, comm_params_for
from distsim_gpu.topology import build_cluster

HERE = Path(__file__).resolve().parent
TOKENS, HIDDEN, TOP_K, EXPERTS, MAX_NODES, GPUS_PER_NODE = 4096, 7168, 8, 256, 4, 8
ELEMENT_BYTES = {"FP8": 1.0 + 4.0 / 128, "BF16": 2.0}
#: H800's NVLink: 400 GB/s bidirectional (NVIDIA's H800 datasheet), 200 GB/s each way.
H800_NVLINK = "200 GB/s"
#: The NVLink fractions a leave-one-EP-size-out fit tries (DeepEP's copy kernels against
#: NCCL's payload rate): 0.50 to 1.00.
FRACTIONS = tuple(round(0.5 + 0.02 * i, 2) for i in range(26))
#: The default fraction (collectives.params), which ``--fit`` derives.
DEFAULT_FRACTION = CommParams().deepep_nvlink_efficiency


def bottleneck_bytes(ep: int, element_bytes: float) -> float:
    """The bytes DeepEP's test divides by the kernel's time (its ``tests/test_internode.py``
    and ``test_intranode.py``): at EP 8 the tokens a rank receives (``recv_x``, its own
    included), beyond the tokens times the distinct nodes each reaches (``inplace_unique``
    of the node indices, the sender's own node included)."""
    nodes = max(1, ep // GPUS_PER_NODE)
    p_gpu, p_node = reach(ranks=ep, nodes=nodes, experts=EXPERTS, top_k=TOP_K,
                          max_nodes=MAX_NODES)
    copies = ep * p_gpu if nodes == 1 else nodes * p_node
    return TOKENS * HIDDEN * element_bytes * copies


def predicted_bandwidth(ep: int, element_bytes: float, nvlink_fraction: float = 1.0) -> float:
    """distsim's bottleneck bandwidth (bytes per second) for one dispatch or combine, with
    DeepEP's NVLink copies at ``nvlink_fraction`` of NCCL's payload rate (1: uncalibrated)."""
    topology = build_cluster({"preset": "dgx-h100", "nodes": max(1, ep // GPUS_PER_NODE),
                              "nvlink": {"bandwidth": H800_NVLINK}})
    params = replace(comm_params_for("hopper"), all_to_all="deepep", moe_experts=EXPERTS,
                     moe_top_k=TOP_K, deepep_max_nodes=MAX_NODES,
                     deepep_nvlink_efficiency=nvlink_fraction)
    size = int(TOKENS * TOP_K * HIDDEN * element_bytes)  # top-k copies, as the iteration's
    (row,) = run_benchmark(topology, "alltoall", [size], params=params, dtype="int8")
    return bottleneck_bytes(ep, element_bytes) / row.time_s


def measured_rows(data: Path) -> list[dict[str, str]]:
    """The V1 normal-kernel rows of the DeepEP table."""
    with open(data / "deepep_dispatch_combine.csv", newline="", encoding="utf-8") as handle:
        return [r for r in csv.DictReader(handle) if r["kernel"].startswith("V1 normal")]


def find_data(given: str | None) -> Path:
    """``--data``, else ``shared/data/kernels/deepep`` above the repository."""
    candidates = [Path(given)] if given else [
        parent / "shared" / "data" / "kernels" / "deepep" for parent in HERE.parents]
    for candidate in candidates:
        if (candidate / "deepep_dispatch_combine.csv").is_file():
            return candidate
    raise SystemExit("no deepep_dispatch_combine.csv found: pass --data DIR")


def compare(data: Path, nvlink_fraction: float = 1.0,
            ) -> list[tuple[str, int, str, float, float]]:
    """(phase, ep, README date, measured GB/s, predicted GB/s) per row."""
    cache: dict[tuple[int, str], float] = {}
    out = []
    for row in measured_rows(data):
        ep, phase = int(row["ep"]), row["phase"]
        dtype = row["dispatch_dtype"] if phase == "dispatch" else row["combine_dtype"]
        key = (ep, dtype)
        if key not in cache:
            cache[key] = predicted_bandwidth(ep, ELEMENT_BYTES[dtype], nvlink_fraction) / 1e9
        out.append((phase, ep, row["readme_date"] or "legacy", float(row["bandwidth_GBps"]),
                    cache[key]))
    return out


def fit_intranode(data: Path) -> float:
    """The default ``deepep_nvlink_efficiency``: the median of measured / uncalibrated over
    the EP 8 rows (NVLink alone carries them), to two decimals."""
    ratios = [m / p for _ph, ep, _d, m, p in compare(data) if ep == GPUS_PER_NODE]
    return round(statistics.median(ratios), 2)


def _median_error(rows: Sequence[tuple[str, int, str, float, float]]) -> float:
    return statistics.median(abs(p / m - 1) for *_r, m, p in rows)


Rows = list[tuple[str, int, str, float, float]]


def sweep(data: Path) -> dict[float, Rows]:
    """The rows at every fraction the leave-one-out fit tries, and at the default."""
    return {f: compare(data, f) for f in sorted({*FRACTIONS, DEFAULT_FRACTION})}


def cross_validated(runs: dict[float, Rows]) -> list[tuple[int, float, float]]:
    """Per EP size: the NVLink fraction fitted on the other sizes (least median |error|)
    and that size's median |error| with it, from :func:`sweep`'s rows."""
    sizes = sorted({ep for _p, ep, *_ in runs[1.0]})
    out = []
    for held in sizes:
        fitted = min(FRACTIONS, key=lambda f: _median_error(
            [r for r in runs[f] if r[1] != held]))
        out.append((held, fitted, _median_error([r for r in runs[fitted] if r[1] == held])))
    return out


def _errors(rows: Sequence[tuple[str, int, str, float, float]], ep: int) -> list[float]:
    return [100 * (p / m - 1) for _ph, e, _d, m, p in rows if ep in (0, e)]


def _cell(signed: list[float]) -> str:
    low, high = (f"{v:+.0f}".replace("-", "−") for v in (min(signed), max(signed)))
    return f"{statistics.median(map(abs, signed)):.1f} % ({low} … {high} %)"


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md's DeepEP section: per EP size, the
    uncalibrated errors, those with the default fraction (fitted on EP 8), and those with
    the fraction fitted on the other EP sizes."""
    runs = sweep(data)
    plain, default = runs[1.0], runs[DEFAULT_FRACTION]
    fits = {held: (fitted, error) for held, fitted, error in cross_validated(runs)}
    lines = ["| EP | rows | median \\|error\\| (signed range), uncalibrated | with "
             f"the default {DEFAULT_FRACTION:.2f} | fraction fitted on the other EP sizes "
             "| median \\|error\\| with it |",
             "|---:|---:|---|---|---:|---:|"]
    for ep in sorted(fits):
        fitted, error = fits[ep]
        lines.append(f"| {ep} | {len(_errors(plain, ep))} | {_cell(_errors(plain, ep))} | "
                     f"{_cell(_errors(default, ep))} | {fitted:.2f} | {100 * error:.1f} % |")
    predicted = [r for r in default if r[1] != GPUS_PER_NODE]
    lines.append(f"| all | {len(plain)} | {_cell(_errors(plain, 0))} | "
                 f"{_cell(_errors(default, 0))} | | |")
    lines.append(f"| 16–64 | {len(predicted)} | | {_cell(_errors(predicted, 0))} | | |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the deepep data folder")
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    parser.add_argument("--fit", action="store_true",
                        help="print the NVLink fraction the EP 8 rows give (the default's)")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(summary_table(find_data(args.data))))
        return 0
    if args.fit:
        print(f"deepep_nvlink_efficiency fitted on the EP 8 rows: "
              f"{fit_intranode(find_data(args.data)):.2f} (default {DEFAULT_FRACTION:.2f})")
        return 0
    rows = compare(find_data(args.data))
    print(f"{'phase':9} {'ep':>3} {'README':>10} {'measured':>9} {'distsim':>8} {'error':>7}")
    errors = []
    for phase, ep, date, measured, predicted in rows:
        error = predicted / measured - 1
        errors.append(abs(error))
        print(f"{phase:9} {ep:3d} {date:>10} {measured:7.1f} GB/s {predicted:6.1f} "
              f"{error:+7.1%}")
    by_ep: dict[int, list[float]] = {}
    for (_phase, ep, *_), error in zip(rows, errors, strict=True):
        by_ep.setdefault(ep, []).append(error)
    for ep, errs in sorted(by_ep.items()):
        print(f"EP {ep:3d}: median |error| {statistics.median(errs):.1%} over {len(errs)} rows")
    print(f"all: median |error| {statistics.median(errors):.1%}, max {max(errors):.1%}")
    print("calibrated (one figure: NVLink's fraction for DeepEP's copies), each EP size "
          "predicted with the fraction fitted on the others:")
    for held, fitted, error in cross_validated(sweep(find_data(args.data))):
        print(f"EP {held:3d}: fraction {fitted:.2f}, median |error| {error:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
