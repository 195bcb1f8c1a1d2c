"""A table of measured training runs and the map that turns its rows into scenarios.

A user's CSV holds one measured run per row (model shape, strategy, cluster size, the
iteration time).  A small YAML **map** says how its columns become scenario keys::

    scenario: vtrain-a100.yaml          # the base scenario (a path beside the map), or
                                        # the scenario itself as a mapping
    measured: {column: "iteration time (ms)", unit: ms}
    group_by: "Parameters (billion)"    # Spearman rank correlation within each group
    columns:
      "hidden size": model.hidden       # a column sets a dotted scenario key, or several,
      "# GPUs":                         # each with transforms applied in this order:
        - {key: cluster.nodes, divide: 8, round: up}       # multiply, divide, round
        - {key: cluster.gpus_per_node, at_most: 8}          # (up/down/nearest), at_least,
                                                            # at_most, values (a lookup)
    set: {training.recompute: full}     # keys every row shares (optional)
    fit:                                # what --fit may move, with bounds (optional;
      compute.matmul_efficiency: {low: 0.3, high: 1.0}     # default: the roofline's GEMM
      compute.launch_overhead: {low: 1.0e-6, high: 1.0e-4, log: true}   # and memory
                                                            # efficiency and launch floor

Malformed input is a :class:`~simcore.errors.ConfigError` naming the map or the table, the
line and what would be valid.  :mod:`scenarios.fit.validate_runs` simulates the rows.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.fit.fitting import Parameter
from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_number,
)
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError
from distsim_gpu.simcore.fileio import read_input_text
from distsim_gpu.simcore.units import parse_duration
from distsim_gpu.simcore.yamlfile import line_of, read_yaml

__all__ = ["DEFAULT_FIT", "ColumnRule", "RunRow", "RunsMap", "column_setting", "read_map",
           "read_runs"]

MAP_KEYS = ("scenario", "measured", "group_by", "label", "columns", "set", "fit")
RULE_KEYS = ("key", "multiply", "divide", "round", "at_least", "at_most", "values")
ROUNDING = ("up", "down", "nearest")
#: What ``--fit`` moves when the map names nothing: the roofline's achieved GEMM and
#: memory-bandwidth fractions and its per-kernel launch floor (physical figures whose
#: sources are in workloads.cost.compute; the bounds span what real GPUs reach).
DEFAULT_FIT: Mapping[str, tuple[float, float, bool]] = {
    "compute.matmul_efficiency": (0.3, 1.0, False),
    "compute.memory_efficiency": (0.3, 1.0, False),
    "compute.launch_overhead": (1e-7, 1e-4, True),
}


# --------------------------------------------------------------------------- the map


@dataclass(frozen=True, slots=True)
class ColumnRule:
    """How one table column sets one scenario key (transforms in field order)."""

    column: str
    key: str
    multiply: float = 1.0
    divide: float = 1.0
    round: str | None = None
    at_least: float | None = None
    at_most: float | None = None
    values: Mapping[str, Any] | None = None
    line: int | None = None  # in the map

    def apply(self, cell: Any, where: str) -> Any:
        """The scenario value for a cell (``where``: ``TABLE:line`` for errors)."""
        if self.values is not None:
            if str(cell) not in self.values:
                raise ConfigError(f"column {self.column!r}: no value for {_brief(cell)} in the "
                                  f"map's values", source=where,
                                  hint="valid: " + ", ".join(map(str, self.values)))
            return self.values[str(cell)]
        if self.multiply == 1 and self.divide == 1 and self.round is None and (
                self.at_least is None and self.at_most is None):
            return cell
        if not isinstance(cell, (int, float)) or not math.isfinite(cell):
            raise ConfigError(f"column {self.column!r}: {_brief(cell)} is not a number",
                              source=where, hint=f"the map transforms it for {self.key}")
        try:  # (an int of thousands of digits has no float)
            value = float(cell) * self.multiply / self.divide
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"column {self.column!r}: {_brief(cell)} transformed for "
                              f"{self.key} is beyond a double's range", source=where,
                              hint="a number of the column's unit, as the map expects")
        value = {"up": math.ceil, "down": math.floor, "nearest": round,
                 None: lambda x: x}[self.round](value)
        if self.at_least is not None:
            value = max(value, self.at_least)
        if self.at_most is not None:
            value = min(value, self.at_most)
        return int(value) if float(value).is_integer() else value


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True, slots=True)
class RunsMap:
    """A parsed map (module docstring); ``base`` is the base scenario mapping."""

    source: str
    base: Mapping[str, Any]
    base_source: str
    base_dir: str
    rules: tuple[ColumnRule, ...]
    measured_column: str
    seconds_per_unit: float
    group_by: str | None = None
    label: str | None = None
    constants: tuple[tuple[str, Any], ...] = ()
    fit: tuple[Parameter, ...] = ()
    lines: Mapping[str, int] = field(default_factory=dict, repr=False)


def read_map(path: str | os.PathLike[str]) -> RunsMap:
    """Read and check a map file (module docstring)."""
    source = os.fspath(path)
    data, lines = read_yaml(source, "map")
    where = _Where(source, lines)
    data = where.mapping(data, "")
    where.keys(data, MAP_KEYS, "")
    for required in ("scenario", "measured", "columns"):
        if required not in data:
            raise ConfigError(f"the map needs '{required}'", source=source,
                              hint="see distsim validate runs --help")
    base, base_source, base_dir = _base(data["scenario"], source, where)
    measured = where.mapping(data["measured"], "measured")
    where.keys(measured, ("column", "unit"), "measured")
    unit = measured.get("unit", "s")
    try:  # (an empty unit would read "1 " as seconds: say it instead)
        if not isinstance(unit, str) or not unit.strip():
            raise ParseError("empty")
        per_unit = parse_duration(f"1 {unit}")
    except DistsimError:
        raise where.error(f"unknown time unit {_brief(unit)}", "measured.unit",
                          hint="e.g. s, ms, us; leave unit out for seconds") from None
    constants = tuple(where.mapping(data.get("set"), "set", optional=True).items())
    rules = _rules(data["columns"], where)
    fit = _fit(data.get("fit"), where)
    for key, section in ([(str(k), "set") for k, _v in constants]
                         + [(p.name, "fit") for p in fit if data.get("fit") is not None]):
        rule = column_setting(key, rules)
        if rule is not None:
            raise where.error(f"column {rule.column!r} sets {rule.key} on every row, so "
                              f"{section}'s value would be ignored", f"{section}.{key}",
                              hint=f"drop {key} from {section}, or the column from columns")
    return RunsMap(source, base, base_source, base_dir, rules,
                   str(where.need(measured, "column", "measured")), per_unit,
                   _optional_str(data, "group_by"), _optional_str(data, "label"),
                   tuple((str(k), v) for k, v in constants), fit, lines)


def column_setting(key: str, rules: Sequence[ColumnRule]) -> ColumnRule | None:
    """The column rule that sets ``key``, a key inside it or a section holding it."""
    for rule in rules:
        if key == rule.key or key.startswith(rule.key + ".") or rule.key.startswith(key + "."):
            return rule
    return None


class _Where:
    """Errors that name the map file, the line of a key and the key."""

    def __init__(self, source: str, lines: Mapping[str, int]) -> None:
        self.source, self.lines = source, lines

    def error(self, message: str, key: str, hint: str | None = None) -> ConfigError:
        return ConfigError(message, source=self.source, key=key or None,
                           line=line_of(key, self.lines) if key else None, hint=hint)

    def mapping(self, value: Any, key: str, optional: bool = False) -> dict[str, Any]:
        try:
            return dict(check_mapping(value, key=key or None, source=self.source,
                                      optional=optional))
        except ConfigError as error:
            error.line = line_of(key, self.lines) if key else None
            raise

    def keys(self, data: Mapping[str, Any], valid: Sequence[str], key: str) -> None:
        try:
            check_keys(data, valid, prefix=key, source=self.source)
        except ConfigError as error:
            error.line = line_of(error.key or key, self.lines)
            raise

    def need(self, data: Mapping[str, Any], name: str, key: str) -> Any:
        if name not in data:
            raise self.error(f"needs '{name}'", key)
        return data[name]


def _optional_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    return None if value is None else str(value)


def _base(raw: Any, source: str, where: _Where) -> tuple[dict[str, Any], str, str]:
    """The base scenario: a mapping in the map, or a scenario file beside it."""
    here = Path(source).parent
    if isinstance(raw, Mapping):
        return dict(raw), source, os.fspath(here)
    if not isinstance(raw, str):
        raise where.error("a scenario file path or a scenario mapping", "scenario")
    path = here / raw
    try:
        found = path.is_file()
    except OSError as error:  # a name longer than the OS takes (255 bytes a part)
        raise where.error(f"cannot use the scenario path {_brief(raw)}: "
                          f"{error.strerror or error}", "scenario") from None
    if not found:
        raise where.error(f"no scenario file {_brief(raw)} beside the map", "scenario",
                          hint=f"looked for {_brief(str(path))}")
    data, _lines = read_yaml(os.fspath(path), "scenario")
    if not isinstance(data, Mapping):
        raise ConfigError("a scenario is a mapping", source=os.fspath(path))
    return dict(data), os.fspath(path), os.fspath(path.parent)


def _rules(raw: Any, where: _Where) -> tuple[ColumnRule, ...]:
    """The column rules: ``column: key``, ``column: {key: …}`` or a list of those."""
    columns = where.mapping(raw, "columns")
    if not columns:
        raise where.error("maps no column", "columns", hint="e.g. 'hidden size: model.hidden'")
    rules = []
    for column, spec in columns.items():
        specs = spec if isinstance(spec, list) else [spec]
        for i, item in enumerate(specs):
            at = f"columns.{column}" + (f"[{i}]" if isinstance(spec, list) else "")
            rules.append(_rule(str(column), item, at, where))
    return tuple(rules)


def _rule(column: str, item: Any, at: str, where: _Where) -> ColumnRule:
    line = line_of(at, where.lines)
    if isinstance(item, str):
        return ColumnRule(column, item, line=line)
    spec = where.mapping(item, at)
    where.keys(spec, RULE_KEYS, at)
    key = str(where.need(spec, "key", at))
    numbers = {}
    for name in ("multiply", "divide", "at_least", "at_most"):
        if name in spec:
            numbers[name] = _number(spec[name], f"{at}.{name}", where,
                                    positive=name in ("multiply", "divide"))
    if "round" in spec:
        check_choice_at(spec["round"], ROUNDING, f"{at}.round", where)
    values = where.mapping(spec["values"], f"{at}.values") if "values" in spec else None
    return ColumnRule(column, key, round=spec.get("round"), line=line,
                      values={str(k): v for k, v in values.items()} if values else None,
                      **numbers)


def check_choice_at(value: Any, valid: Sequence[str], key: str, where: _Where) -> None:
    try:
        check_choice(value, valid, key=key, source=where.source)
    except ConfigError as error:
        error.line = line_of(key, where.lines)
        raise


def _number(value: Any, key: str, where: _Where, positive: bool = False) -> float:
    try:
        return float(check_number(value, key=key, source=where.source, above=positive,
                                  minimum=0.0 if positive else -math.inf))
    except ConfigError as error:
        error.line = line_of(key, where.lines)
        raise


def _fit(raw: Any, where: _Where) -> tuple[Parameter, ...]:
    """The knobs ``--fit`` moves (start values come from the base scenario later)."""
    if raw is None:
        return tuple(Parameter(key, low, high, low, log)
                     for key, (low, high, log) in DEFAULT_FIT.items())
    knobs = where.mapping(raw, "fit")
    out = []
    for key, spec in knobs.items():
        at = f"fit.{key}"
        spec = where.mapping(spec, at)
        where.keys(spec, ("low", "high", "log"), at)
        low = _number(where.need(spec, "low", at), f"{at}.low", where)
        high = _number(where.need(spec, "high", at), f"{at}.high", where)
        log = spec.get("log", False)
        try:
            check_bool(log, key=f"{at}.log", source=where.source)
        except ConfigError as error:
            error.line = line_of(f"{at}.log", where.lines)
            raise
        if not low < high or (log and low <= 0):
            raise where.error(f"bounds [{low}, {high}] are empty" + (
                " or not positive (log)" if log else ""), at, hint="low < high, > 0 with log")
        out.append(Parameter(str(key), low, high, low, log))
    return tuple(out)


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True)
class RunRow:
    """One measured run: its table line, label, group, scenario overrides and time."""

    line: int
    label: str
    group: str
    overrides: tuple[tuple[str, Any], ...]
    measured_s: float


def read_runs(path: str | os.PathLike[str], runs_map: RunsMap) -> tuple[RunRow, ...]:
    """The table's rows as runs; malformed ones are ``TABLE:line`` errors."""
    source = os.fspath(path)
    reader = csv.reader(read_input_text(source, "runs table", error=ConfigError).splitlines())
    try:
        return _read_rows(reader, runs_map, source)
    except csv.Error as error:  # a field past the csv module's 131,072 characters
        raise ParseError(f"not a CSV table: {error}", source=source,
                         line=reader.line_num) from None


def _read_rows(reader: Any, runs_map: RunsMap, source: str) -> tuple[RunRow, ...]:
    # Blank lines before the header (a table pasted with one above it) are skipped as
    # blank lines between rows are; the first line alone would read an empty header.
    header = next(([cell.strip() for cell in cells] for cells in reader
                   if any(cell.strip() for cell in cells)), [])
    if not any(header):
        raise ParseError("the table is empty: it needs a header line and rows", source=source)
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise ParseError(f"column {repeated[0]!r} appears twice in the header",
                         source=source, line=reader.line_num)
    _check_columns(header, runs_map, source)
    rows = []
    for cells in reader:
        if not any(cell.strip() for cell in cells):
            continue
        where = f"{source}:{reader.line_num}"
        if len(cells) != len(header):
            raise ParseError(f"{len(cells)} cells, the header has {len(header)}",
                             source=source, line=reader.line_num)
        rows.append(_row(dict(zip(header, cells)), reader.line_num, runs_map, where))
    if not rows:
        raise ParseError("the table has a header but no runs", source=source)
    return tuple(rows)


def _check_columns(header: Sequence[str], runs_map: RunsMap, table: str) -> None:
    """Every column the map names is in the header (else an error at the map's line)."""
    named = [(rule.column, f"columns.{rule.column}") for rule in runs_map.rules]
    named.append((runs_map.measured_column, "measured.column"))
    for key in ("group_by", "label"):
        value = getattr(runs_map, key)
        if value is not None:
            named.append((value, key))
    for column, key in named:
        if column not in header:
            raise ConfigError(f"column {column!r} is not in {table}", source=runs_map.source,
                              key=key, line=line_of(key, runs_map.lines),
                              hint="the table's columns: " + ", ".join(map(repr, header)))


def _cell(text: str) -> Any:
    """A cell as an int, a float or (else) the stripped text."""
    text = text.strip()
    # (a longer run of digits is no count of anything: as a float it is inf or exact
    # enough, and an int of thousands of digits has no float to compare or scale)
    for kind in ((int, float) if len(text) <= 30 else (float,)):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _row(cells: Mapping[str, str], line: int, runs_map: RunsMap, where: str) -> RunRow:
    measured = _cell(cells[runs_map.measured_column])
    if isinstance(measured, str) or not measured > 0 or not math.isfinite(measured):
        raise ParseError(f"column {runs_map.measured_column!r}: the measured time must be "
                         f"a positive number, got {cells[runs_map.measured_column]!r}",
                         source=where)
    overrides = list(runs_map.constants)
    for rule in runs_map.rules:
        if not cells[rule.column].strip():
            raise ParseError(f"column {rule.column!r} is empty", source=where)
        overrides.append((rule.key, rule.apply(_cell(cells[rule.column]), where)))
    group = cells[runs_map.group_by].strip() if runs_map.group_by else ""
    label = cells[runs_map.label].strip() if runs_map.label else ""
    return RunRow(line, label, group, tuple(overrides),
                  float(measured) * runs_map.seconds_per_unit)
