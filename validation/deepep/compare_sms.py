"""DeepEP's normal kernels by the SMs they run on: distsim's ``all_to_all: deepep`` with
``compute.comm_sms`` against the SM sweeps DeepEP's ``hybrid-ep`` branch README publishes.

The source (``shared/data/kernels/deepep``): DeepEP's normal (intranode) dispatch and
combine on 8 GPUs of one NVLink domain — B200 (HGX, 16 to 48 SMs) and GB200 NVL72 (16,
24, 32 SMs) — 4,096 tokens a rank, hidden 7,168, top-8 of 8 local experts a rank (64 in
all) under a uniform random router, FP8 or BF16 dispatch, combine (16-bit), each
measured around the Python call ("Torch API").  The figure is DeepEP's test's: the
tokens a rank receives, its own included, times their bytes, over the call's time
(:func:`received_bytes`).  Its rows at 16 and 24 ranks on GB200 run DeepEP's internode
kernels across the rack and are left out.

distsim runs the same exchange on one ``dgx-b200`` node (or 8 GPUs of a ``gb200-nvl72``
rack) with DeepEP's NVLink fraction (``deepep_nvlink_efficiency``, H800's fit) and the
kernel's SMs as ``deepep_sms``, first without the SMs' bound (the rate NVLink gives) and
then with it: an SM spending :data:`~collectives.params.DEEPEP_SM_TOKEN_S` a token and
moving its bytes at :data:`~collectives.params.DEEPEP_SM_BYTES_PER_S` — the two figures
``--fit`` derives from B200's dispatch rows alone (the byte rate an SM that its BF16 rows
give, and its FP8 rows', solved for the time a token and the rate a byte), so the combine
and GB200's rows are predictions::

    python validation/deepep/compare_sms.py [--data DIR] [--table | --fit]

``--table`` prints the summary docs/validation.md holds (tests/test_docs_tables.py
checks it) instead of the rows.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from compare_deepep import _cell, find_data  # a sibling script, as dgxc/'s build_table
from distsim_gpu.collectives.deepep import reach
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.collectives.params import (
    DEEPEP_SM_BYTES_PER_S,
    DEEPEP_SM_TOKEN_S,
    comm_params_for,
)
from distsim_gpu.topology import Topology, build_cluster

TOKENS, HIDDEN, TOP_K, RANKS, LOCAL_EXPERTS = 4096, 7168, 8, 8, 8
EXPERTS = RANKS * LOCAL_EXPERTS
ELEMENT_BYTES = {"FP8": 1.0 + 4.0 / 128, "BF16": 2.0}
KERNEL = "DeepEP normal"

#: GPU, phase, dtype, SMs, measured, distsim without the SMs' bound, with it (GB/s).
Row = tuple[str, str, str, int, float, float, float]


def received_bytes(element_bytes: float) -> float:
    """What DeepEP's test divides by the time: the tokens a rank receives (its own
    included), each once per rank it reaches, at ``element_bytes`` an element."""
    p_gpu, _ = reach(ranks=RANKS, nodes=1, experts=EXPERTS, top_k=TOP_K)
    return TOKENS * HIDDEN * element_bytes * RANKS * p_gpu


@lru_cache(maxsize=4)
def _topology(gpu: str) -> Topology:
    spec = ({"preset": "gb200-nvl72", "nvlink_domain": RANKS} if gpu == "GB200"
            else {"preset": "dgx-b200"})
    return build_cluster(spec)


def predicted_bandwidth(gpu: str, element_bytes: float, sms: int,
                        sm_rate: float = DEEPEP_SM_BYTES_PER_S,
                        token_s: float = DEEPEP_SM_TOKEN_S) -> float:
    """distsim's figure (bytes per second as DeepEP's test counts them) for one exchange
    on ``sms`` SMs (0: unbounded by them), an SM taking ``token_s`` a token and moving its
    bytes at ``sm_rate``."""
    topology = _topology(gpu)
    group = list(topology.gpus)[:RANKS]
    params = replace(comm_params_for("blackwell"), all_to_all="deepep", moe_experts=EXPERTS,
                     moe_top_k=TOP_K, deepep_sms=sms, deepep_sm_bytes_per_s=sm_rate,
                     deepep_sm_token_s=token_s, moe_tokens=TOKENS, moe_hidden=HIDDEN)
    size = int(TOKENS * TOP_K * HIDDEN * element_bytes)  # top-k copies, as the iteration's
    (row,) = run_benchmark(topology, "alltoall", [size], params=params, dtype="int8",
                           gpus=group)
    return received_bytes(element_bytes) / row.time_s


def measured_rows(data: Path) -> list[dict[str, str]]:
    """DeepEP's normal-kernel rows at 8 ranks on B200 and GB200."""
    with open(data / "deepep_dispatch_combine.csv", newline="", encoding="utf-8") as handle:
        return [r for r in csv.DictReader(handle) if r["kernel"].startswith(KERNEL)
                and r["gpu"] in ("B200", "GB200") and int(r["ep"]) == RANKS]


def compare(data: Path, sm_rate: float = DEEPEP_SM_BYTES_PER_S,
            token_s: float = DEEPEP_SM_TOKEN_S) -> list[Row]:
    """Per row: GPU, phase, dtype, SMs, measured, distsim unbounded, distsim bounded (GB/s)."""
    out = []
    for row in measured_rows(data):
        dtype = row["dispatch_dtype"] if row["phase"] == "dispatch" else "BF16"
        sms, width = int(row["num_sms"]), ELEMENT_BYTES[dtype]
        out.append((row["gpu"], row["phase"], dtype, sms, float(row["bandwidth_GBps"]),
                    predicted_bandwidth(row["gpu"], width, 0) / 1e9,
                    predicted_bandwidth(row["gpu"], width, sms, sm_rate, token_s) / 1e9))
    return out


def fit_byte_rate(data: Path, dtype: str) -> float:
    """The byte rate an SM (no time a token) B200's ``dtype`` dispatch rows give: of 5 to
    30 GB/s in steps of 0.5, the one with the least median |error| over them."""
    rows = [(int(r["num_sms"]), float(r["bandwidth_GBps"]) * 1e9) for r in measured_rows(data)
            if (r["gpu"], r["phase"], r["dispatch_dtype"]) == ("B200", "dispatch", dtype)]

    def error(rate: float) -> float:
        return statistics.median(
            abs(predicted_bandwidth("B200", ELEMENT_BYTES[dtype], sms, rate, 0.0)
                / measured - 1) for sms, measured in rows)

    return min((step * 0.5e9 for step in range(10, 61)), key=error)


def fit_sm_costs(data: Path) -> tuple[float, float]:
    """``(seconds a token, bytes per second)`` of an SM: the pair under which a token of
    each dtype takes what its rows' byte rate gives (:func:`fit_byte_rate`), ``t + B/rate
    = B/r`` for BF16's and FP8's ``B``, rounded as the defaults are written."""
    sizes = {dtype: HIDDEN * ELEMENT_BYTES[dtype] for dtype in ("BF16", "FP8")}
    per_token = {dtype: size / fit_byte_rate(data, dtype) for dtype, size in sizes.items()}
    seconds_a_byte = (per_token["BF16"] - per_token["FP8"]) / (sizes["BF16"] - sizes["FP8"])
    token_s = per_token["BF16"] - sizes["BF16"] * seconds_a_byte
    return round(token_s, 8), round(1 / seconds_a_byte, -9)


def _errors(rows: Sequence[Row], column: int) -> list[float]:
    return [100 * (row[column] / row[4] - 1) for row in rows]


def summary_table(data: Path) -> list[str]:
    """The Markdown table of docs/validation.md: per GPU and exchange, the median error
    without the SMs' bound and with it."""
    rows = compare(data)
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(f"{row[0]} {row[1]} {row[2]}", []).append(row)
    lines = ["| rows | n | SMs | without the SMs' bound | with it |",
             "|---|---:|---|---|---|"]
    for label, members in groups.items():
        sms = sorted({row[3] for row in members})
        lines.append(f"| {label} | {len(members)} | {sms[0]}–{sms[-1]} | "
                     f"{_cell(_errors(members, 5))} | {_cell(_errors(members, 6))} |")
    lines.append(f"| all | {len(rows)} | | {_cell(_errors(rows, 5))} | "
                 f"{_cell(_errors(rows, 6))} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the deepep data folder")
    parser.add_argument("--table", action="store_true",
                        help="print the summary table of docs/validation.md alone")
    parser.add_argument("--fit", action="store_true",
                        help="print the SM costs B200's dispatch rows give (the defaults')")
    args = parser.parse_args(argv)
    data = find_data(args.data)
    if args.table:
        print("\n".join(summary_table(data)))
        return 0
    if args.fit:
        token_s, rate = fit_sm_costs(data)
        print(f"DeepEP's SM costs fitted on B200's dispatch: {token_s * 1e6:.2f} us a token "
              f"and {rate / 1e9:.0f} GB/s (defaults {DEEPEP_SM_TOKEN_S * 1e6:.2f} us, "
              f"{DEEPEP_SM_BYTES_PER_S / 1e9:.0f} GB/s)")
        return 0
    print(f"{'gpu':6} {'phase':9} {'dtype':5} {'SMs':>4} {'measured':>9} {'unbound':>8} "
          f"{'error':>7} {'bound':>7} {'error':>7}")
    for gpu, phase, dtype, sms, measured, free, bound in compare(data):
        print(f"{gpu:6} {phase:9} {dtype:5} {sms:4d} {measured:7.0f} GB/s {free:6.0f} "
              f"{free / measured - 1:+7.1%} {bound:6.0f} {bound / measured - 1:+7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
