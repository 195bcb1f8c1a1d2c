"""docs/validation.md's vTrain multi-node table from a saved ``validate runs --json`` result.

Simulating vTrain's 109 multi-node runs takes minutes, too long for the test suite, so the
page's table by model size is printed from the saved result instead of hand-copied::

    distsim validate runs ../shared/data/training/vtrain/ground_truth_multi.csv \\
        --map scenarios/examples/validation/vtrain-multi.yaml --workers 2 --json -q \\
        > validation/vtrain/results/multi.json
    python validation/vtrain/doc_table.py validation/vtrain/results/multi.json

Per model size (the map's ``group_by``): runs, mean and max |error|, Spearman within the
size; then every run, and how many are within 5 % and 12 %.  tests/test_docs_tables.py
checks that the page's table is what this prints from the saved result.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path


def _errors(rows: Sequence[dict]) -> list[float]:
    return [abs(100 * (r["predicted_s"] / r["measured_s"] - 1)) for r in rows
            if r.get("predicted_s") is not None]


def _rho(value: float | None) -> str:
    """A rank correlation, or n/a where the result has none (under 3 rows, no spread)."""
    return "n/a" if value is None else f"{value:.2f}"


def table(result: dict) -> list[str]:
    """The Markdown table by model size, with the whole table's line last."""
    by_size: dict[str, list[dict]] = {}
    for row in result["rows"]:
        by_size.setdefault(row["group"], []).append(row)
    spearman = result["uncalibrated"]["spearman"]
    lines = ["| model | runs | mean \\|err\\| | max \\|err\\| | Spearman |",
             "|---|---:|---:|---:|---:|"]
    for size in sorted(by_size, key=float):
        errors = _errors(by_size[size])
        lines.append(f"| {size}B | {len(errors)} | {statistics.mean(errors):.1f} % | "
                     f"{max(errors):.1f} % | {_rho(spearman.get(size))} |")
    every = _errors(result["rows"])
    lines.append(f"| all | {len(every)} | {statistics.mean(every):.1f} % | "
                 f"{max(every):.1f} % | |")
    within = ", ".join(f"{sum(e <= bound for e in every)} within {bound} %" for bound in (5, 12))
    return [*lines, "", f"Of the {len(every)} runs: {within}."]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, help="distsim validate runs --json's output")
    args = parser.parse_args(argv)
    print("\n".join(table(json.loads(args.result.read_text(encoding="utf-8")))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
