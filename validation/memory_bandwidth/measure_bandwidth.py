"""Measure the HBM bandwidth eager PyTorch's element-wise kernels reach, from Kineto traces.

For every CPU op of a simple element-wise kind (``aten::add``/``mul``/``sub``/``div``, their
in-place forms, ``copy_``, ``fill_``) that launched exactly one kernel, the bytes it must
move follow from the op's recorded input shapes and dtypes (inputs read, output written;
an in-place op writes its first input; ``fill_`` only writes), and the kernel's duration
gives the rate.  Only tensors of 64 MB and more count (A100's L2 is 40 MB, so these stream
from HBM).  Rates above the datasheet bandwidth are left out and counted: their operands
were shared or cached, so the bytes are not what moved.  Each device's median is set
against its datasheet bandwidth (distsim's GPU presets) — the fraction
``MEMORY_EFFICIENCY`` in ``workloads/cost/compute/roofline.py`` stands for::

    python validation/memory_bandwidth/measure_bandwidth.py \
        ../shared/data/traces/HolisticTraceAnalysis/tests/data/*/*.json.gz \
        ../shared/data/traces/HolisticTraceAnalysis/tests/data/*/*/*.json.gz
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from typing import Any

from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.gpus import get_gpu

ELEMENT_BYTES = {"float": 4, "c10::Half": 2, "c10::BFloat16": 2, "double": 8, "long int": 8,
                 "int": 4, "bool": 1, "unsigned char": 1}
BINARY = {"aten::add", "aten::mul", "aten::sub", "aten::div"}
IN_PLACE = {"aten::add_", "aten::mul_", "aten::sub_", "aten::div_"}
STREAMING_BYTES = 64e6


def op_bytes(name: str, dims: list[Any], types: list[Any]) -> float | None:
    """Bytes an element-wise op reads and writes, from its inputs' shapes and dtypes."""
    tensors = [(math.prod(d), ELEMENT_BYTES[t]) for d, t in zip(dims, types, strict=False)
               if isinstance(d, list) and d and t in ELEMENT_BYTES]
    if not tensors:
        return None
    sizes = [n * b for n, b in tensors]
    if name == "aten::fill_":
        return sizes[0]
    if name == "aten::copy_":
        return sum(sizes[:2]) if len(sizes) >= 2 else None
    if name in BINARY:
        return sum(sizes) + max(sizes)
    if name in IN_PLACE:
        return sum(sizes) + sizes[0]
    return None


def _owners(events: list[dict[str, Any]]) -> tuple[dict[int, dict], dict[int, int]]:
    """Kernel correlation id -> the innermost CPU op whose span holds its launch, and per
    op (by id) how many kernels it launched."""
    ops: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op" and "dur" in e:
            ops[e["tid"]].append(e)
    starts = {}
    for tid, spans in ops.items():
        spans.sort(key=lambda e: e["ts"])
        starts[tid] = [e["ts"] for e in spans]
    owner, launched = {}, defaultdict(int)
    for e in events:
        if e.get("cat") != "cuda_runtime" or "LaunchKernel" not in e.get("name", ""):
            continue
        spans, i = ops.get(e["tid"], []), bisect.bisect_right(starts.get(e["tid"], []), e["ts"])
        inside = [o for o in spans[max(0, i - 300):i]
                  if o["ts"] + o["dur"] >= e["ts"] + e.get("dur", 0)]
        if inside:
            best = min(inside, key=lambda o: o["dur"])
            owner[e["args"]["correlation"]] = best
            launched[id(best)] += 1
    return owner, launched


def rates_gb_per_s(path: str) -> tuple[str, dict[str, list[float]]]:
    """The trace's device name and, per op kind, the rates of its streaming kernels."""
    with gzip.open(path) if path.endswith(".gz") else open(path, "rb") as handle:
        data = json.load(handle)
    if isinstance(data, list):  # a bare event list: no device properties
        data = {"traceEvents": data}
    devices = data.get("deviceProperties") or [{}]
    events = data["traceEvents"]
    owner, launched = _owners(events)
    rates: dict[str, list[float]] = defaultdict(list)
    for e in events:
        op = owner.get(e.get("args", {}).get("correlation")) if e.get("cat") == "kernel" else None
        if op is None or launched[id(op)] != 1 or e.get("dur", 0) <= 0:
            continue
        args = op.get("args", {})
        moved = op_bytes(op["name"], args.get("Input Dims") or [], args.get("Input type") or [])
        if moved is not None and moved >= STREAMING_BYTES:
            rates[op["name"]].append(moved / (e["dur"] * 1e-6) / 1e9)
    return str(devices[0].get("name", "")), rates


def main(paths: list[str]) -> int:
    for path in paths:
        try:
            device, rates = rates_gb_per_s(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            print(f"{path}: not a readable Kineto trace ({type(error).__name__}: {error})")
            continue
        if not rates:
            continue
        try:
            peak = get_gpu(device).memory_bandwidth_bytes_per_s / 1e9
        except ConfigError:
            print(f"{path}: {device!r} is not a known GPU; skipped")
            continue
        kept = [r for values in rates.values() for r in values if r <= peak]
        dropped = sum(len(v) for v in rates.values()) - len(kept)
        print(f"{path}: {device}, datasheet {peak:.0f} GB/s")
        for name, values in sorted(rates.items()):
            ok = [r for r in values if r <= peak]
            if ok:
                print(f"  {name:12s} {len(ok):4d} kernels  median {statistics.median(ok):6.0f}"
                      f" GB/s = {statistics.median(ok) / peak:.2f}")
        if kept:
            median = statistics.median(kept)
            print(f"  all          {len(kept):4d} kernels  median {median:6.0f} GB/s = "
                  f"{median / peak:.2f} of the datasheet ({dropped} above it left out)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
