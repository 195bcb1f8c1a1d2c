"""``distsim topology import|show``: users' own topology dumps in, a cluster at a glance out.

``import`` reads ``nvidia-smi topo -m`` output or an NCCL topology XML (one node) and writes
a cluster file (:mod:`topology.importers`); with ``ibnetdiscover`` output it writes the
whole fabric, each host a copy of the node given by ``--node`` (a preset or a node dump).
``show`` prints a cluster's summary and, with ``-o``, draws it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import yaml
from distsim_gpu.scenarios.cli.options import add_overrides_option, overrides
from distsim_gpu.scenarios.report.plots import PlotsUnavailable
from distsim_gpu.scenarios.report.topology_view import draw_topology, format_summary, summarise
from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.topology import build_cluster, load_cluster
from distsim_gpu.topology.importers import cluster_spec, cluster_yaml, read_node_dump, read_text
from distsim_gpu.topology.importers.ibnetdiscover import (
    fabric_cluster_spec,
    looks_like_ibnetdiscover,
    parse_ibnetdiscover,
)
from distsim_gpu.topology.importers.layout import without_nics
from distsim_gpu.topology.importers.writer import comment_text
from distsim_gpu.topology.preset_registry import PRESETS

__all__ = ["add_parser", "handle_import", "handle_show"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``topology`` and its commands on the ``distsim`` sub-command set."""
    parser = commands.add_parser("topology", help="import a machine's topology dump; show a "
                                 "cluster")
    kinds = parser.add_subparsers(dest="topology_command", required=True, metavar="COMMAND")
    imp = kinds.add_parser(
        "import", help="write a cluster file from nvidia-smi topo -m, an NCCL topology XML "
        "or ibnetdiscover output",
        description="Read a topology dump and write an editable cluster file; the figures the "
        "dump states are used, every default is named in a comment.")
    imp.add_argument("file", metavar="FILE", help="the dump")
    imp.add_argument("-o", "--output", required=True, metavar="CLUSTER.yaml")
    imp.add_argument("--nodes", type=int, default=None, metavar="N",
                     help="node dumps: how many such nodes the cluster has (default 1)")
    imp.add_argument("--exclude-nic", action="append", default=[], metavar="NAME",
                     help="node dumps: leave out this NIC (e.g. a storage NIC; repeatable)")
    imp.add_argument("--node", default=None, metavar="PRESET_OR_DUMP",
                     help="ibnetdiscover: the shape of every host (a preset, or a "
                     "nvidia-smi / NCCL XML dump)")
    imp.set_defaults(handler=handle_import)
    show = kinds.add_parser("show", help="summarise a cluster and draw it",
                            description="Print a cluster's GPUs, nodes, devices and link "
                            "classes; with -o draw it (PNG or SVG, needs matplotlib).")
    show.add_argument("cluster", metavar="PRESET_OR_FILE")
    show.add_argument("--nodes", type=int, default=None, metavar="N")
    show.add_argument("-o", "--output", default=None, metavar="FILE.png|FILE.svg")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    add_overrides_option(show, "override a cluster field by dotted path, e.g. "
                         "nvlink_domain=36 or fabric.oversubscription=2 (repeatable)")
    show.set_defaults(handler=handle_show)
    return parser


def _node_topology(node: str | None) -> Any:
    if node is None:
        raise ConfigError("an ibnetdiscover dump lists HCAs, not what is inside the hosts",
                          key="--node", hint="give --node PRESET (e.g. dgx-a100) or a "
                          "nvidia-smi topo -m / NCCL XML dump of one host")
    if node in PRESETS:
        return build_cluster({"preset": node})
    if not os.path.exists(node):
        raise ConfigError(f"{node!r} is neither a node preset nor a file", key="--node",
                          hint=closest(node, PRESETS))
    return build_cluster(cluster_spec(read_node_dump(node)), source=node)


def handle_import(args: argparse.Namespace) -> int:
    """Write the cluster file and say what it holds."""
    if args.nodes is not None and args.nodes < 1:
        raise ConfigError(f"must be >= 1, got {args.nodes}", key="--nodes")
    text = read_text(args.file)
    if looks_like_ibnetdiscover(text):
        fabric = parse_ibnetdiscover(text, source=args.file)
        spec = fabric_cluster_spec(fabric, _node_topology(args.node))
        out = (f"# Cluster imported by `distsim topology import` from "
               f"{comment_text(args.file)}\n"
               f"# (ibnetdiscover; every host a copy of {args.node}).  Cables at their "
               "active width x speed; latencies\n# are topology.presets' defaults (cable "
               "50 ns, switch 130 ns, NIC 0.3 us).  Routing: InfiniBand D-mod-K.\n"
               + yaml.safe_dump(spec, sort_keys=False, width=100))
    else:
        layout = without_nics(read_node_dump(args.file), args.exclude_nic)
        spec = cluster_spec(layout, nodes=args.nodes or 1)
        out = cluster_yaml(layout, nodes=args.nodes or 1)
    topology = build_cluster(spec, source=args.file)  # refuse to write what cannot build
    if args.nodes is not None and args.nodes != topology.num_nodes:  # (a fabric dump's hosts)
        raise ConfigError(f"the fabric dump has {topology.num_nodes} hosts, --nodes says "
                          f"{args.nodes}", key="--nodes", source=args.file,
                          hint="--nodes is for one node's dump; a fabric's hosts are the "
                               "cluster's nodes")
    atomic_write_text(args.output, out)
    print(f"wrote {args.output}: {len(topology.gpus)} GPUs on {topology.num_nodes} node(s)")
    sys.stdout.write(format_summary(summarise(topology)))
    return 0


def handle_show(args: argparse.Namespace) -> int:
    """Print the summary (or JSON); draw the cluster with ``-o``."""
    topology = load_cluster(args.cluster, nodes=args.nodes,
                            overrides=overrides(args.overrides))
    summary = summarise(topology)
    if args.output:
        suffix = os.path.splitext(args.output)[1].lower()
        if suffix not in (".png", ".svg"):
            raise ConfigError(f"cannot draw to {suffix or 'a file without suffix'}",
                              key="-o", hint="give a .png or .svg file")
        try:
            draw_topology(topology, args.output)
        except PlotsUnavailable as missing:
            raise ConfigError(f"cannot draw {args.output}: {missing}", key="-o",
                              hint="pip install 'distsim-gpu[plot]', or leave out -o for "
                              "the summary alone") from None
    if args.json:
        print(json.dumps({**summary.to_dict(), "drawing": args.output}, indent=2))
    else:
        sys.stdout.write(format_summary(summary))
        if args.output:
            print(f"drew {args.output}")
    return 0
