"""``distsim sweep``: run a scenario over a grid of overrides (:mod:`scenarios.study.sweep`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from distsim_gpu.scenarios.cli.options import (
    add_allow_oom_option,
    add_overrides_option,
    add_quiet_option,
    add_workers_options,
    overrides,
    workers_of,
)
from distsim_gpu.scenarios.study.sweep import SUMMARY_METRICS, format_sweep, run_sweep

__all__ = ["add_parser", "handle"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``distsim sweep`` on an argparse sub-parsers object; returns the parser.

    Its handler (``args.handler(args)``) returns the exit status: 0 when the sweep ran to
    the end, failed points included (they are results, listed in results.csv).
    """
    parser = commands.add_parser(
        "sweep", help="run a scenario over a grid of overrides",
        description="Run a scenario at every point of a grid of --set style overrides "
        "(their product, or paired with --zip) and write results.csv, one summary.json per "
        "point, sweep.png and report.html into DIR.  Restarted with the same arguments, a "
        "sweep runs only the points not yet done.")
    parser.add_argument("scenario", help="a scenario YAML file")
    parser.add_argument("--grid", action="append", default=[], required=True,
                        metavar="KEY=V1,V2,…", dest="grids",
                        help="a dotted key and its values, comma-separated (commas inside "
                        "[…], {…} or quotes stay in their value) and read like --set "
                        "values, e.g. parallelism.tp=1,2,4, "
                        "cluster.nic.bandwidth=\"100 Gbps,200 Gbps\" or "
                        "\"model.moe.routing=uniform,{zipf: 1.2}\" (repeatable)")
    parser.add_argument("--zip", action="store_true", dest="zip_",
                        help="pair the grids' values element-wise (same lengths; a grid "
                        "may repeat a value, a whole point may not) instead of running "
                        "every combination")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the sweep's directory: new, empty, or this sweep's to resume")
    add_workers_options(parser, "local worker processes (default: the CPU count; 1 runs in "
                        "this process)")
    add_overrides_option(parser, "a scenario key set at every point (repeatable), e.g. "
                         "training.global_batch=1024")
    add_allow_oom_option(parser)
    parser.add_argument("--metric", default="iteration_time_s", metavar="NAME",
                        help="the metric sweep.png plots (default iteration_time_s; one of "
                        + ", ".join(SUMMARY_METRICS) + ")")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (the counts, every point's overrides, "
                        "status, notes and headline metrics) instead of the summary")
    add_quiet_option(parser)
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Run the sweep (resuming one in ``--out``) and print what ran and what failed."""
    fixed = overrides(args.overrides)
    if args.allow_oom:
        fixed.append(("simulation.allow_oom", True))
    result = run_sweep(args.scenario, args.grids, zip_=args.zip_, out_dir=args.out,
                       workers=workers_of(args), overrides=fixed, metric=args.metric,
                       progress=not args.quiet)
    for note in result.notes:
        print(f"distsim: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    sys.stdout.write(format_sweep(result))
    print(f"wrote {args.out}: {', '.join(result.files)}")
    return 0
