"""Parameter sweeps: one scenario run at every point of a grid of overrides.

``distsim sweep SCENARIO --grid KEY=V1,V2,… [--grid …] [--zip] --out DIR`` runs the
scenario once per point — the Cartesian product of the grids, or with ``--zip`` their
element-wise pairing — and writes into ``DIR``:

* ``sweep.json`` — the sweep's definition (scenario file and its content hash, grids, zip);
* ``points/<id>/summary.json`` — each finished point's report (``Report.to_json_dict()``),
  or ``points/<id>/failed.json`` for a point whose run failed, beside ``point.json`` (the
  point's overrides).  ``<id>`` is a short stable hash of the point's overrides;
* ``results.csv`` — one row per point: its id, every swept key, status (``ok`` /
  ``failed``), the error, and every numeric summary metric;
* ``sweep.png`` — ``--metric`` against the first swept key, one line per combination of
  the other keys (needs matplotlib);
* ``report.html`` — the same curves for ``--metric`` and the headline metrics, in one
  self-contained page (needs Plotly, :mod:`scenarios.html_report`).

Grid values are read like ``--set`` values (YAML scalars; units stay strings for the unit
parsers) after splitting on commas, so a list value cannot be swept.  Every point is
validated before anything runs, so a bad key or value fails at once; a point that fails
while it runs (out of memory, say) is recorded and the sweep goes on.

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
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # (not POSIX)
    fcntl = None  # type: ignore[assignment]

from distsim_gpu.scenarios.html_report import HtmlUnavailable, sweep_report_html
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.simcore.config import check_choice, parse_assignment
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.pool import WorkerPool
from distsim_gpu.simcore.units import parse_bandwidth, parse_duration, parse_flops, parse_size

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

_DEFINITION = "sweep.json"
_RESULTS = "results.csv"
_PLOT = "sweep.png"
_HTML = "report.html"
# The metrics report.html draws (``--metric`` first).
_HTML_METRICS = ("iteration_time_s", "samples_per_s", "model_tflops_per_gpu", "mfu")
_POINTS = "points"
_SUMMARY = "summary.json"
_FAILED = "failed.json"
_LOCK = ".sweep.lock"
_RUNNING = ".sweep.running"
_CLAIM = ".claim"
_POINT = "point.json"

Point = tuple[tuple[str, Any], ...]


# --------------------------------------------------------------------------- the grid


def parse_grid(text: str) -> tuple[str, list[Any]]:
    """``"KEY=V1,V2"`` -> ``("KEY", [v1, v2])``, each value read like a ``--set`` value.

    Quotes around the whole value list are dropped (``k="100 Gbps,200 Gbps"``).  Raises
    :class:`ConfigError` on a missing ``=``, an empty value or a repeated value.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"cannot read {text!r}", source="--grid",
                          hint='write KEY=V1,V2,…, e.g. parallelism.tp=1,2,4 or '
                               'cluster.nic.bandwidth="100 Gbps,200 Gbps"')
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        raw = raw[1:-1]
    values: list[Any] = []
    for piece in raw.split(","):
        if not piece.strip():
            raise ConfigError(f"empty value in {raw!r}", source="--grid", key=key,
                              hint="write values separated by single commas, e.g. 1,2,4")
        name, value = parse_assignment(f"{key}={piece.strip()}", source="--grid")
        if any(_canonical(value) == _canonical(v) for v in values):
            raise ConfigError(f"value {piece.strip()!r} appears twice", source="--grid",
                              key=name)
        values.append(value)
    return key, values


def sweep_points(grids: Sequence[tuple[str, Sequence[Any]]], *, zip_: bool = False
                 ) -> list[Point]:
    """The points of the grids: their Cartesian product (the last grid varying fastest),
    or with ``zip_`` the grids paired element-wise (all of the same length)."""
    if not grids:
        raise ConfigError("nothing to sweep", source="--grid",
                          hint="give at least one --grid KEY=V1,V2,…")
    keys = [key for key, _ in grids]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigError("swept more than once: " + ", ".join(repeated), source="--grid",
                          hint="give each key one --grid with all its values")
    if zip_:
        lengths = {key: len(values) for key, values in grids}
        if len(set(lengths.values())) > 1:
            raise ConfigError(
                "--zip needs grids of the same length, got " +
                ", ".join(f"{key}: {n}" for key, n in lengths.items()), source="--grid",
                hint="give every --grid as many values, or drop --zip for the product")
        combos: Iterable[tuple[Any, ...]] = zip(*(values for _, values in grids))
    else:
        combos = itertools.product(*(values for _, values in grids))
    return [tuple(zip(keys, combo)) for combo in combos]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def point_id(point: Point) -> str:
    """A short stable name for a point: 12 hex digits of a hash of its overrides."""
    text = json.dumps([[key, value] for key, value in point], default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _describe(point: Point) -> str:
    return ", ".join(f"{key}={value}" for key, value in point)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class PointResult:
    """One point of a sweep: its overrides, its status (``ok`` / ``failed``), the error of
    a failed one, and the report (``Report.to_json_dict()``) of one that ran."""

    id: str
    overrides: Point
    status: str
    error: str = ""
    summary: Mapping[str, Any] | None = None


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


def format_sweep(result: SweepResult) -> str:
    """The terminal summary: how many points ran, failed and were already done, and each
    failed point with its error."""
    total = len(result.points)
    lines = [f"sweep: {total} point(s): {total - result.failed} ok, {result.failed} failed "
             f"({result.ran} run now, {result.reused} already done)"]
    lines += [f"  failed {_describe(point.overrides)}: {point.error}"
              for point in result.points if point.status != "ok"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- one point


def _run_point(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Run one point from its resolved configuration (in a worker, or in-process).

    Returns ``{"status": "ok", "summary": …}`` or ``{"status": "failed", "error": …,
    "retry": bool}``; ``retry`` marks an unexpected error (not a :class:`DistsimError`)
    that a restarted sweep runs again.
    """
    try:
        scenario = scenario_from_mapping(config, source=source)
        report = run_scenario(scenario)
    except DistsimError as error:
        return {"status": "failed", "error": str(error), "retry": False}
    except Exception as error:  # a bug in one point must not lose the whole sweep
        return {"status": "failed", "error": f"{type(error).__name__}: {error}",
                "retry": True}
    return {"status": "ok", "summary": json.loads(json.dumps(report.to_json_dict()))}


def _read_point(directory: Path, pid: str, point: Point) -> PointResult | None:
    """The stored result of a point, or None when it must (still, or again) run."""
    folder = directory / _POINTS / pid
    try:
        summary = json.loads((folder / _SUMMARY).read_text(encoding="utf-8"))
        return PointResult(pid, point, "ok", summary=summary)
    except (OSError, ValueError):
        pass
    try:
        failed = json.loads((folder / _FAILED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if failed.get("retry"):
        return None
    return PointResult(pid, point, "failed", error=str(failed.get("error", "")))


def _store_point(directory: Path, pid: str, point: Point, outcome: Mapping[str, Any]
                 ) -> PointResult:
    folder = directory / _POINTS / pid
    atomic_write_text(folder / _POINT, json.dumps(
        {"id": pid, "overrides": {key: value for key, value in point}},
        indent=2, default=str) + "\n")
    if outcome["status"] == "ok":
        (folder / _FAILED).unlink(missing_ok=True)
        atomic_write_text(folder / _SUMMARY, json.dumps(outcome["summary"], indent=2) + "\n")
        return PointResult(pid, point, "ok", summary=outcome["summary"])
    atomic_write_text(folder / _FAILED, json.dumps(
        {"error": outcome["error"], "retry": outcome["retry"]}, indent=2) + "\n")
    return PointResult(pid, point, "failed", error=outcome["error"])


def _is_metric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _write_csv(path: Path, keys: Sequence[str], results: Iterable[PointResult | None]) -> None:
    done = [r for r in results if r is not None]
    metrics: list[str] = []
    for result in done:
        for name, value in (result.summary or {}).items():
            if _is_metric(value) and name not in metrics:
                metrics.append(name)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", *keys, "status", "error", *metrics])
    for result in done:
        values = dict(result.overrides)
        summary = result.summary or {}
        writer.writerow([result.id, *(_cell(values[key]) for key in keys), result.status,
                         result.error, *(_cell(summary.get(name, "")) for name in metrics)])
    atomic_write_text(path, buffer.getvalue())


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, default=str)


# --------------------------------------------------------------------------- the definition


def _definition(scenario_path: Path, grids: Sequence[tuple[str, Sequence[Any]]],
                zip_: bool) -> dict[str, Any]:
    try:
        content = scenario_path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the scenario: {error.strerror or error}",
                          source=os.fspath(scenario_path)) from None
    data = {"scenario": os.fspath(scenario_path.resolve()),
            "scenario_sha256": hashlib.sha256(content).hexdigest(),
            "grids": [[key, list(values)] for key, values in grids],
            "zip": zip_}
    return json.loads(json.dumps(data, default=str))


def _check_definition(directory: Path, definition: Mapping[str, Any], *,
                      running: bool = False) -> None:
    """Refuse a directory holding another sweep (naming the difference) or other files;
    ``running``: that sweep is running now (it holds the lock)."""
    label = os.fspath(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError("exists and is not a directory", key="--out", source=label)
    stored_path = directory / _DEFINITION
    if not stored_path.exists():
        if directory.exists() and any(p.name not in (_LOCK, _RUNNING)
                                      for p in directory.iterdir()):
            raise ConfigError("exists and holds files that are not a sweep's", key="--out",
                              source=label, hint="give a new or empty directory, or the "
                                                 "directory of the sweep to resume")
        return
    try:
        stored = json.loads(stored_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read {_DEFINITION}: {error}", key="--out",
                          source=label) from None
    differences = []
    if stored.get("scenario") != definition["scenario"]:
        differences.append(f"scenario {stored.get('scenario')} -> {definition['scenario']}")
    elif stored.get("scenario_sha256") != definition["scenario_sha256"]:
        differences.append("the scenario file's content changed")
    old = {key: values for key, values in stored.get("grids", [])}
    new = {key: values for key, values in definition["grids"]}
    for key in old.keys() - new.keys():
        differences.append(f"--grid {key} dropped")
    for key in new.keys() - old.keys():
        differences.append(f"--grid {key} added")
    for key in old.keys() & new.keys():
        if old[key] != new[key]:
            differences.append(f"--grid {key}: {_values(old[key])} -> {_values(new[key])}")
    if not differences and list(old) != list(new):
        differences.append(f"grid order {', '.join(old)} -> {', '.join(new)}")
    if bool(stored.get("zip")) != definition["zip"]:
        differences.append("--zip " + ("added" if definition["zip"] else "dropped"))
    if differences:
        what = "a different sweep is running into it" if running else "holds a different sweep"
        raise ConfigError(f"{what}: " + "; ".join(differences), key="--out",
                          source=label, hint="resume with the same arguments, or give "
                                             "another directory")


def _claim(directory: Path, definition: Mapping[str, Any]) -> IO[bytes]:
    """Join ``directory`` as a running sweep: under an exclusive ``flock`` on its
    ``.sweep.lock`` (held only for this), check its definition against ours and write it,
    then hold a shared ``flock`` on ``.sweep.running`` for the sweep's life (the kernel
    drops both however the process ends).  A different sweep is refused, naming whether it
    is running; an identical one is joined, and the two share the points
    (:class:`_PointClaims`).  Returns the open ``.sweep.running`` (closing it leaves)."""
    label = os.fspath(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with open(directory / _LOCK, "ab") as lock:
            _flock(lock, exclusive=True, wait=True)
            _check_definition(directory, definition, running=_running(directory))
            atomic_write_text(directory / _DEFINITION, json.dumps(definition, indent=2) + "\n")
            running = open(directory / _RUNNING, "ab")  # noqa: SIM115 (held: it is the mark)
            _flock(running, exclusive=False, wait=True)
    except OSError as error:
        raise ConfigError(f"cannot write the sweep: {error.strerror or error}",
                          key="--out", source=label) from None
    return running


def _flock(handle: IO[bytes], *, exclusive: bool, wait: bool) -> bool:
    """Lock ``handle``'s file; False when ``wait`` is off and another process holds it.
    Without ``fcntl`` (not POSIX) every lock is granted: no sweep is detected or shared."""
    if fcntl is None:
        return True
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(handle.fileno(), mode)
    except BlockingIOError:
        return False
    return True


def _running(directory: Path) -> bool:
    """Whether a sweep is running into ``directory`` now (it holds ``.sweep.running``)."""
    try:
        with open(directory / _RUNNING, "rb") as handle:
            return not _flock(handle, exclusive=True, wait=False)
    except OSError:
        return False


class _PointClaims:
    """Which sweep runs which point, when identical sweeps share a folder: a sweep runs a
    point only while it holds an exclusive ``flock`` on ``points/<id>/.claim``; a point
    another sweep holds is left to it, and waited for at the end (and run here if that
    sweep died without a result)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.held: dict[str, IO[bytes]] = {}

    def take(self, pid: str, *, wait: bool = False) -> bool:
        folder = self.directory / _POINTS / pid
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / _CLAIM, "ab")  # noqa: SIM115 (held while the point runs)
        if not _flock(handle, exclusive=True, wait=wait):
            handle.close()
            return False
        self.held[pid] = handle
        return True

    def release(self, pid: str) -> None:
        handle = self.held.pop(pid, None)
        if handle is not None:
            handle.close()

    def close(self) -> None:
        for pid in list(self.held):
            self.release(pid)


def _values(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


# --------------------------------------------------------------------------- execution


Job = tuple[str, dict[str, Any], str]  # (point id, resolved config, scenario source)


def _run_local(jobs: Sequence[Job], workers: int, admit: Callable[[Job], bool] = bool,
               ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Run the ``jobs`` that ``admit`` takes, each asked just before it would start (so a
    sweep sharing the folder can take the others meanwhile), ``workers`` at a time."""
    admitted = (job for job in jobs if admit(job))
    with WorkerPool(workers, max_tasks=len(jobs)) as pool:
        for done in pool.as_completed(_run_job, admitted):
            yield done.task[0], _outcome(done.result)


def _run_job(job: Job) -> dict[str, Any]:
    return _run_point(job[1], job[2])


def _outcome(result: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A future's result; a worker that died (or could not return) is a retryable failure."""
    try:
        return result()
    except Exception as error:
        return {"status": "failed", "error": f"{type(error).__name__}: {error}",
                "retry": True}


def _run_dask(jobs: Sequence[tuple[str, dict[str, Any], str]], address: str
              ) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError("running on a Dask cluster needs dask.distributed",
                          key="--scheduler",
                          hint="pip install 'distsim-gpu[dask]'") from None
    try:
        client = Client(address)
    except (OSError, TimeoutError, ValueError) as error:
        raise ConfigError(f"cannot connect to the Dask scheduler: {error}",
                          key="--scheduler", source=address) from None
    try:
        futures = {}
        for pid, config, source in jobs:
            future = client.submit(_run_point, config, source, pure=False,
                                   key=f"distsim-sweep-{pid}-{os.urandom(4).hex()}")
            futures[future] = pid
        for future in as_completed(futures):
            yield futures[future], _outcome(future.result)
    finally:
        client.close()


# --------------------------------------------------------------------------- the sweep


def run_sweep(scenario_path: str | os.PathLike[str],
              grids: Sequence[tuple[str, Sequence[Any]] | str], *, zip_: bool = False,
              out_dir: str | os.PathLike[str], workers: int | None = None,
              scheduler: str | None = None, metric: str = "iteration_time_s",
              progress: bool = True) -> SweepResult:
    """Run ``scenario_path`` at every point of ``grids`` and write the results to ``out_dir``.

    ``grids`` are ``(dotted_key, values)`` pairs or ``"KEY=V1,V2"`` texts; ``zip_`` pairs
    them element-wise instead of taking their product.  ``workers`` processes run the points
    (default ``os.cpu_count()``; 1 runs them here), or the Dask cluster at ``scheduler``
    (``tcp://host:port``).  ``metric`` (a name of :data:`SUMMARY_METRICS`) is plotted
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
    if scheduler is not None and workers is not None:
        raise ConfigError("--workers sizes the local pool; with --scheduler the Dask "
                          "cluster has its own workers", key="--workers")
    if workers is None:
        workers = os.cpu_count() or 1
    if workers < 1:
        raise ConfigError(f"must be at least 1, got {workers}", key="--workers")
    points = sweep_points(parsed, zip_=zip_)
    path = Path(scenario_path)
    directory = Path(out_dir)
    definition = _definition(path, parsed, zip_)
    _check_definition(directory, definition, running=_running(directory))

    # Validate every point before running any.
    configs: dict[str, dict[str, Any]] = {}
    source = os.fspath(path)
    for point in points:
        try:
            scenario = load_scenario(path, list(point))
        except DistsimError as error:
            if error.source == "--set":
                error.source = "--grid"
            raise type(error)(f"{error.message} (at grid point {_describe(point)})",
                              source=error.source, key=error.key, line=error.line,
                              hint=error.hint) from None
        configs[point_id(point)] = json.loads(json.dumps(scenario.resolved()))

    lock = _claim(directory, definition)
    try:
        return _run_claimed(directory, parsed, points, configs, source, workers=workers,
                            scheduler=scheduler, metric=metric, progress=progress)
    finally:
        lock.close()  # (the kernel drops the lock with the file, or with the process)


def _run_claimed(directory: Path, parsed: Sequence[tuple[str, Sequence[Any]]],
                 points: Sequence[Point], configs: Mapping[str, dict[str, Any]], source: str,
                 *, workers: int, scheduler: str | None, metric: str,
                 progress: bool) -> SweepResult:
    """The sweep, once it has joined ``directory``: run the points not done yet, each
    under its claim (:class:`_PointClaims`), sharing them with an identical sweep."""
    from tqdm import tqdm

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
            run.record(_run_dask([job for job in jobs if run.admit(job)], scheduler))
        else:
            run.record(_run_local(jobs, workers, run.admit))
        for job in run.deferred:  # held by another sweep: wait for it, then take its result
            if run.adopt(job[0], wait=True):
                run.record(_run_local([job], 1))  # (it died without one: run it here)
    finally:
        run.bar.close()
        run.claims.close()
    done = tuple(r for r in (run.results[i] for i in ids) if r is not None)
    files, notes = _figures(directory, parsed, done, metric)
    return SweepResult(directory, done, run.ran, reused + run.shared,
                       (_DEFINITION, _RESULTS, _POINTS + "/", *files), tuple(notes))


class _SharedRun:
    """The points of one sweep as it runs: results, claims, what another sweep ran."""

    def __init__(self, directory: Path, keys: list[str], ids: list[str],
                 by_id: dict[str, Point]) -> None:
        self.directory, self.keys, self.ids, self.by_id = directory, keys, ids, by_id
        self.results: dict[str, PointResult | None] = {
            pid: _read_point(directory, pid, by_id[pid]) for pid in ids}
        self.claims = _PointClaims(directory)
        self.deferred: list[Job] = []
        self.ran = self.shared = self.failed = 0
        self.bar: Any = None

    def write_csv(self) -> None:
        _write_csv(self.directory / _RESULTS, self.keys, (self.results[i] for i in self.ids))

    def adopt(self, pid: str, *, wait: bool = False) -> bool:
        """Claim ``pid`` (waiting for another sweep's claim when ``wait``); True when it is
        ours to run, False when another sweep holds it or finished it (result taken)."""
        return self.claims.take(pid, wait=wait) and self._unfinished(pid)

    def _unfinished(self, pid: str) -> bool:
        """With ``pid`` claimed: True if it has no result yet, else take the result (a
        sweep sharing the folder ran it) and let the claim go."""
        found = _read_point(self.directory, pid, self.by_id[pid])
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
            self.results[pid] = _store_point(self.directory, pid, self.by_id[pid], outcome)
            self.claims.release(pid)
            self.ran += 1
            self.write_csv()
            if outcome["status"] != "ok":
                self.failed += 1
                self.bar.set_postfix(failed=self.failed, refresh=False)
            self.bar.update(1)


def _figures(directory: Path, grids: Sequence[tuple[str, Sequence[Any]]],
             done: Sequence[PointResult], metric: str) -> tuple[list[str], list[str]]:
    """Draw sweep.png and report.html; the files written, and notes for those skipped."""
    files: list[str] = []
    notes: list[str] = []
    try:
        if _plot(directory / _PLOT, grids, done, metric):
            files.append(_PLOT)
        else:
            notes.append(f"plot skipped: no point has a value of {metric}")
    except ImportError:
        notes.append("plot skipped: matplotlib is not installed (pip install "
                      "'distsim-gpu[plot]')")
    try:
        _write_html(directory / _HTML, directory.name, grids, done, metric)
        files.append(_HTML)
    except HtmlUnavailable as missing:
        notes.append(f"report.html skipped: {missing}")
    return files, notes


# --------------------------------------------------------------------------- the plot


def _write_html(path: Path, name: str, grids: Sequence[tuple[str, Sequence[Any]]],
                results: Sequence[PointResult], metric: str) -> None:
    """report.html (atomically): every point's metrics against the first key
    (:func:`scenarios.html_report.sweep_report_html`).  Raises HtmlUnavailable."""
    first, xs = grids[0]
    numeric = _numeric_axis(xs)
    curves = {m: {", ".join(label): pairs
                  for label, pairs in _curves(grids, results, m).items()}
              for m in dict.fromkeys((metric, *_HTML_METRICS))}
    failed = sum(1 for r in results if r.status != "ok")
    intro = (f"<p>{len(results)} point(s), {failed} failed; results.csv has every "
             "point's metrics.</p>")
    page = sweep_report_html(f"distsim sweep: {name}", first, [str(v) for v in xs],
                             numeric[0] if numeric else None,
                             {m: c for m, c in curves.items() if c}, intro,
                             numeric[1] if numeric else "")
    atomic_write_text(path, page)

_UNIT_PARSERS: tuple[tuple[Callable[..., float], str], ...] = (
    (parse_bandwidth, "B/s"), (parse_duration, "s"), (parse_size, "B"), (parse_flops, "FLOP/s"))


def _numeric_axis(values: Sequence[Any]) -> tuple[list[float], str] | None:
    """The values as numbers (and their unit) when all are numbers or all parse with one
    unit parser; None otherwise (a categorical axis)."""
    if all(_is_metric(v) for v in values):
        return [float(v) for v in values], ""
    for parser, unit in _UNIT_PARSERS:
        try:
            return [parser(v) for v in values], unit
        except DistsimError:
            continue
    return None


def _curves(grids: Sequence[tuple[str, Sequence[Any]]], results: Sequence[PointResult],
            metric: str) -> dict[tuple[str, ...], list[tuple[int, float]]]:
    """``metric`` against the first key: per combination of the other keys (its
    ``key=value`` labels), the (index of the first key's value, metric) of every point
    that has it."""
    first, xs = grids[0]
    others = [key for key, _ in grids[1:]]
    lines: dict[tuple[str, ...], list[tuple[int, float]]] = {}
    index = {_canonical(v): i for i, v in enumerate(xs)}
    for result in results:
        value = (result.summary or {}).get(metric)
        if result.status != "ok" or not _is_metric(value):
            continue
        point = dict(result.overrides)
        label = tuple(f"{key}={point[key]}" for key in others)
        lines.setdefault(label, []).append((index[_canonical(point[first])], float(value)))
    return lines


def _plot(path: Path, grids: Sequence[tuple[str, Sequence[Any]]],
          results: Sequence[PointResult], metric: str) -> bool:
    """Draw ``metric`` against the first key into ``path`` (atomically); False when no
    point has the metric.  Raises ImportError without matplotlib."""
    first, xs = grids[0]
    others = [key for key, _ in grids[1:]]
    lines = _curves(grids, results, metric)
    if not lines:
        return False
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    numeric = _numeric_axis(xs)
    figure = Figure(figsize=(7.0, 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    for label, pairs in lines.items():
        pairs.sort(key=lambda p: numeric[0][p[0]] if numeric else p[0])
        x = [numeric[0][i] if numeric else i for i, _ in pairs]
        axes.plot(x, [v for _, v in pairs], marker="o", label=", ".join(label) or None)
    if numeric is None:
        axes.set_xticks(range(len(xs)), [str(v) for v in xs])
        axes.set_xlabel(first)
    else:
        axes.set_xlabel(f"{first} ({numeric[1]})" if numeric[1] else first)
    axes.set_ylabel(metric)
    axes.grid(True, alpha=0.3)
    if others:
        axes.legend(fontsize="small")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=120)
    from distsim_gpu.simcore.fileio import atomic_write_bytes

    atomic_write_bytes(path, buffer.getvalue())
    return True
