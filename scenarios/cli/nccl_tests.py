"""``distsim nccl-tests``: NVIDIA's nccl-tests (``*_perf``), simulated on a cluster."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from distsim_gpu.collectives.nccl_tests import (
    BENCH_OPS,
    DTYPE_BYTES,
    format_table,
    run_benchmark,
    size_series,
)
from distsim_gpu.collectives.params import CommParams
from distsim_gpu.scenarios.cli.options import (
    add_cluster_options,
    add_quiet_option,
    cluster_and_params,
)
from distsim_gpu.scenarios.run_notes import nvlink_efficiency_notes
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.units import parse_size
from distsim_gpu.topology.fabric_notes import fabric_notes, spans_nodes
from distsim_gpu.topology.model import Topology

__all__ = ["add_parser", "handle"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``nccl-tests`` on the ``distsim`` sub-command set; its handler is
    ``args.handler``."""
    parser = commands.add_parser(
        "nccl-tests", help="simulate NVIDIA nccl-tests (*_perf) on a cluster",
        description="Time one collective over every GPU of the cluster at a series of "
        "sizes and print nccl-tests' own table.")
    add_cluster_options(parser)
    parser.add_argument("--op", choices=tuple(BENCH_OPS), default="all_reduce")
    parser.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    parser.add_argument("-e", "--maxbytes", default="128M", help="largest size (default 128M)")
    parser.add_argument("-f", "--stepfactor", type=float, default=2.0,
                        help="multiply the size by this factor (default 2)")
    parser.add_argument("-d", "--datatype", choices=tuple(DTYPE_BYTES), default="float")
    add_quiet_option(parser)
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Run the benchmark's sizes and print nccl-tests' table (or JSON)."""
    min_bytes = parse_size(args.minbytes, key="-b")
    max_bytes = parse_size(args.maxbytes, key="-e")
    sizes = size_series(min_bytes, max_bytes, args.stepfactor)
    with progress.reporting("nccl-tests", enabled=not args.quiet) as reporter:
        if reporter is not None:
            reporter.phase("building the cluster")
        topology, params = cluster_and_params(args)
        if reporter is not None:
            reporter.phase(f"{args.op} on {len(topology.gpus):,} GPUs")
        rows = run_benchmark(topology, args.op, sizes, params=params, dtype=args.datatype)
    if args.json:
        print(json.dumps({
            "op": args.op,
            "num_ranks": len(topology.gpus),
            "cluster": topology.config,
            "comm": params.to_dict(),
            "rows": [r.to_dict() for r in rows],
            "avg_busbw_bytes_per_s": sum(r.busbw_bytes_per_s for r in rows) / len(rows),
            "notes": [note.to_dict() for note in _benchmark_notes(topology, params)],
        }, indent=2))
    else:
        title = [
            f"distsim nccl-tests (simulated): {args.op}_perf on {topology.name}",
            f"{len(topology.gpus)} GPUs on {topology.num_nodes} node(s); fidelity "
            f"{params.fidelity}; algorithm {params.algorithm}; protocol {params.protocol}",
            # the bounds as given, as nccl-tests prints them (-e 1G -f 8 ends at 512M)
            f"minBytes {int(min_bytes)} maxBytes {int(max_bytes)} step: "
            f"{args.stepfactor:g}(factor)",
            *(f"note: {note}" for note in _benchmark_notes(topology, params)),
        ]
        sys.stdout.write(format_table(rows, title_lines=title))
    return 0


def _benchmark_notes(topology: Topology, params: CommParams) -> list[RunNote]:
    """The fabric's notes, NVLink's efficiency where it is H100's on another generation,
    and on one GPU that the 0.00 us rows time no local copy."""
    notes = (fabric_notes(topology, nics_carry=spans_nodes(topology))
             + nvlink_efficiency_notes(params, topology))
    if len(topology.gpus) == 1:
        notes.append(RunNote("unmodelled", "one GPU: the collective moves no bytes between GPUs, "
                             "so its rows read 0; NCCL itself still copies an out-of-place "
                             "buffer locally (a few us), which is not timed"))
    return notes
