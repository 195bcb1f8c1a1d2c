"""vTrain's measured all-reduce table as an nccl-tests log, for ``distsim calibrate nccl``.

vTrain (github.com/VIA-Research/vTrain, MIT) ships the all-reduce times it measured on
its own A100 nodes: ``allreduce_lut/a100/AR_GPU{n}_1M_1024M_LUT.csv`` — 1 MiB to 1 GiB,
float, out-of-place and in-place time (ns) and bus bandwidth, n GPUs of one node.  This
writes the same rows in all_reduce_perf's table (µs) so the cluster's collectives can be
calibrated on the cluster's own measurement — the physics of the machine the training
runs were measured on, not a fit to the training rows::

    python validation/vtrain/lut_to_nccl_tests.py \\
        ../shared/data/training/vtrain/allreduce_lut/a100/AR_GPU8_1M_1024M_LUT.csv > ar8.txt
    distsim calibrate nccl ar8.txt --cluster dgx-a100 --nodes 1 -o vtrain-comm.yaml
"""

from __future__ import annotations

import csv
import sys


def convert(path: str) -> str:
    """The nccl-tests text of one LUT file."""
    lines = ["# nThread 1 nGpus 1 (converted from vTrain's " + path.rsplit("/", 1)[-1] + ")",
             "#",
             "#                                                              out-of-place"
             "                       in-place",
             "#       size         count      type   redop    root     time   algbw   busbw"
             " #wrong     time   algbw   busbw #wrong",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
             "            (us)  (GB/s)  (GB/s)"]
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    for size, count, dtype, t_out, bw_out, t_in, bw_in in rows[1:]:
        out_us, in_us = float(t_out) / 1e3, float(t_in) / 1e3
        alg_out, alg_in = int(size) / out_us / 1e3, int(size) / in_us / 1e3
        lines.append(f"{int(size):>12} {int(count):>13} {dtype:>9}    sum      -1 "
                     f"{out_us:8.1f} {alg_out:7.2f} {float(bw_out):7.2f}      0 "
                     f"{in_us:8.1f} {alg_in:7.2f} {float(bw_in):7.2f}      0")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(convert(sys.argv[1]))
