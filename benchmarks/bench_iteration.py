"""Benchmark: `distsim run` on the example scenarios, and a scaling series in GPUs.

Run from the repository root:

    python benchmarks/bench_iteration.py                 # examples + 64 … 8192 GPUs
    python benchmarks/bench_iteration.py --max-gpus 1024 # a shorter series
    python benchmarks/bench_iteration.py --skip-examples --min-gpus 1024 --max-gpus 16384

Prints host wall time and CPU time (``time.process_time``: on a shared machine the figure
to compare), simulated events and events per CPU second.

Prints Markdown tables: host wall time, simulated events and events per second.  The
scaling series keeps the work per pipeline fixed (GPT-3 175B, tp 8 · pp 8, 16
micro-batches per pipeline) and grows data parallelism, so GPUs × micro-batches grows
with the GPU count; wall time should grow no faster than that.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "examples"


def scaling_scenario(gpus: int) -> dict:
    dp = gpus // 64
    return {
        "name": f"gpt3-175b-{gpus}",
        "cluster": {"preset": "dgx-a100", "nodes": gpus // 8, "fabric": "rail-optimized"},
        "model": {"preset": "gpt3-175b"},
        "parallelism": {"tp": 8, "pp": 8, "dp": dp, "schedule": "1f1b", "zero": 1},
        "training": {"micro_batch": 1, "global_batch": 16 * dp, "recompute": "full"},
        "compute": {"gpu": "a100-80gb"},
    }


def timed(scenario) -> tuple[float, float, object]:
    """Wall and CPU seconds of one ``run_scenario``, and its report."""
    started, cpu = time.perf_counter(), time.process_time()
    report = run_scenario(scenario)
    return time.perf_counter() - started, time.process_time() - cpu, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gpus", type=int, default=8192)
    parser.add_argument("--min-gpus", type=int, default=64,
                        help="first point of the scaling series (a power of two ≥ 64)")
    parser.add_argument("--skip-examples", action="store_true")
    args = parser.parse_args()
    print(f"# {platform.machine()}, Python {platform.python_version()}")
    if not args.skip_examples:
        print("| example | GPUs | iteration (s) | MFU | wall (s) | events | events/s | flows |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for path in sorted(EXAMPLES.glob("*.yaml")):
            wall, _cpu, report = timed(load_scenario(path))
            print(f"| {path.name} | {report.num_gpus} | {report.iteration_time_s:.3f} | "
                  f"{100 * report.mfu:.1f} % | {wall:.1f} | {report.events:,} | "
                  f"{report.events / wall:,.0f} | {report.flows:,} |", flush=True)
        print()
    print("| GPUs | micro-batches/pipeline | iteration (s) | wall (s) | CPU (s) | events | "
          "events per CPU s | CPU per (GPU × micro-batch) (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    gpus = max(64, args.min_gpus)
    while gpus <= args.max_gpus:
        scenario = scenario_from_mapping(scaling_scenario(gpus), source="scaling")
        wall, cpu, report = timed(scenario)
        print(f"| {gpus} | 16 | {report.iteration_time_s:.3f} | {wall:.1f} | {cpu:.2f} | "
              f"{report.events:,} | {report.events / cpu:,.0f} | "
              f"{1000 * cpu / (gpus * 16):.3f} |", flush=True)
        gpus *= 2


if __name__ == "__main__":
    main()
