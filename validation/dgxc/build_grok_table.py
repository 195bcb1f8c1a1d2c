"""NVIDIA's measured Grok-1 314B step times (DGX H100) as one table for ``distsim validate runs``.

The dgxc-benchmarking Grok-1 READMEs (kept verbatim in
``shared/data/training/dgxc_benchmarking/raw``) pair a configuration table
(``| GPUs | SeqLen | Layers | TP | PP | CP | EP | [ETP |] DP | VP | MBS | GBS | GA |``) with
step-time tables per precision.  This script joins them into ``dgxc-grok-h100.csv`` beside
it, with the columns ``scenarios/examples/validation/dgxc-grok-h100.yaml`` reads::

    python validation/dgxc/build_grok_table.py [--data DIR] [--out CSV]

What it resolves, each checked against ``raw/``:

* the ``DP`` column of the releases before v25.05 is the expert data parallelism ``dp/ep``
  (8 GPUs at tp 4 with DP 1 and EP 2 only add up with dp 2); the data parallelism written
  here is ``GPUs / (tp·pp·cp)``.
* those releases state no ``ETP``: NeMo then ran Megatron-Core's default, expert-tensor
  parallelism equal to tp.  From v25.05 the H100 table states ETP 1 (whole experts).
* the small-GPU rows are weak-scaling proxies with 2-32 layers and sequence 4096 or 8192:
  the table's layers and sequence are kept.
* a table re-published unchanged by a later release is one measurement, kept once with its
  first release; a configuration measured again (other step times) is kept for each.

GB200 rows are ``dgxc-gb200.csv``'s (``build_gb200_table.py``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from build_table import find_data, write_table

HERE = Path(__file__).resolve().parent
CONFIG_HEADER = re.compile(r"^\|\s*GPUs\s*\|\s*SeqLen")
STEP_ROW = re.compile(r"^\|\s*Training step time \(seconds per step\)\s*\|(.*)$")
GPU_CELL = re.compile(r"(\d+)\s*x?\s*H100")


@dataclass(frozen=True, slots=True)
class GrokRow:
    """One measured H100 run as the map reads it (``vp`` 1: no interleaving)."""

    precision: str
    gpus: int
    tp: int
    pp: int
    cp: int
    ep: int
    expert_tp: int
    vp: int
    dp: int
    mbs: int
    gbs: int
    layers: int
    seq_len: int
    step_time_s: float
    release: str
    source_file: str


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def h100_configs(lines: Sequence[str]) -> dict[int, dict[str, int]]:
    """The H100 configuration table's rows by GPU count (the table after an ``**H100**``
    marker where the README has one for GB200 too, else the only one)."""
    tables, current, platform = [], None, "H100"
    for line in lines:
        if line.startswith("**GB200**"):
            platform = "GB200"
        elif line.startswith("**H100**"):
            platform = "H100"
        if CONFIG_HEADER.match(line):
            current = (platform, _cells(line), [])
            tables.append(current)
        elif current is not None and line.startswith("|") and not line.startswith("|-"):
            current[2].append(_cells(line))
        elif current is not None and not line.startswith("|"):
            current = None
    configs: dict[int, dict[str, int]] = {}
    for platform, header, rows in tables:
        if platform != "H100":
            continue
        for cells in rows:
            named = dict(zip(header, cells, strict=True))
            configs[int(named["GPUs"])] = {k: (1 if v == "NA" else int(v))
                                           for k, v in named.items()}
    return configs


def step_tables(lines: Sequence[str]) -> Iterator[tuple[str, list[int], list[float]]]:
    """Each H100 step-time table: precision, GPU counts and step times in order."""
    header: list[str] | None = None
    for line in lines:
        if line.startswith("|") and "H100" in line and ("BF16" in line or "FP8" in line):
            header = _cells(line)
        match = STEP_ROW.match(line)
        if match and header is not None:
            precision = "fp8" if "FP8" in header[0] else "bf16"
            gpus = [int(GPU_CELL.search(c).group(1)) for c in header[1:] if GPU_CELL.search(c)]
            times = [float(c) for c in _cells(match.group(1)) if c][:len(gpus)]
            yield precision, gpus, times
            header = None


def rows_of(path: Path, release: str) -> list[GrokRow]:
    """The measured H100 rows of one README."""
    lines = path.read_text(encoding="utf-8").splitlines()
    configs = h100_configs(lines)
    rows = []
    for precision, gpus, times in step_tables(lines):
        for count, step in zip(gpus, times, strict=True):
            c = configs[count]
            tp, pp, cp = c["TP"], c["PP"], c["CP"]
            rows.append(GrokRow(precision, count, tp, pp, cp, c["EP"], c.get("ETP", tp),
                                c["VP"], count // (tp * pp * cp), c["MBS"], c["GBS"],
                                c["Layers"], c["SeqLen"], step, release, path.name))
    return rows


def release_of(name: str) -> str:
    """``2025-05-21_v25.01.1__e6afea3a_grok1_README_314b.md`` -> ``v25.01.1``; the
    revised table of 2025-07-23 is named by its date."""
    match = re.search(r"_(v[\d.]+)_", name)
    return match.group(1) if match else name.split("_", 1)[0]


def build(raw: Path) -> list[GrokRow]:
    """Every distinct H100 measurement, earliest README first."""
    seen: set[tuple[object, ...]] = set()
    rows = []
    for path in sorted(raw.glob("*grok1_README*.md")):
        for row in rows_of(path, release_of(path.name)):
            key = tuple(v for k, v in asdict(row).items() if k not in ("release", "source_file"))
            if key not in seen:
                seen.add(key)
                rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the dgxc_benchmarking folder (default: found above "
                        "the repository, or $DISTSIM_SHARED_DATA)")
    parser.add_argument("--out", default=str(HERE / "dgxc-grok-h100.csv"))
    args = parser.parse_args(argv)
    raw = find_data(args.data) / "raw"
    rows = build(raw)
    write_table(rows, Path(args.out))
    print(f"{len(rows)} measured H100 Grok-1 runs -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
