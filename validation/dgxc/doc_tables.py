"""docs/validation.md's DGX Cloud tables from a ``distsim validate runs --json`` result.

The three comparisons (DGX H100 dense models, Grok-1 on DGX H100, GB200 NVL72) take
minutes to simulate, too long for the test suite, so the page's tables are printed from a
saved result instead of hand-copied::

    distsim validate runs validation/dgxc/dgxc-h100.csv \\
        --map scenarios/examples/validation/dgxc-h100.yaml --json -q > h100.json
    python validation/dgxc/doc_tables.py h100 h100.json

(``grok`` with ``dgxc-grok-h100.csv`` / ``dgxc-grok-h100.yaml``, ``gb200`` with
``dgxc-gb200.csv`` / ``dgxc-gb200.yaml``.)  The table's CSV is read beside this script;
the result's ``line`` numbers are its lines.  ``results/`` holds the results the page
quotes (the commit they ran on is named there); tests/test_docs_tables.py checks that the
page's tables are what this script prints from them.  After a change that moves the
model, rerun the three commands into ``results/`` and regenerate the page.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
Row = dict[str, str]
#: Per comparison: its CSV, and the summary's row groups (label, which rows).
_EXPERT_TP_4 = ("v24.11.1", "v25.02")
GROUPS: dict[str, tuple[str, list[tuple[str, Callable[[Row], bool]]]]] = {
    "h100": ("dgxc-h100.csv", []),  # all, per precision, per model and precision: below
    "grok": ("dgxc-grok-h100.csv", [
        ("v24.11.1 / v25.02 BF16 (expert-tp 4)",
         lambda r: r["release"] in _EXPERT_TP_4 and r["precision"] == "bf16"),
        ("v24.11.1 / v25.02 FP8 (expert-tp 4)",
         lambda r: r["release"] in _EXPERT_TP_4 and r["precision"] == "fp8"),
        ("v25.05.01 / 2025-07-23 BF16 (expert-tp 1)",
         lambda r: r["release"] not in _EXPERT_TP_4 and r["precision"] == "bf16"),
        ("v25.05.01 / 2025-07-23 FP8 (expert-tp 1)",
         lambda r: r["release"] not in _EXPERT_TP_4 and r["precision"] == "fp8"),
    ]),
    "gb200": ("dgxc-gb200.csv", [
        ("Llama 3.1 405B and Grok-1 (the issue's target rows)",
         lambda r: r["model"] in ("llama3.1-405b", "grok-1")),
    ]),
}


def _rows(kind: str, result: dict) -> list[tuple[Row, dict]]:
    """Each CSV row (by its line number) with its result."""
    if Path(result.get("table", "")).name != GROUPS[kind][0]:
        raise SystemExit(f"this result is of {result.get('table')!r}, not of "
                         f"{GROUPS[kind][0]} ({kind}): pass the matching kind")
    with open(HERE / GROUPS[kind][0], newline="", encoding="utf-8") as handle:
        table = {line: row for line, row in enumerate(csv.DictReader(handle), start=2)}
    missing = sorted({r["line"] for r in result["rows"]} - table.keys())
    if missing:
        raise SystemExit(f"this result has lines {missing[:5]} that {GROUPS[kind][0]} does "
                         "not: the table changed since; rerun validate runs")
    return [(table[r["line"]], r) for r in result["rows"]]


def _signed(value: float) -> str:
    return f"{value:+.1f}".replace("-", "−")


def _errors(pairs: Sequence[tuple[Row, dict]]) -> list[float]:
    return [100 * (r["predicted_s"] / r["measured_s"] - 1) for _row, r in pairs
            if r.get("predicted_s") is not None]


def _summary_line(label: str, groups: Sequence[Sequence[tuple[Row, dict]]]) -> str:
    """One line of the summary: one group, or several side by side ("bf16 / fp8")."""
    errors = [_errors(pairs) for pairs in groups]

    def cell(values: Sequence[str], unit: str = " %") -> str:
        return " / ".join(values) + unit

    return (f"| {label} | {cell([str(len(e)) for e in errors], '')} | "
            f"{cell([f'{statistics.mean(map(abs, e)):.1f}' for e in errors])} | "
            f"{cell([f'{max(map(abs, e)):.1f}' for e in errors])} | "
            f"{cell([_signed(statistics.mean(e)) for e in errors])} |")


def _latest(pairs: Sequence[tuple[Row, dict]]) -> list[tuple[Row, dict]]:
    """Each configuration's row from its latest release (the releases' names sort)."""
    setting = ("model", "precision", "gpus", "tp", "pp", "cp", "vp", "dp", "mbs", "gbs",
               "layers", "seq_len")
    latest: dict[tuple[str, ...], tuple[Row, dict]] = {}
    for row, r in pairs:
        key = tuple(row[k] for k in setting)
        if key not in latest or row["release"] > latest[key][0]["release"]:
            latest[key] = (row, r)
    return list(latest.values())


def summary(kind: str, result: dict) -> list[str]:
    """The summary table: every row that simulated, the comparison's groups, then (with a
    model column) per precision and per model, "bf16 / fp8"."""
    pairs = _rows(kind, result)
    lines = ["| rows | n | mean \\|error\\| | max \\|error\\| | mean signed error |",
             "|---|---:|---:|---:|---:|", _summary_line("all", [pairs])]
    lines += [_summary_line(label, [[(row, r) for row, r in pairs if keep(row)]])
              for label, keep in GROUPS[kind][1]]
    if "model" not in pairs[0][0]:
        return lines
    if kind == "h100":
        lines += [_summary_line(p, [[x for x in pairs if x[0]["precision"] == p]])
                  for p in ("bf16", "fp8")]
        lines.append(_summary_line("latest release of each configuration", [_latest(pairs)]))
    for model in sorted({row["model"] for row, _r in pairs}):
        lines.append(_summary_line(f"{model} bf16 / fp8", [
            [x for x in pairs if (x[0]["model"], x[0]["precision"]) == (model, p)]
            for p in ("bf16", "fp8")]))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=sorted(GROUPS))
    parser.add_argument("result", type=Path, help="distsim validate runs --json's output")
    args = parser.parse_args(argv)
    result = json.loads(args.result.read_text(encoding="utf-8"))
    print("\n".join(summary(args.kind, result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
