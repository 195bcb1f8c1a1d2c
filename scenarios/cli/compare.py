"""``distsim compare``: run scenarios side by side (:mod:`scenarios.study.compare`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from distsim_gpu.scenarios.cli.options import (
    add_allow_oom_option,
    add_overrides_option,
    add_quiet_option,
    overrides,
)
from distsim_gpu.scenarios.study.compare import (
    compare_scenarios,
    format_comparison,
    write_comparison,
)
from distsim_gpu.simcore import progress

__all__ = ["add_parser", "handle"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``compare`` on the ``distsim`` sub-command set ``commands`` (what
    ``add_subparsers`` returned); its handler is ``args.handler``."""
    parser = commands.add_parser(
        "compare", help="run scenarios side by side: what changed and why",
        description="Run two or more scenarios and print their metrics, per-stage time "
        "breakdown and critical path side by side, with the delta of each against the "
        "first, and each scenario's busiest links with the traffic that loads them.")
    parser.add_argument("scenarios", nargs="+", metavar="SCENARIO",
                        help="scenario YAML files (at least two; the first is the baseline)")
    add_overrides_option(parser, "override a field of every scenario by dotted path, e.g. "
                         "training.global_batch=64 (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="also write comparison.json and report.html (the scenarios "
                        "side by side) into DIR, a new or empty directory or a previous "
                        "comparison's")
    add_allow_oom_option(parser)
    add_quiet_option(parser)
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    """Run the scenarios and print the comparison (or JSON)."""
    with progress.reporting("compare", enabled=not args.quiet):
        comparison = compare_scenarios(args.scenarios, overrides(args.overrides),
                                       allow_oom=args.allow_oom)
    files: list[str] = []
    if args.out is not None:
        files, notes = write_comparison(comparison, args.out)
        for note in notes:
            print(f"distsim: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(comparison.to_json_dict(), indent=2))
    else:
        sys.stdout.write(format_comparison(comparison))
        if files:
            print(f"\nwrote {args.out}: {', '.join(files)}")
    return 0
