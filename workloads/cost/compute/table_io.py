"""Cost tables on disk: where they were measured (:class:`TableHeader`), what they measured
(:class:`CostRow`), and their YAML and CSV forms (:func:`read_cost_table`,
:func:`write_cost_table`).

A row is one measured time of ``kind`` × ``pass`` at a shape.  ``kind`` is a whole layer
(``transformer_layer``, ``moe_layer``), an edge of the model (``embedding``, ``loss``) or
one operator of a layer by the name :mod:`~distsim_gpu.workloads.cost.compute.operators` gives
it (``qkv``, ``attn_softmax``, ``mlp_fc1``, ...): a profile fills the operators it measured
and the roofline the rest (:class:`~distsim_gpu.workloads.cost.compute.table_costs.TableCosts`).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.simcore.config import check_choice, check_keys, check_whole
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.fileio import atomic_write_text, read_input_text
from distsim_gpu.simcore.units import parse_duration
from distsim_gpu.simcore.yamlfile import BoundedLoader
from distsim_gpu.workloads.specs.gpus import canonical_gpu_name
from distsim_gpu.workloads.specs.recompute import RECOMPUTE_TABLE_PASSES

__all__ = ["TABLE_PASSES", "CostRow", "TableHeader", "read_cost_table", "write_cost_table"]

TABLE_PASSES = ("fwd", "bwd", *RECOMPUTE_TABLE_PASSES)
_FLOAT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


@dataclass(frozen=True, slots=True)
class TableHeader:
    """Where a cost table was measured.  ``software``, ``date`` and ``source`` are required."""

    software: str
    date: str
    source: str
    gpu: str = ""
    precision: str = ""
    model: str = ""
    notes: str = ""


@dataclass(frozen=True, slots=True)
class CostRow:
    """One measured time: ``kind`` × ``pass_`` at a shape, on ``gpu``, in seconds.

    ``kind``: ``transformer_layer``, ``moe_layer``, ``embedding``, ``loss`` or any finer
    kernel name; ``pass_``: one of :data:`TABLE_PASSES`.
    """

    gpu: str
    kind: str
    pass_: str
    micro_batch: int
    seq_len: int
    hidden: int
    tp: int
    time_s: float
    sequence_parallel: bool = False

    @property
    def tokens(self) -> int:
        """micro_batch · seq_len."""
        return self.micro_batch * self.seq_len


_HEADER_FIELDS = tuple(f.name for f in fields(TableHeader))
_REQUIRED_HEADER = ("software", "date", "source")
_COLUMNS = ("gpu", "kind", "pass", "micro_batch", "seq_len", "hidden", "tp",
            "sequence_parallel", "time_s")
_REQUIRED_COLUMNS = ("kind", "pass", "micro_batch", "seq_len", "hidden", "tp", "time_s")
_INT_COLUMNS = ("micro_batch", "seq_len", "hidden", "tp")


def read_cost_table(path: str | os.PathLike[str]) -> tuple[TableHeader, tuple[CostRow, ...]]:
    """Read a YAML (``.yaml``/``.yml``) or CSV (``.csv``) cost table.

    YAML: top-level header fields (``software``, ``date``, ``source`` required; ``gpu``,
    ``precision``, ``model``, ``notes`` optional) and ``rows:``, a list of mappings with
    the columns below.  CSV: header fields as leading ``# key: value`` comment lines, then
    a column line, then rows.  Columns: ``kind``, ``pass``, ``micro_batch``, ``seq_len``,
    ``hidden``, ``tp``, ``time_s`` (a number of seconds or a duration such as
    ``"1.2 ms"``), optional ``gpu`` (default: the header's) and ``sequence_parallel``
    (default false).  Malformed content raises :class:`ParseError` with the file and line;
    an unreadable file :class:`ConfigError` (a file not UTF-8: :class:`ParseError`).
    """
    name = os.fspath(path)
    text = read_input_text(name, "cost table")  # bounded, UTF-8 or a clear error
    if _table_format(name) == ".csv":
        return _read_csv(text, name)
    return _read_yaml(text, name)


def write_cost_table(path: str | os.PathLike[str], header: TableHeader,
                     rows: Iterable[CostRow]) -> None:
    """Write a cost table (format by suffix, as :func:`read_cost_table` reads it).

    Written atomically; times are written with ``repr`` so they read back exactly.
    """
    name = os.fspath(path)
    suffix = _table_format(name)
    rows = tuple(rows)
    if suffix in (".yaml", ".yml"):
        doc: dict[str, Any] = {f: getattr(header, f) for f in _HEADER_FIELDS
                               if getattr(header, f) or f in _REQUIRED_HEADER}
        doc["rows"] = [_row_dict(r) for r in rows]
        atomic_write_text(name, yaml.safe_dump(doc, sort_keys=False, default_flow_style=None,
                                               width=200))
    else:
        buffer = io.StringIO()
        buffer.write("# distsim cost table\n")
        for f in _HEADER_FIELDS:
            value = getattr(header, f)
            if value or f in _REQUIRED_HEADER:
                buffer.write(f"# {f}: {_one_line(value)}\n")
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for r in rows:
            d = _row_dict(r)
            writer.writerow([d[c] for c in _COLUMNS])
        atomic_write_text(name, buffer.getvalue())


def _table_format(name: str) -> str:
    """The file's suffix, lower-cased, when it is one a cost table is written in."""
    return check_choice(Path(name).suffix, (".yaml", ".yml", ".csv"), key=None, source=name,
                        what="cost table format", fold_case=True)


def _one_line(value: str) -> str:
    return " ".join(str(value).split())


def _row_dict(row: CostRow) -> dict[str, Any]:
    return {"gpu": row.gpu, "kind": row.kind, "pass": row.pass_,
            "micro_batch": row.micro_batch, "seq_len": row.seq_len, "hidden": row.hidden,
            "tp": row.tp, "sequence_parallel": row.sequence_parallel,
            "time_s": row.time_s}


def _read_yaml(text: str, name: str) -> tuple[TableHeader, tuple[CostRow, ...]]:
    loader = BoundedLoader(text)  # nesting, aliases and integers bounded
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise ParseError(f"malformed YAML: {error.problem or error}", source=name,
                         line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as error:
        raise ParseError(f"malformed YAML: {error}", source=name) from None
    finally:
        loader.dispose()
    if not isinstance(data, Mapping) or node is None:
        raise ParseError("a cost table must be a mapping with header fields and 'rows'",
                         source=name, line=1)
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    values = {str(k.value): v for k, v in node.value}
    check_keys(data, (*_HEADER_FIELDS, "rows"), source=name, lines=lines, error=ParseError)
    header = _header({k: v for k, v in data.items() if k != "rows"}, name, lines)
    raw_rows = data.get("rows")
    if not isinstance(raw_rows, list) or not raw_rows:
        raise ParseError("'rows' must be a non-empty list of measurements", source=name,
                         key="rows", line=lines.get("rows", 1))
    row_nodes = values["rows"].value
    rows = []
    for index, (raw, row_node) in enumerate(zip(raw_rows, row_nodes)):
        line = row_node.start_mark.line + 1
        if not isinstance(raw, Mapping):
            raise ParseError("a row must be a mapping of column to value", source=name,
                             key=f"rows[{index}]", line=line)
        rows.append(_row({str(k): v for k, v in raw.items()}, header, name, line,
                         f"rows[{index}]"))
    return header, _check_duplicates(rows, name, [n.start_mark.line + 1 for n in row_nodes])


def _read_csv(text: str, name: str) -> tuple[TableHeader, tuple[CostRow, ...]]:
    header_data: dict[str, Any] = {}
    header_lines: dict[str, int] = {}
    columns: list[str] | None = None
    rows: list[CostRow] = []
    row_lines: list[int] = []
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line:
            continue
        if line.startswith("#"):
            body = line[1:].strip()
            key, sep, value = body.partition(":")
            if columns is None and sep and key.strip().isidentifier():
                key = check_choice(key.strip(), _HEADER_FIELDS, key=None, source=name,
                                   what="header field", line=number, error=ParseError)
                header_data[key] = value.strip()
                header_lines[key] = number
            continue
        try:
            cells = next(csv.reader([raw_line]))
        except csv.Error as error:  # (a field past csv's 128 KiB limit, a NUL byte)
            raise ParseError(f"cannot read this CSV line: {error}", source=name,
                             line=number) from None
        cells = [c.strip() for c in cells]
        if columns is None:
            for column in cells:
                check_choice(column, _COLUMNS, key=None, source=name, what="column",
                             line=number, error=ParseError)
            missing = [c for c in _REQUIRED_COLUMNS if c not in cells]
            if missing:
                raise ParseError(f"missing column(s) {', '.join(missing)}", source=name,
                                 line=number, hint="columns: " + ", ".join(_COLUMNS))
            columns = cells
            header = _header(header_data, name, header_lines)
            continue
        if len(cells) != len(columns):
            raise ParseError(f"expected {len(columns)} cells, found {len(cells)}",
                             source=name, line=number, hint=", ".join(columns))
        rows.append(_row(dict(zip(columns, cells)), header, name, number, None))
        row_lines.append(number)
    if columns is None:
        raise ParseError("no column line", source=name, line=1,
                         hint="expected a line such as " + ",".join(_COLUMNS))
    if not rows:
        raise ParseError("no measurements", source=name)
    return header, _check_duplicates(rows, name, row_lines)


def _header(data: Mapping[str, Any], name: str, lines: Mapping[str, int]) -> TableHeader:
    values: dict[str, str] = {}
    for key in _HEADER_FIELDS:
        value = data.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            if key in _REQUIRED_HEADER:
                raise ParseError(f"missing header field {key!r}", source=name, line=1,
                                 hint="a cost table records where it was measured: "
                                      "gpu, software, date, source")
            continue
        if isinstance(value, (_dt.date, _dt.datetime)):
            value = value.isoformat()
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ParseError(f"header field must be text, got {value!r}", source=name,
                             key=key, line=lines.get(key))
        values[key] = str(value).strip()
    if "gpu" in values:
        values["gpu"] = canonical_gpu_name(values["gpu"])
    return TableHeader(**values)


def _row(data: Mapping[str, Any], header: TableHeader, name: str, line: int,
         key: str | None) -> CostRow:
    def where(column: str) -> str:
        return f"{key}.{column}" if key else column

    def fail(message: str, column: str, hint: str | None = None) -> ParseError:
        return ParseError(message, source=name, line=line, key=where(column), hint=hint)

    check_keys(data, _COLUMNS, prefix=key or "", source=name, what="column", line=line,
               error=ParseError)
    for column in _REQUIRED_COLUMNS:
        if column not in data or data[column] in (None, ""):
            raise fail("missing value", column)
    gpu = data.get("gpu") or header.gpu
    if not gpu:
        raise fail("no GPU: give a gpu column or a gpu header field", "gpu")
    kind = str(data["kind"]).strip()
    if not kind:
        raise fail("empty kind", "kind")
    pass_ = check_choice(str(data["pass"]).strip(), TABLE_PASSES, key=where("pass"),
                         source=name, line=line, fold_case=True, error=ParseError)
    ints: dict[str, int] = {}
    for column in _INT_COLUMNS:
        value = data[column]
        if isinstance(value, str) and re.fullmatch(r"[0-9]{1,18}", value.strip()):
            value = int(value.strip())  # (ASCII digits only; 5,000 would pass int()'s limit)
        ints[column] = check_whole(value, key=where(column), source=name, line=line,
                                   error=ParseError)
    sp_raw = data.get("sequence_parallel", False)
    if isinstance(sp_raw, str):
        text = sp_raw.strip().lower()
        if text not in ("true", "false", "1", "0", "yes", "no", ""):
            raise fail(f"must be true or false, got {sp_raw!r}", "sequence_parallel")
        sp = text in ("true", "1", "yes")
    elif isinstance(sp_raw, bool):
        sp = sp_raw
    else:
        raise fail(f"must be true or false, got {sp_raw!r}", "sequence_parallel")
    raw_time = data["time_s"]
    if isinstance(raw_time, str) and _FLOAT.match(raw_time):
        raw_time = float(raw_time)
    try:
        time_s = parse_duration(raw_time, allow_zero=False)
    except ParseError as error:
        raise fail(error.message, "time_s", error.hint) from None
    return CostRow(canonical_gpu_name(str(gpu)), kind, pass_, ints["micro_batch"],
                   ints["seq_len"], ints["hidden"], ints["tp"], time_s, sp)


def _row_key(row: CostRow) -> tuple[Any, ...]:
    return (row.gpu, row.kind, row.pass_, row.micro_batch, row.seq_len, row.hidden, row.tp,
            row.sequence_parallel)


def _check_duplicates(rows: list[CostRow], name: str,
                      lines: Sequence[int]) -> tuple[CostRow, ...]:
    seen: dict[tuple[Any, ...], int] = {}
    for row, line in zip(rows, lines):
        key = _row_key(row)
        if key in seen:
            raise ParseError(f"duplicate measurement (first on line {seen[key]})",
                             source=name, line=line)
        seen[key] = line
    return tuple(rows)


