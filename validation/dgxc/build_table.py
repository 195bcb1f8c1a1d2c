"""One clean table of NVIDIA's measured DGX H100 step times for ``distsim validate runs``.

NVIDIA's ``dgxc-benchmarking`` READMEs (every release v24.11.1 … v25.05.05, kept verbatim in
``shared/data/training/dgxc_benchmarking/raw``) publish NeMo/Megatron step times on EOS (DGX
H100 nodes, 8×400 Gb/s InfiniBand rails).  ``dgxc_step_times_wide.csv`` there is a parse of
them; this script derives from it (never editing it) ``dgxc-h100.csv`` beside this file: every
H100 NeMo/Megatron dense pre-training row whose configuration is complete, one per distinct
measurement, with the columns the map ``scenarios/examples/validation/dgxc-h100.yaml`` reads::

    python validation/dgxc/build_table.py [--data DIR] [--out CSV]

What it resolves, each checked against ``raw/``:

* layers / sequence length a table title leaves out come from the model's definition (GPT-3
  175B 96 × 2048, Llama 3.1 8B 32 and 70B 80 × 8192, Nemotron-4 15B 32 and 340B 96 × 4096):
  the READMEs' own config tables and MFU formulas give the same figures.  The 405B "proxy"
  rows of small GPU counts keep their reduced layer count (7/21/42 in v24.11, 8/30/62 in
  v25.04), as the tables write it.
* source typos: ``8.7  5`` s (405B BF16, 96 GPUs, v24.11.1–v25.01.1) is 8.75 s; GBS ``1204``
  (GPT-3 at 512 GPUs, v25.04 config table) is 1024 — dp 16 · mbs 1 · GA 64, and the v25.02
  title of the same measurement says ``GBS=1024``.
* ``partition``: 405B chunks that ``layers`` do not fill evenly (30 or 62 layers over pp 4 ·
  vp 8, 126 over pp 8 · vp 8) are NeMo's split with the embedding and the loss counted as one
  layer each (``account_for_embedding_in_pipeline_split`` / ``..._loss_...`` of its 405B
  recipe): ``layers + 2`` over the chunks, distsim's ``partition: embedding``.
* the Nemotron-4 H100 rows of v25.05 onwards, which the parse missed (their tables have no
  header line), are read from the raw README's H100 specification and performance tables.

Repeats: a README often re-publishes an older release's table unchanged.  A row whose model,
precision, GPU count and step time match an earlier release's, in a table whose every step
time matches too, is that measurement copied: kept once, with the earliest release.  A
configuration measured anew (another table of times) is kept for every release that measured
it — each is a real run of that configuration, and the target is every row.  Where copies of
one measurement state different configurations, the earliest is kept and the conflict is
printed (the v25.04 GPT-3 config table writes VP 6 beside the v25.02 times published under
VP=12).

Left out, with the reason printed: Grok-1 (mixture of experts with EP and CP), the JAX
(MaxText, PaxML) rows (FSDP under XLA, another stack), fine-tuning (LoRA trains no base
weights; SFT runs packed variable-length sequences), and GB200 rows.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from distsim_gpu.simcore.fileio import atomic_write_text

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WIDE = "dgxc_step_times_wide.csv"
CONFIG_TABLES = "dgxc_config_tables.csv"
DATASET = Path("training") / "dgxc_benchmarking"

#: (layers, seq_len) of the full models, for rows whose table states neither: GPT-3 175B
#: (Brown et al. 2020, Table 2.1: 96 layers, context 2048), Llama 3.1 (Llama Team 2024,
#: "The Llama 3 Herd of Models", Table 3: 32 / 80 / 126 layers; pre-trained at 8192),
#: Nemotron-4 15B (arXiv 2402.16819, Table 1: 32 layers, 4096) and 340B (arXiv 2406.11704,
#: Table 1: 96 layers, 4096).  The dgxc READMEs' config tables and MFU examples agree.
FULL_MODEL = {"gpt3-175b": (96, 2048), "llama3.1-8b": (32, 8192), "llama3.1-70b": (80, 8192),
              "llama3.1-405b": (126, 8192), "nemotron4-15b": (32, 4096),
              "nemotron4-340b": (96, 4096)}
#: Cells the source misprints, as (column, written) -> value.
TYPOS = {("step_time_s", "8.7  5"): "8.75", ("gbs", "1204"): "1024"}
COLUMNS = ("model", "precision", "gpus", "tp", "pp", "cp", "vp", "dp", "mbs", "gbs", "layers",
           "seq_len", "partition", "step_time_s", "release", "source_file")


@dataclass(frozen=True, slots=True)
class Row:
    """One measured run as the map reads it (``vp`` 1: no interleaving)."""

    model: str
    precision: str
    gpus: int
    tp: int
    pp: int
    cp: int
    vp: int
    dp: int
    mbs: int
    gbs: int
    layers: int
    seq_len: int
    partition: str
    step_time_s: float
    release: str
    source_file: str

    @property
    def configuration(self) -> tuple[object, ...]:
        return tuple(getattr(self, c) for c in COLUMNS[:13])


class RowError(ValueError):
    """A source row that cannot become a complete configuration (the message says why)."""


def model_preset(family: str, title: str, size: str) -> str | None:
    """The distsim model preset of a table, or None when it is not a dense pre-training run."""
    text = f"{family} {title}".lower()
    if "finetun" in text or "grok" in text:
        return None
    if "nemo megatron" in text:
        return "gpt3-175b"
    size = size.lower()
    if re.search(r"llama ?3\.1", text) and size in ("8b", "70b", "405b"):
        return f"llama3.1-{size}"
    if "nemotron4" in text and size in ("15b", "340b"):
        return f"nemotron4-{size}"
    return None


def exclusion(record: dict[str, str]) -> str | None:
    """Why a wide-table row is left out, or None to keep it."""
    if record["gpu_type"] != "H100":
        return f"{record['gpu_type']}: not the DGX H100 cluster"
    if not record["framework"].startswith("NeMo"):
        return f"{record['framework']}: JAX under XLA, not the Megatron stack"
    text = f"{record['model_family']} {record['table_title']}".lower()
    if "grok" in text:
        return "Grok-1: mixture of experts with EP and CP"
    if "finetun" in text:
        return "fine-tuning: LoRA trains no base weights, SFT packs variable-length sequences"
    if model_preset(record["model_family"], record["table_title"], record["model_size"]) is None:
        return "unknown model"
    return None


def _whole(text: str, name: str, default: int | None = None) -> int:
    text = TYPOS.get((name, text.strip()), text).strip()
    if text.lower() in ("", "na", "n/a", "none"):
        if default is None:
            raise RowError(f"{name} is missing")
        return default
    value = float(text)
    if not value.is_integer() or value < 1:
        raise RowError(f"{name} {text!r} is not a whole number >= 1")
    return int(value)


def partition_for(layers: int, chunks: int) -> str:
    """``uniform`` when the layers fill the pipeline's chunks evenly, else NeMo's split with
    the embedding and the loss as one layer each (which must then be even)."""
    if layers % chunks == 0:
        return "uniform"
    if (layers + 2) % chunks == 0:
        return "embedding"
    raise RowError(f"{layers} layers (+2) do not split into pp·vp = {chunks} chunks")


def _size_of(record: dict[str, str]) -> str:
    if record["model_size"]:
        return record["model_size"]
    found = re.search(r"(\d+)b\b", record["table_title"], re.IGNORECASE)
    return f"{found.group(1)}B" if found else ""


def row_from_record(record: dict[str, str]) -> Row:
    """A complete row from one wide-table record (a :class:`RowError` when it is not)."""
    preset = model_preset(record["model_family"], record["table_title"], _size_of(record))
    if preset is None:
        raise RowError("no model preset")
    full_layers, full_seq = FULL_MODEL[preset]
    gpus = _whole(record["gpus"], "gpus")
    tp, pp = _whole(record["tp"], "tp"), _whole(record["pp"], "pp")
    cp, vp = _whole(record["cp"], "cp", 1), _whole(record["vp"], "vp", 1)
    mbs, gbs = _whole(record["mbs"], "mbs"), _whole(record["gbs"], "gbs")
    layers = _whole(record["layers"], "layers", full_layers)
    seq_len = _whole(record["seq_len"], "seq_len", full_seq)
    step = float(TYPOS.get(("step_time_s", record["step_time_s"].strip()),
                           record["step_time_s"]))
    return make_row(preset, record["dtype"], (gpus, tp, pp, cp, vp), (mbs, gbs),
                    (layers, seq_len), step, (record["release"], record["source_file"]))


def make_row(preset: str, dtype: str, degrees: Sequence[int], batches: Sequence[int],
             shape: Sequence[int], step_time_s: float, origin: Sequence[str]) -> Row:
    """A checked row: the GPUs split whole into tp·pp·cp·dp and the batch into dp·mbs."""
    gpus, tp, pp, cp, vp = degrees
    mbs, gbs = batches
    if gpus % (tp * pp * cp):
        raise RowError(f"{gpus} GPUs do not split into tp·pp·cp = {tp * pp * cp}")
    dp = gpus // (tp * pp * cp)
    if gbs % (mbs * dp):
        raise RowError(f"global batch {gbs} is not a multiple of mbs·dp = {mbs * dp}")
    if not step_time_s > 0:
        raise RowError(f"step time {step_time_s}")
    return Row(preset, dtype.strip().lower(), gpus, tp, pp, cp, vp, dp, mbs, gbs, shape[0],
               shape[1], partition_for(shape[0], pp * vp), step_time_s, origin[0], origin[1])


# ----------------------------------------------------------------- Nemotron-4 from raw/

_SPEC = re.compile(r"^\|\s*(15b|340b)\s*\|\s*BF16/FP8\s*\|((?:[^|]*\|){12})", re.IGNORECASE)
_PERF = re.compile(r"^\|\s*Nemotron4 (15b|340b) (BF16|FP8) H100\s*\|\s*(\d+)x H100",
                   re.IGNORECASE)
_STEP = re.compile(r"^\|?\s*Training step time \(seconds per step\)\s*\|\s*([\d.]+)")


def nemotron_raw_rows(text: str, release: str, source_file: str) -> list[Row]:
    """The H100 rows of a v25.05-style Nemotron README: its "H100 specifications" table
    (GPUs SeqLen Layers TP PP CP EP DP VP MBS GBS GA) joined to its performance tables."""
    h100 = text.split("# GB200", 1)[0]
    specs = {}
    for line in h100.splitlines():
        found = _SPEC.match(line)
        if found:
            cells = [c.strip() for c in found.group(2).split("|")[:12]]
            specs[(found.group(1).lower(), int(cells[0]))] = cells
    rows, pending = [], None
    for line in text.splitlines():
        found = _PERF.match(line)
        if found:
            pending = (found.group(1).lower(), found.group(2), int(found.group(3)))
            continue
        step = _STEP.match(line)
        if step and pending is not None:
            size, dtype, gpus = pending
            cells = specs.get((size, gpus))
            if cells is None:
                raise RowError(f"no H100 specification row for {size} at {gpus} GPUs")
            seq, layers, tp, pp, cp, _ep, _dp, vp, mbs, gbs = cells[1:11]
            rows.append(make_row(
                f"nemotron4-{size}", dtype,
                (gpus, int(tp), int(pp), int(cp), _whole(vp, "vp", 1)),
                (int(mbs), int(gbs)), (int(layers), int(seq)), float(step.group(1)),
                (release, source_file)))
            pending = None
    return rows


# ----------------------------------------------------------------------------- the table


def _release_order(release: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", release)[:3])


def releases_by_date(index_path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Per raw file: (commit date, version numbers), the order releases came out in."""
    order = {}
    for line in index_path.read_text(encoding="utf-8").splitlines():
        parts = line.split("|")
        if len(parts) >= 5:
            order[parts[0]] = (parts[3], _release_order(parts[4]))
    return order


def measurements(tables: Iterable[Sequence[Row]]) -> list[tuple[Row, tuple[object, ...]]]:
    """Each row with what makes it one measurement: model, precision, GPU count, step time
    and every (GPU count, step time) of its source table (a copied table matches them all)."""
    out = []
    for table in tables:
        series = tuple(sorted((r.gpus, r.step_time_s) for r in table))
        out += [(r, (r.model, r.precision, r.gpus, r.step_time_s, series)) for r in table]
    return out


def deduplicate(rows: Iterable[tuple[Row, tuple[object, ...]]],
                order: dict[str, tuple[str, tuple[int, ...]]]) -> tuple[list[Row], list[str]]:
    """One row per measurement, the earliest release's; conflicting copies are reported."""
    kept: dict[tuple[object, ...], Row] = {}
    notes = []
    for row, key in sorted(rows, key=lambda pair: order.get(pair[0].source_file, ("", ()))):
        first = kept.setdefault(key, row)
        if first is not row and first.configuration != row.configuration:
            changed = [c for c in COLUMNS[:13] if getattr(first, c) != getattr(row, c)]
            notes.append(f"{row.release} {row.model} {row.precision} {row.gpus} GPUs "
                         f"{row.step_time_s} s: republished with "
                         + ", ".join(f"{c} {getattr(row, c)} (was {getattr(first, c)})"
                                     for c in changed) + f"; kept {first.release}'s")
    ordered = sorted(kept.values(), key=lambda r: (r.model, r.precision, r.gpus,
                                                   order.get(r.source_file, ("", ()))))
    return ordered, notes


def build(data: Path) -> tuple[list[Row], Counter[str], list[str]]:
    """The table's rows, the count of rows left out by reason, and the notes on repeats."""
    left_out: Counter[str] = Counter()
    tables: dict[tuple[str, ...], list[Row]] = {}
    with open(data / WIDE, newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            reason = exclusion(record)
            if reason is None:
                try:
                    table = (record["source_file"], record["table_title"])
                    tables.setdefault(table, []).append(row_from_record(record))
                    continue
                except (RowError, ValueError) as error:
                    reason = f"incomplete: {error}"
            left_out[reason] += 1
    index = data / "raw_index.txt"
    for raw in sorted((data / "raw").glob("*_nemotron_README.md")):
        release = raw.name.split("_", 1)[1].rsplit("_nemotron", 1)[0].split("__")[0]
        for row in nemotron_raw_rows(raw.read_text(encoding="utf-8"), release, raw.name):
            tables[(raw.name, row.model, row.precision)] = [row]
    rows = measurements(tables.values())
    kept, notes = deduplicate(rows, releases_by_date(index) if index.is_file() else {})
    left_out["repeat of an earlier release's measurement"] = len(rows) - len(kept)
    return kept, left_out, notes


def write_table(rows: Sequence[Any], path: Path) -> None:
    """``rows`` (dataclass records of one type) as a CSV at ``path``, whole or not at all."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[f.name for f in fields(type(rows[0]))],
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(row) for row in rows)
    atomic_write_text(path, buffer.getvalue())


def find_data(given: str | None) -> Path:
    """The dataset folder: ``--data``, ``$DISTSIM_SHARED_DATA`` or a ``shared/data`` above."""
    candidates = [Path(given)] if given else []
    if os.environ.get("DISTSIM_SHARED_DATA"):
        candidates.append(Path(os.environ["DISTSIM_SHARED_DATA"]) / DATASET)
    candidates += [parent / "shared" / "data" / DATASET for parent in REPO.parents]
    for candidate in candidates:
        if (candidate / WIDE).is_file():
            return candidate
    sys.exit(f"no {WIDE} found (looked in {', '.join(map(str, candidates))}); pass --data")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the dgxc_benchmarking folder of shared/data/training")
    parser.add_argument("--out", default=str(HERE / "dgxc-h100.csv"))
    args = parser.parse_args(argv)
    rows, left_out, notes = build(find_data(args.data))
    write_table(rows, Path(args.out))
    print(f"{len(rows)} rows -> {args.out}")
    for (model, precision), count in sorted(Counter((r.model, r.precision)
                                                    for r in rows).items()):
        print(f"  {model:16} {precision:5} {count:3}")
    print("left out:")
    for reason, count in left_out.most_common():
        print(f"  {count:4}  {reason}")
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
