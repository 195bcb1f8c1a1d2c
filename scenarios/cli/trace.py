"""``distsim trace summary|costs|chakra``: read measured traces.

``summary`` breaks each rank's profiler steps down into compute, communication and idle
time; ``costs`` measures per-layer compute times and writes them as a cost table;
``chakra`` runs MLCommons Chakra execution traces (:mod:`scenarios.cli.chakra`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from distsim_gpu.measured.summary import format_summary_table, summarise, to_json
from distsim_gpu.measured.traces import load_traces
from distsim_gpu.scenarios.cli import chakra
from distsim_gpu.workloads.traces.kineto_replay import check_one_job
from distsim_gpu.workloads.traces.measured_costs import (
    DEFAULT_LAYER_REGEX,
    LAYER_KINDS,
    ExtractOptions,
    extract_costs,
    format_costs,
)

__all__ = ["add_parser", "handle_costs", "handle_summary"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``trace`` and its commands on the ``distsim`` sub-command set."""
    parser = commands.add_parser("trace", help="read measured PyTorch profiler traces")
    kinds = parser.add_subparsers(dest="trace_command", required=True, metavar="COMMAND")
    summary = kinds.add_parser(
        "summary", help="per-rank, per-step breakdown of PyTorch profiler (Kineto) traces",
        description="Read Kineto Chrome-trace JSON (one per rank) and print, per rank and "
        "ProfilerStep, the step time, GPU busy time per class (compute, NCCL communication, "
        "memcpy), GPU idle time, compute/communication overlap and NCCL kernels per "
        "collective.")
    summary.add_argument("traces", nargs="+", metavar="TRACES",
                         help=".json / .json.gz files, .tar.gz archives of them, or "
                         "directories holding them")
    summary.add_argument("--json", action="store_true", help="print one JSON object")
    summary.set_defaults(handler=handle_summary)
    _add_costs_parser(kinds)
    chakra.add_parser(kinds)
    return parser


def _add_costs_parser(kinds: Any) -> None:
    parser = kinds.add_parser(
        "costs", help="a profiled cost table (compute: {costs: FILE}) from traces",
        description="Measure per-layer compute times from distsim's own trace.json or from "
        "PyTorch profiler (Kineto) traces of a real job and write them as a cost table "
        "(median over layer instances; header records the source, GPU and spread).")
    parser.add_argument("traces", nargs="+", metavar="TRACES",
                        help="distsim trace.json, or Kineto .json / .json.gz files, .tar.gz "
                        "archives or directories")
    parser.add_argument("-o", "--output", required=True, metavar="FILE",
                        help="the cost table to write (.yaml, .yml or .csv)")
    parser.add_argument("--layer", default=DEFAULT_LAYER_REGEX, metavar="REGEX",
                        help="Kineto: the annotation names of one layer (default: common "
                        "transformer blocks, e.g. LlamaDecoderLayer, GPT2Block, BertLayer, "
                        "ParallelTransformerLayer)")
    parser.add_argument("--kind", default="transformer_layer", choices=LAYER_KINDS,
                        help="Kineto: the table kind of the matched layers")
    parser.add_argument("--operators", default=None, metavar="REGEX",
                        help="Kineto: per-operator rows instead of layers, from the scopes "
                        "this matches (qkv, attn_softmax(F), mlp_fc1(B)...; kind = the name, "
                        "F/none = fwd, B and W = bwd): a scenario takes them for those "
                        "operators and the roofline for the rest")
    parser.add_argument("--micro-batch", type=int, default=None, metavar="N")
    parser.add_argument("--seq-len", type=int, default=None, metavar="N")
    parser.add_argument("--hidden", type=int, default=None, metavar="N")
    parser.add_argument("--model", default=None, metavar="PRESET",
                        help="Kineto: the model preset (its hidden size, and the header)")
    parser.add_argument("--tp", type=int, default=1, metavar="N",
                        help="Kineto: tensor-parallel size the job ran with (default 1)")
    parser.add_argument("--sequence-parallel", action="store_true",
                        help="Kineto: the job used sequence parallelism")
    parser.add_argument("--gpu", default=None, metavar="NAME",
                        help="the GPU (default: as the trace records it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=handle_costs)


def handle_summary(args: argparse.Namespace) -> int:
    """Print the per-rank, per-step table (or JSON)."""
    traces = load_traces(args.traces)
    check_one_job(traces)  # (a table of two jobs' ranks side by side reads as one job)
    summaries = summarise(traces)
    if args.json:
        print(json.dumps(to_json(traces, summaries), indent=2))
    else:
        sys.stdout.write(format_summary_table(traces, summaries))
    return 0


def handle_costs(args: argparse.Namespace) -> int:
    """Extract the cost table, write it to ``-o`` and print it (or JSON)."""
    extracted = extract_costs(args.traces, ExtractOptions(
        layer=args.layer, kind=args.kind, micro_batch=args.micro_batch,
        seq_len=args.seq_len, hidden=args.hidden, model=args.model, tp=args.tp,
        sequence_parallel=args.sequence_parallel, gpu=args.gpu, operators=args.operators))
    extracted.write(args.output)
    for warning in extracted.warnings:
        print(f"distsim: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps({"output": args.output, **extracted.to_json()}, indent=2))
    else:
        sys.stdout.write(format_costs(extracted, args.output))
    return 0
