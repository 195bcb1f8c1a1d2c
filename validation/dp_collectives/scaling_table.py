"""Reduce-scatter of GPT-3 175B's data-parallel traffic on 1 to 1,344 DGX H100 nodes.

For each node count, on the ``dgx-h100`` preset with a rail-optimized fabric (plain, and
with SHARP switches), times one reduce-scatter (an all-gather takes the same time in every
plan here: the same routes mirrored) of

* a 40 MB bucket of gradients (20 M bf16 values), and
* the full gradient shard of one GPU under tp 4 · pp 8 (175e9 / 32 parameters × 2 B,
  10.9 GB), as the distributed optimizer reduce-scatters it when buckets are not
  overlapped,

over two groups: every GPU of the nodes (dp = 8·nodes), and one GPU per node (a rail:
dp = nodes with tp 8 inside each node).  Per algorithm the closed-form uncontended time
(``Communicator.estimate_s``), and what ``auto`` picks.  Prints a Markdown table.

    python validation/dp_collectives/scaling_table.py [--nodes 1,2,8,...]
"""

from __future__ import annotations

import argparse
import sys

from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster

GPT3_PARAMS = 175e9  # GPT-3 175B (Brown et al. 2020, Table 2.1)
MODEL_PARALLEL = 4 * 8  # tp 4 x pp 8, the 10,752-GPU run of NVIDIA's GPT-3 benchmark
SIZES = {"40 MB bucket": 40e6, "full shard (10.9 GB)": GPT3_PARAMS / MODEL_PARALLEL * 2}
NODES = (1, 2, 8, 32, 128, 512, 1344)
ALGORITHMS = ("ring", "pat", "nvls")


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds * 1e3:.3f}" if seconds < 1 else f"{seconds * 1e3:.0f}"


def _times(comm: Communicator, group: list[str], size: float) -> dict[str, float | None]:
    found: dict[str, float | None] = {}
    for algorithm in ALGORITHMS:
        try:
            found[algorithm] = comm.estimate_s("reduce_scatter", group, size,
                                               algorithm=algorithm)
        except ConfigError:
            found[algorithm] = None
    return found


def rows(nodes: int) -> list[str]:
    """Markdown rows for one node count: per group and size, ring / PAT / NVLS and auto."""
    out = []
    comms = {sharp: Communicator(Simulation(), build_cluster(
        {"preset": "dgx-h100", "nodes": nodes,
         "fabric": {"kind": "rail-optimized", "sharp": sharp}}), CommParams())
        for sharp in (False, True)}
    topo = comms[False].topology
    groups = {"all GPUs": list(topo.gpus),
              "one per node": [g for g in topo.gpus if topo.own_rail(g) == 0]}
    for group_name, group in groups.items():
        if group_name == "one per node" and nodes == 1:
            continue
        for size_name, size in SIZES.items():
            plain = _times(comms[False], group, size)
            nvls_sharp = _times(comms[True], group, size)["nvls"]
            auto = comms[False].choose("reduce_scatter", group, size)
            auto_sharp = comms[True].choose("reduce_scatter", group, size)
            out.append(
                f"| {nodes} | {len(group)} | {group_name} | {size_name} "
                f"| {_fmt(plain['ring'])} | {_fmt(plain['pat'])} "
                f"| {_fmt(plain['nvls'] if nodes == 1 else nvls_sharp)} "
                f"| {auto.algorithm}/{auto.protocol} "
                f"{_fmt(comms[False].time_s(auto, size))} "
                f"| {auto_sharp.algorithm}/{auto_sharp.protocol} "
                f"{_fmt(comms[True].time_s(auto_sharp, size))} |")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default=",".join(map(str, NODES)),
                        help="comma-separated node counts")
    args = parser.parse_args(argv)
    print("| nodes | GPUs | group | size | ring (ms) | PAT (ms) | NVLS (ms) "
          "| auto, plain fabric (ms) | auto, SHARP fabric (ms) |")
    print("|---:|---:|---|---|---:|---:|---:|---|---|")
    for nodes in (int(n) for n in args.nodes.split(",")):
        for row in rows(nodes):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
