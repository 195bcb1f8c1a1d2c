"""NVIDIA's measured GB200 NVL72 step times as one table for ``distsim validate runs``.

The same dgxc-benchmarking READMEs as :mod:`build_table` (kept verbatim in
``shared/data/training/dgxc_benchmarking/raw``) publish GB200 tables from release v25.05 on:
Llama 3.1 405B (tp 4, pp 8, cp 2, vp 8), Grok-1 314B (tp 4, ep 8, expert-tp 4) and
Nemotron-4 340B (tp 8, pp 4, vp 12), each in BF16 and FP8 at 128, 256 and 512 GPUs.  This
script derives ``dgxc-gb200.csv`` beside it from ``dgxc_step_times_wide.csv`` there (never
editing it), with the columns ``scenarios/examples/validation/dgxc-gb200.yaml`` reads::

    python validation/dgxc/build_gb200_table.py [--data DIR] [--out CSV]

What it resolves, each checked against ``raw/``:

* the Nemotron-4 GB200 rows carry no configuration in the wide table; their README's "GB200"
  configuration table (``dgxc_config_tables.csv``, matched on GPUs and global batch) gives tp
  8, pp 4, vp 12, mbs 1 for both its weak-scaling (global batch 32·GPUs/128) and its
  strong-scaling (global batch 512) tables.
* Grok-1 writes expert-tensor parallelism 4 beside tp 4: Megatron-Core's default (experts
  split like the dense layers), which is what distsim's ``ep`` with ``tp`` runs.
* the 405B's 126 layers over pp 8 · vp 8 = 64 chunks are NeMo's split that counts the
  embedding and the loss as one layer each (``partition: embedding``, as on H100).

Repeats: later releases re-publish the v25.05 tables unchanged; each measurement is kept
once, with the earliest release (the wide table lists releases in the order they came out).
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from build_table import (
    CONFIG_TABLES,
    FULL_MODEL,
    WIDE,
    RowError,
    find_data,
    partition_for,
    write_table,
)

HERE = Path(__file__).resolve().parent
#: Model presets of the GB200 tables, by the wide table's model family and size.
PRESETS = {("llama3.1", "405b"): "llama3.1-405b", ("grok1", "314b"): "grok-1",
           ("nemotron", "340b"): "nemotron4-340b"}
#: Grok-1's shape (xai-org/grok-1 README: 64 layers, context 8192).
FULL_LAYERS_SEQ = {**FULL_MODEL, "grok-1": (64, 8192)}


@dataclass(frozen=True, slots=True)
class Gb200Row:
    """One measured GB200 run as the map reads it (``ep`` 1 and ``vp`` 1: none)."""

    model: str
    precision: str
    gpus: int
    tp: int
    pp: int
    cp: int
    ep: int
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


def _whole(text: str, default: int | None = None) -> int:
    text = text.strip()
    if text.lower() in ("", "na", "n/a"):
        if default is None:
            raise RowError("a parallel degree is missing")
        return default
    return int(float(text))


def nemotron_configs(data: Path) -> dict[tuple[str, int, int], dict[str, str]]:
    """The Nemotron-4 GB200 configuration rows, by (source file, GPUs, global batch)."""
    configs = {}
    with open(data / CONFIG_TABLES, newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            if "nemotron" in record["file"] and "GB200" in record["gpu_context"]:
                key = (record["file"], int(record["GPUs"]), int(record["GBS"]))
                configs[key] = record
    return configs


def gb200_row(record: dict[str, str], configs: dict[tuple[str, int, int], dict[str, str]]
              ) -> Gb200Row:
    """A complete row from one GB200 record of the wide table."""
    preset = PRESETS[(record["model_family"].lower(), record["model_size"].lower())]
    gpus = int(record["gpus"])
    if preset == "nemotron4-340b":
        gbs_text = record["gbs"] or record["table_title"]
        config = configs.get((record["source_file"], gpus, int(record["gbs"] or 0)))
        if config is None:
            raise RowError(f"no GB200 configuration for {gpus} GPUs, batch {gbs_text}")
        record = {**record, "tp": config["TP"], "pp": config["PP"], "cp": config["CP"],
                  "vp": config["VP"], "mbs": config["MBS"], "ep": ""}
    tp, pp, cp = _whole(record["tp"]), _whole(record["pp"]), _whole(record["cp"], 1)
    ep, vp, mbs = _whole(record["ep"], 1), _whole(record["vp"], 1), _whole(record["mbs"])
    gbs = int(record["gbs"])
    layers, seq_len = FULL_LAYERS_SEQ[preset]
    if gpus % (tp * pp * cp) or gbs % (gpus // (tp * pp * cp) * mbs):
        raise RowError(f"{gpus} GPUs, batch {gbs} do not split into tp {tp} pp {pp} cp {cp}")
    return Gb200Row(preset, record["dtype"].lower(), gpus, tp, pp, cp, ep, vp,
                    gpus // (tp * pp * cp), mbs, gbs, layers, seq_len,
                    partition_for(layers, pp * vp), float(record["step_time_s"]),
                    record["release"], record["source_file"])


def build(data: Path) -> list[Gb200Row]:
    """Every distinct GB200 measurement, the earliest release's copy."""
    configs = nemotron_configs(data)
    kept: dict[tuple[object, ...], Gb200Row] = {}
    with open(data / WIDE, newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            if record["gpu_type"] == "GB200":
                row = gb200_row(record, configs)
                kept.setdefault((row.model, row.precision, row.gpus, row.gbs,
                                 row.step_time_s), row)
    return sorted(kept.values(), key=lambda r: (r.model, r.precision, r.gbs, r.gpus))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data", help="the dgxc_benchmarking folder of shared/data/training")
    parser.add_argument("--out", default=str(HERE / "dgxc-gb200.csv"))
    args = parser.parse_args(argv)
    rows = build(find_data(args.data))
    write_table(rows, Path(args.out))
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
