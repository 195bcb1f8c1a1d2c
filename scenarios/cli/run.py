"""``distsim run``: simulate one training iteration of a scenario file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from typing import Any

from distsim_gpu.scenarios.cli.options import (
    add_allow_oom_option,
    add_overrides_option,
    add_quiet_option,
    overrides,
)
from distsim_gpu.scenarios.disruptions import analyse, format_incidents
from distsim_gpu.scenarios.report import OutputResult, format_summary, write_output_dir
from distsim_gpu.scenarios.scenario import Scenario, load_scenario, run_scenario
from distsim_gpu.scenarios.study.search import iteration_bounds
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.notes import RunNote

__all__ = ["MAX_TRACED_GPUS", "add_parser", "handle"]

#: Above this many GPUs ``--out`` leaves the trace out unless ``--trace`` asks for it: a
#: traced run cannot fold its replicas (spans are per rank group), so the 1,024-GPU GPT-3
#: example goes from 7 s and 165 MB untraced to over 100 s and 4 GB traced.
MAX_TRACED_GPUS = 512


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``run`` on the ``distsim`` sub-command set (what ``add_subparsers``
    returned); its handler is ``args.handler``."""
    parser = commands.add_parser(
        "run", help="simulate one training iteration of a scenario file",
        description="Load a scenario (cluster, model, parallelism, training, compute, "
        "communication, simulation), simulate one training iteration and print its "
        "iteration time, throughput, MFU and per-GPU breakdown.")
    parser.add_argument("scenario", help="a scenario YAML file (see scenarios/examples/)")
    add_overrides_option(parser, "override a scenario field by dotted path before "
                         "validation, e.g. parallelism.tp=4, model.layers=48, "
                         "cluster.nic.bandwidth=\"200 Gbps\" (repeatable)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (metrics, per-GPU breakdown, resolved "
                        "config)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="write summary.json, resolved.yaml, trace.json (Chrome/Perfetto), "
                        "PNG plots and report.html (one self-contained page) into DIR, a "
                        "new or empty directory or a previous output")
    parser.add_argument("--no-trace", action="store_true",
                        help="with --out: do not trace (no trace.json or timeline.png; for "
                        "runs too large to trace in memory)")
    parser.add_argument("--trace", action="store_true",
                        help=f"with --out: trace a run of more than {MAX_TRACED_GPUS} GPUs "
                        "too (left out by default: a trace unfolds the run into every rank "
                        "group, minutes and gigabytes at a thousand GPUs)")
    add_allow_oom_option(parser)
    add_quiet_option(parser)
    parser.set_defaults(handler=handle)
    return parser


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def _estimate_s(scenario: Scenario) -> float | None:
    """The iteration time :mod:`workloads.cost.bounds` estimates, for the progress line only."""
    try:
        return iteration_bounds(scenario)[1]
    except Exception:  # (an estimate is optional: never fail a run over it)
        return None


def _trace_left_out(scenario: Scenario) -> RunNote | None:
    """The note of a run too large to trace by default (``--trace`` traces it anyway)."""
    gpus = len(scenario.topology.gpus)
    if gpus <= MAX_TRACED_GPUS:
        return None
    return RunNote("defaulted", f"trace.json and timeline.png left out: a trace unfolds the "
                   f"run into every rank group, and {gpus:,} GPUs is above "
                   f"{MAX_TRACED_GPUS} (--trace traces it anyway)", key="--trace")


def handle(args: argparse.Namespace) -> int:
    """Run the scenario, print its summary (or JSON) and write ``--out``."""
    assignments = overrides(args.overrides)
    for flag, given in (("--no-trace", args.no_trace), ("--trace", args.trace)):
        if given and args.out is None:
            raise ConfigError(f"{flag} applies to --out", key=flag,
                              hint="without --out nothing is traced anyway")
    if args.trace and args.no_trace:
        raise ConfigError("--trace and --no-trace ask for opposites", key="--trace",
                          hint="give one of them")
    trace = args.out is not None and not args.no_trace
    # SIGTERM (a job scheduler's kill) unwinds like Ctrl-C, so --out cleans up after itself.
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    output: OutputResult | None = None
    try:
        with progress.reporting("run", enabled=not args.quiet) as reporter:
            if reporter is not None:
                reporter.phase("reading the scenario and building its cluster")
            scenario = load_scenario(args.scenario, assignments)
            left_out = _trace_left_out(scenario) if trace and not args.trace else None
            trace = trace and left_out is None
            if reporter is not None:
                reporter.phase(f"simulating {len(scenario.topology.gpus):,} GPUs")
                reporter.expect(lambda: _estimate_s(scenario))
            report = run_scenario(scenario, trace=trace, allow_oom=args.allow_oom)
            if left_out is not None:  # in every output's notes, summary.json's too
                report = dataclasses.replace(report, notes=(*report.notes, left_out))
        # Faults, stragglers' cost, jobs, goodput (scenarios.disruptions); None without.
        incidents = analyse(scenario, report)
        if args.out is not None:
            sections = ({"incidents": (incidents.to_dict(), format_incidents(incidents))}
                        if incidents is not None else None)
            output = write_output_dir(report, args.out, sections=sections)
            for note in output.notes:
                print(f"distsim: note: {note}", file=sys.stderr)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if args.json:
        data = report.to_json_dict()
        if incidents is not None:
            data["incidents"] = incidents.to_dict()
        print(json.dumps(data, indent=2))
    else:
        sys.stdout.write(format_summary(report))
        if incidents is not None:
            sys.stdout.write(format_incidents(incidents))
        if output is not None:
            print(f"\nwrote {args.out}: {', '.join(output.files)}")
    return 0
