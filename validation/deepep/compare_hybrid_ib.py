"""HybridEP's dispatch and combine across H100 nodes (InfiniBand): distsim's two-hop
``all_to_all: deepep`` exchange against the bandwidths HybridEP's README publishes, 16 to 64
ranks on 4, 8 and 16 SMs.

The source (``shared/data/kernels/deepep``, DeepEP's ``hybrid-ep`` branch README, the H100
table added with its RDMA support in commit 1dddd19): 4,096 tokens per rank, hidden 7,168,
top-8 of 8 local experts per rank under a uniform random router, FP8 (1 byte and one
4-byte scale per 128 elements) or BF16 dispatch, combine in BF16 (its dtype is not
stated; the test combines in BF16).  The figure is "IB bandwidth" as the branch's
``tests/test_hybrid_ep.py`` counts it: the tokens times the distinct nodes each reaches,
the sender's own node included (``count_rdma_send_from_routing_map``, which keeps the
own node "to align with the implementation in the DeepEP"), at the dtype's bytes, over
the time of the call — so at 16 ranks about half of it never crosses a NIC.  The README
does not say how many GPUs a node holds; distsim takes 8 (a DGX or HGX H100, one
400 Gb/s ConnectX-7 per GPU, ``dgx-h100``).

HybridEP sends a token once per other node it reaches, over InfiniBand to the GPU of the
same local rank there, which forwards it over NVLink to the ranks that need it — the
exchange ``all_to_all: deepep`` models (``collectives/deepep.py``).  Its copies run on
the Hopper's Tensor Memory Accelerator, not on SM warps as DeepEP's do, so the run takes
HybridEP's figures (``ep_kernels: hybridep``, ``collectives/ep_kernels.py``): its NVLink
copies at the fraction of NCCL's rate its 8-rank Blackwell rows give
(``compare_rack_a2a.py --fit``), not bound by its SMs — none of these rows is fitted::

    python validation/deepep/compare_hybrid_ib.py [--data DIR] [--measurement "Torch API"]

``--table`` prints the summary by row group that docs/validation.md holds (and
tests/test_docs_tables.py checks) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from compare_deepep import find_data  # a sibling script, as compare_sms imports it
from distsim_gpu.collectives.deepep import reach
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import comm_params_from_mapping
from distsim_gpu.topology import build_cluster

TOKENS, HIDDEN, TOP_K, LOCAL_EXPERTS, GPUS_PER_NODE = 4096, 7168, 8, 8, 8
ELEMENT_BYTES = {"FP8": 1.0 + 4.0 / 128, "BF16": 2.0}

#: ranks, phase and dtype, SMs, measured GB/s, distsim GB/s.
Row = tuple[int, str, int, float, float]


def counted_bytes(ranks: int, element_bytes: float) -> float:
    """What HybridEP's test divides by the time: a rank's tokens, each once per node it
    reaches (its own node included), at ``element_bytes`` an element."""
    nodes = ranks // GPUS_PER_NODE
    _, p_node = reach(ranks=ranks, nodes=nodes, experts=LOCAL_EXPERTS * ranks, top_k=TOP_K)
    return TOKENS * HIDDEN * element_bytes * nodes * p_node


@lru_cache(maxsize=16)
def predicted_bandwidth(ranks: int, element_bytes: float) -> float:
    """distsim's figure (bytes per second as HybridEP's test counts them) for one dispatch
    or combine over ``ranks`` H100s, 8 a node: the two-hop exchange with HybridEP's
    figures."""
    topology = build_cluster({"preset": "dgx-h100", "nodes": ranks // GPUS_PER_NODE})
    params = replace(comm_params_from_mapping({"all_to_all": "deepep", "ep_kernels": "hybridep"},
                                              architecture="hopper"),
                     moe_experts=LOCAL_EXPERTS * ranks, moe_top_k=TOP_K, deepep_sms=16)
    size = int(TOKENS * TOP_K * HIDDEN * element_bytes)  # top-k copies, as the iteration's
    (row,) = run_benchmark(topology, "alltoall", [size], params=params, dtype="int8")
    return counted_bytes(ranks, element_bytes) / row.time_s


def measured_rows(data: Path, measurement: str) -> list[dict[str, str]]:
    """HybridEP's H100 rows of one measurement (``Kernel Only`` or ``Torch API``)."""
    with open(data / "deepep_dispatch_combine.csv", newline="", encoding="utf-8") as handle:
        return [r for r in csv.DictReader(handle) if r["kernel"] == "HybridEP"
                and r["gpu"] == "H100" and r["measurement"] == measurement]


def compare(data: Path, measurement: str = "Kernel Only") -> list[Row]:
    """(ranks, phase and dtype, SMs, measured GB/s, distsim GB/s) per row."""
    out = []
    for r in measured_rows(data, measurement):
        dtype = r["dispatch_dtype"] if r["phase"] == "dispatch" else "BF16"
        ranks = int(r["ep"])
        out.append((ranks, f"{r['phase']} {dtype}", int(r["num_sms"]),
                    float(r["bandwidth_GBps"]),
                    predicted_bandwidth(ranks, ELEMENT_BYTES[dtype]) / 1e9))
    return out


#: The summary's row groups: (label, which rows).
GROUPS: tuple[tuple[str, Callable[[Row], bool]], ...] = (
    ("every kernel-time row: 16–64 ranks, 4–16 SMs", lambda r: True),
    ("32–64 ranks on 8–16 SMs", lambda r: r[0] >= 32 and r[2] >= 8),
    ("16 ranks (2 nodes) on 8–16 SMs", lambda r: r[0] == 16 and r[2] >= 8),
    ("4 SMs", lambda r: r[2] == 4),
)


def _errors(rows: Sequence[Row]) -> list[float]:
    return [100 * (predicted / measured - 1) for *_r, measured, predicted in rows]


def _line(label: str, errors: Sequence[float]) -> str:
    low, high = (f"{v:+.1f}".replace("-", "−") for v in (min(errors), max(errors)))
    return (f"| {label} | {len(errors)} | {statistics.median(map(abs, errors)):.1f} % | "
            f"{low} … {high} % |")


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md's HybridEP-on-H100 section."""
    kernel = compare(data)
    lines = ["| rows | n | median \\|error\\| | signed |", "|---|---:|---:|---|"]
    lines += [_line(label, _errors([r for r in kernel if keep(r)])) for label, keep in GROUPS]
    lines.append(_line('every "Torch API" row (the Python call around the kernel)',
                       _errors(compare(data, "Torch API"))))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the deepep data folder")
    parser.add_argument("--measurement", default="Kernel Only",
                        choices=("Kernel Only", "Torch API"))
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    args = parser.parse_args(argv)
    data = find_data(args.data)
    if args.table:
        print("\n".join(summary_table(data)))
        return 0
    rows = compare(data, args.measurement)
    print(f"{'ranks':>5} {'phase':15} {'SMs':>4} {'measured':>9} {'distsim':>8} {'error':>7}")
    for ranks, phase, sms, measured, predicted in rows:
        print(f"{ranks:5d} {phase:15} {sms:4d} {measured:9.1f} {predicted:8.1f} "
              f"{100 * (predicted / measured - 1):+6.1f}%")
    errors = [abs(e) for e in _errors(rows)]
    print(f"{len(rows)} rows ({args.measurement}): median |error| "
          f"{statistics.median(errors):.1f} %, max {max(errors):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
