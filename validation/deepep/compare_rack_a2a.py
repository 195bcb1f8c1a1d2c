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
Predicted bandwidth = counted bytes / simulated time — uncalibrated, the plain all-to-all
at NCCL's rate, and the two-hop exchange as a HybridEP run gives it (``all_to_all:
deepep`` with ``ep_kernels: hybridep``: each token once per destination GPU, HybridEP's
copies at ``HYBRIDEP_NVLINK_EFFICIENCY`` of NCCL's rate, not bound by its SMs), whose
fraction ``--fit`` derives from the 8-rank rows alone, so that 16 to 36 ranks are
predictions::

    python validation/deepep/compare_rack_a2a.py [--data DIR] [--measurement "Kernel Only"]

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
from math import comb
from pathlib import Path

from distsim_gpu.collectives.ep_kernels import EP_KERNELS
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import comm_params_for, comm_params_from_mapping
from distsim_gpu.topology import Topology, build_cluster

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


@lru_cache(maxsize=16)
def _domain(gpu: str, ep: int) -> Topology:
    spec = ({"preset": "gb200-nvl72", "nvlink_domain": ep} if gpu == "GB200"
            else {"preset": "dgx-b200"})
    return build_cluster(spec)


def predicted_bandwidth(gpu: str, ep: int, element_bytes: float) -> float:
    """distsim's algorithm bandwidth (the bytes HybridEP's test counts per second) for one
    exchange: the remote bytes as an all-to-all at the links' rates."""
    remote = TOKENS * HIDDEN * element_bytes * remote_ranks(ep)
    size = int(remote * ep / (ep - 1))  # an all-to-all's S sends S/ep to each rank
    (row,) = run_benchmark(_domain(gpu, ep), "alltoall", [size],
                           params=comm_params_for("blackwell"), dtype="int8")
    return counted_bytes(ep, element_bytes) / row.time_s


@lru_cache(maxsize=64)
def hybridep_bandwidth(gpu: str, ep: int, element_bytes: float,
                       nvlink_fraction: float | None = None) -> float:
    """The same figure for the two-hop exchange a HybridEP run gives (``all_to_all:
    deepep``, ``ep_kernels: hybridep``), its copies at ``nvlink_fraction`` of NCCL's rate
    (None: HybridEP's default)."""
    topology = _domain(gpu, ep)
    given = {} if nvlink_fraction is None else {"deepep_nvlink_efficiency": nvlink_fraction}
    params = replace(comm_params_from_mapping(
        {"all_to_all": "deepep", "ep_kernels": "hybridep", **given},
        architecture="blackwell"), moe_experts=LOCAL_EXPERTS * ep, moe_top_k=TOP_K)
    size = int(TOKENS * TOP_K * HIDDEN * element_bytes)  # top-k copies, as the iteration's
    (row,) = run_benchmark(topology, "alltoall", [size], params=params, dtype="int8",
                           gpus=list(topology.gpus)[:ep])
    return counted_bytes(ep, element_bytes) / row.time_s


def measured_rows(data: Path, measurement: str) -> list[dict[str, str]]:
    with open(data / "deepep_dispatch_combine.csv", newline="", encoding="utf-8") as handle:
        return [r for r in csv.DictReader(handle)
                if r["kernel"] == "HybridEP" and r["gpu"] in ("GB200", "B200")
                and _SAME.get(r["measurement"], r["measurement"]) == measurement]


#: GPU, ep, phase and dtype, SMs, measured, plain all-to-all, HybridEP's exchange (GB/s).
_Row = tuple[str, int, str, int, float, float, float]


def compare(data: Path, measurement: str) -> list[_Row]:
    """Per row: GPU, ep, phase and dtype, SMs, measured GB/s, the plain all-to-all's and
    HybridEP's two-hop exchange's GB/s."""
    out = []
    for r in measured_rows(data, measurement):
        dtype = r["dispatch_dtype"] if r["phase"] == "dispatch" else "BF16"
        key = (r["gpu"], int(r["ep"]), ELEMENT_BYTES[dtype])
        out.append((r["gpu"], int(r["ep"]), f"{r['phase']} {dtype}", int(r["num_sms"]),
                    float(r["bandwidth_GBps"]), predicted_bandwidth(*key) / 1e9,
                    hybridep_bandwidth(*key) / 1e9))
    return out


def fit_hybridep(data: Path) -> float:
    """HybridEP's NVLink fraction: the median of measured / the exchange at NCCL's rate
    over the 8-rank kernel-time rows (B200 and GB200, 16 and 32 SMs), to two decimals."""
    return round(statistics.median(
        float(r["bandwidth_GBps"]) * 1e9 / hybridep_bandwidth(
            r["gpu"], 8, ELEMENT_BYTES[r["dispatch_dtype"] if r["phase"] == "dispatch"
                                       else "BF16"], 1.0)
        for r in measured_rows(data, "Kernel Only") if int(r["ep"]) == 8), 2)


#: The summary's row groups: (label, which kernel-time rows).
GROUPS: tuple[tuple[str, Callable[[_Row], bool]], ...] = (
    ("every kernel-time row: GB200 8–36 ranks, B200 8", lambda r: True),
    ("16–36 ranks (not in HybridEP's fit)", lambda r: r[1] > 8),
    ("8–16 ranks at 32 SMs", lambda r: r[1] <= 16 and r[3] == 32),
    ("BF16 dispatch and combine at 32 SMs", lambda r: "BF16" in r[2] and r[3] == 32),
    ("FP8 dispatch at 16 SMs, 24–36 ranks", lambda r: "FP8" in r[2] and r[3] == 16
     and r[1] >= 24),
)


def _errors(rows: Sequence[_Row], column: int) -> list[float]:
    """Signed errors (%) of the prediction in ``column`` (5 plain, 6 HybridEP's)."""
    return [100 * (row[column] / row[4] - 1) for row in rows]


def _cell(errors: Sequence[float]) -> str:
    low, high = (f"{v:+.1f}".replace("-", "−") for v in (min(errors), max(errors)))
    return f"{statistics.median(map(abs, errors)):.1f} % ({low} … {high} %)"


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md's HybridEP section: per row group, the
    median |error| (signed range) of the plain all-to-all and of HybridEP's exchange."""
    kernel = compare(data, "Kernel Only")
    lines = ["| rows | n | plain all-to-all | `deepep`, `ep_kernels: hybridep` |",
             "|---|---:|---|---|"]
    for label, keep in GROUPS:
        rows = [r for r in kernel if keep(r)]
        lines.append(f"| {label} | {len(rows)} | {_cell(_errors(rows, 5))} | "
                     f"{_cell(_errors(rows, 6))} |")
    torch = compare(data, "Torch API")
    lines.append(f'| every "Torch API" row (the Python call around the kernel) | '
                 f"{len(torch)} | {_cell(_errors(torch, 5))} | {_cell(_errors(torch, 6))} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", default=str(HERE.parents[2] / "shared" / "data" / "kernels"
                                              / "deepep"))
    parser.add_argument("--measurement", default="Kernel Only",
                        choices=("Kernel Only", "Torch API"))
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    parser.add_argument("--fit", action="store_true",
                        help="print HybridEP's NVLink fraction the 8-rank rows give")
    args = parser.parse_args(argv)
    if args.table:
        print("\n".join(summary_table(Path(args.data))))
        return 0
    if args.fit:
        print(f"HybridEP's NVLink fraction fitted on the 8-rank rows: "
              f"{fit_hybridep(Path(args.data)):.2f} "
              f"(default {EP_KERNELS['hybridep'].nvlink_efficiency:.2f})")
        return 0
    rows = compare(Path(args.data), args.measurement)
    print(f"{'GPU':6} {'ep':>3} {'phase':15} {'SMs':>4} {'measured':>9} {'plain':>7} "
          f"{'error':>7} {'hybridep':>8} {'error':>7}")
    for gpu, ep, phase, sms, measured, plain, hybrid in rows:
        print(f"{gpu:6} {ep:3d} {phase:15} {sms:4d} {measured:9.1f} {plain:7.1f} "
              f"{100 * (plain / measured - 1):+6.1f}% {hybrid:8.1f} "
              f"{100 * (hybrid / measured - 1):+6.1f}%")
    for column, name in ((5, "plain all-to-all"), (6, "HybridEP's exchange")):
        errors = [abs(e) for e in _errors(rows, column)]
        print(f"{name}: {len(rows)} rows ({args.measurement}), median |error| "
              f"{statistics.median(errors):.1f} %, max {max(errors):.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
