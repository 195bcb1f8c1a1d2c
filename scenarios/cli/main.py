"""The ``distsim`` command line: the parser of every command, and the error handling.

Every sub-command reads its input, runs, and prints a table (or one JSON object with
``--json``).  Bad input of any kind ends with ``distsim: error: <where>: <what>`` on
stderr and exit status 2 — never a traceback.  Each command lives in its own module of
this package (``add_parser`` + handler); the options several share in
:mod:`scenarios.cli.options`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from distsim_gpu.scenarios.cli import (
    calibrate,
    compare,
    nccl_tests,
    profile,
    run,
    search,
    sweep,
    topology,
    trace,
    validate,
)
from distsim_gpu.simcore.errors import DistsimError

__all__ = ["build_parser", "main"]

# In the order ``distsim --help`` lists them.
_COMMANDS = (nccl_tests, run, validate, trace, sweep, search, compare, calibrate, profile,
             topology)


def build_parser() -> argparse.ArgumentParser:
    """The ``distsim`` parser; each command sets ``handler`` (``args -> exit status``)."""
    parser = argparse.ArgumentParser(
        prog="distsim",
        description="Discrete-event simulation of distributed DNN training on GPU clusters.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in _COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``distsim`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except DistsimError as error:
        print(f"distsim: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("distsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``distsim … | head``): stop quietly, as Unix tools do, and
        # keep Python's exit-time flush from failing on the closed pipe.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
