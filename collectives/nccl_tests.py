"""The nccl-tests twin: NVIDIA's ``*_perf`` benchmarks, simulated.

nccl-tests times one collective at a series of sizes and reports, per size, the time, the
*algorithm bandwidth* ``algbw = S / t`` and the *bus bandwidth* ``busbw = algbw · F``, where
the factor ``F`` makes the figure comparable with the hardware's link speed whatever the
rank count (nccl-tests ``doc/PERFORMANCE.md``):

=====================================  ==============
all_reduce                             2(n-1)/n
all_gather, reduce_scatter, alltoall   (n-1)/n
broadcast, reduce, sendrecv            1
=====================================  ==============

Sizes follow the tool's conventions: ``-b`` minimum, ``-e`` maximum, ``-f`` multiplicative
factor; a size is rounded down to a whole number of elements (and, for the gathered,
scattered and all-to-all buffers, of ``n`` elements) exactly as nccl-tests does.  All
ranks run one call per size; the simulation runs the sizes one after another.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from distsim_gpu.collectives.communicator import Communicator
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology

__all__ = [
    "BENCH_OPS",
    "DTYPE_BYTES",
    "BenchRow",
    "bus_factor",
    "format_table",
    "run_benchmark",
    "size_series",
]

# nccl-tests op names (without _perf) -> distsim collective names.
BENCH_OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
    "sendrecv": "sendrecv",
}

DTYPE_BYTES = {"int8": 1, "uint8": 1, "half": 2, "float16": 2, "bfloat16": 2, "float": 4,
               "float32": 4, "int32": 4, "uint32": 4, "double": 8, "float64": 8, "int64": 8,
               "uint64": 8}

_PER_RANK_SPLIT = ("all_gather", "reduce_scatter", "alltoall")


def bus_factor(op: str, num_ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor of ``op`` on ``num_ranks`` ranks."""
    check_choice(op, BENCH_OPS, key="op", what="nccl-tests operation")
    n = num_ranks
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in _PER_RANK_SPLIT:
        return (n - 1) / n
    return 1.0  # broadcast, reduce, sendrecv: every byte crosses once


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One size of a simulated nccl-tests run (SI units)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    algorithm: str
    protocol: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Sizes one benchmark may time: -b 1 -e 1T -f 1.01 is about 2,800; each is a simulation.
MAX_SIZES = 4096


def size_series(min_bytes: float, max_bytes: float, factor: float) -> list[int]:
    """Sizes from ``min_bytes`` to ``max_bytes`` multiplying by ``factor`` (nccl-tests -f)."""
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ConfigError(f"need 0 < min ({min_bytes:g} B) <= max ({max_bytes:g} B)",
                          key="-b/-e")
    if not math.isfinite(factor) or (factor <= 1 and min_bytes != max_bytes):
        raise ConfigError(f"the step factor must be a finite number > 1, got {factor:g}",
                          key="-f", hint="e.g. -f 2 (nccl-tests' default)")
    if min_bytes != max_bytes:
        count = math.floor(math.log(max_bytes / min_bytes) / math.log(factor) + 1e-9) + 1
        if count > MAX_SIZES:
            raise ConfigError(f"-b {min_bytes:g} to -e {max_bytes:g} by -f {factor:.10g} is "
                              f"{count:,} sizes, more than {MAX_SIZES:,}", key="-f",
                              hint="use a larger step factor (-f 2 doubles)")
    sizes = []
    size = float(min_bytes)
    while size <= max_bytes * (1 + 1e-12):
        sizes.append(int(size))
        if factor <= 1:
            break
        size *= factor
    return sizes


def _aligned(size_bytes: int, op: str, num_ranks: int, dtype_bytes: int) -> tuple[int, int]:
    """(size, count) as nccl-tests rounds and prints them: whole elements, whole per-rank
    shares, and the count a rank's share where the collective splits the buffer by rank
    (all-gather, reduce-scatter, all-to-all print their per-rank count)."""
    count = size_bytes // dtype_bytes
    if op in _PER_RANK_SPLIT:
        share = count // num_ranks
        return share * num_ranks * dtype_bytes, share
    return count * dtype_bytes, count


def run_benchmark(
    topology: Topology,
    op: str,
    sizes: Sequence[int],
    *,
    params: CommParams | None = None,
    dtype: str = "float",
    seed: int = 0,
    gpus: Sequence[str] | None = None,
) -> list[BenchRow]:
    """Simulate ``op`` over all GPUs of ``topology`` (or ``gpus``) at each size: each
    distinct size once (a measured log repeats its sizes run after run; a row per size
    requested, in order)."""
    check_choice(op, BENCH_OPS, key="op", what="nccl-tests operation")
    check_choice(dtype, DTYPE_BYTES, key="dtype", what="data type")
    group = list(gpus) if gpus is not None else list(topology.gpus)
    n = len(group)
    sim = Simulation(seed)
    comm = Communicator(sim, topology, params)
    dtype_bytes = DTYPE_BYTES[dtype]
    redop = "sum" if op in ("all_reduce", "reduce_scatter", "reduce") else "none"
    root = 0 if op in ("broadcast", "reduce") else -1
    by_size: dict[int, BenchRow] = {}
    distinct = list(dict.fromkeys(int(requested) for requested in sizes))
    reporter = progress.current()  # (a terminal's progress line, if the caller opened one)
    for done, requested in enumerate(distinct):
        if reporter is not None:
            reporter.stage(done, len(distinct), "sizes")
        size, count = _aligned(requested, op, n, dtype_bytes)
        process = comm.collective(BENCH_OPS[op], group, size)
        sim.run(until=process)
        record = process.value
        time_s = record.duration_s
        algbw = size / time_s if time_s > 0 else 0.0
        by_size[requested] = BenchRow(size, count, dtype, redop, root, time_s, algbw,
                                      algbw * bus_factor(op, n), record.algorithm,
                                      record.protocol)
    return [by_size[int(requested)] for requested in sizes]


def format_table(rows: Sequence[BenchRow], *, title_lines: Sequence[str] = ()) -> str:
    """The rows in nccl-tests' own layout (times in µs, bandwidths in GB/s).

    In-place and out-of-place are the same call in a simulation, so both column groups
    carry the same figures; ``#wrong`` is ``N/A`` as nccl-tests prints without checking.
    """
    lines = [f"# {line}" if line else "#" for line in title_lines]
    lines.append("#")
    lines.append(f"#{'':>54}out-of-place{'':>23}in-place")
    lines.append(f"#{'size':>11} {'count':>13} {'type':>9} {'redop':>7} {'root':>7} "
                 f"{'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6} "
                 f"{'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}")
    lines.append(f"#{'(B)':>11} {'(elements)':>13} {'':>9} {'':>7} {'':>7} "
                 f"{'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6} "
                 f"{'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}")
    for r in rows:
        cells = (f"{_time_us(r.time_s):>8} {r.algbw_bytes_per_s / 1e9:7.2f} "
                 f"{r.busbw_bytes_per_s / 1e9:7.2f} {'N/A':>6}")
        lines.append(f" {r.size_bytes:>11} {r.count:>13} {r.dtype:>9} {r.redop:>7} "
                     f"{r.root:>7} {cells} {cells}")
    lines.append("# Out of bounds values : 0 OK")
    average = sum(r.busbw_bytes_per_s for r in rows) / len(rows) if rows else 0.0
    lines.append(f"# Avg bus bandwidth    : {average / 1e9:.4g} ")
    lines.append("#")
    return "\n".join(lines) + "\n"


def _time_us(time_s: float) -> str:
    """Microseconds the way nccl-tests prints them: 4 significant digits, 2 decimals max."""
    us = time_s * 1e6
    if us >= 10000:
        return f"{us:.0f}"
    if us >= 1000:
        return f"{us:.1f}"
    return f"{us:.2f}"
