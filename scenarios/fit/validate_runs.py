"""Validating on a table of measured training runs: every row simulated, errors and ranks.

A user's CSV holds one measured run per row (model shape, strategy, cluster size, the
iteration time); a small YAML **map** (:mod:`scenarios.fit.runs_table`) says how its
columns become scenario keys.

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

Before any of that the table is checked against itself (:mod:`scenarios.fit.consistency`):
pairs of rows that differ only in their micro-batch and whose measured time per sample
rose more than any cost model lets it are reported, with the least error any such model
makes on one of them.

Malformed input is a :class:`~simcore.errors.ConfigError` naming the map or the table, the
line and what would be valid.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from distsim_gpu.scenarios.fit.consistency import TOLERANCE, MicroBatchRise, micro_batch_rises
from distsim_gpu.scenarios.fit.fitting import (
    Parameter,
    error_pct,
    k_folds,
    log_ratio_loss,
    minimise,
)
from distsim_gpu.scenarios.fit.runs_table import (
    DEFAULT_FIT,
    ColumnRule,
    RunRow,
    RunsMap,
    column_setting,
    read_map,
    read_runs,
)
from distsim_gpu.scenarios.report import format_table
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.config import check_whole, set_path
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.pool import WorkerPool, Workers
from distsim_gpu.simcore.yamlfile import line_of

__all__ = [
    "DEFAULT_FIT",
    "ColumnRule",
    "RunRow",
    "RunsMap",
    "RunsReport",
    "check_folds",
    "fit_fragment",
    "fit_runs",
    "format_runs_report",
    "read_map",
    "read_runs",
    "simulate_rows",
    "spearman",
    "summarise",
    "validate_runs",
    "validate_scenarios",
]

# How far the sensitivity simulations step each knob: ×1.2 on a log knob, else +5 % of
# its range (away from the nearer bound).
_LOG_STEP = math.log(1.2)
_LINEAR_STEP = 0.05
# Fits on the surrogate, each checked by simulation (module docstring).
_CHORD_ROUNDS = 4
_CV_ROUNDS = 2  # per fold: a cross-validation costs folds × this many passes over its rows
_TRUST_FACTOR = 1.5


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
        return error_pct(self.predicted_s, self.row.measured_s)


def _simulate(job: tuple[Mapping[str, Any], str, str, tuple[tuple[str, Any], ...],
                         Mapping[str, str]]) -> tuple[float | None, str]:
    """One row's iteration time (in a worker): ``(seconds, "")`` or ``(None, why)``;
    ``job[4]`` names the table column each of the row's keys came from."""
    base, source, base_dir, overrides, columns = job
    try:
        scenario = scenario_from_mapping(base, source=source, overrides=overrides,
                                         base_dir=base_dir)
        return run_scenario(scenario).iteration_time_s, ""
    except DistsimError as error:
        # The scenario names every override "--set"; a bad cell is the table's column's.
        if error.source == "--set" and error.key in columns:
            error.source = f"column {columns[error.key]!r}"
        return None, str(error)


#: Where rows run: a pool of worker processes, or None for this process.
Pool = WorkerPool | None


def simulate_rows(runs_map: RunsMap, rows: Sequence[RunRow],
                  extra: Sequence[Sequence[tuple[str, Any]]] | None = None,
                  pool: Pool = None) -> tuple[RowResult, ...]:
    """Simulate every row (with ``extra[i]`` overrides after row ``i``'s own), in
    ``pool`` (None: one after another in this process)."""
    columns = {rule.key: rule.column for rule in runs_map.rules}
    jobs = []
    for i, row in enumerate(rows):
        added = tuple(extra[i]) if extra else ()
        fitted = {key for key, _ in added}  # (a knob set after a column's key is its own)
        jobs.append((runs_map.base, runs_map.base_source, runs_map.base_dir,
                     tuple(row.overrides) + added,
                     {k: c for k, c in columns.items() if k not in fitted}))
    reporter = progress.current()  # (a terminal's progress line: rows done of all)
    outcomes: list[tuple[float | None, str]] = [(None, "")] * len(jobs)
    if pool is None:
        for i, job in enumerate(jobs):
            outcomes[i] = _simulate(job)
            if reporter is not None:
                reporter.stage(i + 1, len(jobs), "rows")
    else:  # as the workers finish, placed back in the rows' order
        for done, finished in enumerate(pool.as_completed(_simulate_numbered,
                                                          list(enumerate(jobs)))):
            i, outcome = finished.result()
            outcomes[i] = outcome
            if reporter is not None:
                reporter.stage(done + 1, len(jobs), "rows")
    return tuple(RowResult(row, time_s, why) for row, (time_s, why) in zip(rows, outcomes))


def _simulate_numbered(task: tuple[int, Any]) -> tuple[int, tuple[float | None, str]]:
    """:func:`_simulate` of ``task[1]``, tagged with its row number ``task[0]``."""
    return task[0], _simulate(task[1])


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


def _finite(value: float) -> float | None:
    """``value``, or None (JSON's null) where it is NaN: JSON has no NaN."""
    return None if math.isnan(value) else value


def summarise(results: Sequence[RowResult]) -> dict[str, Any]:
    """Mean and max |error| (%) over the rows that ran, and Spearman per group (None
    where there is none: under 3 rows or no spread; likewise the errors without rows)."""
    ok = [r for r in results if r.predicted_s is not None]
    errors = [abs(r.error_pct or 0.0) for r in ok]
    groups: dict[str, list[RowResult]] = {}
    for r in ok:
        groups.setdefault(r.row.group, []).append(r)
    return {
        "rows": len(results), "simulated": len(ok),
        "mean_abs_error_pct": statistics.fmean(errors) if errors else None,
        "max_abs_error_pct": max(errors) if errors else None,
        "spearman": {group: _finite(spearman([r.predicted_s or 0.0 for r in rs],
                                             [r.row.measured_s for r in rs]))
                     for group, rs in sorted(groups.items())},
        "group_rows": {group: len(rs) for group, rs in sorted(groups.items())},
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
    resolved = scenario.resolved(with_assumed=True)  # a defaulted figure may be fitted too
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


def check_folds(folds: Any, key: str = "folds") -> int:
    """``folds`` if it is a whole number of at least 2 (a cross-validation needs a fold
    to fit and one to test), else a :class:`ConfigError` at ``key``."""
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ConfigError(f"must be a whole number >= 2, got {folds!r}", key=key)
    return folds


def fit_runs(runs_map: RunsMap, results: Sequence[RowResult], *, folds: int = 5,
             pool: Pool = None) -> FitOutcome:
    """Fit the map's knobs to the rows that ran (``results``: their uncalibrated runs),
    then simulate every row with them and cross-validate over ``folds`` folds."""
    check_folds(folds)
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
    rises: tuple[MicroBatchRise, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the rows, the summaries, the fitted knobs and the measured rows
        that contradict each other (:mod:`scenarios.fit.consistency`)."""
        fit = self.fit
        data: dict[str, Any] = {"table": self.table, "map": self.map,
                                "uncalibrated": summarise(self.results),
                                "micro_batch_rises": [asdict(r) for r in self.rises]}
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
                  fit: bool = False, folds: int = 5, workers: int | Workers | None = None,
                  every: int = 1, overrides: Sequence[tuple[str, Any]] = ()) -> RunsReport:
    """Simulate every ``every``-th row of ``table`` as ``map_path`` says (module
    docstring), with ``overrides`` after each row's keys, over ``workers`` processes
    (default: the CPUs; 1: in this process) or a :class:`~simcore.pool.Workers` (a Dask
    cluster); with ``fit``, fit the map's knobs and
    cross-validate them over ``folds`` folds."""
    runs_map = read_map(map_path)
    if overrides:
        runs_map = _with_constants(runs_map, overrides)
    if not isinstance(every, int) or every < 1:
        raise ConfigError(f"must be a whole number >= 1, got {every!r}", key="--every")
    rows = read_runs(table, runs_map)[::every]
    # 0 is no number of processes: "every CPU" is said by leaving --workers out.
    where = workers if isinstance(workers, Workers) else Workers(
        (os.cpu_count() or 1) if workers is None else check_whole(
            workers, key="--workers", hint="leave --workers out for one per CPU; 1 runs here"))
    with where.pool(max_tasks=len(rows)) as pool:
        return _validate(table, map_path, runs_map, rows, fit, folds, pool)


def validate_scenarios(runs: Sequence[tuple[str, str, Mapping[str, Any], float]], *,
                       source: str, base_dir: str, fit: Mapping[str, tuple[float, float, bool]]
                       | None = None, folds: int = 3) -> RunsReport:
    """Measured runs whose scenarios a script built — ``(label, group, scenario mapping,
    measured seconds per iteration)`` — simulated, summarised and (with ``fit``: key ->
    ``(low, high, log)``) fitted and cross-validated as a table's rows are; relative paths
    in the scenarios resolve against ``base_dir``."""
    if fit:
        check_folds(folds)
    knobs = tuple(Parameter(k, low, high, low, log)
                  for k, (low, high, log) in (fit or {}).items())
    runs_map = RunsMap(source=source, base={}, base_source=source, base_dir=base_dir,
                       rules=(), measured_column="", seconds_per_unit=1.0,
                       group_by="group", label="label", fit=knobs)
    rows = [RunRow(line, label, group, tuple(scenario.items()), measured_s)
            for line, (label, group, scenario, measured_s) in enumerate(runs, start=1)]
    results = simulate_rows(runs_map, rows)
    outcome = fit_runs(runs_map, results, folds=folds) if fit else None
    return RunsReport(source, source, results, outcome, micro_batch_rises(rows, {}))


def _validate(table: str | os.PathLike[str], map_path: str | os.PathLike[str],
              runs_map: RunsMap, rows: Sequence[RunRow], fit: bool, folds: int,
              pool: Pool) -> RunsReport:
    results = simulate_rows(runs_map, rows, pool=pool)
    if all(r.predicted_s is None for r in results):
        first = results[0]
        raise ConfigError(f"no row simulates; line {first.row.line}: {first.failure}",
                          source=os.fspath(table))
    outcome = fit_runs(runs_map, results, folds=folds, pool=pool) if fit else None
    return RunsReport(os.fspath(table), os.fspath(map_path), results, outcome,
                      micro_batch_rises(rows, runs_map.base))


def _with_constants(runs_map: RunsMap, overrides: Sequence[tuple[str, Any]]) -> RunsMap:
    """The map with ``overrides`` (``--set``) set on every row after the map's ``set``;
    a key a column sets (the row's own value) is an error, not silently outvoted."""
    for key, _value in overrides:
        rule = column_setting(key, runs_map.rules)
        if rule is not None:
            raise ConfigError(f"{key} is set on every row by the table's column "
                              f"{rule.column!r} (as {rule.key}), so --set would be ignored",
                              source="--set", key=key,
                              hint=f"drop the --set, or the column from {runs_map.source}")
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
    lines += _rise_lines(report.rises)
    failed = [r for r in report.results if r.failure]
    lines += [f"line {r.row.line} did not simulate: {r.failure}" for r in failed]
    return "\n".join(lines) + "\n"


def _rise_lines(rises: Sequence[MicroBatchRise]) -> list[str]:
    if not rises:
        return []
    lines = [f"measured rows that contradict each other (same work per GPU, a larger "
             f"micro-batch, per-sample time up by more than {TOLERANCE:.0%}):"]
    lines += [f"  lines {r.low_line} -> {r.high_line} (micro-batch {r.low_micro_batch} -> "
              f"{r.high_micro_batch}): x{r.rise:.2f} per sample; a model whose per-sample "
              f"time rises by at most {TOLERANCE:.0%} misses one by >= {r.bound_pct:.1f}%"
              for r in rises]
    return lines


def _cells(result: RowResult | None) -> list[str]:
    if result is None or result.predicted_s is None:
        return ["failed", ""]
    return [f"{result.predicted_s:.4g} s", f"{result.error_pct:+.1f}%"]


def _rho_text(rho: float | None, rows: int) -> str:
    """A rank correlation, or why there is none: it needs three rows, and a spread."""
    if rows < 3:
        return f"n/a ({rows} row{'s' if rows != 1 else ''})"
    return "n/a (no spread)" if rho is None else f"{rho:.2f}"


def _summary_lines(name: str, results: Sequence[RowResult]) -> list[str]:
    s = summarise(results)
    if not s["simulated"]:
        return [f"{name}: 0/{s['rows']} rows simulated"]
    ranks = ", ".join(f"{group or 'all'} {_rho_text(rho, s['group_rows'][group])}"
                      for group, rho in s["spearman"].items())
    return [f"{name}: {s['simulated']}/{s['rows']} rows, mean |error| "
            f"{s['mean_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}%; "
            f"Spearman within groups: {ranks or 'n/a'}"]
