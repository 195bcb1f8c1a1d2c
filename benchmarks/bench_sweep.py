"""Benchmark: sweep throughput (points per minute) with 1 and 2 local workers.

    python benchmarks/bench_sweep.py [--points 16]

Sweeps the quickstart example over global batch sizes 256 … 4096 (each point a full
simulation of about a second) into a fresh temporary folder per worker count.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from distsim_gpu.scenarios.study.sweep import run_sweep

QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "examples" / "quickstart.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=16)
    args = parser.parse_args()
    # Larger batches: each point simulates for about a second, so pool start-up does not
    # dominate the figure.
    batches = ",".join(str(256 * (i + 1)) for i in range(args.points))
    print(f"# {platform.machine()}, Python {platform.python_version()}")
    print("| workers | points | wall (s) | points per minute |")
    print("|---:|---:|---:|---:|")
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as folder:
            started = time.perf_counter()
            result = run_sweep(QUICKSTART, [f"training.global_batch={batches}"],
                               out_dir=Path(folder) / "sweep", workers=workers,
                               progress=False)
            wall = time.perf_counter() - started
        print(f"| {workers} | {len(result.points)} | {wall:.1f} | "
              f"{60 * len(result.points) / wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
