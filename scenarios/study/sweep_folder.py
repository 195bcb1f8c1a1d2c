"""The folder of a sweep: its definition, its locks, and each point's files.

``sweep.json`` holds the definition (scenario, its content hash, grids, zip), checked
against a restarted sweep's under an exclusive ``flock`` on ``.sweep.lock``; a running
sweep holds a shared ``flock`` on ``.sweep.running``, and runs a point only under an
exclusive ``flock`` on ``points/<id>/.claim`` (:class:`PointClaims`), so identical sweeps
share the points.  Each point's ``point.json``, ``summary.json`` or ``failed.json`` and the
``results.csv`` built from them are written atomically.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

try:
    import fcntl
except ImportError:  # (not POSIX)
    fcntl = None  # type: ignore[assignment]

from distsim_gpu.scenarios.study.sweep_grid import Point
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import atomic_write_text, file_in_the_way, read_input_bytes
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.yamlfile import MAX_YAML_BYTES

__all__ = [
    "DEFINITION",
    "POINTS",
    "RESULTS",
    "PointClaims",
    "PointResult",
    "check_definition",
    "claim_folder",
    "is_metric",
    "leave_folder",
    "read_point",
    "store_point",
    "sweep_definition",
    "sweep_running",
    "write_results_csv",
]

DEFINITION = "sweep.json"
RESULTS = "results.csv"
POINTS = "points"
_SUMMARY = "summary.json"
_FAILED = "failed.json"
_LOCK = ".sweep.lock"
_RUNNING = ".sweep.running"
_CLAIM = ".claim"
_POINT = "point.json"


@dataclass(frozen=True, slots=True)
class PointResult:
    """One point of a sweep: its overrides, its status (``ok`` / ``failed``), the error of
    a failed one, and the report (``Report.to_json_dict()``) of one that ran."""

    id: str
    overrides: Point
    status: str
    error: str = ""
    summary: Mapping[str, Any] | None = None

    @property
    def notes(self) -> tuple[str, ...]:
        """The run's notes (the assumptions that move its answer), as ``run`` prints them:
        a sweep reports them with the point's numbers rather than only in its summary."""
        return tuple(str(RunNote(note["kind"], note["message"], note.get("key")))
                     for note in (self.summary or {}).get("notes", ()))


def read_point(directory: Path, pid: str, point: Point) -> PointResult | None:
    """The stored result of a point, or None when it must (still, or again) run."""
    folder = directory / POINTS / pid
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


def store_point(directory: Path, pid: str, point: Point, outcome: Mapping[str, Any]
                ) -> PointResult:
    """Write a point's files for ``outcome`` (:func:`~.sweep_runner.run_point`'s)."""
    folder = directory / POINTS / pid
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


def is_metric(value: Any) -> bool:
    """A number a summary reports (a bool is not one)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Between a point's notes in results.csv's ``notes`` cell (notes are written in sentences
#: with semicolons and commas, never with this).
NOTES_SEPARATOR = " | "


def write_results_csv(path: Path, keys: Sequence[str],
                      results: Iterable[PointResult | None]) -> None:
    """results.csv: per point done, its id, swept values, status, error, notes (joined by
    :data:`NOTES_SEPARATOR`: one row a line, for tools that read CSV by lines) and
    metrics."""
    done = [r for r in results if r is not None]
    metrics: list[str] = []
    for result in done:
        for name, value in (result.summary or {}).items():
            if is_metric(value) and name not in metrics:
                metrics.append(name)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["id", *keys, "status", "error", "notes", *metrics])
    for result in done:
        values = dict(result.overrides)
        summary = result.summary or {}
        writer.writerow([result.id, *(_cell(values[key]) for key in keys), result.status,
                         result.error, NOTES_SEPARATOR.join(result.notes),
                         *(_cell(summary.get(name, "")) for name in metrics)])
    atomic_write_text(path, buffer.getvalue())


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, default=str)


def sweep_definition(scenario_path: Path, grids: Sequence[tuple[str, Sequence[Any]]],
                     zip_: bool, overrides: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
    """What sweep.json holds: the scenario (path and content hash), grids and zip, and
    the overrides every point shares (only when there are: older sweeps' folders match)."""
    # Read as `run` reads it (bounded, regular files only): `sweep /dev/zero` would
    # otherwise read until memory ran out, and a missing file would say less than `run`.
    content = read_input_bytes(scenario_path, "scenario", limit_bytes=MAX_YAML_BYTES)
    data = {"scenario": os.fspath(scenario_path.resolve()),
            "scenario_sha256": hashlib.sha256(content).hexdigest(),
            "grids": [[key, list(values)] for key, values in grids],
            "zip": zip_}
    if overrides:
        data["set"] = [[key, value] for key, value in overrides]
    return json.loads(json.dumps(data, default=str))


def check_definition(directory: Path, definition: Mapping[str, Any], *,
                     running: bool = False) -> None:
    """Refuse a directory holding another sweep (naming the difference) or other files;
    ``running``: that sweep is running now (it holds the lock)."""
    label = os.fspath(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError("exists and is not a directory", key="--out", source=label)
    stored_path = directory / DEFINITION
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
        raise ConfigError(f"cannot read {DEFINITION}: {error}", key="--out",
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
    if stored.get("set", []) != definition.get("set", []):
        was, now = (", ".join(f"{k}={v}" for k, v in d.get("set", [])) or "none"
                    for d in (stored, definition))
        differences.append(f"--set {was} -> {now}")
    if differences:
        what = "a different sweep is running into it" if running else "holds a different sweep"
        raise ConfigError(f"{what}: " + "; ".join(differences), key="--out",
                          source=label, hint="resume with the same arguments, or give "
                                             "another directory")


def _values(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


def claim_folder(directory: Path, definition: Mapping[str, Any]) -> IO[bytes]:
    """Join ``directory`` as a running sweep: under an exclusive ``flock`` on its
    ``.sweep.lock`` (held only for this), check its definition against ours and write it,
    then hold a shared ``flock`` on ``.sweep.running`` for the sweep's life (the kernel
    drops both however the process ends).  A different sweep is refused, naming whether it
    is running; an identical one is joined, and the two share the points
    (:class:`PointClaims`).  Returns the open ``.sweep.running`` (closing it leaves)."""
    label = os.fspath(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _folder_lock(directory):
            check_definition(directory, definition, running=sweep_running(directory))
            atomic_write_text(directory / DEFINITION, json.dumps(definition, indent=2) + "\n")
            running = open(directory / _RUNNING, "ab")  # noqa: SIM115 (held: it is the mark)
            _flock(running, exclusive=False, wait=True)
    except OSError as error:
        blocker = file_in_the_way(directory)
        why = (f"{blocker} is a file, not a directory" if blocker is not None
               else error.strerror or error)
        raise ConfigError(f"cannot write the sweep: {why}", key="--out", source=label) from None
    return running


@contextlib.contextmanager
def _folder_lock(directory: Path) -> Iterator[IO[bytes]]:
    """Hold the exclusive ``flock`` on ``directory/.sweep.lock``.  The last sweep to
    leave removes the file (:func:`leave_folder`): a lock taken on a file that was removed
    meanwhile is let go and taken again on the new one."""
    path = directory / _LOCK
    while True:
        lock = open(path, "ab")  # noqa: SIM115 (closed below, or yielded and closed)
        _flock(lock, exclusive=True, wait=True)
        try:
            same = os.path.samestat(os.fstat(lock.fileno()), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        lock.close()
    try:
        yield lock
    finally:
        lock.close()


def leave_folder(directory: Path, running: IO[bytes]) -> None:
    """Leave a sweep's folder: close ``running`` (from :func:`claim_folder`); the last
    sweep out (no other holds ``.sweep.running``) removes ``.sweep.lock`` and
    ``.sweep.running``, so a finished sweep's folder holds its results alone."""
    try:
        with _folder_lock(directory):
            if fcntl is not None and _flock(running, exclusive=True, wait=False):
                (directory / _RUNNING).unlink(missing_ok=True)
                (directory / _LOCK).unlink(missing_ok=True)
    except OSError:
        pass  # the marks are only left behind: the next sweep reads them as before
    finally:
        running.close()


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


def sweep_running(directory: Path) -> bool:
    """Whether a sweep is running into ``directory`` now (it holds ``.sweep.running``)."""
    try:
        with open(directory / _RUNNING, "rb") as handle:
            return not _flock(handle, exclusive=True, wait=False)
    except OSError:
        return False


class PointClaims:
    """Which sweep runs which point, when identical sweeps share a folder: a sweep runs a
    point only while it holds an exclusive ``flock`` on ``points/<id>/.claim``; a point
    another sweep holds is left to it, and waited for at the end (and run here if that
    sweep died without a result)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.held: dict[str, IO[bytes]] = {}

    def take(self, pid: str, *, wait: bool = False) -> bool:
        folder = self.directory / POINTS / pid
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
