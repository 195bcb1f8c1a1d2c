"""``distsim trace chakra`` and ``distsim trace export-chakra``: Chakra traces in and out.

``chakra`` runs MLCommons Chakra execution traces on a simulated cluster: each rank's ET
(``.et`` protobuf or its JSON form; a directory of them) runs as a dependency graph
(:mod:`workloads.traces.chakra`): compute as recorded, collectives and point-to-point transfers on
the cluster's network.  ``--export DIR`` writes the graphs that ran back out as ETs.
``export-chakra`` writes a scenario's simulated iteration as ETs, one per rank
(:mod:`workloads.traces.chakra_export`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from distsim_gpu.measured.chakra import load_chakra
from distsim_gpu.scenarios.cli.options import (
    add_cluster_options,
    add_output_dir_option,
    add_output_file_option,
    add_overrides_option,
    add_quiet_option,
    cluster_and_params,
    overrides,
    refuse_jobs,
)
from distsim_gpu.scenarios.scenario import load_scenario, spec_of
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.config import check_number
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.trace import Tracer
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.workloads.iteration.simulator import simulate_iteration
from distsim_gpu.workloads.traces.chakra import chakra_graphs, export_chakra, run_chakra
from distsim_gpu.workloads.traces.chakra_export import iter_rank_graphs, iteration_graphs
from distsim_gpu.workloads.traces.replay import replay_graph

__all__ = ["add_parser", "handle", "handle_export"]


def add_parser(kinds: Any) -> argparse.ArgumentParser:
    """Register ``chakra`` under ``distsim trace``."""
    parser = kinds.add_parser(
        "chakra", help="run Chakra execution traces (.et / JSON, one per rank) on a cluster",
        description="Run MLCommons Chakra ETs as a workload: compute nodes take their "
        "recorded time (or FLOPs at --flops), communication nodes run on the cluster's "
        "network; print the iteration time per rank.")
    parser.add_argument("traces", nargs="+", metavar="ET",
                        help="<name>.<rank>.et or .json files, directories or tar archives "
                             "(.tar.gz) of them")
    add_cluster_options(parser)
    parser.add_argument("--world-size", type=int, default=None, metavar="N",
                        help="ranks of the job (default: the GPU count the ETs' metadata "
                        "records, ngpus or world_size, else as many as the traces); ranks "
                        "without a trace reach collectives with the last present rank")
    parser.add_argument("--ranks-per-node", type=int, default=None, metavar="N")
    parser.add_argument("--ctrl-deps", action="store_true",
                        help="also wait for control dependencies (default: data only, as "
                        "Chakra's ET feeder)")
    parser.add_argument("--flops", default=None, metavar="FLOP/S", type=float,
                        help="speed for compute nodes that give FLOPs (num_ops) only")
    add_output_dir_option(parser, "write the graphs that ran as Chakra ETs, one per rank",
                          old=("--export",))
    add_output_file_option(parser, "write the run as a Chrome/Perfetto trace (a track per "
                           "rank and stream)", metavar="FILE.json", old=("--trace",))
    add_quiet_option(parser)
    parser.set_defaults(handler=handle)
    export = kinds.add_parser(
        "export-chakra", help="write a scenario's simulated iteration as Chakra ETs",
        description="Write the iteration a scenario simulates as Chakra execution traces, "
        "one <name>.<rank>.et per GPU, that `distsim trace chakra` runs back.")
    export.add_argument("scenario", metavar="SCENARIO")
    add_output_dir_option(export, "the folder for the ETs, one <name>.<rank>.et per GPU",
                          required=True, old=("-o", "--output"))
    add_overrides_option(export, "override a scenario field by dotted path (repeatable)")
    export.add_argument("--check", action="store_true",
                        help="also simulate the iteration and run the graphs, and print "
                        "both times (holds every rank's graph in memory)")
    add_quiet_option(export)
    export.set_defaults(handler=handle_export)
    return parser


def handle_export(args: argparse.Namespace) -> int:
    """Write the ETs (and, with --check, compare the two runs)."""
    scenario = load_scenario(args.scenario, overrides(args.overrides))
    refuse_jobs(scenario, "trace export-chakra", "writes one job's ranks")
    spec = spec_of(scenario)
    with progress.reporting("trace export-chakra", enabled=not args.quiet) as reporter:
        if reporter is not None:
            reporter.phase("writing the ETs" + (" and running them" if args.check else ""))
        return _export(args, spec)


def _export(args: argparse.Namespace, spec: Any) -> int:
    """:func:`handle_export`'s work, inside its progress line."""
    if not args.check:  # rank group by rank group: one group's graphs in memory at a time
        counted = [0]

        def count(pairs: Any) -> Any:
            for rank, graph in pairs:
                counted[0] += len(graph)
                yield rank, graph

        paths = export_chakra(count(iter_rank_graphs(spec)), args.out,
                              name=spec.model.name)
        print(f"wrote {len(paths)} Chakra ETs ({counted[0]} nodes) to {args.out}")
        return 0
    graphs, world = iteration_graphs(spec)
    paths = export_chakra(graphs, args.out, name=spec.model.name)
    nodes = sum(map(len, graphs.values()))
    print(f"wrote {len(paths)} Chakra ETs ({nodes} nodes) to {args.out}")
    if args.check:
        # The graphs hold each kernel's time alone: the simulation to compare them with
        # leaves out the SMs overlapped NCCL collectives take from compute.
        alone = replace(spec, comm=replace(spec.comm, nccl_sms=0))
        simulated = simulate_iteration(alone).iteration_time_s
        replayed = replay_graph(graphs, spec.topology, spec.comm, world_size=world).time_s
        print(f"iteration time (kernels at their time alone): simulated "
              f"{format_duration(simulated)}, the exported graphs "
              f"{format_duration(replayed)} "
              f"(relative difference {(replayed - simulated) / simulated:.1e})")
    return 0


def handle(args: argparse.Namespace) -> int:
    """Run the traces and print the result (or JSON)."""
    if args.world_size is not None and args.world_size < 1:
        raise ConfigError(f"must be >= 1, got {args.world_size}", key="--world-size")
    flops = (check_number(args.flops, key="--flops", above=True)
             if args.flops is not None else None)
    topology, params = cluster_and_params(args)
    if args.world_size is not None and args.world_size > len(topology.gpus):
        raise ConfigError(f"{args.world_size:,} ranks on a cluster of "
                          f"{len(topology.gpus):,} GPUs", key="--world-size",
                          hint="at most the cluster's GPUs, or a larger --cluster / --nodes")
    traces = load_chakra(args.traces)
    with progress.reporting("trace chakra", enabled=not args.quiet):
        run = run_chakra(traces, topology, params, world_size=args.world_size,
                         flops_per_s=flops, ctrl_deps=args.ctrl_deps,
                         ranks_per_node=args.ranks_per_node)
    written = []
    if args.out:
        graphs, _world, _notes = chakra_graphs(traces, world_size=args.world_size,
                                               flops_per_s=flops, ctrl_deps=args.ctrl_deps)
        written = export_chakra(graphs, args.out)
    result = run.result
    if args.output:
        tracer = Tracer()
        tracer.spans.extend(result.spans)
        atomic_write_text(args.output, json.dumps(tracer.to_chrome_trace(),
                                                 separators=(",", ":")))
        written.append(args.output)
    if args.json:
        print(json.dumps({"cluster": topology.name, "world_size": run.world_size,
                          "ranks": list(run.ranks), "nodes": run.nodes,
                          "iteration_time_s": run.time_s, "end_s": result.end_s,
                          "compute_s": result.compute_s,
                          "communication_s": result.communication_s,
                          "notes": list(run.notes), "exported": written}, indent=2))
        return 0
    lines = [f"Chakra ETs: {len(run.ranks)} rank(s) of {run.world_size}, {run.nodes} nodes, "
             f"on {topology.name}",
             f"iteration time: {format_duration(run.time_s)}", "",
             f"{'rank':>6} {'end':>12} {'compute':>12} {'comm':>12}"]
    lines += [f"{r:>6} {format_duration(result.end_s[r]):>12} "
              f"{format_duration(result.compute_s[r]):>12} "
              f"{format_duration(result.communication_s[r]):>12}" for r in run.ranks]
    lines += [f"note: {note}" for note in run.notes]
    lines += [f"wrote {path}" for path in written]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
