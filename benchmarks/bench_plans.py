"""Benchmark: building collective plans (``Communicator.choose``) on large clusters.

Run from the repository root:

    python benchmarks/bench_plans.py                 # both clusters
    python benchmarks/bench_plans.py dgx-h100-1344   # one of them
    python benchmarks/bench_plans.py gb200-10752 --profile /tmp/plans.prof

Each case builds a cluster, then times ``choose`` with algorithm and protocol ``auto``
(every candidate algorithm × protocol planned and priced, as a training run's setup
does) for all_reduce, reduce_scatter and all_gather over realistic groups: the
data-parallel groups of one GPU per node across every node, and the groups of 8 (a
DGX node) or 72 (a GB200 NVL72 rack) GPUs.  It prints the CPU seconds per kind of group
and a checksum of the predicted times, which must not move when plan building gets
faster (plans must stay exactly the same).
"""

from __future__ import annotations

import argparse
import cProfile
import time
from collections.abc import Callable

from distsim_gpu.collectives import Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import Topology, build_cluster

OPS = ("all_reduce", "reduce_scatter", "all_gather")
SIZE = 2.0**28


def dgx_h100() -> tuple[Topology, int]:
    """1,344 DGX H100 (10,752 GPUs), rail-optimized; blocks of 8 GPUs (a node)."""
    return build_cluster({"preset": "dgx-h100", "nodes": 1344,
                          "fabric": {"kind": "rail-optimized"}}), 8


def gb200() -> tuple[Topology, int]:
    """149 GB200 NVL72 racks (10,728 GPUs), rail-optimized; blocks of 72 (a rack)."""
    return build_cluster({"preset": "gb200-nvl72", "nodes": 149,
                          "fabric": {"kind": "rail-optimized"}}), 72


CASES: dict[str, Callable[[], tuple[Topology, int]]] = {
    "dgx-h100-1344": dgx_h100, "gb200-10752": gb200}


def groups(topo: Topology, block: int) -> dict[str, list[list[str]]]:
    """Four data-parallel groups (local GPU k of every node, k < 4) and the first 16
    node-sized blocks: enough calls to time, few enough to run in a minute."""
    nodes = sorted({topo.node_of(g) for g in topo.gpus})
    dp = [[topo.gpus_on_node(node)[k] for node in nodes] for k in range(4)]
    gpus = list(topo.gpus)
    blocks = [gpus[i:i + block] for i in range(0, 16 * block, block)]
    return {"dp (1 GPU/node)": dp, f"blocks of {block}": blocks}


def run_case(name: str) -> float:
    """Time one case; return the checksum of the chosen plans' predicted times."""
    start = time.process_time()
    topo, block = CASES[name]()
    comm = Communicator(Simulation(), topo)
    print(f"{name}: {len(topo.gpus)} GPUs, cluster built in "
          f"{time.process_time() - start:.1f} s CPU")
    checksum = 0.0
    for kind, members in groups(topo, block).items():
        began = time.process_time()
        for group in members:
            for op in OPS:
                plan = comm.choose(op, group, SIZE, algorithm="auto", protocol="auto")
                checksum += comm.time_s(plan, SIZE)
        print(f"  {kind}: {len(members)} groups x {len(OPS)} ops, "
              f"{time.process_time() - began:.2f} s CPU")
    print(f"  checksum {checksum!r}")
    return checksum


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"of {', '.join(CASES)} (default: all)")
    parser.add_argument("--profile", default="", help="write cProfile stats to this file")
    args = parser.parse_args()
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    for name in args.cases or CASES:
        run_case(name)
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
