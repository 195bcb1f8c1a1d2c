"""``distsim validate nccl|trace``: predictions set against measurements.

``nccl`` simulates every size of a measured nccl-tests log; ``trace`` replays a job's
PyTorch profiler traces with the collectives re-simulated.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli.options import (
    ALGORITHMS,
    PROTOCOLS,
    add_log_options,
    add_trace_cluster_options,
    cluster_and_params,
    comm_params,
    split_cluster_overrides,
)
from distsim_gpu.scenarios.fit.validate_nccl import format_validation, validate_nccl_log
from distsim_gpu.scenarios.fit.validate_trace import (
    format_report,
    trace_cluster,
    validate_traces,
    write_output,
)

__all__ = ["add_parser", "handle_nccl", "handle_trace"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``validate`` and its kinds on the ``distsim`` sub-command set."""
    parser = commands.add_parser("validate", help="compare predictions with measurements")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    nccl = kinds.add_parser(
        "nccl", help="a real nccl-tests log against the simulated cluster",
        description="Simulate every size of a measured nccl-tests log and print measured "
        "vs predicted time and bus bandwidth with the error per size.")
    add_log_options(nccl, "compare")
    nccl.set_defaults(handler=handle_nccl)
    _add_trace_parser(kinds)
    return parser


def _add_trace_parser(kinds: Any) -> None:
    parser = kinds.add_parser(
        "trace", help="replay PyTorch profiler traces: predicted vs measured",
        description="Replay a job's Kineto traces (one per rank) with compute as measured "
                    "and collectives re-simulated on a cluster, and report predicted vs "
                    "measured iteration, per-rank and per-collective times.")
    add_trace_cluster_options(parser)
    parser.add_argument("--algo", choices=ALGORITHMS, default=None,
                        help="collective algorithm (default auto)")
    parser.add_argument("--proto", choices=PROTOCOLS, default=None,
                        help="NCCL protocol (default auto)")
    parser.add_argument("--mode", choices=("simulated", "measured"), default="simulated",
                        help="simulated: collectives on the network model (default); "
                             "measured: measured transfers (checks the replay itself)")
    parser.add_argument("--step", type=int, action="append", default=[], metavar="N",
                        help="replay profiler step N only (repeatable; default: every step "
                             "all traces hold)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="write report.json, summary.txt and trace.json (Perfetto: "
                             "measured and replayed side by side)")
    parser.set_defaults(handler=handle_trace)


def handle_nccl(args: argparse.Namespace) -> int:
    """Compare the log with the simulated cluster; print the table (or JSON)."""
    log = parse_nccl_log(args.log)
    topology, params = cluster_and_params(args)
    report = validate_nccl_log(log, topology, op=args.op, params=params, run=args.run)
    if args.json:
        data = report.to_dict()
        data["cluster"] = topology.config
        data["comm"] = params.to_dict()
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(format_validation(report))
    return 0


def handle_trace(args: argparse.Namespace) -> int:
    """Replay the traces; print the report (or JSON) and write ``--out``."""
    traces = load_traces(args.traces)
    cluster_overrides, comm_overrides = split_cluster_overrides(args.overrides)
    params = comm_params(comm_overrides, path=args.comm, algo=args.algo, proto=args.proto)
    chosen = trace_cluster(traces, cluster=args.cluster, nodes=args.nodes,
                           ranks_per_node=args.ranks_per_node, overrides=cluster_overrides)
    data, result = validate_traces(traces, chosen.topology, params,
                                   cluster=chosen.description, mode=args.mode,
                                   steps=args.step, ranks_per_node=args.ranks_per_node)
    if args.out is not None:
        write_output(args.out, data, result)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(format_report(data))
        if args.out is not None:
            print(f"wrote {args.out}/report.json, summary.txt, trace.json")
    return 0
