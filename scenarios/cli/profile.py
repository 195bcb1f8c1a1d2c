"""``distsim profile layer``: time a model's transformer layer on this machine's GPU with
PyTorch and write a cost table (:mod:`workloads.cost.profile_layer`).

PyTorch is optional: without it (or without a CUDA device) the command ends with a
``distsim: error`` that names the ``profile`` extra, never an ``ImportError``.
"""

from __future__ import annotations

import argparse
from typing import Any

from distsim_gpu.scenarios.cli.options import add_output_file_option
from distsim_gpu.workloads.cost.profile_layer import PRECISIONS, ProfileSettings, profile_layer
from distsim_gpu.workloads.specs.models import get_model

__all__ = ["add_parser", "handle_layer"]


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``profile`` and its kinds on the ``distsim`` sub-command set."""
    parser = commands.add_parser("profile", help="measure costs on this machine's GPU")
    kinds = parser.add_subparsers(dest="kind", required=True, metavar="KIND")
    layer = kinds.add_parser(
        "layer", help="time a model's transformer layer with PyTorch; write a cost table",
        description="Measure a transformer layer on a real GPU with PyTorch and write a "
        "cost table: one tensor-parallel rank's shard of the model preset's dense layer, "
        "forward and backward timed with CUDA events (median of --repeats after --warmup "
        "runs) at every micro-batch, sequence length and tp given.  Needs the 'profile' "
        "extra (PyTorch with CUDA).")
    layer.add_argument("--model", required=True, help="model preset, e.g. llama3-8b")
    layer.add_argument("--gpu", required=True, help="GPU name recorded in the table")
    layer.add_argument("--micro-batch", type=int, nargs="+", default=[1], metavar="N",
                       help="micro-batch sizes (default 1)")
    layer.add_argument("--seq-len", type=int, nargs="+", default=None, metavar="N",
                       help="sequence lengths (default: the model's)")
    layer.add_argument("--tp", type=int, nargs="+", default=[1], metavar="N",
                       help="tensor-parallel sizes (default 1)")
    layer.add_argument("--precision", default="bf16", choices=PRECISIONS)
    layer.add_argument("--warmup", type=int, default=5, metavar="N",
                       help="untimed runs before timing (default 5)")
    layer.add_argument("--repeats", type=int, default=20, metavar="N",
                       help="timed runs, median kept (default 20)")
    add_output_file_option(layer, "the cost table to write (.yaml or .csv)", required=True,
                           metavar="TABLE", old=("--out",))
    layer.set_defaults(handler=handle_layer)
    return parser


def handle_layer(args: argparse.Namespace) -> int:
    """Profile the preset's layer at every shape and write the table to ``--out``."""
    settings = ProfileSettings(micro_batches=args.micro_batch, seq_lens=args.seq_len,
                               tps=args.tp, precision=args.precision, warmup=args.warmup,
                               repeats=args.repeats)
    _, rows = profile_layer(get_model(args.model, key="--model"), gpu=args.gpu,
                            settings=settings, output=args.output)
    print(f"wrote {len(rows)} rows to {args.output}")
    return 0
