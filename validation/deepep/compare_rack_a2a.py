"""Expert-parallel all-to-all inside one NVLink domain: distsim against HybridEP's measured
dispatch / combine bandwidth on GB200 NVL72 (8–36 ranks) and B200 (8 ranks).

The source (``shared/data/kernels/deepep``, DeepEP's ``hybrid-ep`` branch README): 4,096
tokens per rank, hidden 7,168, top-8 of 8 local experts per rank under a uniform random
router, BF16 or FP8 dispatch, "algorithm bandwidth" — as the branch's test counts it
(``tests/test_mnnvlink_hybridep.py`` when the table was written, 6ced416; the same count in
``tests/test_hybrid_ep.py`` since), the tokens a rank receives, its own included, each
once, over the time of the call (``dispatched_hidden.numel()`` at the dtype's bytes).  The
same exchange in distsim: an all-to-all over the ``ep`` GPUs of one domain
(``gb200-nvl72`` with ``nvlink_domain`` = ep; ``dgx-b200`` for B200) whose per-rank bytes
to the others are those of the router:

    bytes_remote = tokens · hidden · element_bytes · E[distinct other ranks a token reaches]

with ``E = (ep − 1) · (1 − C(8·ep − 8, 8) / C(8·ep, 8))`` (top-8 without replacement among
8·ep experts, 8 per rank), FP8 at 1 byte plus one 4-byte scale per 128 elements, BF16 2;
a rank receives as many, and keeps its own tokens besides — ``ep · (1 − C(…)/C(…))``
ranks' worth, :func:`counted_bytes`, which the figure divides by the time.
Predicted bandwidth = counted bytes / simulated time.  Uncalibrated::

    python validation/deepep/compare_rack_a2a.py [--data DIR] [--measurement "Kernel Only"]

``--table`` prints the summary by row group that docs/validation.md holds (and
tests/test_docs_tables.py checks) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Callable, Sequence
from math import comb
from pathlib import Path

from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import comm_params_for
from distsim_gpu.topology import build_cluster

HERE = Path(__file__).resolve().parent
TOKENS, HIDDEN, TOP_K, LOCAL_EXPERTS = 4096, 7168, 8, 8
ELEMENT_BYTES = {"BF16": 2.0, "FP8": 1.0 + 4.0 / 128}
# The B200 table names the kernel-only measurement differently.
_SAME = {"Only Kernel Time": "Kernel Only"}


def _missed(ep: int) -> float:
    """P(a given rank holds none of a token's top-8 experts, 8 of 8·ep on each rank)."""
    experts = LOCAL_EXPERTS * ep
    return comb(experts - LOCAL_EXPERTS, TOP_K) / comb(experts, TOP_K)


def remote_ranks(ep: int) -> float:
    """Expected other ranks one token is sent to (top-k of ep·8 experts, 8 per rank)."""
    return (ep - 1) * (1 - _missed(ep))


def counted_bytes(ep: int, element_bytes: float) -> float:
    """What HybridEP's test divides by the time: the tokens a rank receives, its own
    included, each once (every rank, the sender too, gets a token it holds an expert of)."""
    return TOKENS * HIDDEN * element_bytes * ep * (1 - _missed(ep))


def predicted_bandwidth(gpu: str, ep: int, element_bytes: float) -> float:
    """distsim's algorithm bandwidth (the bytes HybridEP's test counts per second) for one
    exchange: the remote bytes as an all-to-all at the links' rates."""
    spec = ({"preset": "gb200-nvl72", "nvlink_domain": ep} if gpu == "GB200"
            else {"preset": "dgx-b200"})
    topology = build_cluster(spec)
    remote = TOKENS * HIDDEN * element_bytes * remote_ranks(ep)
    size = int(remote * ep / (ep - 1))  # an all-to-all's S sends S/ep to each rank
    (row,) = run_benchmark(topology, "alltoall", [size],
                           params=comm_params_for("blackwell"), dtype="int8")
    return counted_bytes(ep, element_bytes) / row.time_s


def measured_rows(data: Path, measurement: str) -> list[dict[str, str]]:
    with open(data / "deepep_dispatch_combine.csv", newline="", encoding="utf-8") as handle:
        return [r for r in csv.DictReader(handle)
                if r["kernel"] == "HybridEP" and r["gpu"] in ("GB200", "B200")
                and _SAME.get(r["measurement"], r["measurement"]) == measurement]


def compare(data: Path, measurement: str) -> list[tuple[str, int, str, int, float, float]]:
    """(GPU, ep, phase and dtype, SMs, measured GB/s, predicted GB/s) per row."""
    cache: dict[tuple[str, int, float], float] = {}
    out = []
    for r in measured_rows(data, measurement):
        dtype = r["dispatch_dtype"] if r["phase"] == "dispatch" else "BF16"
        key = (r["gpu"], int(r["ep"]), ELEMENT_BYTES[dtype])
        if key not in cache:
            cache[key] = predicted_bandwidth(*key) / 1e9
        out.append((r["gpu"], int(r["ep"]), f"{r['phase']} {dtype}", int(r["num_sms"]),
                    float(r["bandwidth_GBps"]), cache[key]))
    return out


_Row = tuple[str, int, str, int, float, float]
#: The summary's row groups: (label, which kernel-time rows).
GROUPS: tuple[tuple[str, Callable[[_Row], bool]], ...] = (
    ("every kernel-time row: GB200 8–36 ranks, B200 8", lambda r: True),
    ("8–16 ranks at 32 SMs", lambda r: r[1] <= 16 and r[3] == 32),
    ("BF16 dispatch and combine at 32 SMs", lambda r: "BF16" in r[2] and r[3] == 32),
    ("FP8 dispatch at 16 SMs, 24–36 ranks", lambda r: "FP8" in r[2] and r[3] == 16
     and r[1] >= 24),
)


def _errors(rows: Sequence[_Row]) -> list[float]:
    return [100 * (predicted / measured - 1) for *_r, measured, predicted in rows]


def _line(label: str, errors: Sequence[float]) -> str:
    low, high = (f"{v:+.1f}".replace("-", "−") for v in (min(errors), max(errors)))
    return (f"| {label} | {len(errors)} | {statistics.median(map(abs, errors)):.1f} % | "
            f"{low} … {high} % |")


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md's HybridEP section."""
    kernel = compare(data, "Kernel Only")
    lines = ["| rows | n | median \\|error\\| | signed |", "|---|---:|---:|---|"]
    lines += [_line(label, _errors([r for r in kernel if keep(r)]))
              for label, keep in GROUPS]
    lines.append(_line('every "Torch API" row (the Python call around the kernel)',
                       _errors(compare(data, "Torch API"))))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", default=str(HERE.parents[2] / "shared" / "data" / "kernels"
                                              / "deepep"))
    parser.add_argument("--measurement", default="Kernel Only",
                        choices=("Kernel Only", "Torch API"))
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(summary_table(Path(args.data))))
        return 0
    rows = compare(Path(args.data), args.measurement)
    print(f"{'GPU':6} {'ep':>3} {'phase':15} {'SMs':>4} {'measured':>9} {'distsim':>8} "
          f"{'error':>7}")
    errors = []
    for gpu, ep, phase, sms, measured, predicted in rows:
        error = (predicted / measured - 1) * 100
        errors.append(abs(error))
        print(f"{gpu:6} {ep:3d} {phase:15} {sms:4d} {measured:9.1f} {predicted:8.1f} "
              f"{error:+6.1f}%")
    print(f"{len(rows)} rows ({args.measurement}): median |error| "
          f"{statistics.median(errors):.1f} %, max {max(errors):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
