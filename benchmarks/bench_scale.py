"""Benchmark: one iteration of the largest runs people publish, wall time and memory.

Run from the repository root, one case per process (peak RSS is the process's):

    python benchmarks/bench_scale.py gpt3-10752            # 10,752 H100s, GPT-3 175B
    python benchmarks/bench_scale.py gpt3-10752-fp8
    python benchmarks/bench_scale.py llama405b-512         # tp 8 · pp 8 · cp 2 · dp 4
    python benchmarks/bench_scale.py llama405b-8192-gb200  # 128 GB200 racks of 64 used
    python benchmarks/bench_scale.py gpt3-10752 --profile /tmp/gpt3.prof

Each prints the host wall and CPU time of ``simulate_iteration`` (after the scenario is built),
the process's peak resident memory (``resource.getrusage``), the events and flows of the
run, which simulation ran (``IterationResult.folding``) and the iteration time.  The
GPT-3 case is the 10,752-GPU DGX H100 run of NVIDIA's MLPerf-style scale tables (1,344
nodes, tp 4 · pp 8 · dp 336, interleaved 12 chunks, the distributed optimizer); the
405B case is Llama 3.1 405B on 64 DGX H100 with context parallelism; the GB200 cases are
NVIDIA's GB200 NVL72 recipe for it at 512 and 8,192 GPUs.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import resource
import sys
import time

from distsim_gpu.scenarios.scenario import scenario_from_mapping
from distsim_gpu.workloads.iteration.simulator import simulate_iteration


def gpt3_10752(precision: str) -> dict:
    return {
        "name": f"gpt3-175b-10752-h100-{precision}",
        "cluster": {"preset": "dgx-h100", "nodes": 1344, "fabric": {"kind": "superpod"}},
        "model": {"preset": "gpt3-175b"},
        "parallelism": {"tp": 4, "pp": 8, "dp": 336, "sequence_parallel": True,
                        "schedule": "interleaved", "interleave": 12, "zero": 1},
        "training": {"micro_batch": 1, "global_batch": 2688, "precision": precision},
        "compute": {"gpu": "h100-sxm"},
    }


def llama405b_512() -> dict:
    return {
        "name": "llama3.1-405b-512-h100",
        "cluster": {"preset": "dgx-h100", "nodes": 64, "fabric": {"kind": "rail-optimized"}},
        "model": {"preset": "llama3.1-405b", "seq_len": 8192},
        "parallelism": {"tp": 8, "pp": 8, "cp": 2, "dp": 4, "sequence_parallel": True,
                        "schedule": "interleaved", "interleave": 8, "partition": "embedding",
                        "zero": 1},
        "training": {"micro_batch": 1, "global_batch": 256, "precision": "bf16"},
        "compute": {"gpu": "h100-sxm"},
    }


def llama405b_gb200(gpus: int) -> dict:
    """NVIDIA's GB200 recipe (tp 4 · pp 8 · cp 2 · vp 8) weak-scaled to ``gpus``: racks of
    which a job uses 64 GPUs (16 trays), one 400 Gb/s NIC per GPU, rail-optimized."""
    return {
        "name": f"llama3.1-405b-{gpus}-gb200",
        "cluster": {"preset": "gb200-nvl72", "nvlink_domain": 64, "nodes": gpus // 64,
                    "fabric": {"kind": "rail-optimized"}},
        "model": {"preset": "llama3.1-405b"},
        "parallelism": {"tp": 4, "pp": 8, "cp": 2, "dp": gpus // 64,
                        "sequence_parallel": True, "schedule": "interleaved", "interleave": 8,
                        "partition": "embedding", "zero": 1},
        "training": {"micro_batch": 1, "global_batch": gpus // 2, "precision": "bf16"},
        "compute": {"gpu": "gb200", "stack": "nemo"},
    }


CASES = {
    "gpt3-10752": lambda: gpt3_10752("bf16"),
    "gpt3-10752-fp8": lambda: gpt3_10752("fp8"),
    "gpt3-10752-rail": lambda: {**gpt3_10752("bf16"), "cluster": {
        "preset": "dgx-h100", "nodes": 1344, "fabric": {"kind": "rail-optimized"}}},
    # NeMo's recipe: TP communication pipelined with the GEMMs, the parameter gather with
    # the forward (docs/overlaps.md).
    "gpt3-10752-rail-nemo": lambda: {**CASES["gpt3-10752-rail"](), "compute": {
        "gpu": "h100-sxm", "stack": "nemo"}},
    "llama405b-512": llama405b_512,
    "llama405b-512-gb200": lambda: llama405b_gb200(512),
    "llama405b-8192-gb200": lambda: llama405b_gb200(8192),
}


def peak_rss_bytes() -> int:
    """The process's peak resident set (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=sorted(CASES))
    parser.add_argument("--profile", default="", help="write cProfile stats to this file")
    args = parser.parse_args()
    started = time.perf_counter()
    scenario = scenario_from_mapping(CASES[args.case](), source=args.case)
    built, cpu = time.perf_counter(), time.process_time()
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    result = simulate_iteration(scenario.spec)
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
    done, cpu = time.perf_counter(), time.process_time() - cpu
    print(f"# {platform.machine()}, Python {platform.python_version()}")
    print(f"case {args.case}: {len(scenario.topology.gpus)} GPUs, build "
          f"{built - started:.1f} s, iteration {done - built:.1f} s wall ({cpu:.1f} s CPU), "
          f"peak RSS {peak_rss_bytes() / 2**30:.2f} GiB")
    print(f"events {result.events:,}, flows {result.flows:,}, "
          f"iteration time {result.iteration_time_s!r} s")
    print(f"simulation: {result.folding}")


if __name__ == "__main__":
    main()
