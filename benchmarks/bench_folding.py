"""Benchmark: symmetry folding of data-parallel replicas, folded against full.

Run from the repository root:

    python benchmarks/bench_folding.py                      # examples + 64 … 4096 GPUs
    python benchmarks/bench_folding.py --max-gpus 1024 --full-up-to 1024
    python benchmarks/bench_folding.py --straggler n5.gpu3=1.2 --skip-examples --max-gpus 0
    python benchmarks/bench_folding.py --gpt3-rail 336 --skip-examples --max-gpus 0

Each case runs twice in this process, folded (the default) and full
(``IterationSpec.fold_replicas=False``), and prints Markdown tables: host wall time,
events, flows, which simulation ran, and the largest relative difference between the two
runs over the iteration time and every GPU's breakdown (0 where folding is exact).  The
scaling series is bench_iteration.py's: GPT-3 175B, tp 8 · pp 8, 16 micro-batches per
pipeline, data parallelism growing with the GPUs; beyond ``--full-up-to`` GPUs only the
folded run is timed.  ``--straggler GPU=FACTOR`` adds a row: the 1024-GPU GPT-3 example
with that GPU slowed, whose replicas without a straggler still fold.  ``--gpt3-rail
NODES`` adds bench_scale.py's GPT-3 case on a rail-optimized fabric cut to that many DGX
H100 nodes (tp 4 · pp 8, dp = NODES / 4): pipeline stages whose boundaries fall inside a
leaf's nodes, where replicas fold into classes or not at all.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import replace
from pathlib import Path

from bench_iteration import scaling_scenario
from bench_scale import gpt3_10752
from distsim_gpu.scenarios.scenario import Scenario, load_scenario, scenario_from_mapping
from distsim_gpu.workloads.iteration.simulator import (
    IterationResult,
    simulate_iteration,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "examples"
FIELDS = ("compute_s", "host_s", "communication_s", "exposed_communication_s", "bubble_s",
          "idle_s")


def timed(scenario: Scenario, fold: bool) -> tuple[float, IterationResult]:
    # Memory is not what is timed here: an example that needs --allow-oom runs as it would
    # with it (DeepSeek-V3's activations do not fit its H800s as distsim counts them).
    spec = replace(scenario.spec, fold_replicas=fold, allow_oom=True)
    started = time.perf_counter()
    result = simulate_iteration(spec)
    return time.perf_counter() - started, result


def difference(a: IterationResult, b: IterationResult) -> float:
    """The largest relative difference of the iteration time and the GPUs' times."""
    pairs = [(a.iteration_time_s, b.iteration_time_s)]
    pairs += [(getattr(x, f), getattr(y, f)) for x, y in zip(a.per_gpu, b.per_gpu)
              for f in FIELDS]
    floor = 1e-12 * b.iteration_time_s
    return max((abs(u - v) / max(abs(v), floor) for u, v in pairs), default=0.0)


def row(name: str, gpus: int, scenario: Scenario, full: bool) -> str:
    wall, folded = timed(scenario, True)
    cells = f"| {name} | {gpus} | {folded.folding} | {wall:.2f} | {folded.events:,} | " \
            f"{folded.flows:,} |"
    if not full:
        return cells + " – | – | – | – |"
    wall_full, unfolded = timed(scenario, False)
    return cells + (f" {wall_full:.2f} | {unfolded.events:,} | {unfolded.flows:,} | "
                    f"{difference(folded, unfolded):.1e} |")


def gpt3_rail(nodes: int) -> Scenario:
    """bench_scale.py's GPT-3 175B case on ``nodes`` rail-optimized DGX H100s."""
    mapping = gpt3_10752("bf16")
    dp = nodes * 8 // 32  # tp 4 · pp 8
    mapping["cluster"] = {"preset": "dgx-h100", "nodes": nodes,
                          "fabric": {"kind": "rail-optimized"}}
    mapping["parallelism"]["dp"] = dp
    mapping["training"]["global_batch"] = 8 * dp
    return scenario_from_mapping(mapping, source=f"gpt3-rail-{nodes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gpus", type=int, default=4096)
    parser.add_argument("--full-up-to", type=int, default=2048,
                        help="run the full simulation too up to this many GPUs")
    parser.add_argument("--skip-examples", action="store_true")
    parser.add_argument("--straggler", default="",
                        help="GPU=FACTOR: the GPT-3 1024-GPU example with this straggler")
    parser.add_argument("--gpt3-rail", type=int, default=0, metavar="NODES",
                        help="GPT-3 175B, tp 4 · pp 8, on this many rail-optimized DGX H100s")
    args = parser.parse_args()
    print(f"# {platform.machine()}, Python {platform.python_version()}")
    print("| case | GPUs | simulation | folded wall (s) | events | flows | "
          "full wall (s) | events | flows | max rel. diff |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    if not args.skip_examples:
        for path in sorted(EXAMPLES.glob("*.yaml")):
            scenario = load_scenario(path)
            print(row(path.name, len(scenario.topology.gpus), scenario, True), flush=True)
    if args.straggler:
        gpu, factor = args.straggler.split("=")
        path = EXAMPLES / "gpt3-175b-1024-a100.yaml"
        scenario = load_scenario(path, overrides=[(f"stragglers.{gpu}", float(factor))])
        print(row(f"{path.name}, straggler {gpu} ×{factor}", 1024, scenario, True),
              flush=True)
    if args.gpt3_rail:
        print(row(f"gpt3-rail, {args.gpt3_rail} nodes", 8 * args.gpt3_rail,
                  gpt3_rail(args.gpt3_rail), True), flush=True)
    gpus = 64
    while gpus <= args.max_gpus:
        scenario = scenario_from_mapping(scaling_scenario(gpus), source="scaling")
        print(row("scaling series", gpus, scenario, gpus <= args.full_up_to), flush=True)
        gpus *= 2


if __name__ == "__main__":
    main()
