"""``distsim validate nccl|trace|runs``: predictions set against measurements.

``nccl`` simulates every size of a measured nccl-tests log; ``trace`` replays a job's
PyTorch profiler traces with the collectives re-simulated; ``runs`` simulates every row of
a table of measured training runs (:mod:`scenarios.fit.validate_runs`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli.options import (
    ALGORITHMS,
    PROTOCOLS,
    add_log_options,
    add_output_file_option,
    add_overrides_option,
    add_quiet_option,
    add_trace_cluster_options,
    add_workers_options,
    checked_comm,
    cluster_and_params,
    comm_params_on,
    overrides,
    split_cluster_overrides,
    workers_of,
)
from distsim_gpu.scenarios.fit.validate_nccl import format_validation, validate_nccl_log
from distsim_gpu.scenarios.fit.validate_operators import (
    format_operator_report,
    validate_operators,
)
from distsim_gpu.scenarios.fit.validate_runs import (
    check_folds,
    fit_fragment,
    format_runs_report,
    summarise,
    validate_runs,
)
from distsim_gpu.scenarios.fit.validate_trace import (
    format_report,
    trace_cluster,
    validate_traces,
    write_output,
)
from distsim_gpu.scenarios.scenario import load_scenario
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text

__all__ = ["add_parser", "handle_nccl", "handle_runs", "handle_trace"]


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
    _add_runs_parser(kinds)
    return parser


def _add_runs_parser(kinds: Any) -> None:
    parser = kinds.add_parser(
        "runs", help="a table of measured training runs: every row simulated",
        description="Simulate every row of a CSV of measured training runs, as a YAML map "
        "turns its columns into scenario keys, and print predicted vs measured with the "
        "error per row, mean and max |error| and Spearman rank correlation within groups; "
        "with --fit, fit the compute model's few physical knobs (cross-validated) and "
        "write them as a scenario fragment.  The map's format: "
        "scenarios/fit/validate_runs.py; an example: "
        "scenarios/examples/validation/vtrain-multi.yaml.")
    parser.add_argument("table", help="a CSV file, one measured run per row")
    parser.add_argument("--map", required=True, metavar="MAP.yaml", dest="map_path",
                        help="how the table's columns become scenario keys")
    parser.add_argument("--fit", action="store_true",
                        help="fit the map's knobs (default: GEMM and memory efficiency, "
                        "launch floor) and cross-validate")
    parser.add_argument("--folds", type=int, default=5, metavar="K",
                        help="folds of the cross-validation (default 5)")
    parser.add_argument("--every", type=int, default=1, metavar="N",
                        help="simulate every N-th row only (a quick look)")
    add_workers_options(parser, "worker processes (default: the CPU count; 1 runs in "
                        "this process)")
    add_output_file_option(parser, "with --fit: write the fitted knobs as a scenario "
                           "fragment", metavar="FRAGMENT.yaml", old=("--out",))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_overrides_option(parser, "a scenario key set on every row (repeatable), e.g. "
                         "compute.stack=megatron-deepspeed")
    add_quiet_option(parser)
    parser.set_defaults(handler=handle_runs)


def handle_runs(args: argparse.Namespace) -> int:
    """Simulate the table's rows; print the error table (or JSON); write ``--out``."""
    if args.output is not None and not args.fit:
        raise ConfigError("-o writes the fitted knobs: it needs --fit", key="-o")
    check_folds(args.folds, "--folds")  # before any row runs
    with progress.reporting("validate runs", enabled=not args.quiet) as reporter:
        if reporter is not None:
            reporter.phase("simulating the rows" + (" (and fitting)" if args.fit else ""))
        report = validate_runs(args.table, args.map_path, fit=args.fit, folds=args.folds,
                               workers=workers_of(args), every=args.every,
                               overrides=overrides(args.overrides))
    if args.output is not None and report.fit is not None:
        crossed = summarise(report.fit.cross_validated)["mean_abs_error_pct"]
        crossed_text = "n/a" if crossed is None else f"{crossed:.1f} %"
        header = (f"# Fitted by distsim validate runs {args.table} --map {args.map_path} "
                  f"({len(report.fit.fitted)} runs; {report.fit.folds}-fold cross-validated "
                  f"mean |error| {crossed_text})\n")
        atomic_write_text(args.output, header + yaml.safe_dump(fit_fragment(report.fit),
                                                               sort_keys=False))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        sys.stdout.write(format_runs_report(report))
        if args.output is not None:
            print(f"wrote {args.output}")
    return 0


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
    parser.add_argument("--operators", default=None, metavar="SCENARIO",
                        help="instead of replaying: predict each annotated operator scope "
                             "(attn(F), mlp(B), dispatch(W), ...) from SCENARIO's cost "
                             "model and report predicted vs measured per operator "
                             "(--set then sets SCENARIO's keys, e.g. training.recompute)")
    parser.set_defaults(handler=handle_trace)


def handle_nccl(args: argparse.Namespace) -> int:
    """Compare the log with the simulated cluster; print the table (or JSON)."""
    log = parse_nccl_log(args.log)
    topology, params = cluster_and_params(args)
    with progress.reporting("validate nccl", enabled=not args.quiet):
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
    if args.operators is not None:
        return _handle_operators(args, traces)
    cluster_overrides, comm_overrides = split_cluster_overrides(args.overrides)
    comm = checked_comm(comm_overrides, path=args.comm, algo=args.algo, proto=args.proto)
    chosen = trace_cluster(traces, cluster=args.cluster, nodes=args.nodes,
                           ranks_per_node=args.ranks_per_node, overrides=cluster_overrides)
    params = comm_params_on(comm, chosen.topology, cluster=args.cluster)
    with progress.reporting("validate trace", enabled=not args.quiet):
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


def _handle_operators(args: argparse.Namespace, traces: Any) -> int:
    """``validate trace --operators SCENARIO``: per-operator predicted vs measured
    (``--set`` overrides the scenario's keys)."""
    scenario = load_scenario(args.operators, overrides(args.overrides))
    data = validate_operators(traces, scenario)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(format_operator_report(data))
    return 0
