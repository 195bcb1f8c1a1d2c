"""Argument blocks several commands share, and what turns their values into library inputs.

A command module adds its options with the ``add_*`` functions here and hands the parsed
values to :func:`overrides`, :func:`comm_params` and :func:`cluster_and_params`, which
return what the library takes: ``(dotted_key, value)`` pairs, a
:class:`~collectives.CommParams` and a :class:`~topology.Topology`.  Nothing below the CLI
sees an ``argparse.Namespace``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from distsim_gpu.collectives import ALGORITHMS, FIDELITIES, CommParams, comm_params_from_mapping
from distsim_gpu.collectives.nccl_tests import BENCH_OPS
from distsim_gpu.simcore.config import parse_assignment, set_path, split_overrides
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.pool import Workers
from distsim_gpu.simcore.yamlfile import read_yaml
from distsim_gpu.topology import Topology, list_presets, load_cluster
from distsim_gpu.workloads.specs.gpus import get_gpu

__all__ = [
    "ALGORITHMS",
    "PROTOCOLS",
    "add_cluster_options",
    "add_log_options",
    "add_overrides_option",
    "add_quiet_option",
    "add_trace_cluster_options",
    "checked_comm",
    "cluster_and_params",
    "cluster_architecture",
    "comm_file",
    "comm_params",
    "comm_params_on",
    "overrides",
    "split_cluster_overrides",
]

PROTOCOLS = ("auto", "ll", "ll128", "simple")


# --------------------------------------------------------------------------- argument blocks


def add_overrides_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--set KEY=VALUE`` (repeatable), collected in ``args.overrides``."""
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="overrides", help=help_text)


def add_allow_oom_option(parser: argparse.ArgumentParser) -> None:
    """``--allow-oom``: simulate what would not fit in a GPU's memory (the flag of the
    scenario key ``simulation.allow_oom``, which every command takes through ``--set``)."""
    parser.add_argument("--allow-oom", action="store_true",
                        help="simulate even if a GPU's memory would not hold the "
                        "configuration (as --set simulation.allow_oom=true)")


def add_quiet_option(parser: argparse.ArgumentParser) -> None:
    """``--quiet``: no progress line on a terminal (:mod:`simcore.progress`)."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress line (shown on a terminal for runs over a second: "
                             "simulated time, events, an estimate of what is left)")


# --------------------------------------------------------------------------- outputs
# One grammar for every command: ``--out DIR`` writes a folder, ``-o FILE`` one file.
# A spelling a command used before is kept for a release, hidden, as an alias that says
# what to write instead.


class _Deprecated(argparse.Action):
    """An old spelling of an option: stores like the new one and says to use that."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, use: str,
                 **kwargs: Any) -> None:
        self.use = use
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"distsim: note: {option_string} is deprecated here; write {self.use}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_output_file_option(parser: argparse.ArgumentParser, help_text: str, *,
                           required: bool = False, metavar: str = "FILE",
                           old: Sequence[str] = ()) -> None:
    """``-o/--output FILE`` (``args.output``), with ``old`` spellings as aliases."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("-o", "--output", default=None, metavar=metavar, help=help_text)
    if old:
        group.add_argument(*old, dest="output", action=_Deprecated, use=f"-o {metavar}",
                           metavar=metavar)


def add_output_dir_option(parser: argparse.ArgumentParser, help_text: str, *,
                          required: bool = False, old: Sequence[str] = ()) -> None:
    """``--out DIR`` (``args.out``), with ``old`` spellings as aliases."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--out", default=None, metavar="DIR", help=help_text)
    if old:
        group.add_argument(*old, dest="out", action=_Deprecated, use="--out DIR",
                           metavar="DIR")


def add_workers_options(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--workers N`` (local processes) and ``--scheduler ADDRESS`` (a Dask cluster)."""
    parser.add_argument("--workers", type=int, default=None, metavar="N", help=help_text)
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="run on an existing Dask cluster, e.g. tcp://host:8786 "
                        "(pip install 'distsim-gpu[dask]'; docs/dask.md)")


def workers_of(args: argparse.Namespace) -> Workers | int | None:
    """Where ``--workers`` / ``--scheduler`` say the command's tasks run: the Dask cluster
    when given, else the number of processes (None: one per CPU)."""
    if args.scheduler is not None:
        if args.workers is not None:
            raise ConfigError("--workers sizes the local pool; with --scheduler the Dask "
                              "cluster has its own workers", key="--workers")
        return Workers(scheduler=args.scheduler)
    return args.workers


def add_cluster_options(parser: argparse.ArgumentParser) -> None:
    """The cluster a command simulates and its communication parameters, and ``--json``."""
    parser.add_argument("--cluster", required=True, metavar="PRESET_OR_FILE",
                        help="a node preset (" + ", ".join(list_presets()) +
                        ") or a cluster YAML file")
    parser.add_argument("--nodes", type=int, default=None, metavar="N",
                        help="number of nodes (default: the preset's or file's)")
    add_overrides_option(parser, "override a cluster field by dotted path, e.g. "
                         "nic.bandwidth=\"200 Gbps\"; comm.* sets communication parameters, "
                         "e.g. comm.link_efficiency.nvlink=0.9 (repeatable)")
    parser.add_argument("--comm", default=None, metavar="FILE",
                        help="communication parameters from a YAML file: its "
                        "'communication' section, as 'distsim calibrate nccl -o' writes it")
    parser.add_argument("--algo", choices=ALGORITHMS, default=None,
                        help="collective algorithm (default auto: as NCCL's tuner picks, "
                        "among those the cluster offers)")
    parser.add_argument("--proto", choices=PROTOCOLS, default=None,
                        help="NCCL protocol (default auto)")
    parser.add_argument("--fidelity", choices=FIDELITIES, default=None,
                        help="coflow: one flow per call; step: one flow per algorithm step")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_log_options(parser: argparse.ArgumentParser, verb: str) -> None:
    """The arguments of a command that reads an nccl-tests log against a cluster."""
    parser.add_argument("log", help="an nccl-tests output file")
    add_cluster_options(parser)
    parser.add_argument("--op", choices=tuple(BENCH_OPS), default=None,
                        help="the operation (default: as the log says, else all_reduce)")
    parser.add_argument("--run", type=int, default=None, metavar="K",
                        help=f"for a log holding several runs: {verb} run K (1-based)")
    add_quiet_option(parser)


def add_trace_cluster_options(parser: argparse.ArgumentParser) -> None:
    """The traces and the cluster they ran on: the arguments every trace command shares."""
    parser.add_argument("traces", nargs="+", metavar="TRACES",
                        help=".json / .json.gz files, a .tar.gz of them, or a directory")
    parser.add_argument("--cluster", default=None, metavar="PRESET_OR_FILE",
                        help="the cluster the job ran on (default: the box of the traces' "
                             "GPU model, as many nodes as the ranks need)")
    parser.add_argument("--nodes", type=int, default=None, metavar="N",
                        help="number of nodes (default: as many as the ranks need)")
    parser.add_argument("--ranks-per-node", type=int, default=None, metavar="N",
                        help="ranks per node, placed in order (default: the node's GPUs)")
    add_overrides_option(parser, "override a cluster field or comm.* parameter (repeatable)")
    parser.add_argument("--comm", default=None, metavar="FILE",
                        help="communication parameters from a YAML file (e.g. from "
                             "'distsim calibrate nccl -o' or 'calibrate trace -o')")
    add_quiet_option(parser)


# --------------------------------------------------------------------------- values


def overrides(texts: Sequence[str]) -> list[tuple[str, Any]]:
    """``--set`` texts (``KEY=VALUE``) -> ``(dotted_key, value)`` pairs."""
    return [parse_assignment(text) for text in texts]


def refuse_jobs(scenario: Any, command: str, does: str) -> None:
    """A ConfigError when ``scenario`` has several ``jobs``: ``command`` ``does`` (e.g.
    ``search`` ``varies one job's strategy``) one job's work, and the others' would be
    lost."""
    if scenario.jobs:
        raise ConfigError(f"{command} {does}; this scenario has {len(scenario.jobs)} jobs",
                          key="jobs", source=scenario.source,
                          hint=f"run {command} on a scenario of each job's own (its model, "
                               "parallelism and training at the top level)")


def split_cluster_overrides(texts: Sequence[str]
                            ) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """``--set`` texts -> (cluster overrides, ``comm.*`` overrides with the prefix off)."""
    cluster, routed = split_overrides(overrides(texts), ["comm"])
    return cluster, routed["comm"]


def comm_file(path: str) -> dict[str, Any]:
    """The ``communication`` section of a YAML file (a scenario or calibration output)."""
    data, _lines = read_yaml(path, "communication parameters")
    section = data.get("communication") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ConfigError("no 'communication' mapping in this file", source=path,
                          hint="write it with 'distsim calibrate nccl … -o FILE'")
    return dict(section)


def comm_params(comm_overrides: Sequence[tuple[str, Any]], *, path: str | None = None,
                algo: str | None = None, proto: str | None = None,
                fidelity: str | None = None, architecture: str = "") -> CommParams:
    """Communication parameters: the defaults for GPUs of ``architecture``, the ``--comm``
    file's section (``path``), then the ``comm.*`` overrides, then ``--algo``, ``--proto``
    and ``--fidelity``, each over the one before."""
    return comm_params_from_mapping(_comm_mapping(comm_overrides, path, algo, proto, fidelity),
                                    source="--set", prefix="comm", architecture=architecture)


def _comm_mapping(comm_overrides: Sequence[tuple[str, Any]], path: str | None,
                  algo: str | None, proto: str | None, fidelity: str | None) -> dict[str, Any]:
    """The ``communication`` mapping :func:`comm_params` reads (file, overrides, flags)."""
    comm: dict[str, Any] = comm_file(path) if path else {}
    for key, value in comm_overrides:
        set_path(comm, key, value, source="--set comm")
    for key, value in (("algorithm", algo), ("protocol", proto), ("fidelity", fidelity)):
        if value is not None:
            comm[key] = value
    return comm


def cluster_and_params(args: argparse.Namespace) -> tuple[Topology, CommParams]:
    """The topology and communication parameters of :func:`add_cluster_options`' values.

    The communication parameters are checked first, then the cluster is built; the
    defaults they start from are those of the cluster's GPU generation (NVLink's
    efficiency differs by generation)."""
    cluster_overrides, comm_overrides = split_cluster_overrides(args.overrides)
    comm = checked_comm(comm_overrides, path=args.comm, algo=args.algo, proto=args.proto,
                        fidelity=args.fidelity)
    try:
        topology = load_cluster(args.cluster, nodes=args.nodes, overrides=cluster_overrides)
    except DistsimError as error:
        if args.nodes is not None and error.key == "nodes" and error.source is None:
            error.key = "--nodes"  # (the library names its argument; the user typed this)
        raise
    return topology, comm_params_on(comm, topology, cluster=args.cluster)


def checked_comm(comm_overrides: Sequence[tuple[str, Any]], *, path: str | None = None,
                 algo: str | None = None, proto: str | None = None,
                 fidelity: str | None = None) -> CommParams:
    """The communication parameters of :func:`comm_params`' inputs, parsed now (once) so
    that their errors come before the cluster's; NVLink's efficiency stays the GPU
    generation's until :func:`comm_params_on` meets the cluster.  The ``--comm`` file is
    read alone first, so that its errors name the file and its key, not ``--set``."""
    if path:
        comm_params_from_mapping(comm_file(path), source=path, prefix="communication")
    return comm_params_from_mapping(_comm_mapping(comm_overrides, path, algo, proto, fidelity),
                                    source="--set", prefix="comm")


def comm_params_on(comm: CommParams, topology: Topology, *,
                   cluster: str | None = None) -> CommParams:
    """Checked communication parameters on a cluster: NVLink's and NVLink SHARP's
    efficiencies those of the cluster's GPU generation unless they were given.  A cluster
    with NVLink whose GPU model distsim has no spec for is an error unless NVLink's
    efficiency is given: another generation's figure would be a silent guess
    (generations differ by several percent,
    :data:`~collectives.params.NVLINK_EFFICIENCY_BY_ARCHITECTURE`).  ``cluster``: what
    the user named the cluster by (a preset or file), for the error."""
    model = str(topology.config.get("gpu", {}).get("model", ""))
    architecture = cluster_architecture(topology)
    if comm.nvlink_efficiency_given:
        return comm.on_architecture(architecture)
    if model and not architecture and any(link.kind == "nvlink" for link in topology.links()):
        raise ConfigError(f"the cluster's GPU {model[:60]!r} is no GPU distsim has a spec "
                          "for, so NVLink's efficiency on it is unknown", key="gpu.model",
                          source=cluster or topology.name,
                          hint="name a known GPU model, e.g. h100-sxm5-80gb, or give the "
                               "figure: --set comm.link_efficiency.nvlink=0.82 (H100's)")
    return comm.on_architecture(architecture)


def cluster_architecture(topology: Topology) -> str:
    """The generation of the GPU a cluster names ("" where the cluster names none or one
    distsim has no spec for)."""
    model = str(topology.config.get("gpu", {}).get("model", ""))
    try:
        return get_gpu(model).architecture if model else ""
    except ConfigError:
        return ""
