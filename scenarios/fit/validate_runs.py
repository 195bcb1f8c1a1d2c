"""Validating on a table of measured training runs: every row simulated, errors and ranks.

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

Every row is simulated (in a process pool, like a sweep); the result is the error table
(predicted, measured, signed error), mean and max |error|, and Spearman's rank correlation
of predicted and measured time within each ``group_by`` group — whether the model orders a
group's configurations as the real runs do, the ranking a user chooses a strategy by.

**Fitting** (``fit=True``) moves the few physical knobs of the compute model, within their
bounds, to minimise the squared log ratios of predicted to measured time, with the one fit
loop of :mod:`scenarios.fit.fitting`.  A simulation per row per step of the search would
take hours, so the search runs on a surrogate that is exact at the start point: each row's
simulated time there, and its sensitivity to each knob from one more simulation per knob
(``log T`` linear in the knob, or in its log for a ``log`` knob — compute time goes as
``1/efficiency``).  The fitted values are then checked by simulation, and so is the
**k-fold cross-validation**: rows are dealt into ``k`` folds, each fold's rows predicted
by simulation with the knobs fitted on the other folds.  The fitted knobs come back as a
scenario fragment (``compute: {...}``) to merge into a scenario.

Malformed input is a :class:`~simcore.errors.ConfigError` naming the map or the table, the
line and what would be valid.
"""

from __future__ import annotations

import concurrent.futures
import csv
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.fit.fitting import Parameter, k_folds, log_ratio_loss, minimise
from distsim_gpu.scenarios.report import format_table
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.config import (
    check_choice,
    check_keys,
    check_mapping,
    check_number,
    set_path,
)
from distsim_gpu.simcore.errors import ConfigError, DistsimError, ParseError
from distsim_gpu.simcore.units import parse_duration
from distsim_gpu.simcore.workers import die_with_parent
from distsim_gpu.simcore.yamlfile import line_of, read_yaml

__all__ = [
    "DEFAULT_FIT",
    "ColumnRule",
    "RunRow",
    "RunsMap",
    "RunsReport",
    "fit_fragment",
    "fit_runs",
    "format_runs_report",
    "read_map",
    "read_runs",
    "simulate_rows",
    "spearman",
    "summarise",
    "validate_runs",
]

MAP_KEYS = ("scenario", "measured", "group_by", "label", "columns", "set", "fit")
RULE_KEYS = ("key", "multiply", "divide", "round", "at_least", "at_most", "values")
ROUNDING = ("up", "down", "nearest")
#: What ``--fit`` moves when the map names nothing: the roofline's achieved GEMM and
#: memory-bandwidth fractions and its per-kernel launch floor (physical figures whose
#: sources are in workloads.compute; the bounds span what real GPUs reach).
DEFAULT_FIT: Mapping[str, tuple[float, float, bool]] = {
    "compute.matmul_efficiency": (0.3, 1.0, False),
    "compute.memory_efficiency": (0.3, 1.0, False),
    "compute.launch_overhead": (1e-7, 1e-4, True),
}
# How far the sensitivity simulations step each knob: ×1.2 on a log knob, else +5 % of
# its range (away from the nearer bound).
_LOG_STEP = math.log(1.2)
_LINEAR_STEP = 0.05
# Fits on the surrogate, each checked by simulation (module docstring).
_CHORD_ROUNDS = 4
_CV_ROUNDS = 2  # per fold: a cross-validation costs folds × this many passes over its rows
_TRUST_FACTOR = 1.5


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
                raise ConfigError(f"column {self.column!r}: no value for {cell!r} in the "
                                  f"map's values", source=where,
                                  hint="valid: " + ", ".join(map(str, self.values)))
            return self.values[str(cell)]
        if self.multiply == 1 and self.divide == 1 and self.round is None and (
                self.at_least is None and self.at_most is None):
            return cell
        if not isinstance(cell, (int, float)):
            raise ConfigError(f"column {self.column!r}: {cell!r} is not a number",
                              source=where, hint=f"the map transforms it for {self.key}")
        value = cell * self.multiply / self.divide
        value = {"up": math.ceil, "down": math.floor, "nearest": round,
                 None: lambda x: x}[self.round](value)
        if self.at_least is not None:
            value = max(value, self.at_least)
        if self.at_most is not None:
            value = min(value, self.at_most)
        return int(value) if float(value).is_integer() else value


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
    unit = str(measured.get("unit", "s"))
    try:
        per_unit = parse_duration(f"1 {unit}")
    except DistsimError:
        raise where.error(f"unknown time unit {unit!r}", "measured.unit",
                          hint="e.g. s, ms, us") from None
    constants = tuple(where.mapping(data.get("set"), "set", optional=True).items())
    return RunsMap(source, base, base_source, base_dir, _rules(data["columns"], where),
                   str(where.need(measured, "column", "measured")), per_unit,
                   _optional_str(data, "group_by"), _optional_str(data, "label"),
                   tuple((str(k), v) for k, v in constants), _fit(data.get("fit"), where),
                   lines)


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
    if not path.is_file():
        raise where.error(f"no scenario file {raw!r} beside the map", "scenario",
                          hint=f"looked for {path}")
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
        log = bool(spec.get("log", False))
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
    reader = csv.reader(_table_text(source).splitlines())
    header = [cell.strip() for cell in next(reader, [])]
    if not any(header):
        raise ParseError("the table is empty: it needs a header line and rows", source=source)
    repeated = sorted({c for c in header if header.count(c) > 1})
    if repeated:
        raise ParseError(f"column {repeated[0]!r} appears twice in the header",
                         source=source, line=1)
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


def _table_text(source: str) -> str:
    try:
        return Path(source).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError("no table file here", source=source) from None
    except IsADirectoryError:
        raise ConfigError("a table is a CSV file, this is a directory", source=source) from None
    except UnicodeDecodeError:
        raise ParseError("the table is not UTF-8 text", source=source) from None
    except OSError as error:
        raise ConfigError(f"cannot read the table: {error.strerror or error}",
                          source=source) from None


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
    for kind in (int, float):
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


# --------------------------------------------------------------------------- simulating


@dataclass(frozen=True, slots=True)
class RowResult:
    """A row's prediction (None when its scenario failed: ``failure`` says why)."""

    row: RunRow
    predicted_s: float | None
    failure: str = ""

    @property
    def error_pct(self) -> float | None:
        """Signed error of the prediction, % of the measured time."""
        if self.predicted_s is None:
            return None
        return 100.0 * (self.predicted_s - self.row.measured_s) / self.row.measured_s


def _simulate(job: tuple[Mapping[str, Any], str, str, tuple[tuple[str, Any], ...]],
              ) -> tuple[float | None, str]:
    """One row's iteration time (in a worker): ``(seconds, "")`` or ``(None, why)``."""
    base, source, base_dir, overrides = job
    try:
        scenario = scenario_from_mapping(base, source=source, overrides=overrides,
                                         base_dir=base_dir)
        return run_scenario(scenario).iteration_time_s, ""
    except DistsimError as error:
        return None, str(error)


#: Where rows run: a process pool, or None for this process.
Pool = concurrent.futures.Executor | None


def simulate_rows(runs_map: RunsMap, rows: Sequence[RunRow],
                  extra: Sequence[Sequence[tuple[str, Any]]] | None = None,
                  pool: Pool = None) -> tuple[RowResult, ...]:
    """Simulate every row (with ``extra[i]`` overrides after row ``i``'s own), in
    ``pool`` (None: one after another in this process)."""
    jobs = [(runs_map.base, runs_map.base_source, runs_map.base_dir,
             tuple(row.overrides) + tuple(extra[i] if extra else ()))
            for i, row in enumerate(rows)]
    if pool is None or len(jobs) <= 1:
        outcomes = [_simulate(job) for job in jobs]
    else:
        outcomes = list(pool.map(_simulate, jobs))
    return tuple(RowResult(row, time_s, why) for row, (time_s, why) in zip(rows, outcomes))


# --------------------------------------------------------------------------- statistics


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties take their average rank); NaN under 3 points or
    when either side is constant."""
    if len(xs) != len(ys) or len(xs) < 3:
        return float("nan")
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def summarise(results: Sequence[RowResult]) -> dict[str, Any]:
    """Mean and max |error| (%) over the rows that ran, and Spearman per group."""
    ok = [r for r in results if r.predicted_s is not None]
    errors = [abs(r.error_pct or 0.0) for r in ok]
    groups: dict[str, list[RowResult]] = {}
    for r in ok:
        groups.setdefault(r.row.group, []).append(r)
    return {
        "rows": len(results), "simulated": len(ok),
        "mean_abs_error_pct": statistics.fmean(errors) if errors else float("nan"),
        "max_abs_error_pct": max(errors) if errors else float("nan"),
        "spearman": {group: spearman([r.predicted_s or 0.0 for r in rs],
                                     [r.row.measured_s for r in rs])
                     for group, rs in sorted(groups.items())},
    }


# --------------------------------------------------------------------------- fitting


@dataclass(frozen=True, slots=True)
class FitOutcome:
    """Fitted knobs (by dotted key), where they started, and the rows predicted with
    them (``fitted``) and cross-validated (each by the knobs of the other folds)."""

    values: dict[str, float]
    start: dict[str, float]
    fitted: tuple[RowResult, ...]
    cross_validated: tuple[RowResult, ...]
    folds: int


def _starts(runs_map: RunsMap, row: RunRow) -> tuple[Parameter, ...]:
    """The fit's knobs starting at the base scenario's values (inside their bounds)."""
    scenario = scenario_from_mapping(runs_map.base, source=runs_map.base_source,
                                     overrides=row.overrides, base_dir=runs_map.base_dir)
    resolved = scenario.resolved()
    out = []
    for p in runs_map.fit:
        node: Any = resolved
        for part in p.name.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if not isinstance(node, (int, float)) or isinstance(node, bool):
            raise ConfigError(f"{p.name} is not a number the scenario has", key=f"fit.{p.name}",
                              source=runs_map.source, line=line_of(f"fit.{p.name}",
                                                                   runs_map.lines),
                              hint="fit a numeric compute knob, e.g. compute.matmul_efficiency")
        start = min(max(float(node), p.low), p.high)
        out.append(Parameter(p.name, p.low, p.high, start, p.log))
    return tuple(out)


def _coordinate(p: Parameter, value: float) -> float:
    """Where the surrogate is linear: a positive knob's log (time goes as a power of an
    efficiency or a floor), else the knob itself."""
    return math.log(value) if p.low > 0 else value


def _stepped(p: Parameter) -> float:
    """The knob's value for its sensitivity run (module docstring)."""
    if p.log:
        up = p.start * math.exp(_LOG_STEP)
        return up if up <= p.high else p.start / math.exp(_LOG_STEP)
    step = _LINEAR_STEP * (p.high - p.low)
    return p.start + step if p.start + step <= p.high else p.start - step


class _Surrogate:
    """``log T`` of each row linear in the knobs' coordinates around a centre where the
    rows were simulated: exact there, with slopes from one simulation per knob at the
    start (module docstring).  :meth:`recentred` moves the centre to a new simulation,
    keeping the slopes (a chord iteration)."""

    def __init__(self, params: Sequence[Parameter], base: Sequence[RowResult],
                 stepped: Sequence[Sequence[RowResult]]) -> None:
        self.params = params
        self.centre = {p.name: p.start for p in params}
        self.base_s = [r.predicted_s or 0.0 for r in base]
        self.slopes = []
        for p, runs in zip(params, stepped):
            delta = _coordinate(p, _stepped(p)) - _coordinate(p, p.start)
            self.slopes.append([
                (math.log(s.predicted_s / b.predicted_s) / delta)
                if s.predicted_s and b.predicted_s else 0.0 for s, b in zip(runs, base)])

    def recentred(self, values: Mapping[str, float], runs: Sequence[RowResult],
                  rows: Sequence[int]) -> _Surrogate:
        """The surrogate around ``values``, where rows ``rows`` took ``runs``; the other
        rows (and one that did not simulate) keep this surrogate's prediction there."""
        moved = object.__new__(_Surrogate)
        moved.params, moved.slopes, moved.centre = self.params, self.slopes, dict(values)
        moved.base_s = self.predict(values, range(len(self.base_s)))
        for i, run in zip(rows, runs):
            moved.base_s[i] = run.predicted_s or moved.base_s[i]
        return moved

    def predict(self, values: Mapping[str, float], rows: Sequence[int]) -> list[float]:
        out = []
        for i in rows:
            shift = sum(slope[i] * (_coordinate(p, values.get(p.name, self.centre[p.name]))
                                    - _coordinate(p, self.centre[p.name]))
                        for p, slope in zip(self.params, self.slopes))
            out.append(self.base_s[i] * math.exp(shift))
        return out


def fit_runs(runs_map: RunsMap, results: Sequence[RowResult], *, folds: int = 5,
             pool: Pool = None) -> FitOutcome:
    """Fit the map's knobs to the rows that ran (``results``: their uncalibrated runs),
    then simulate every row with them and cross-validate over ``folds`` folds."""
    ok = [r for r in results if r.predicted_s is not None]
    if len(ok) < 2:
        raise ConfigError(f"fitting needs at least 2 runs that simulate, got {len(ok)}",
                          source=runs_map.source)
    rows = [r.row for r in ok]
    params = _starts(runs_map, rows[0])
    stepped = [simulate_rows(runs_map, rows, [((p.name, _stepped(p)),)] * len(rows), pool)
               for p in params]
    surrogate = _Surrogate(params, ok, stepped)
    everything = list(range(len(rows)))
    values, fitted = _chord_fit(runs_map, rows, everything, params, surrogate, pool,
                                _CHORD_ROUNDS)
    k = min(folds, len(rows))
    per_row: list[tuple[tuple[str, Any], ...]] = [()] * len(rows)
    # Each fold is fitted from the start on its training rows alone (simulated there),
    # so no measured time of a test row reaches its prediction.
    for train, test in k_folds(everything, k) if k >= 2 else ():
        fold_values, _runs = _chord_fit(runs_map, rows, train, params, surrogate, pool,
                                        _CV_ROUNDS)
        for i in test:
            per_row[i] = tuple(fold_values.items())
    crossed = simulate_rows(runs_map, rows, per_row, pool) if k >= 2 else ()
    return FitOutcome(values, {p.name: p.start for p in params}, fitted, crossed, k)


def _chord_fit(runs_map: RunsMap, rows: Sequence[RunRow], idx: Sequence[int],
               params: Sequence[Parameter], surrogate: _Surrogate, pool: Pool,
               rounds: int) -> tuple[dict[str, float], tuple[RowResult, ...]]:
    """Fit rows ``idx`` on the surrogate (within its trust region), simulate them there,
    recentre and fit again, ``rounds`` times at most or until the simulated loss stops
    falling; the best simulated point wins, with its runs."""
    chosen = [rows[i] for i in idx]
    measured = [row.measured_s for row in chosen]
    best: tuple[float, dict[str, float], tuple[RowResult, ...]] | None = None
    for _ in range(rounds):
        values, _evaluations = minimise(_trust_region(params, surrogate.centre),
                                        surrogate.predict, idx, measured)
        runs = simulate_rows(runs_map, chosen, [tuple(values.items())] * len(chosen), pool)
        loss = log_ratio_loss([r.predicted_s or m for r, m in zip(runs, measured)], measured)
        if best is not None and loss >= best[0] * (1 - 1e-3):
            break
        best = (loss, values, runs)
        surrogate = surrogate.recentred(values, runs, idx)
    assert best is not None  # rounds >= 1
    return best[1], best[2]


def _trust_region(params: Sequence[Parameter], centre: Mapping[str, float],
                  ) -> tuple[Parameter, ...]:
    """The knobs bounded to where the surrogate is trusted around ``centre``: a factor
    :data:`_TRUST_FACTOR` either way for a positive knob, else a fifth of its range; an
    efficiency's effect turns from GEMMs to memory-bound kernels further out."""
    out = []
    for p in params:
        c = centre[p.name]
        if p.low > 0:
            low, high = max(p.low, c / _TRUST_FACTOR), min(p.high, c * _TRUST_FACTOR)
        else:
            width = 0.2 * (p.high - p.low)
            low, high = max(p.low, c - width), min(p.high, c + width)
        out.append(Parameter(p.name, low, high, min(max(c, low), high), p.log))
    return tuple(out)


def fit_fragment(outcome: FitOutcome) -> dict[str, Any]:
    """The fitted knobs as a scenario fragment (``{"compute": {...}}``)."""
    fragment: dict[str, Any] = {}
    for key, value in outcome.values.items():
        set_path(fragment, key, float(f"{value:.6g}"))
    return fragment


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class RunsReport:
    """Every row predicted uncalibrated and, with a fit, fitted and cross-validated."""

    table: str
    map: str
    results: tuple[RowResult, ...]
    fit: FitOutcome | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the rows, the summaries and the fitted knobs."""
        fit = self.fit
        data: dict[str, Any] = {"table": self.table, "map": self.map,
                                "uncalibrated": summarise(self.results)}
        columns = {"predicted_s": self.results}
        if fit is not None:
            data["fitted"] = summarise(fit.fitted)
            data["fit"] = {"values": fit.values, "start": fit.start, "folds": fit.folds,
                           "fragment": fit_fragment(fit)}
            columns["fitted_s"] = fit.fitted
            if fit.cross_validated:
                data["cross_validated"] = summarise(fit.cross_validated)
                columns["cross_validated_s"] = fit.cross_validated
        data["rows"] = [_row_dict(i, columns) for i in range(len(self.results))]
        return data


def _row_dict(i: int, columns: Mapping[str, Sequence[RowResult]]) -> dict[str, Any]:
    first = next(iter(columns.values()))[i]
    out: dict[str, Any] = {"line": first.row.line, "label": first.row.label,
                           "group": first.row.group, "measured_s": first.row.measured_s}
    for name, results in columns.items():
        lookup = {r.row.line: r for r in results}
        result = lookup.get(first.row.line)
        out[name] = None if result is None else result.predicted_s
        if result is not None and result.failure:
            out.setdefault("failure", result.failure)
    return out


def validate_runs(table: str | os.PathLike[str], map_path: str | os.PathLike[str], *,
                  fit: bool = False, folds: int = 5, workers: int | None = None,
                  every: int = 1, overrides: Sequence[tuple[str, Any]] = ()) -> RunsReport:
    """Simulate every ``every``-th row of ``table`` as ``map_path`` says (module
    docstring), with ``overrides`` after each row's keys, over ``workers`` processes
    (default: the CPUs; 1: in this process); with ``fit``, fit the map's knobs and
    cross-validate them over ``folds`` folds."""
    runs_map = read_map(map_path)
    if overrides:
        runs_map = _with_constants(runs_map, overrides)
    if not isinstance(every, int) or every < 1:
        raise ConfigError(f"must be a whole number >= 1, got {every!r}", key="--every")
    rows = read_runs(table, runs_map)[::every]
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(rows) == 1:
        return _validate(table, map_path, runs_map, rows, fit, folds, None)
    with concurrent.futures.ProcessPoolExecutor(
            max_workers=min(workers, len(rows)), initializer=die_with_parent,
            initargs=(os.getpid(),)) as pool:
        return _validate(table, map_path, runs_map, rows, fit, folds, pool)


def _validate(table: str | os.PathLike[str], map_path: str | os.PathLike[str],
              runs_map: RunsMap, rows: Sequence[RunRow], fit: bool, folds: int,
              pool: Pool) -> RunsReport:
    results = simulate_rows(runs_map, rows, pool=pool)
    if all(r.predicted_s is None for r in results):
        first = results[0]
        raise ConfigError(f"no row simulates; line {first.row.line}: {first.failure}",
                          source=os.fspath(table))
    outcome = fit_runs(runs_map, results, folds=folds, pool=pool) if fit else None
    return RunsReport(os.fspath(table), os.fspath(map_path), results, outcome)


def _with_constants(runs_map: RunsMap, overrides: Sequence[tuple[str, Any]]) -> RunsMap:
    """The map with ``overrides`` (``--set``) set on every row after the map's ``set``;
    a column that sets the same key still wins (it is the row's own value)."""
    return replace(runs_map, constants=runs_map.constants + tuple(overrides))


def format_runs_report(report: RunsReport) -> str:
    """The error table and the summaries, for a terminal."""
    fit = report.fit
    labelled = any(r.row.label for r in report.results)
    header = ["line", "label", "group", "measured", "predicted", "error"]
    later: list[tuple[str, dict[int, RowResult]]] = []
    if fit is not None:
        later.append(("fitted", {r.row.line: r for r in fit.fitted}))
        if fit.cross_validated:
            later.append(("cross-val.", {r.row.line: r for r in fit.cross_validated}))
        for name, _ in later:
            header += [name, "error"]
    body = []
    for r in report.results:
        cells = [str(r.row.line), r.row.label, r.row.group, f"{r.row.measured_s:.4g} s",
                 *_cells(r)]
        for _name, lookup in later:
            cells += _cells(lookup.get(r.row.line))
        body.append(cells)
    if not labelled:  # no label column in the map: the line says which run
        header.pop(1)
        body = [cells[:1] + cells[2:] for cells in body]
    right = set(range(len(header))) - {header.index("group")}
    lines = [f"distsim validate runs: {report.table} (map {report.map})",
             *format_table(header, body, right=right), ""]
    lines += _summary_lines("uncalibrated", report.results)
    if fit is not None:
        lines += _summary_lines("fitted", fit.fitted)
        if fit.cross_validated:
            lines += _summary_lines(f"{fit.folds}-fold cross-validated", fit.cross_validated)
        lines.append("fitted knobs: " + ", ".join(
            f"{k} {fit.start[k]:.4g} -> {v:.4g}" for k, v in fit.values.items()))
    failed = [r for r in report.results if r.failure]
    lines += [f"line {r.row.line} did not simulate: {r.failure}" for r in failed]
    return "\n".join(lines) + "\n"


def _cells(result: RowResult | None) -> list[str]:
    if result is None or result.predicted_s is None:
        return ["failed", ""]
    return [f"{result.predicted_s:.4g} s", f"{result.error_pct:+.1f}%"]


def _summary_lines(name: str, results: Sequence[RowResult]) -> list[str]:
    s = summarise(results)
    ranks = ", ".join(f"{group or 'all'} {rho:.2f}" for group, rho in s["spearman"].items())
    return [f"{name}: {s['simulated']}/{s['rows']} rows, mean |error| "
            f"{s['mean_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}%; "
            f"Spearman within groups: {ranks or 'n/a'}"]
