"""The one loader of trace files: finds them, streams each, and picks its format.

Inputs may be a ``.json`` or ``.json.gz`` file, a tar archive (``.tar.gz``, ``.tgz``,
``.tar``, …) holding one JSON per rank (read member by member, never extracted to disk),
or a directory of such files.  Each file is streamed (:mod:`distsim_gpu.measured.jsonstream`):
its events are decoded one at a time from the (decompressing) file object and handed at
once to both format readers, which keep compact records; one file is read at a time.

Two formats share the Chrome trace-event layout, and a file says which it is only at its
end, by ``otherData.generator``:

* ``"distsim"`` — distsim's own trace.json (:mod:`distsim_gpu.measured.distsim_trace`):
  every simulated GPU of a run, one :class:`RankTrace` each, plus the raw spans with
  their args (:class:`~distsim_gpu.measured.distsim_trace.DistsimTrace`);
* anything else, or no ``otherData`` at all — a PyTorch profiler (Kineto) trace of one
  rank (:mod:`distsim_gpu.measured.kineto`).  Kineto writes no generator; a Chrome trace
  of another tool is read the same way and keeps whatever Kineto-shaped events it has.

Whatever the format, the result is the records of :mod:`distsim_gpu.measured.records`.
A file unusable as a whole (missing, not JSON, truncated, empty, no ``traceEvents``
list, an unsafe tar member name) raises :class:`~distsim_gpu.simcore.errors.ParseError`
naming the file (and tar member).
"""

from __future__ import annotations

import os
import re
import stat
import tarfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Literal

from distsim_gpu.measured.distsim_trace import DistsimReader, DistsimTrace, is_distsim_trace
from distsim_gpu.measured.jsonstream import scan_document
from distsim_gpu.measured.kineto import KinetoReader
from distsim_gpu.measured.records import RankTrace
from distsim_gpu.simcore.errors import ParseError

__all__ = [
    "TraceFile",
    "load_trace_file",
    "load_traces",
    "read_trace_file",
    "read_traces",
]

_EXPECTED = "expected a PyTorch profiler (Kineto) trace or a distsim trace.json"
# Chakra ETs are the other trace format distsim reads, by another command: a user who
# hands one here is told where it goes, not that its bytes are not JSON.
_CHAKRA_HINT = "run Chakra ETs with 'distsim trace chakra ET... --cluster ...'"

TraceFormat = Literal["kineto", "distsim"]


@dataclass(frozen=True, slots=True)
class TraceFile:
    """One trace document as read: where it came from, which format it was, its ranks.

    ``simulated`` is the decoded distsim trace (its spans keep their args, which cost
    tables need) when ``format`` is ``"distsim"``, else ``None``.
    """

    source: str
    format: TraceFormat
    rank_traces: tuple[RankTrace, ...]
    simulated: DistsimTrace | None = None


def _read_stream(stream: IO[bytes], source: str, compressed: bool) -> TraceFile:
    """Stream one document from ``stream`` and read it in its own format.

    Every event goes to both readers: the Kineto one reduces it at once, the distsim one
    keeps only the few kinds a distsim trace is made of, so memory stays that of one
    format's records.  ``source`` names the document in errors and in the records.
    """
    kineto = KinetoReader(source)
    distsim = DistsimReader(source)

    def on_event(index: int, event: object) -> None:
        kineto.add(index, event)
        distsim.add(index, event)

    document = scan_document(stream, source, compressed=compressed, on_item=on_event)
    if "traceEvents" not in document and ("workload_graph" in document or "nodes" in document):
        raise ParseError("a Chakra execution trace (its JSON form), not a profiler trace",
                         source=source, hint=_CHAKRA_HINT)
    if is_distsim_trace(document):
        simulated = distsim.finish(document)
        return TraceFile(source, "distsim", tuple(simulated.rank_traces()), simulated)
    return TraceFile(source, "kineto", (kineto.finish(document),))


def read_trace_file(path: str | Path) -> tuple[list[RankTrace], DistsimTrace | None]:
    """One ``.json``/``.json.gz`` file: its rank traces and, for a distsim trace.json, the
    :class:`~distsim_gpu.measured.distsim_trace.DistsimTrace` with its spans' args (else
    ``None``).  Raises :class:`ParseError`."""
    read = _read_file(Path(path))
    return list(read.rank_traces), read.simulated


def load_trace_file(path: str | Path) -> RankTrace:
    """Read one ``.json`` or ``.json.gz`` file of one rank (raises :class:`ParseError`,
    also for a distsim trace of several GPUs: :func:`load_traces` reads those)."""
    traces = _read_file(Path(path)).rank_traces
    if len(traces) != 1:
        raise ParseError(f"holds {len(traces)} GPUs (a distsim trace)", source=str(path),
                         hint="read it with load_traces")
    return traces[0]


def read_traces(paths: Iterable[str | Path]) -> Iterator[TraceFile]:
    """Every trace document under ``paths`` (files, tar archives, directories), in order,
    each in its own format.

    Tar members and directory entries come in name order; one file is decoded at a time.
    Raises :class:`ParseError` for a missing path or an unusable file.
    """
    for path in paths:
        yield from _iter_path(Path(path))


def load_traces(paths: Iterable[str | Path]) -> list[RankTrace]:
    """The rank traces of every document under ``paths`` (see :func:`read_traces`), Kineto
    and distsim's alike, in order."""
    return [trace for read in read_traces(paths) for trace in read.rank_traces]


def _is_gz(name: str) -> bool:
    return name.lower().endswith(".gz")


def _is_trace_name(name: str) -> bool:
    lower = name.lower()
    return lower.endswith(".json") or lower.endswith(".json.gz")


def _is_tar_name(name: str) -> bool:
    lower = name.lower()
    return lower.endswith((".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tar.xz"))


def _read_file(path: Path) -> TraceFile:
    source = str(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # /dev/zero would never end, a FIFO block
            raise ParseError("not a regular file (a device, pipe or socket)", source=source,
                             hint=_EXPECTED)
        if info.st_size == 0:
            raise ParseError("empty file", source=source, hint=_EXPECTED)
        if path.name.lower().endswith(".et"):
            raise ParseError("a Chakra execution trace (.et), not a profiler trace",
                             source=source, hint=_CHAKRA_HINT)
        with path.open("rb") as stream:
            return _read_stream(stream, source, _is_gz(path.name))
    except OSError as error:
        raise ParseError(f"cannot read: {error.strerror or error}", source=source) from None


def _iter_path(path: Path) -> Iterator[TraceFile]:
    if not os.path.exists(path):  # (False too for a name the OS refuses: 255+ chars)
        raise ParseError("no such file or directory", source=str(path),
                         hint="give a .json, .json.gz, .tar.gz or a directory of them")
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and _is_trace_name(p.name))
        if not files:
            raise ParseError("no *.json or *.json.gz files in the directory", source=str(path))
        for file in files:
            yield _read_file(file)
    elif _is_tar_name(path.name):
        # Archive order is the writer's; name order is what a directory gives too.
        yield from sorted(_iter_tar(path), key=lambda read: read.source)
    else:
        yield _read_file(path)


def _check_member_name(name: str, source: str) -> None:
    parts = PurePosixPath(name).parts
    if name.startswith(("/", "\\")) or ".." in parts or re.match(r"^[A-Za-z]:", name):
        raise ParseError(f"unsafe member name {name!r}", source=source,
                         hint="members must be relative paths without '..'")


def _iter_tar(path: Path) -> Iterator[TraceFile]:
    """Every trace member of a tar archive, streamed in archive order."""
    source = str(path)
    found = False
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                _check_member_name(member.name, source)
                if not member.isfile() or not _is_trace_name(member.name):
                    continue
                found = True
                member_source = f"{source}:{member.name}"
                if member.size == 0:
                    raise ParseError("empty file", source=member_source, hint=_EXPECTED)
                stream = archive.extractfile(member)
                if stream is not None:
                    with stream:
                        yield _read_stream(stream, member_source, _is_gz(member.name))
    except (tarfile.TarError, EOFError, zlib.error, OSError) as error:
        raise ParseError(f"not a readable tar archive: {error}", source=source) from None
    if not found:
        raise ParseError("no *.json or *.json.gz member in the archive", source=source)
