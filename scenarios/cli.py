"""The ``distsim`` command line.

Every sub-command reads its input, runs, and prints a table (or one JSON object with
``--json``).  Bad input of any kind ends with ``distsim: error: <where>: <what>`` on
stderr and exit status 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from collectives import FIDELITIES, CommParams, comm_params_from_mapping
from scenarios.nccl_log import parse_nccl_log
from scenarios.nccl_tests import BENCH_OPS, DTYPE_BYTES, format_table, run_benchmark, size_series
from scenarios.nccl_validate import format_validation, validate_nccl_log
from scenarios.overrides import parse_assignment, set_path, split_overrides
from simcore.errors import DistsimError
from simcore.units import parse_size
from topology import Topology, list_presets, load_cluster

__all__ = ["main"]


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", required=True, metavar="PRESET_OR_FILE",
                        help="a node preset (" + ", ".join(list_presets()) +
                        ") or a cluster YAML file")
    parser.add_argument("--nodes", type=int, default=None, metavar="N",
                        help="number of nodes (default: the preset's or file's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="overrides",
                        help="override a cluster field by dotted path, e.g. "
                        "nic.bandwidth=\"200 Gbps\"; comm.* sets communication parameters, "
                        "e.g. comm.link_efficiency.nvlink=0.9 (repeatable)")
    parser.add_argument("--algo", choices=("auto", "ring", "tree"), default=None,
                        help="collective algorithm (default auto: as NCCL's tuner picks)")
    parser.add_argument("--proto", choices=("auto", "ll", "ll128", "simple"), default=None,
                        help="NCCL protocol (default auto)")
    parser.add_argument("--fidelity", choices=FIDELITIES, default=None,
                        help="coflow: one flow per call; step: one flow per algorithm step")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _cluster_and_params(args: argparse.Namespace) -> tuple[Topology, CommParams]:
    assignments = [parse_assignment(text) for text in args.overrides]
    cluster_overrides, routed = split_overrides(assignments, ["comm"])
    comm: dict[str, Any] = {}
    for key, value in routed["comm"]:
        set_path(comm, key, value, source="--set comm")
    for key, value in (("algorithm", args.algo), ("protocol", args.proto),
                       ("fidelity", args.fidelity)):
        if value is not None:
            comm[key] = value
    params = comm_params_from_mapping(comm, source="--set", prefix="comm")
    topology = load_cluster(args.cluster, nodes=args.nodes, overrides=cluster_overrides)
    return topology, params


def _cmd_nccl_tests(args: argparse.Namespace) -> int:
    topology, params = _cluster_and_params(args)
    sizes = size_series(parse_size(args.minbytes, key="-b"), parse_size(args.maxbytes, key="-e"),
                        args.stepfactor)
    rows = run_benchmark(topology, args.op, sizes, params=params, dtype=args.datatype)
    if args.json:
        print(json.dumps({
            "op": args.op,
            "num_ranks": len(topology.gpus),
            "cluster": topology.config,
            "comm": params.to_dict(),
            "rows": [r.to_dict() for r in rows],
            "avg_busbw_bytes_per_s": sum(r.busbw_bytes_per_s for r in rows) / len(rows),
        }, indent=2))
    else:
        title = [
            f"distsim nccl-tests (simulated): {args.op}_perf on {topology.name}",
            f"{len(topology.gpus)} GPUs on {topology.num_nodes} node(s); fidelity "
            f"{params.fidelity}; algorithm {params.algorithm}; protocol {params.protocol}",
            f"minBytes {sizes[0]} maxBytes {sizes[-1]} step: {args.stepfactor:g}(factor)",
        ]
        sys.stdout.write(format_table(rows, title_lines=title))
    return 0


def _cmd_validate_nccl(args: argparse.Namespace) -> int:
    log = parse_nccl_log(args.log)
    topology, params = _cluster_and_params(args)
    report = validate_nccl_log(log, topology, op=args.op, params=params, run=args.run)
    if args.json:
        data = report.to_dict()
        data["cluster"] = topology.config
        data["comm"] = params.to_dict()
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(format_validation(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distsim",
        description="Discrete-event simulation of distributed DNN training on GPU clusters.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bench = commands.add_parser(
        "nccl-tests", help="simulate NVIDIA nccl-tests (*_perf) on a cluster",
        description="Time one collective over every GPU of the cluster at a series of "
        "sizes and print nccl-tests' own table.")
    _add_cluster_options(bench)
    bench.add_argument("--op", choices=tuple(BENCH_OPS), default="all_reduce")
    bench.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    bench.add_argument("-e", "--maxbytes", default="128M", help="largest size (default 128M)")
    bench.add_argument("-f", "--stepfactor", type=float, default=2.0,
                       help="multiply the size by this factor (default 2)")
    bench.add_argument("-d", "--datatype", choices=tuple(DTYPE_BYTES), default="float")
    bench.set_defaults(handler=_cmd_nccl_tests)

    validate = commands.add_parser("validate", help="compare predictions with measurements")
    kinds = validate.add_subparsers(dest="kind", required=True, metavar="KIND")
    nccl = kinds.add_parser(
        "nccl", help="a real nccl-tests log against the simulated cluster",
        description="Simulate every size of a measured nccl-tests log and print measured "
        "vs predicted time and bus bandwidth with the error per size.")
    nccl.add_argument("log", help="an nccl-tests output file")
    _add_cluster_options(nccl)
    nccl.add_argument("--op", choices=tuple(BENCH_OPS), default=None,
                      help="the operation (default: as the log says, else all_reduce)")
    nccl.add_argument("--run", type=int, default=None, metavar="K",
                      help="for a log holding several runs: compare run K (1-based)")
    nccl.set_defaults(handler=_cmd_validate_nccl)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``distsim`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except DistsimError as error:
        print(f"distsim: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("distsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
