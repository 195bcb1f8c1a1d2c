"""Measure eager PyTorch's host time per launched kernel from Kineto traces.

For every CPU thread that launches kernels (``cudaLaunchKernel`` / ``cuLaunchKernel``
events), print the launches and the quartiles of the interval between consecutive
launches.  While the host issues kernels back to back, that interval is what one kernel
costs the host (Python, the dispatcher, autograd, the launch call itself); the median is
robust to the long gaps where the host waits (synchronisation, data loading).  The
thread that runs the forward pass and the autograd engine's thread (the backward) are
reported apart.  Used for ``EAGER_HOST_FORWARD_S`` / ``EAGER_HOST_BACKWARD_S`` in
``workloads/cost/compute/stacks.py``::

    python validation/host_dispatch/measure_host.py \
        ../shared/data/traces/HolisticTraceAnalysis/tests/data/*/*.json.gz \
        ../shared/data/traces/HolisticTraceAnalysis/tests/data/*/*/*.json.gz
"""

from __future__ import annotations

import gzip
import itertools
import json
import sys
from collections import defaultdict


def launch_intervals_us(path: str) -> dict[int, list[float]]:
    """Per thread id: the sorted intervals (µs) between consecutive kernel launches."""
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as handle:
        data = json.load(handle)
    events = data["traceEvents"] if isinstance(data, dict) else data
    starts: dict[int, list[float]] = defaultdict(list)
    for event in events:
        if (event.get("ph") == "X" and event.get("cat") in ("cuda_runtime", "cuda_driver")
                and "LaunchKernel" in event.get("name", "")):
            starts[event["tid"]].append(float(event["ts"]))
    out = {}
    for tid, times in starts.items():
        times.sort()
        out[tid] = sorted(b - a for a, b in itertools.pairwise(times))
    return out


def main(paths: list[str]) -> None:
    for path in paths:
        for tid, gaps in launch_intervals_us(path).items():
            if len(gaps) < 100:  # too few launches for a steady state
                continue
            q = [gaps[int(f * len(gaps))] for f in (0.25, 0.5, 0.75)]
            name = "/".join(path.split("/")[-3:])
            print(f"{name:>60} tid {tid:>9}: {len(gaps) + 1:6d} launches, "
                  f"interval p25/p50/p75 {q[0]:6.1f} {q[1]:6.1f} {q[2]:6.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
