"""Benchmark: importing a large profiler trace — wall time and peak memory.

    python benchmarks/bench_trace_import.py [--steps 600000] [--gzip]

Writes a synthetic Kineto trace into a temporary folder — per step of the loop one
operator (``cpu_op`` with a sequence number and recorded shapes), one
``cudaLaunchKernel`` and one GEMM kernel, as a training trace has them — then reads it
with ``load_traces`` in a fresh process and reports the file size, the import's wall time
and the process's peak resident memory (``ru_maxrss``), so the figure is the importer's
and not the generator's.  The default (600 000 launches, 1.8 million events) is a
~370 MB file, the size of a few hundred steps of a real job.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

_READER = """
import resource, sys, time
from distsim_gpu.measured.traces import load_traces
start = time.perf_counter()
(trace,) = load_traces([sys.argv[1]])
wall = time.perf_counter() - start
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{wall:.1f} {peak_mib:.0f} {len(trace.gpu_events)} {len(trace.cpu_events)}")
"""


def write_trace(path: Path, launches: int, compressed: bool) -> None:
    """Stream the synthetic trace to ``path`` (the generator never holds it either)."""
    opener = gzip.open if compressed else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},\n'
                  ' "traceEvents": [\n')
        t = 0
        for i in range(launches):
            events = (
                {"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 50}", "pid": 1, "tid": 1,
                 "ts": t, "dur": 3, "args": {"External id": i, "Sequence number": i,
                                             "Fwd thread id": 1,
                                             "Input Dims": [[128, 1024], [1024]],
                                             "Input type": ["float", "float"]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": t + 1, "dur": 2, "args": {"correlation": i, "cbid": 211}},
                {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_tn", "pid": 0,
                 "tid": 7, "ts": t + 5, "dur": 20,
                 "args": {"correlation": i, "stream": 7, "device": 0, "grid": [8, 1, 1],
                          "block": [256, 1, 1]}},
            )
            out.write(",\n".join(json.dumps(e) for e in events) + ",\n")
            t += 25
        out.write(json.dumps({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                              "pid": 1, "tid": 1, "ts": 0, "dur": t}) + "\n]}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600_000,
                        help="kernel launches (three events each)")
    parser.add_argument("--gzip", action="store_true", help="write and read a .json.gz")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("trace.json.gz" if args.gzip else "trace.json")
        write_trace(path, args.steps, args.gzip)
        size_mib = path.stat().st_size / 2**20
        out = subprocess.run([sys.executable, "-c", _READER, str(path)], check=True,
                             capture_output=True, text=True).stdout.split()
    wall, peak, gpu, cpu = out
    print(f"# {platform.machine()}, Python {platform.python_version()}")
    print("| events | file (MiB) | wall (s) | peak RSS (MiB) | GPU events | CPU events |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {3 * args.steps + 1} | {size_mib:.0f} | {wall} | {peak} | {gpu} | {cpu} |")


if __name__ == "__main__":
    main()
