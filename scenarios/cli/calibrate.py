"""``distsim calibrate nccl|trace``: fit parameters to measurements.

``nccl`` fits link efficiencies and a latency scale to an nccl-tests log; ``trace`` fits
them to the collectives of a job's profiler traces (and, with ``--scenario``, the GEMM
efficiency to their compute time).  Both print the fit and can write it as YAML sections
for ``--comm`` or a scenario.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

import yaml
from distsim_gpu.collectives import CommParams
from distsim_gpu.measured.nccl_log import parse_nccl_log
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli.options import (
    add_log_options,
    add_trace_cluster_options,
    checked_comm,
    cluster_and_params,
    comm_params_on,
    split_cluster_overrides,
)
from distsim_gpu.scenarios.fit.calibrate_nccl import NcclCalibration, calibrate_nccl
from distsim_gpu.scenarios.fit.calibrate_trace import (
    calibrate_trace,
    fit_compute_efficiency,
    fit_to_json,
    fitted_sections,
    format_fit,
    measured_compute_s,
)
from distsim_gpu.scenarios.fit.nccl_log_setting import log_setting
from distsim_gpu.scenarios.fit.validate_trace import trace_cluster
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.units import parse_size

__all__ = ["add_parser", "handle_nccl", "handle_trace"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``calibrate`` and its kinds on the ``distsim`` sub-command set."""
    parser = commands.add_parser("calibrate", help="fit parameters to measurements")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    nccl = kinds.add_parser(
        "nccl", help="fit link efficiencies and latency to an nccl-tests log",
        description="Fit the cluster's link efficiencies and a latency scale to a measured "
        "nccl-tests log (least squares on relative time), print the error before and after "
        "and a cross-validation, and write the fitted values for --comm / scenarios.")
    add_log_options(nccl, "fit")
    nccl.add_argument("--min-bytes", default="1M",
                      help="fit and judge sizes of at least this (default 1M)")
    nccl.add_argument("-o", "--output", default=None, metavar="FILE",
                      help="write the fitted 'communication' section to FILE (YAML)")
    nccl.set_defaults(handler=handle_nccl)

    trace = kinds.add_parser(
        "trace", help="fit network (and compute) parameters to PyTorch profiler traces",
        description="Fit link efficiencies and a latency scale to the collectives of a "
                    "job's Kineto traces; with --scenario, also the GEMM efficiency that "
                    "matches the traces' compute time.")
    add_trace_cluster_options(trace)
    trace.add_argument("--scenario", default=None, metavar="FILE",
                       help="a scenario of the traced job: also fit compute.matmul_efficiency")
    trace.add_argument("-o", "--output", default=None, metavar="FILE",
                       help="write the fitted sections as YAML")
    trace.add_argument("--json", action="store_true", help="print one JSON object")
    trace.set_defaults(handler=handle_trace)
    return parser


# --------------------------------------------------------------------------- nccl


def handle_nccl(args: argparse.Namespace) -> int:
    """Fit to the log; print the fit (or JSON) and write ``-o``."""
    topology, params = cluster_and_params(args)
    setting = log_setting(parse_nccl_log(args.log), topology, op=args.op, run=args.run)
    log, op = setting.log, setting.op
    with progress.reporting("calibrate nccl", enabled=not args.quiet):
        result = calibrate_nccl(log, topology, op=op, base=params,
                                min_bytes=parse_size(args.min_bytes, key="--min-bytes"))
    result = replace(result, notes=setting.notes + result.notes)
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
            "bands": [band.to_dict() for band in result.bands],
            "notes": [note.to_dict() for note in result.notes],
            "overrides": document,
        }, indent=2))
        return 0
    _print_nccl_fit(args, result, params, op=op, num_gpus=len(topology.gpus))
    return 0


def _print_nccl_fit(args: argparse.Namespace, result: NcclCalibration, params: CommParams, *,
                    op: str, num_gpus: int) -> None:
    print(f"# {args.log}: {op} on {num_gpus} GPUs, fitted on sizes >= {args.min_bytes}")
    print(f"{'parameter':<28} {'default':>10} {'fitted':>10}")
    for kind, value in result.link_efficiency.items():
        print(f"{'link_efficiency.' + kind:<28} {params.efficiency_of(kind):>10.3f} "
              f"{value:>10.3f}")
    print(f"{'latency scale':<28} {1.0:>10.3f} {result.latency_scale:>10.3f}")
    print(f"median |error| before: {result.median_error_before_pct:.1f} %   after: "
          f"{result.median_error_after_pct:.1f} %   cross-validated (fit on half the "
          f"sizes, tested on the other): {result.cross_validation_error_pct:.1f} %")
    print(f"{'sizes':<20} {'count':>6} {'before':>9} {'after':>9}   (median |error|)")
    for band in result.bands:
        print(f"{band.label:<20} {band.sizes:>6} {band.median_error_before_pct:>7.1f} % "
              f"{band.median_error_after_pct:>7.1f} %")
    for note in result.notes:
        print(f"note: {note}")
    if args.output:
        print(f"wrote {args.output} (use with --comm {args.output}, or as a scenario's "
              "'communication' section)")


# --------------------------------------------------------------------------- trace


def handle_trace(args: argparse.Namespace) -> int:
    """Fit to the traces (and the scenario's compute); print the fit (or JSON), write
    ``-o``."""
    traces = load_traces(args.traces)
    cluster_overrides, comm_overrides = split_cluster_overrides(args.overrides)
    comm = checked_comm(comm_overrides, path=args.comm)
    chosen = trace_cluster(traces, cluster=args.cluster, nodes=args.nodes,
                           ranks_per_node=args.ranks_per_node, overrides=cluster_overrides)
    params = comm_params_on(comm, chosen.topology, cluster=args.cluster)
    with progress.reporting("calibrate trace", enabled=not args.quiet):
        network = calibrate_trace(traces, chosen.topology, base=params,
                                  ranks_per_node=args.ranks_per_node)
        compute = None
        if args.scenario:
            world = next((t.world_size for t in traces if t.world_size is not None), None)
            compute = fit_compute_efficiency(args.scenario, measured_compute_s(traces),
                                             world_size=world)
    if args.output:
        header = (f"# distsim calibrate trace {' '.join(args.traces)} --cluster "
                  f"{chosen.cluster} --nodes {chosen.topology.num_nodes}\n"
                  f"# {network.samples} collectives: median |error| "
                  f"{network.median_error_before_pct:.1f} % before, "
                  f"{network.median_error_after_pct:.1f} % after, cross-validated "
                  f"{network.cross_validation_error_pct:.1f} %\n")
        document = fitted_sections(network, compute)
        atomic_write_text(args.output, header + yaml.safe_dump(document, sort_keys=False))
    if args.json:
        print(json.dumps(fit_to_json(network, compute, cluster=chosen.description), indent=2))
        return 0
    sys.stdout.write(format_fit(network, compute, base=params, num_traces=len(traces),
                                cluster=chosen.description))
    if args.output:
        print(f"wrote {args.output} (use with --comm {args.output}, or as a scenario's "
              "sections)")
    return 0
