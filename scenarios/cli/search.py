"""``distsim search``: the fastest parallel strategies for a scenario
(:mod:`scenarios.study.search`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import yaml
from distsim_gpu.scenarios.cli.options import (
    add_overrides_option,
    add_quiet_option,
    add_workers_options,
    overrides,
    refuse_jobs,
    workers_of,
)
from distsim_gpu.scenarios.scenario import load_scenario
from distsim_gpu.scenarios.study.layer_search import (
    format_layer_search,
    layer_search_dict,
    search_layer_groups,
    write_layer_search,
)
from distsim_gpu.scenarios.study.search import format_search, search_strategies
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.errors import ConfigError

__all__ = ["add_parser", "handle", "parse_space"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``distsim search`` on an ``add_subparsers()`` object; returns its parser."""
    parser = commands.add_parser(
        "search", help="find the fastest parallel strategies for a scenario",
        description="Enumerate parallel strategies (tp, pp, dp, ep, micro-batch, schedule, "
        "ZeRO, recompute, sequence parallelism, placement) for the scenario's model at its "
        "global batch, prune invalid, out-of-memory and provably slower ones (a lower bound "
        "from compute and the least time of each call on the critical path, against the "
        "K-th best simulated time), simulate the rest in parallel "
        "and print the best K with the speed-up over a naive baseline.")
    parser.add_argument("scenario", help="a scenario YAML file (its model, cluster, batch)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="search on the first N GPUs' worth of nodes (default: all)")
    parser.add_argument("--top", type=int, default=10, metavar="K",
                        help="how many of the best to report (default 10)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="write results.csv, pruned.csv and best.yaml into DIR")
    add_workers_options(parser, "simulation processes (default: the CPU count; "
                        "1: in-process)")
    add_overrides_option(parser, "override a scenario field by dotted path before "
                         "searching (repeatable)")
    parser.add_argument("--space", action="append", default=[], metavar="AXIS=V1,V2",
                        help="the values an axis of the search space takes (repeatable), "
                        "e.g. --space cp=1,2 --space recompute=none,op,full --space "
                        "dp_replicate=1,2,4 (HSDP) --space reshard_after_forward=null,false "
                        "--space expert_tp=null,1; scenarios.study.search names the axes "
                        "and their defaults")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="start no simulation after SECONDS (those running finish); the "
                        "result is then the best found, not necessarily the optimum")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object (the counts, the best K, the baseline) "
                        "instead of the table")
    parser.add_argument("--verbose", action="store_true",
                        help="print each simulated candidate to stderr as it finishes")
    add_quiet_option(parser)
    parser.add_argument("--layer-groups", action="store_true",
                        help="instead: per-layer strategies (Galvatron) at the scenario's "
                        "pp — the best two-group mix of tp and recompute against the best "
                        "uniform strategy within the GPU's memory (scenarios.study."
                        "layer_search)")
    parser.set_defaults(handler=handle)
    return parser


def parse_space(options: list[str]) -> dict[str, list[Any]]:
    """``--space AXIS=V1,V2`` options as a search space: each value read as YAML (``null``,
    ``true``, numbers, words); an axis given twice takes its last values."""
    space: dict[str, list[Any]] = {}
    for option in options:
        axis, sep, values = option.partition("=")
        if not sep or not axis.strip() or not values.strip():
            raise ConfigError(f"must be AXIS=V1,V2,..., got {option!r}", key="--space",
                              hint="e.g. --space cp=1,2")
        try:
            space[axis.strip()] = [yaml.safe_load(v.strip()) for v in values.split(",")]
        except yaml.YAMLError:
            raise ConfigError(f"cannot read the values of {option!r}", key="--space",
                              hint="comma-separated numbers, words, true, false or null"
                              ) from None
    return space


def _progress(line: str) -> None:
    print(line, file=sys.stderr)


def handle(args: argparse.Namespace) -> int:
    """Search, print the best strategies and write ``--out``."""
    scenario = load_scenario(args.scenario, overrides(args.overrides))
    refuse_jobs(scenario, "search", "varies one job's strategy")  # (the first job's alone)
    if args.time_limit is not None and not args.time_limit > 0:
        raise ConfigError(f"must be a number of seconds > 0, got {args.time_limit!r}",
                          key="--time-limit")
    if args.layer_groups:
        with progress.reporting("search", enabled=not args.quiet):
            found = search_layer_groups(scenario)
        written = write_layer_search(found, args.out)
        if args.json:
            print(json.dumps(layer_search_dict(found), indent=2))
            return 0
        sys.stdout.write(format_layer_search(found))
        print(f"\nwrote {args.out}: {', '.join(written)}")
        return 0
    with progress.reporting("search", enabled=not args.quiet):
        result = search_strategies(
            scenario, gpus=args.gpus, top=args.top, workers=workers_of(args), out_dir=args.out,
            space=parse_space(args.space), time_limit_s=args.time_limit,
            progress=_progress if args.verbose else None)
    status = 0 if result.results else 1  # nothing simulated: a script should stop here
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return status
    sys.stdout.write(format_search(result))
    print(f"\nwrote {args.out}: {', '.join(result.files)}")
    if "best.yaml" in result.files:
        print(f"run the best: distsim run {os.path.join(args.out, 'best.yaml')}")
    return status
