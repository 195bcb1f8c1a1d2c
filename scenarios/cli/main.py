"""The ``distsim`` command line.

Every sub-command reads its input, runs, and prints a table (or one JSON object with
``--json``).  Bad input of any kind ends with ``distsim: error: <where>: <what>`` on
stderr and exit status 2 — never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import yaml
from distsim_gpu.collectives import FIDELITIES, CommParams, comm_params_from_mapping
from distsim_gpu.collectives.nccl_tests import (
    BENCH_OPS,
    DTYPE_BYTES,
    format_table,
    run_benchmark,
    size_series,
)
from distsim_gpu.measured.kineto import load_traces
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.measured.summary import format_summary_table, summarise, to_json
from distsim_gpu.scenarios.fit.calibrate_nccl import calibrate_nccl
from distsim_gpu.scenarios.fit.calibrate_trace import add_parser as add_calibrate_trace_parser
from distsim_gpu.scenarios.fit.validate_nccl import format_validation, select_run, validate_nccl_log
from distsim_gpu.scenarios.fit.validate_trace import add_parser as add_validate_trace_parser
from distsim_gpu.scenarios.report import format_summary, write_output_dir
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario
from distsim_gpu.scenarios.study import compare, search, sweep
from distsim_gpu.simcore.config import parse_assignment, set_path, split_overrides
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.units import parse_size
from distsim_gpu.simcore.yamlfile import read_yaml
from distsim_gpu.topology import Topology, list_presets, load_cluster
from distsim_gpu.workloads.measured_costs import add_parser as add_trace_costs_parser

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
    parser.add_argument("--comm", default=None, metavar="FILE",
                        help="communication parameters from a YAML file: its "
                        "'communication' section, as 'distsim calibrate nccl -o' writes it")
    parser.add_argument("--algo", choices=("auto", "ring", "tree"), default=None,
                        help="collective algorithm (default auto: as NCCL's tuner picks)")
    parser.add_argument("--proto", choices=("auto", "ll", "ll128", "simple"), default=None,
                        help="NCCL protocol (default auto)")
    parser.add_argument("--fidelity", choices=FIDELITIES, default=None,
                        help="coflow: one flow per call; step: one flow per algorithm step")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _add_log_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """The arguments of a command that reads an nccl-tests log against a cluster."""
    parser.add_argument("log", help="an nccl-tests output file")
    _add_cluster_options(parser)
    parser.add_argument("--op", choices=tuple(BENCH_OPS), default=None,
                        help="the operation (default: as the log says, else all_reduce)")
    parser.add_argument("--run", type=int, default=None, metavar="K",
                        help=f"for a log holding several runs: {verb} run K (1-based)")


def _comm_file(path: str) -> dict[str, Any]:
    """The ``communication`` section of a YAML file (a scenario or calibration output)."""
    data, _lines = read_yaml(path, "communication parameters")
    section = data.get("communication") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ConfigError("no 'communication' mapping in this file", source=path,
                          hint="write it with 'distsim calibrate nccl … -o FILE'")
    return dict(section)


def _cluster_and_params(args: argparse.Namespace) -> tuple[Topology, CommParams]:
    assignments = [parse_assignment(text) for text in args.overrides]
    cluster_overrides, routed = split_overrides(assignments, ["comm"])
    comm: dict[str, Any] = _comm_file(args.comm) if args.comm else {}
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


def _cmd_trace_summary(args: argparse.Namespace) -> int:
    traces = load_traces(args.traces)
    summaries = summarise(traces)
    if args.json:
        print(json.dumps(to_json(traces, summaries), indent=2))
    else:
        sys.stdout.write(format_summary_table(traces, summaries))
    return 0


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _cmd_run(args: argparse.Namespace) -> int:
    overrides = [parse_assignment(text) for text in args.overrides]
    if args.no_trace and args.out is None:
        raise ConfigError("--no-trace applies to --out", key="--no-trace",
                          hint="without --out nothing is traced anyway")
    scenario = load_scenario(args.scenario, overrides)
    trace = args.out is not None and not args.no_trace
    # SIGTERM (a job scheduler's kill) unwinds like Ctrl-C, so --out cleans up after itself.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    try:
        report = run_scenario(scenario, trace=trace, allow_oom=args.allow_oom)
        output = None
        if args.out is not None:
            output = write_output_dir(report, args.out)
            for note in output.notes:
                print(f"distsim: note: {note}", file=sys.stderr)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(report.to_json_dict(), indent=2))
    else:
        sys.stdout.write(format_summary(report))
        if output is not None:
            print(f"\nwrote {args.out}: {', '.join(output.files)}")
    return 0


def _cmd_calibrate_nccl(args: argparse.Namespace) -> int:
    topology, params = _cluster_and_params(args)
    log = select_run(parse_nccl_log(args.log), len(topology.gpus), args.run)
    op = args.op or log.op or "all_reduce"
    result = calibrate_nccl(log, topology, op=op, base=params,
                            min_bytes=parse_size(args.min_bytes, key="--min-bytes"))
    document = {"communication": result.overrides()}
    if args.output:
        header = (f"# distsim calibrate nccl {args.log} --cluster {args.cluster}"
                  f"{f' --nodes {args.nodes}' if args.nodes else ''}\n"
                  f"# median |error| (sizes >= {args.min_bytes}): "
                  f"{result.median_error_before_pct:.1f} % before, "
                  f"{result.median_error_after_pct:.1f} % after; cross-validated "
                  f"{result.cross_validation_error_pct:.1f} %\n")
        atomic_write_text(args.output, header + yaml.safe_dump(document, sort_keys=False))
    if args.json:
        print(json.dumps({
            "link_efficiency": result.link_efficiency,
            "latency_scale": result.latency_scale,
            "median_error_before_pct": result.median_error_before_pct,
            "median_error_after_pct": result.median_error_after_pct,
            "cross_validation_error_pct": result.cross_validation_error_pct,
            "evaluations": result.evaluations,
            "overrides": document,
        }, indent=2))
        return 0
    print(f"# {args.log}: {op} on {len(topology.gpus)} GPUs, fitted on sizes >= "
          f"{args.min_bytes}")
    print(f"{'parameter':<28} {'default':>10} {'fitted':>10}")
    for kind, value in result.link_efficiency.items():
        print(f"{'link_efficiency.' + kind:<28} {params.efficiency_of(kind):>10.3f} "
              f"{value:>10.3f}")
    print(f"{'latency scale':<28} {1.0:>10.3f} {result.latency_scale:>10.3f}")
    print(f"median |error| before: {result.median_error_before_pct:.1f} %   after: "
          f"{result.median_error_after_pct:.1f} %   cross-validated (fit on half the "
          f"sizes, tested on the other): {result.cross_validation_error_pct:.1f} %")
    if args.output:
        print(f"wrote {args.output} (use with --comm {args.output}, or as a scenario's "
              "'communication' section)")
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

    run = commands.add_parser(
        "run", help="simulate one training iteration of a scenario file",
        description="Load a scenario (cluster, model, parallelism, training, compute, "
        "communication, simulation), simulate one training iteration and print its "
        "iteration time, throughput, MFU and per-GPU breakdown.")
    run.add_argument("scenario", help="a scenario YAML file (see scenarios/examples/)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     dest="overrides",
                     help="override a scenario field by dotted path before validation, e.g. "
                     "parallelism.tp=4, model.layers=48, cluster.nic.bandwidth=\"200 Gbps\" "
                     "(repeatable)")
    run.add_argument("--json", action="store_true",
                     help="print one JSON object (metrics, per-GPU breakdown, resolved config)")
    run.add_argument("--out", metavar="DIR", default=None,
                     help="write summary.json, resolved.yaml, trace.json (Chrome/Perfetto) and "
                     "PNG plots into DIR, a new or empty directory or a previous output")
    run.add_argument("--no-trace", action="store_true",
                     help="with --out: do not trace (no trace.json or timeline.png; for runs "
                     "too large to trace in memory)")
    run.add_argument("--allow-oom", action="store_true",
                     help="simulate even if a GPU's memory would not hold the configuration")
    run.set_defaults(handler=_cmd_run)

    validate = commands.add_parser("validate", help="compare predictions with measurements")
    kinds = validate.add_subparsers(dest="kind", required=True, metavar="KIND")
    nccl = kinds.add_parser(
        "nccl", help="a real nccl-tests log against the simulated cluster",
        description="Simulate every size of a measured nccl-tests log and print measured "
        "vs predicted time and bus bandwidth with the error per size.")
    _add_log_options(nccl, "compare")
    nccl.set_defaults(handler=_cmd_validate_nccl)
    add_validate_trace_parser(kinds)

    trace = commands.add_parser("trace", help="read measured PyTorch profiler traces")
    trace_kinds = trace.add_subparsers(dest="trace_command", required=True, metavar="COMMAND")
    summary = trace_kinds.add_parser(
        "summary", help="per-rank, per-step breakdown of PyTorch profiler (Kineto) traces",
        description="Read Kineto Chrome-trace JSON (one per rank) and print, per rank and "
        "ProfilerStep, the step time, GPU busy time per class (compute, NCCL communication, "
        "memcpy), GPU idle time, compute/communication overlap and NCCL kernels per "
        "collective.")
    summary.add_argument("traces", nargs="+", metavar="TRACES",
                         help=".json / .json.gz files, .tar.gz archives of them, or "
                         "directories holding them")
    summary.add_argument("--json", action="store_true", help="print one JSON object")
    summary.set_defaults(handler=_cmd_trace_summary)
    add_trace_costs_parser(trace_kinds)
    sweep.add_parser(commands)
    search.add_parser(commands)
    compare.add_parser(commands)

    calibrate = commands.add_parser("calibrate", help="fit parameters to measurements")
    calibrate_kinds = calibrate.add_subparsers(dest="kind", required=True, metavar="KIND")
    fit = calibrate_kinds.add_parser(
        "nccl", help="fit link efficiencies and latency to an nccl-tests log",
        description="Fit the cluster's link efficiencies and a latency scale to a measured "
        "nccl-tests log (least squares on relative time), print the error before and after "
        "and a cross-validation, and write the fitted values for --comm / scenarios.")
    _add_log_options(fit, "fit")
    fit.add_argument("--min-bytes", default="1M",
                     help="fit and judge sizes of at least this (default 1M)")
    fit.add_argument("-o", "--output", default=None, metavar="FILE",
                     help="write the fitted 'communication' section to FILE (YAML)")
    fit.set_defaults(handler=_cmd_calibrate_nccl)
    add_calibrate_trace_parser(calibrate_kinds)
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
    except BrokenPipeError:
        # The reader went away (``distsim … | head``): stop quietly, as Unix tools do, and
        # keep Python's exit-time flush from failing on the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
