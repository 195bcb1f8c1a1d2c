"""``--out DIR``: every output of a run in one directory, written whole or not at all.

:func:`write_output_dir` runs the registered writers (:data:`scenarios.report.writers.
WRITERS`: summary.json, resolved.yaml, trace.json, PNG plots, report.html) into a
temporary sibling directory and renames it into place at the end, so a reader never sees
half an output, and a failure leaves the old one as it was.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.report.record import Report
from distsim_gpu.scenarios.report.writers import WRITERS, OutputContext, ReportWriter
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.fileio import file_in_the_way

__all__ = ["OUTPUT_FILES", "OutputResult", "write_output_dir"]

# Every name the built-in writers may write; a directory holding only the names of the
# writers in use (and a summary.json) is a previous distsim output and may be replaced.
OUTPUT_FILES = tuple(name for writer in WRITERS for name in writer.files)


@dataclass(frozen=True, slots=True)
class OutputResult:
    """What :func:`write_output_dir` wrote (file names inside ``directory``) and notes
    (e.g. plots skipped)."""

    directory: Path
    files: tuple[str, ...]
    notes: tuple[str, ...] = ()


def _is_previous_output(directory: Path, names_written: Sequence[str]) -> bool:
    names = {p.name for p in directory.iterdir()}
    return "summary.json" in names and names <= set(names_written)


def _check_target(target: Path, label: str, names_written: Sequence[str]) -> None:
    """Refuse a target that is not a directory, or one holding files distsim did not write.
    A symbolic link is refused by name: replacing the directory would replace the link, not
    what it points to."""
    if target.is_symlink():
        raise ConfigError("is a symbolic link; distsim replaces its output directory whole, "
                          "which would replace the link", key="--out", source=label,
                          hint=f"give the directory it points to: {os.path.realpath(target)}")
    if not target.exists():
        return
    if not target.is_dir():
        raise ConfigError("exists and is not a directory", key="--out", source=label)
    if any(target.iterdir()) and not _is_previous_output(target, names_written):
        raise ConfigError(
            "exists and holds files distsim did not write", key="--out", source=label,
            hint="give a new or empty directory; distsim replaces only its own previous "
                 "output (" + ", ".join(names_written) + ")")


def _run_writers(writers: Sequence[ReportWriter], out: OutputContext
                 ) -> tuple[list[str], list[str]]:
    """Each writer in turn: the files written and the notes, in the writers' order."""
    files: list[str] = []
    notes: list[str] = []
    for writer in writers:
        try:
            written = writer.write(out)
        except writer.unavailable as missing:  # an optional package is not installed
            notes.append(f"{writer.skipped}: {missing}")
            continue
        files += written.files
        notes += written.notes
    return files, notes


def write_output_dir(report: Report, directory: str | os.PathLike[str], *,
                     plots: bool = True, html: bool = True,
                     sections: Mapping[str, tuple[Any, str]] | None = None,
                     writers: Sequence[ReportWriter] | None = None) -> OutputResult:
    """Write ``summary.json``, ``resolved.yaml``, ``trace.json`` (when the run traced),
    PNG plots (when ``plots`` and matplotlib is installed) and ``report.html`` (when
    ``html`` and Plotly is installed, see :mod:`scenarios.report.html_report`) into
    ``directory``; what was skipped, and why, is in the result's notes.  ``sections``:
    more of the run's findings, each as (its JSON, its text), added to summary.json
    under its name and to report.html's summary (e.g. faults and jobs,
    :mod:`scenarios.disruptions`).  ``writers``: the writers to run, in order (default
    :data:`scenarios.report.writers.WRITERS`); ``plots`` / ``html`` switch off the
    writers of those names.

    The directory appears whole or not at all: the files are written into a temporary
    sibling directory that is renamed into place at the end; any failure removes it and
    leaves ``directory`` as it was.  ``directory`` may be absent, empty, or a previous
    distsim output (only files the writers write, with a summary.json), which is
    replaced; anything else is refused with :class:`ConfigError`.
    """
    chosen = list(WRITERS if writers is None else writers)
    names_written = tuple(name for writer in chosen for name in writer.files)
    off = {name for name, on in (("plots", plots), ("html", html)) if not on}
    target = Path(directory)
    label = os.fspath(directory)
    _check_target(target, label, names_written)
    parent = target.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = _make_staging(parent, target.name)
    except OSError as error:
        blocker = file_in_the_way(parent)
        why = (f"{blocker} is a file, not a directory" if blocker is not None
               else error.strerror or error)  # (mkdir's own word here was "File exists")
        raise ConfigError(f"cannot create the output directory: {why}",
                          key="--out", source=label) from None
    try:
        out = OutputContext(report, staging, dict(sections or {}))
        files, notes = _run_writers([w for w in chosen if w.name not in off], out)
        _commit(staging, target)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise ConfigError(f"cannot write the output: {error.strerror or error}",
                              key="--out", source=label) from None
        raise
    return OutputResult(target, tuple(files), tuple(notes))


def _make_staging(parent: Path, name: str) -> Path:
    """A new hidden directory beside the target, with the umask's usual permissions
    (``tempfile.mkdtemp`` would make it private, and the rename would keep that)."""
    for _ in range(100):
        staging = parent / f".{name}.{secrets.token_hex(4)}.partial"
        try:
            staging.mkdir()
        except FileExistsError:
            continue
        return staging
    raise FileExistsError(f"cannot find a free staging name beside {name}")


def _commit(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``, replacing an existing (empty or previous) one."""
    if not target.exists():
        os.rename(staging, target)
        return
    old = staging.with_name(staging.name.replace(".partial", ".old"))
    os.rename(target, old)
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)

