"""Parameter sweeps: one scenario run at every point of a grid of overrides.

``distsim sweep SCENARIO --grid KEY=V1,V2,… [--grid …] [--zip] --out DIR`` runs the
scenario once per point — the Cartesian product of the grids, or with ``--zip`` their
element-wise pairing — and writes into ``DIR``:

* ``sweep.json`` — the sweep's definition (scenario file and its content hash, grids, zip);
* ``points/<id>/summary.json`` — each finished point's report (``Report.to_json_dict()``),
  or ``points/<id>/failed.json`` for a point whose run failed, beside ``point.json`` (the
  point's overrides).  ``<id>`` is a short stable hash of the point's overrides;
* ``results.csv`` — one row per point: its id, every swept key, status (``ok`` /
  ``failed``), the error, the run's notes (one a line) and every numeric summary metric;
* ``sweep.png`` — ``--metric`` against the first swept key, one line per combination of
  the other keys (needs matplotlib);
* ``report.html`` — the same curves for ``--metric`` and the headline metrics, in one
  self-contained page (needs Plotly, :mod:`scenarios.report.html_report`).

Grid values are read like ``--set`` values (YAML scalars; units stay strings for the unit
parsers) after splitting on commas outside brackets.  Every point is validated before
anything runs, so a bad key or value fails at once, with every invalid point named; a
point that fails while it runs (out of memory, say) is recorded and the sweep goes on.

A sweep is resumable: every file is written atomically, a point with a result file is not
run again, and ``results.csv`` is rewritten from the point files after every point.  A
sweep restarted into the same ``DIR`` must have the same definition, checked and written
under a lock (``flock`` on ``DIR/.sweep.lock``), so two sweeps started together cannot
both pass the check.  A running sweep marks ``DIR`` (a shared ``flock`` on
``DIR/.sweep.running``; the kernel drops every lock however the sweep ends): a different
sweep started into it is refused at once; an identical one joins it and the two share the
points — a point runs only under its claim (``points/<id>/.claim``), a point the other
holds is left to it and its result taken when it lands (run here if the other died).
Pool workers die with the sweep (``PR_SET_PDEATHSIG`` on Linux, and a watch on the
parent's pid everywhere), so a killed sweep leaves no simulation running.

Points run in a local process pool (``workers``; 1 runs in this process) or on an existing
Dask cluster (``scheduler``, needs ``pip install 'distsim-gpu[dask]'``).  A point's job carries
its resolved configuration (:meth:`Scenario.resolved`), not a path, so Dask workers need no
access to the scenario file.  The simulation is deterministic: results are the same
whichever way the points ran (``wall_time_s`` aside).

The grid is :mod:`.sweep_grid`, the folder (definition, locks, point files, results.csv)
:mod:`.sweep_folder`, where the points run :mod:`.sweep_runner`, the figures
:mod:`.sweep_figures`; this module runs a sweep through them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.scenario import load_scenario
from distsim_gpu.scenarios.study.sweep_figures import draw_figures
from distsim_gpu.scenarios.study.sweep_folder import (
    DEFINITION,
    POINTS,
    RESULTS,
    PointClaims,
    PointResult,
    check_definition,
    claim_folder,
    leave_folder,
    read_point,
    store_point,
    sweep_definition,
    sweep_running,
    write_results_csv,
)
from distsim_gpu.scenarios.study.sweep_grid import (
    Point,
    describe_point,
    parse_grid,
    point_id,
    sweep_points,
)
from distsim_gpu.scenarios.study.sweep_runner import Job, run_dask, run_local
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.pool import Workers

__all__ = [
    "SUMMARY_METRICS",
    "PointResult",
    "SweepResult",
    "format_sweep",
    "parse_grid",
    "point_id",
    "run_sweep",
    "sweep_points",
]

# The numeric top-level fields of ``Report.to_json_dict()``: what --metric may name.
SUMMARY_METRICS = ("iteration_time_s", "samples_per_s", "tokens_per_s", "model_flops",
                   "model_tflops_per_gpu", "mfu", "peak_flops_per_gpu", "num_gpus",
                   "microbatches", "wall_time_s", "events", "flows", "gpu_memory_bytes")


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep left in ``out_dir``: every point (grid order), how many ran now, how
    many were already done, the files written and notes (e.g. a skipped plot)."""

    out_dir: Path
    points: tuple[PointResult, ...]
    ran: int
    reused: int
    files: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def failed(self) -> int:
        return sum(1 for p in self.points if p.status != "ok")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``sweep --json``): the folder, the counts, each point's overrides,
        status, error, notes and headline metrics, and the files written."""
        return {"out_dir": str(self.out_dir), "points": len(self.points),
                "failed": self.failed, "ran": self.ran, "reused": self.reused,
                "files": list(self.files), "notes": list(self.notes),
                "results": [{"id": p.id, "overrides": dict(p.overrides), "status": p.status,
                             "error": p.error, "notes": list(p.notes),
                             **{m: (p.summary or {}).get(m) for m in SUMMARY_METRICS}}
                            for p in self.points]}


def format_sweep(result: SweepResult) -> str:
    """The terminal summary: how many points ran, failed and were already done, and each
    failed point with its error."""
    total = len(result.points)
    lines = [f"sweep: {total} point(s): {total - result.failed} ok, {result.failed} failed "
             f"({result.ran} run now, {result.reused} already done)"]
    lines += [f"  failed {describe_point(point.overrides)}: {point.error}"
              for point in result.points if point.status != "ok"]
    return "\n".join(lines + _notes_lines(result.points)) + "\n"


def _notes_lines(points: Sequence[PointResult]) -> list[str]:
    """Each distinct note of the points that ran, once, with the points it holds at when
    not all: a sweep's numbers rest on the same assumptions ``run`` would print."""
    ran = [point for point in points if point.status == "ok"]
    at: dict[str, list[PointResult]] = {}
    for point in ran:
        for note in point.notes:
            at.setdefault(note, []).append(point)
    if not at:
        return []
    lines = ["Notes (assumptions that move the answers; results.csv has each point's):"]
    for note, where in at.items():
        if len(where) == len(ran):
            lines.append(f"  note (every point): {note}")
            continue
        shown = "; ".join(describe_point(point.overrides) for point in where[:3])
        more = f"; … {len(where) - 3} more" if len(where) > 3 else ""
        lines.append(f"  note ({len(where)} of {len(ran)} points: {shown}{more}): {note}")
    return lines


def run_sweep(scenario_path: str | os.PathLike[str],
              grids: Sequence[tuple[str, Sequence[Any]] | str], *, zip_: bool = False,
              out_dir: str | os.PathLike[str], workers: Workers | int | None = None,
              overrides: Sequence[tuple[str, Any]] = (), metric: str = "iteration_time_s",
              progress: bool = True) -> SweepResult:
    """Run ``scenario_path`` at every point of ``grids`` and write the results to ``out_dir``.

    ``grids`` are ``(dotted_key, values)`` pairs or ``"KEY=V1,V2"`` texts; ``zip_`` pairs
    them element-wise instead of taking their product; ``overrides`` (``(dotted_key,
    value)``, ``--set``) hold at every point.  ``workers`` processes run the points
    (default ``os.cpu_count()``; 1 runs them here), or the Dask cluster a :class:`Workers`
    names (``tcp://host:port``).  ``metric`` (a name of :data:`SUMMARY_METRICS`) is plotted
    against the first key.  ``progress`` shows a progress bar on stderr (when it is a
    terminal).  Points already done in ``out_dir`` are not run again.

    Raises :class:`ConfigError` on a bad grid, a point that does not validate (before
    anything runs), a bad metric, or an ``out_dir`` holding a different sweep.
    """
    parsed = [parse_grid(g) if isinstance(g, str) else (g[0], list(g[1])) for g in grids]
    for key, values in parsed:
        if not values:
            raise ConfigError("no values", key=key, source="--grid")
    check_choice(metric, SUMMARY_METRICS, key="--metric")
    processes, scheduler = _where(workers)
    points = sweep_points(parsed, zip_=zip_)
    path = Path(scenario_path)
    directory = Path(out_dir)
    fixed = [(key, value) for key, value in overrides]
    definition = sweep_definition(path, parsed, zip_, fixed)
    check_definition(directory, definition, running=sweep_running(directory))

    configs = _validated(path, parsed, points, fixed)
    lock = claim_folder(directory, definition)
    try:
        return _run_claimed(_Plan(directory, parsed, points, configs, os.fspath(path)),
                            workers=processes, scheduler=scheduler, metric=metric,
                            progress=progress)
    finally:
        # (the kernel drops the lock with the file, or with the process)
        leave_folder(directory, lock)


# How many of a grid's other invalid points the error names, each with its own message.
_INVALID_SHOWN = 5


def _validated(path: Path, grids: Sequence[tuple[str, Sequence[Any]]],
               points: Sequence[Point], fixed: Sequence[tuple[str, Any]]
               ) -> dict[str, dict[str, Any]]:
    """Every point's resolved configuration by point id, all validated before any runs.

    Where some points validate, one error names every point that does not (the first
    with its file, key and hint, the others after it), so a grid is fixed in one pass, not
    a point per try; where none does, the first point's error is the scenario's."""
    configs: dict[str, dict[str, Any]] = {}
    invalid: list[tuple[Point, DistsimError]] = []
    for point in points:
        try:
            scenario = load_scenario(path, [*fixed, *point])
        except DistsimError as error:
            if error.source == "--set" and error.key in dict(grids):  # (a fixed --set's
                error.source = "--grid"                               # error stays its own)
            invalid.append((point, error))
            continue
        configs[point_id(point)] = json.loads(json.dumps(scenario.resolved()))
    if not invalid:
        return configs
    (point, error), others = invalid[0], invalid[1:]
    message = f"{error.message} (at grid point {describe_point(point)})"
    hint = error.hint
    if others and len(invalid) < len(points):  # (all invalid: the scenario's, not the grid's)
        shown = "; ".join(f"{describe_point(p)}: {e.message}"
                          for p, e in others[:_INVALID_SHOWN])
        more = f"; … {len(others) - _INVALID_SHOWN} more" if len(others) > _INVALID_SHOWN else ""
        message += (f"; {len(invalid)} of the {len(points)} points do not validate, the "
                    f"others: {shown}{more}")
        hint = ((hint + "; ") if hint else "") + (
            "a grid runs every combination of its values: drop the values that do not go "
            "together, or pair them point by point with --zip")
    raise type(error)(message, source=error.source, key=error.key, line=error.line,
                      hint=hint) from None


def _where(workers: Workers | int | None) -> tuple[int, str | None]:
    """(local processes, Dask scheduler address or None) of a sweep's ``workers``."""
    if isinstance(workers, Workers):
        if workers.scheduler is not None:
            return 1, workers.scheduler
        workers = workers.processes
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise ConfigError(f"must be at least 1, got {workers}", key="--workers")
    return workers, None


@dataclass(frozen=True, slots=True)
class _Plan:
    """A sweep checked and ready to run: its folder, grids and points, and each point's
    resolved configuration (by point id) with the scenario file it was read from."""

    directory: Path
    grids: Sequence[tuple[str, Sequence[Any]]]
    points: Sequence[Point]
    configs: Mapping[str, dict[str, Any]]
    source: str


def _run_claimed(plan: _Plan, *, workers: int, scheduler: str | None, metric: str,
                 progress: bool) -> SweepResult:
    """The sweep, once it has joined its folder: run the points not done yet, each
    under its claim (:class:`PointClaims`), sharing them with an identical sweep."""
    from tqdm import tqdm

    directory, parsed, points = plan.directory, plan.grids, plan.points
    configs, source = plan.configs, plan.source
    ids = [point_id(point) for point in points]
    run = _SharedRun(directory, [key for key, _ in parsed], ids, dict(zip(ids, points)))
    jobs = [(pid, configs[pid], source) for pid in ids if run.results[pid] is None]
    reused = len(points) - len(jobs)
    run.write_csv()
    failed = sum(1 for r in run.results.values() if r is not None and r.status != "ok")
    run.bar = tqdm(total=len(points), initial=reused, unit="point", desc="sweep",
                   file=sys.stderr, disable=None if progress else True, dynamic_ncols=True)
    run.failed = failed
    try:
        run.bar.set_postfix(failed=failed)
        if scheduler is not None:
            run.record(run_dask([job for job in jobs if run.admit(job)], scheduler))
        else:
            run.record(run_local(jobs, workers, run.admit))
        for job in run.deferred:  # held by another sweep: wait for it, then take its result
            if run.adopt(job[0], wait=True):
                run.record(run_local([job], 1))  # (it died without one: run it here)
    finally:
        run.bar.close()
        run.claims.close()
    done = tuple(r for r in (run.results[i] for i in ids) if r is not None)
    files, notes = draw_figures(directory, parsed, done, metric)
    return SweepResult(directory, done, run.ran, reused + run.shared,
                       (DEFINITION, RESULTS, POINTS + "/", *files), tuple(notes))


class _SharedRun:
    """The points of one sweep as it runs: results, claims, what another sweep ran."""

    def __init__(self, directory: Path, keys: list[str], ids: list[str],
                 by_id: dict[str, Point]) -> None:
        self.directory, self.keys, self.ids, self.by_id = directory, keys, ids, by_id
        self.results: dict[str, PointResult | None] = {
            pid: read_point(directory, pid, by_id[pid]) for pid in ids}
        self.claims = PointClaims(directory)
        self.deferred: list[Job] = []
        self.ran = self.shared = self.failed = 0
        self.bar: Any = None

    def write_csv(self) -> None:
        write_results_csv(self.directory / RESULTS, self.keys,
                          (self.results[i] for i in self.ids))

    def adopt(self, pid: str, *, wait: bool = False) -> bool:
        """Claim ``pid`` (waiting for another sweep's claim when ``wait``); True when it is
        ours to run, False when another sweep holds it or finished it (result taken)."""
        return self.claims.take(pid, wait=wait) and self._unfinished(pid)

    def _unfinished(self, pid: str) -> bool:
        """With ``pid`` claimed: True if it has no result yet, else take the result (a
        sweep sharing the folder ran it) and let the claim go."""
        found = read_point(self.directory, pid, self.by_id[pid])
        if found is None:
            return True
        self.claims.release(pid)
        self.results[pid] = found
        self.shared += 1
        self.bar.update(1)
        self.write_csv()
        return False

    def admit(self, job: Job) -> bool:
        """Whether to run ``job`` now; a point another sweep holds is deferred."""
        if self.claims.take(job[0]):
            return self._unfinished(job[0])
        self.deferred.append(job)
        return False

    def record(self, stream: Iterable[tuple[str, dict[str, Any]]]) -> None:
        for pid, outcome in stream:
            self.results[pid] = store_point(self.directory, pid, self.by_id[pid], outcome)
            self.claims.release(pid)
            self.ran += 1
            self.write_csv()
            if outcome["status"] != "ok":
                self.failed += 1
                self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)
