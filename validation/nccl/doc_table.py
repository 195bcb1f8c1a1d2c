"""One nccl-tests log against distsim, as the Markdown table docs/validation.md shows it.

``distsim validate nccl`` prints one algorithm choice at a time; the page sets NCCL's own
choice (``auto``) beside the ring for every size, with the measured and predicted bus
bandwidths.  This runs both and prints that table, so a test can check that the page shows
what the code predicts now (``tests/test_docs_tables.py``).  From the repository root:

    python validation/nccl/doc_table.py LOG --cluster PRESET --nodes N [--run K] [--op OP]
        [--set KEY=VALUE ...] [--no-ring] [--no-busbw]

The arguments after LOG are ``distsim validate nccl``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any

from distsim_gpu.scenarios.cli.main import main as distsim
from distsim_gpu.simcore.units import format_bytes


def validated(log: str, args: list[str]) -> dict[str, Any]:
    """``distsim validate nccl LOG ARGS --json``'s object."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = distsim(["validate", "nccl", log, *args, "--json", "-q"])
    if status != 0:
        raise SystemExit(status)
    return json.loads(out.getvalue())


def table(auto: dict[str, Any], ring: dict[str, Any] | None, busbw: bool) -> list[str]:
    header = ["size", "measured (µs)", "predicted auto (µs)", "err %", "algo/proto"]
    align = ["---:", "---:", "---:", "---:", "---"]
    if ring is not None:
        header += ["predicted ring (µs)", "err %"]
        align += ["---:", "---:"]
    if busbw:
        header += ["measured busbw (GB/s)",
                   "predicted busbw auto (GB/s)" if ring is not None else "predicted busbw (GB/s)"]
        align += ["---:", "---:"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    ring_rows = ring["rows"] if ring is not None else [None] * len(auto["rows"])
    for row, other in zip(auto["rows"], ring_rows, strict=True):
        cells = [format_bytes(row["size_bytes"]), f"{row['measured_time_s'] * 1e6:.2f}",
                 f"{row['predicted_time_s'] * 1e6:.2f}", f"{row['error_pct']:+.1f}",
                 f"{row['algorithm']}/{row['protocol']}"]
        if other is not None:
            cells += [f"{other['predicted_time_s'] * 1e6:.2f}", f"{other['error_pct']:+.1f}"]
        if busbw:
            cells += [f"{row['measured_busbw_bytes_per_s'] / 1e9:.2f}",
                      f"{row['predicted_busbw_bytes_per_s'] / 1e9:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--no-ring", action="store_true", help="no forced-ring columns")
    parser.add_argument("--no-busbw", action="store_true", help="no bus bandwidth columns")
    args, rest = parser.parse_known_args(argv)
    auto = validated(args.log, rest)
    ring = None if args.no_ring else validated(args.log, [*rest, "--algo", "ring"])
    print("\n".join(table(auto, ring, busbw=not args.no_busbw)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
