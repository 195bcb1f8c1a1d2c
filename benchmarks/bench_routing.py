"""Benchmark: a 1 GiB ring all-reduce from 2 to 16,384 GPUs under each routing policy.

Two questions, one table each:

* does the ring keep its rate as the cluster grows?  ``dgx-a100`` on a two-tier fat-tree
  at 2, 16, 128 and 1024 nodes: bus bandwidth, and the bus bandwidth of the bytes alone
  (``2(n-1)/n · S / (time - the plan's latency)``), which D-mod-K and adaptive routing keep
  at the 2-node figure and ECMP's hashing does not;
* what does the largest case cost the simulator?  2,048 DGX H100 (16,384 GPUs) on a
  SuperPOD or three-tier fabric under every policy: host CPU time to build the cluster and
  to run the call, and peak memory (each case in its own process, so that its peak is
  its own).

Run from the repository root:

    python benchmarks/bench_routing.py            # everything (a few minutes)
    python benchmarks/bench_routing.py --quick    # up to 128 nodes, no 16,384-GPU case

Prints Markdown tables; figures go into benchmarks/README.md with the machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.algorithms import build_plan
from distsim_gpu.collectives.nccl_tests import run_benchmark
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.routing import POLICIES

SIZE = 2**30
PARAMS = CommParams(algorithm="ring", protocol="simple")


def measure(preset: str, nodes: int, fabric: str, routing: str) -> dict[str, float]:
    """One ring all-reduce of 1 GiB: bandwidths (GB/s), host CPU seconds, peak MiB."""
    start = time.process_time()
    topo = build_cluster({"preset": preset, "nodes": nodes,
                          "fabric": {"kind": fabric, "routing": routing}})
    built = time.process_time()
    (row,) = run_benchmark(topo, "all_reduce", [SIZE], params=PARAMS)
    ran = time.process_time()
    plan = build_plan(topo, topo.gpus, "all_reduce", algorithm="ring", protocol="simple",
                      params=PARAMS)
    n = len(topo.gpus)
    return {"gpus": n, "busbw": row.busbw_bytes_per_s / 1e9,
            "bytes_busbw": 2 * (n - 1) / n * SIZE / (row.time_s - plan.latency_s) / 1e9,
            "build_s": built - start, "run_s": ran - built,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def in_own_process(preset: str, nodes: int, fabric: str, routing: str) -> dict[str, float]:
    """:func:`measure` in a fresh interpreter, so that the peak memory is this case's."""
    out = subprocess.run([sys.executable, __file__, "--case", preset, str(nodes), fabric,
                          routing], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def scaling_table(node_counts: list[int]) -> None:
    print("| nodes | GPUs | routing | busbw (GB/s) | bytes alone (GB/s) | host CPU (s) |")
    print("|---:|---:|---|---:|---:|---:|")
    for nodes in node_counts:
        for routing in ("dmodk", "adaptive", "ecmp"):
            r = measure("dgx-a100", nodes, "fat-tree", routing)
            print(f"| {nodes} | {r['gpus']:.0f} | {routing} | {r['busbw']:.1f} | "
                  f"{r['bytes_busbw']:.1f} | {r['build_s'] + r['run_s']:.1f} |", flush=True)


def largest_table(fabrics: list[str]) -> None:
    print("| fabric | routing | busbw (GB/s) | bytes alone (GB/s) | build (s) | run (s) "
          "| peak (MiB) |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for fabric in fabrics:
        for routing in POLICIES:
            r = in_own_process("dgx-h100", 2048, fabric, routing)
            print(f"| {fabric} | {routing} | {r['busbw']:.1f} | {r['bytes_busbw']:.1f} | "
                  f"{r['build_s']:.1f} | {r['run_s']:.1f} | {r['peak_mib']:.0f} |",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="up to 128 nodes only")
    parser.add_argument("--case", nargs=4, metavar=("PRESET", "NODES", "FABRIC", "ROUTING"),
                        help="measure one case and print it as JSON (used internally)")
    args = parser.parse_args()
    if args.case:
        preset, nodes, fabric, routing = args.case
        print(json.dumps(measure(preset, int(nodes), fabric, routing)))
        return
    print(f"# ring all-reduce, {SIZE // 2**30} GiB, simple protocol\n")
    scaling_table([2, 16, 128] if args.quick else [2, 16, 128, 1024])
    if not args.quick:
        print("\n# 2,048 x dgx-h100 = 16,384 GPUs\n")
        largest_table(["superpod", "three-tier"])


if __name__ == "__main__":
    main()
