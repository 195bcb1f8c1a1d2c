"""Reading nccl-tests logs: measured collective times to check the simulator against.

NVIDIA's nccl-tests (``all_reduce_perf``, ``all_gather_perf`` …) print one table row per
message size::

    #    size   count  type redop root   time algbw busbw #wrong   time algbw busbw #wrong
    #     (B) (elements)                   (us) (GB/s) (GB/s)        (us) (GB/s) (GB/s)
      1048576  262144 float   sum   -1  85.58 12.25 22.97      0  84.50 12.41 23.27      0

— size and element count, data type, reduction and root, then *time, algbw, busbw,
#wrong* for the out-of-place and (optionally) the in-place call.  Around the table the
tool prints a header (``nThread … nGpus …``, ``# Using devices``, one line per rank with
host and GPU model) and a trailer (``# Avg bus bandwidth : 66.48``).

Real logs arrive pasted into READMEs and chat: wrapped in markdown fences, quoted with
``> ``, behind ``mpirun`` echo, ssh warnings, NCCL INFO lines and hostname prefixes, and
from nccl-tests versions whose tables differ (older ones lack ``redop``/``root`` for some
operations; the newest add ``#bitdiff``, per-iteration and timestamp columns).  This
module finds the tables in that noise and reads them:

* the row grammar comes from the table's own column-header line when the log has one,
  otherwise from the number of fields (7–9 fields: out-of-place only, 11–13: both halves);
* a line that is clearly meant as a row but does not read (a column that is not a number,
  too few fields) is a :class:`~simcore.errors.ParseError` naming the file and line —
  never a silently dropped measurement, never a traceback;
* one file may hold several runs (say a 1-node and a 2-node sweep); a new header after a
  table starts a new run, and :func:`split_nccl_runs` returns them one by one.

Units are converted here, once: times from microseconds to seconds, algbw/busbw from GB/s
(10⁹ B/s, as nccl-tests prints them) to bytes per second.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from distsim_gpu.measured.nccl_row_values import (
    BYTES_PER_S_PER_GB_S,
    TIME_COLUMNS,
    RowPlace,
    measured_halves,
    wrong_results,
)
from distsim_gpu.simcore.errors import ParseError
from distsim_gpu.simcore.fileio import read_input_bytes

__all__ = ["NcclLog", "NcclRow", "parse_nccl_log", "split_nccl_runs"]

_T = TypeVar("_T")

# Collectives named by the nccl-tests binaries (``<op>_perf``, ``<op>_perf_mpi``).
_KNOWN_OPS = frozenset({
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
    "sendrecv", "gather", "scatter", "hypercube", "alltoallv",
})

# Data type names nccl-tests (and its ROCm fork) print; only used to recognise a row
# outside a table, where a looser test would mistake prose for data.
_KNOWN_DTYPES = frozenset({
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double",
    "bfloat16", "char", "int", "float16", "float32", "float64", "bf16", "fp16", "fp32",
    "fp64", "f16", "f32", "f64", "f8e4m3", "f8e5m2", "fp8_e4m3", "fp8_e5m2", "fp8",
    "bf8", "e4m3", "e5m2",
})

_ROW_EXAMPLE = (
    "a row looks like '   1048576   262144   float   sum   -1   85.58   12.25   22.97"
    "   0   84.50   12.41   23.27   0': size(B) count type [redop] [root], then time(us) "
    "algbw(GB/s) busbw(GB/s) #wrong out-of-place and, optionally, in-place"
)

# --- line shapes ---------------------------------------------------------------------

# Leading decoration: whitespace, markdown quoting, terminal colour codes.
_LEAD = re.compile(r"^(?:[\s>]|\x1b\[[0-9;]*[A-Za-z])+")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Per-line tags that launchers prepend: mpirun --tag-output, kubectl --prefix, pdsh/clush,
# srun --label.
_TAG = re.compile(
    r"^(?:\[\d+,\d+\]<\w+>:"              # [1,0]<stdout>:
    r"|\[[A-Za-z][\w./-]*\]\s"            # [pod/worker-0/nccl]
    r"|[A-Za-z{][\w.{}-]*:\s"             # node001:  (hostname then whitespace)
    r"|\d+:\s)"                           # 0:  (srun --label: the task number)
)
_FENCE = re.compile(r"^(```|~~~)")
# Counts and ids are ASCII digits, at most 18 (``\d`` takes any script's digits, and
# int() refuses more than 4,300): a longer number is not a count, so the line does
# not match and reads as noise or as a malformed row.
_INT = re.compile(r"^[-+]?[0-9]{1,18}$")
_UINT = re.compile(r"^[0-9]{1,18}$")
_WORD = re.compile(r"^[A-Za-z_][\w.%-]*$")
_DATE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$")
_CLOCK = re.compile(r"^[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?$")

_NTHREAD = re.compile(r"^nThread\s+([0-9]{1,18})\s+nGpus\s+([0-9]{1,18})\b")
# The sweep the nThread line declares: "maxBytes 8589934592 step: 2(factor)" or "(bytes)".
_SWEEP = re.compile(r"\bmaxBytes\s+([0-9]{1,18})\s+step:\s*([0-9]{1,18})\((factor|bytes)\)")
_USING = re.compile(r"^Using devices\s*$")
_DEVICE = re.compile(
    r"^Rank\s+([0-9]{1,18})\s+(?:Group\s+([0-9]{1,18})\s+)?Pid\s+[0-9]+\s+on\s+\S+\s+device\s+[0-9]+\s+"
    r"\[[^\]]*\]\s+(.*?)\s*$"
)
_BANNER = re.compile(r"^(?:nccl|rccl)-tests version\b(.*)$")
_LIBRARY_CODE = re.compile(r"\bnccl-library=([0-9]{1,18})")
_STARTING = re.compile(r"^Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"^Collective test concluded\b")
_OUT_OF_BOUNDS = re.compile(r"^Out of bounds values\s*:")
_AVG_BUSBW = re.compile(r"^Avg bus bandwidth\s*:\s*(\S*)")
_NCCL_VERSION = re.compile(r"\bNCCL version\s+([0-9]+\.[0-9]+\.[0-9]+[\w.+-]*)")
_NRANKS = re.compile(r"\bnranks[\s=:]+([0-9]{1,18})\b")
_BINARY = re.compile(r"(?:^|[\s/=])([a-z][a-z0-9_]*?)_perf(?:_mpi)?(?=$|[\s;&|)])")
_LAUNCHER = re.compile(r"(?:^|[\s/])(?:mpirun|mpiexec|orterun|prterun|srun)(?=\s|$)")
_NP = re.compile(r"(?:^|\s)(?:-np|--np|-n|--n|--ntasks)(?:\s+|=)([0-9]{1,18})(?=\s|$)")
_NGPUS_OPT = re.compile(r"(?:^|\s)(?:-g|--ngpus)(?:\s*|=)([0-9]{1,18})(?=\s|$)")
_NTHREADS_OPT = re.compile(r"(?:^|\s)(?:-t|--nthreads)(?:\s*|=)([0-9]{1,18})(?=\s|$)")

# Order in which a run's header parts appear; a part that comes "too early" for the
# run being read begins the next run.
_COMMAND, _BANNER_STAGE, _START, _NTHREAD_STAGE, _USING_STAGE, _DEVICES = 1, 2, 3, 4, 5, 6
_HEADER, _ROWS, _TRAILER = 7, 8, 9


# --- public records --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NcclRow:
    """One row of an nccl-tests table, in SI units.

    ``redop`` is ``"none"`` and ``root`` is ``-1`` where the log's table has no such
    column (what nccl-tests itself prints for operations without them).  The in-place
    fields are ``None`` when the row has only the out-of-place half.  ``line`` is the
    1-based line of the row in its file.
    """

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place_time_s: float
    out_of_place_algbw_bytes_per_s: float
    out_of_place_busbw_bytes_per_s: float
    in_place_time_s: float | None
    in_place_algbw_bytes_per_s: float | None
    in_place_busbw_bytes_per_s: float | None
    line: int
    # nccl-tests' #wrong over both halves: results its check found wrong (0 for N/A).
    wrong_results: int = 0

    @property
    def time_s(self) -> float:
        """The measured time of one call, seconds, to compare a prediction against.

        The mean of the out-of-place and in-place times when both were measured, else
        the out-of-place time.  Both halves run the same collective on the same bytes
        over the same links — in-place only saves a local buffer copy that is negligible
        next to the network time — so they are two samples of one quantity, and their
        mean halves the run-to-run noise the table shows (a few percent between the two
        columns is common).  The minimum would bias toward lucky runs.
        """
        if self.in_place_time_s is None:
            return self.out_of_place_time_s
        return 0.5 * (self.out_of_place_time_s + self.in_place_time_s)


@dataclass(frozen=True, slots=True)
class NcclLog:
    """What one nccl-tests log says: the run's setting and its rows, in SI units.

    ``op`` is the collective (``"all_reduce"`` …) when the log names it — the
    ``*_perf`` binary on an echoed command line or ``# Collective test starting:`` —
    else ``None``.  ``num_ranks`` counts the ranks on the ``Rank N Group G …`` device
    lines (per group when ``NCCL_TESTS_SPLIT_MASK`` split them); without device lines it
    is ``-np`` of an echoed ``mpirun`` times the GPUs per process, or NCCL's ``nranks``,
    else ``None``.  ``gpu_model`` is the name on the device lines (distinct names joined
    by ``", "`` if ranks differ).  ``nccl_version`` is NCCL's ``NCCL version 2.18.3+…``
    line or, failing that, the ``nccl-library=`` code of the nccl-tests banner.
    ``avg_busbw_bytes_per_s`` is the ``# Avg bus bandwidth`` trailer (printed in GB/s).
    ``max_bytes`` is the ``maxBytes`` of the ``nThread`` header line; ``cut_short`` says
    that the table stops before that sweep's last size (the next step is still within
    ``maxBytes``) and no trailer follows: the run died, or the log was copied in part.

    ``sections`` holds the runs the log is made of, in file order, each an
    :class:`NcclLog` of its own (with empty ``sections``), as :func:`split_nccl_runs`
    returns them.  A file with one run has one section: that run again.  For a
    file with several runs, ``rows`` are all runs' rows in file order and each setting
    field is the value the runs share, or ``None`` where they differ — read
    ``sections`` to keep runs apart.
    """

    source: str
    op: str | None
    num_ranks: int | None
    gpu_model: str | None
    nccl_version: str | None
    rows: tuple[NcclRow, ...]
    avg_busbw_bytes_per_s: float | None
    sections: tuple[NcclLog, ...] = field(default=(), repr=False)
    max_bytes: int | None = None
    cut_short: bool = False


# --- the reader -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Layout:
    """The row grammar a column-header line declares."""

    prefix: tuple[str, ...]                 # size, count, type, then e.g. redop, root
    groups: tuple[tuple[str, ...], ...]     # per half: time, algbw, busbw, #wrong, …


class _Run:
    """A run being read: header facts and rows collected so far (mutable, internal)."""

    __slots__ = (
        "avg_busbw", "devices", "layout", "nccl_version", "np", "nranks", "op",
        "per_process", "rows", "stage", "sweep", "table_open",
    )

    def __init__(self) -> None:
        self.stage = 0
        self.op: str | None = None
        self.np: int | None = None
        self.per_process: int | None = None
        self.nranks: int | None = None
        self.devices: dict[int, tuple[int, str]] = {}
        self.nccl_version: str | None = None
        self.layout: _Layout | None = None
        self.rows: list[NcclRow] = []
        self.avg_busbw: float | None = None
        self.sweep: tuple[int, int, bool] | None = None  # maxBytes, step, step is a factor
        self.table_open = False

    def num_ranks(self) -> int | None:
        if self.devices:
            per_group: dict[int, int] = {}
            for group, _model in self.devices.values():
                per_group[group] = per_group.get(group, 0) + 1
            return max(per_group.values())
        if self.np is not None:
            return self.np * (self.per_process or 1)
        return self.nranks

    def gpu_model(self) -> str | None:
        models: list[str] = []
        for _rank, (_group, model) in sorted(self.devices.items()):
            if model and model not in models:
                models.append(model)
        return ", ".join(models) if models else None

    def finish(self, source: str) -> NcclLog:
        cut_short = False
        if self.sweep is not None and self.avg_busbw is None and self.rows:
            largest = max(row.size_bytes for row in self.rows)
            max_bytes, step, factor = self.sweep
            cut_short = (largest * step if factor else largest + step) <= max_bytes
        return NcclLog(
            source=source, op=self.op, num_ranks=self.num_ranks(),
            gpu_model=self.gpu_model(), nccl_version=self.nccl_version,
            rows=tuple(self.rows), avg_busbw_bytes_per_s=self.avg_busbw,
            max_bytes=self.sweep[0] if self.sweep else None, cut_short=cut_short,
        )


class _Reader:
    """Walks a log's lines once, splitting it into runs and reading their rows."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.runs: list[_Run] = []
        self.run = _Run()
        # An NCCL version line after a run's table belongs to the next run, if one
        # follows: NCCL prints it when the next run's communicators start.
        self.carry_version: str | None = None

    # -- run boundaries

    def _new_run(self) -> None:
        if self.run.rows:
            self.runs.append(self.run)
        self.run = _Run()
        self.run.nccl_version, self.carry_version = self.carry_version, None

    def _enter(self, stage: int, *, repeatable: bool = False) -> None:
        """Move the current run to ``stage``, starting a new run if it is past it."""
        if self.run.stage > stage or (self.run.stage == stage and not repeatable):
            self._new_run()
        self.run.stage = stage
        if stage != _ROWS:
            self.run.table_open = stage == _HEADER

    # -- line handlers

    def feed(self, lines: list[str]) -> list[NcclLog]:
        index = 0
        while index < len(lines):
            number = index + 1
            text = _clean(lines[index])
            index += 1
            if text.endswith("\\") and (_LAUNCHER.search(text) or _BINARY.search(text)):
                parts = [text[:-1]]
                while index < len(lines):
                    more = _clean(lines[index])
                    index += 1
                    if more.endswith("\\"):
                        parts.append(more[:-1])
                    else:
                        parts.append(more)
                        break
                self._command(" ".join(parts))
                continue
            self._line(text, number)
        self._new_run()
        return [run.finish(self.source) for run in self.runs]

    def _line(self, text: str, number: int) -> None:
        if not text or _FENCE.match(text):
            self.run.table_open = False
            return
        if text.startswith("#"):
            self.run.table_open = False
            self._comment(text.lstrip("#").strip(), number)
            return
        if self._row_candidate(text):
            self._row(text, number)
            return
        # Header lines whose '#' was eaten (markdown), NCCL's own version/INFO lines,
        # and the echoed command line.
        self._comment(text, number)
        if _BINARY.search(text) or _LAUNCHER.search(text):
            self._command(text)

    def _comment(self, body: str, number: int) -> None:
        run = self.run
        if match := _NTHREAD.match(body):
            self._enter(_NTHREAD_STAGE)
            self.run.per_process = int(match.group(1)) * int(match.group(2))
            if sweep := _SWEEP.search(body):  # (a factor is at least 2, a byte step 1)
                step, factor = int(sweep.group(2)), sweep.group(3) == "factor"
                if step >= 1 + factor:
                    self.run.sweep = (int(sweep.group(1)), step, factor)
        elif _USING.match(body):
            self._enter(_USING_STAGE)
        elif match := _DEVICE.match(body):
            rank = int(match.group(1))
            if rank in run.devices:
                self._new_run()
            self._enter(_DEVICES, repeatable=True)
            self.run.devices[rank] = (int(match.group(2) or 0), match.group(3))
        elif match := _BANNER.match(body):
            self._enter(_BANNER_STAGE)
            code = _LIBRARY_CODE.search(match.group(1))
            if code and self.run.nccl_version is None:
                self.run.nccl_version = _version_from_code(int(code.group(1)))
        elif match := _STARTING.match(body):
            self._enter(_START)
            self.run.op = _op_name(match.group(1))
        elif _is_column_header(body):
            self._enter(_HEADER)
            self.run.layout = _layout(body)
        elif _OUT_OF_BOUNDS.match(body) or _CONCLUDED.match(body):
            self._enter(_TRAILER, repeatable=True)
        elif match := _AVG_BUSBW.match(body):
            self._enter(_TRAILER, repeatable=True)
            self.run.avg_busbw = self._avg(match.group(1), number)
        else:
            self._soft(body)

    def _soft(self, text: str) -> None:
        """Facts NCCL prints at init (version, nranks): never a run boundary.

        After a table they are not the finished run's: a version line then belongs to
        the next run, an ``nranks`` line is communicator teardown and is ignored.
        """
        after_table = self.run.stage >= _ROWS
        if match := _NCCL_VERSION.search(text):
            if after_table:
                self.carry_version = match.group(1)
            else:
                self.run.nccl_version = match.group(1)
        if (match := _NRANKS.search(text)) and not after_table and self.run.nranks is None:
            self.run.nranks = int(match.group(1))

    def _command(self, text: str) -> None:
        binary = _BINARY.search(text)
        op = _op_name(binary.group(1) + "_perf") if binary else None
        launcher_part = text[: binary.start()] if binary else text
        counts = _NP.findall(launcher_part) if _LAUNCHER.search(launcher_part) else []
        if op is None and not counts:
            return  # prose naming mpirun ("mpirun noticed that …") is not a command
        # A launcher line and the benchmark's own line may come one after the other.
        self._enter(_COMMAND, repeatable=True)
        if op is not None:
            self.run.op = op
        if counts:
            self.run.np = int(counts[-1])
        if binary:
            options = text[binary.end():]
            gpus = _NGPUS_OPT.findall(options)
            threads = _NTHREADS_OPT.findall(options)
            if (gpus or threads) and self.run.per_process is None:
                self.run.per_process = int((gpus or ["1"])[-1]) * int((threads or ["1"])[-1])

    def _avg(self, token: str, number: int) -> float | None:
        try:
            value = float(token)
        except ValueError:
            raise ParseError(
                f"cannot read the average bus bandwidth {token!r}", source=self.source,
                line=number, hint="expected '# Avg bus bandwidth    : 66.48' (GB/s)",
            ) from None
        return value * BYTES_PER_S_PER_GB_S if math.isfinite(value) else None

    # -- rows

    def _row_candidate(self, text: str) -> bool:
        """Is this line meant as a table row (so that failing to read it is an error)?"""
        tokens = text.split(None, 3)
        if not _UINT.match(tokens[0]):
            return False
        if self.run.table_open:
            # Inside a table: a size followed by a count, or by anything then a data
            # type — but not a message such as "15 more processes have sent …".
            return len(tokens) == 1 or bool(_INT.match(tokens[1])) or (
                len(tokens) >= 3 and tokens[2] in _KNOWN_DTYPES)
        return len(tokens) >= 3 and bool(_UINT.match(tokens[1])) and tokens[2] in _KNOWN_DTYPES

    def _row(self, text: str, number: int) -> None:
        self._enter(_ROWS, repeatable=True)
        self.run.table_open = True
        self.run.rows.append(_read_row(text, self.run.layout, self.source, number))


# --- row grammar -----------------------------------------------------------------------


def _is_column_header(body: str) -> bool:
    words = body.split()
    return len(words) >= 4 and words[:3] == ["size", "count", "type"]


def _layout(body: str) -> _Layout | None:
    """The grammar a header line declares, or ``None`` if it is not one this reads."""
    words = body.split()
    if words and words[-1] == "timestamp":
        words = words[:-1]
    starts = [i for i, word in enumerate(words) if word in TIME_COLUMNS]
    if not starts or len(starts) > 2:
        return None
    prefix = tuple(words[: starts[0]])
    bounds = [*starts, len(words)]
    groups = tuple(tuple(words[bounds[i]: bounds[i + 1]]) for i in range(len(starts)))
    for group in groups:
        if "algbw" not in group or "busbw" not in group:
            return None
    return _Layout(prefix=prefix, groups=groups)


# Without a header: 3 fixed fields, 0-2 of redop/root, then 1 or 2 halves of 4 fields.
_FALLBACK_BY_COUNT = {3 + extra + 4 * halves: (extra, halves)
                      for extra in (0, 1, 2) for halves in (1, 2)}
_HALF = ("time", "algbw", "busbw", "#wrong")


def _fallback_layout(tokens: list[str]) -> _Layout | None:
    shape = _FALLBACK_BY_COUNT.get(len(tokens))
    if shape is None:
        return None
    extra, halves = shape
    if extra == 2:
        names: tuple[str, ...] = ("redop", "root")
    elif extra == 1:
        # Older tables: broadcast has a root, all_reduce a redop, never both.
        names = ("root",) if _INT.match(tokens[3]) else ("redop",)
    else:
        names = ()
    return _Layout(prefix=("size", "count", "type", *names), groups=(_HALF,) * halves)


def _describe(layout: _Layout) -> str:
    halves = ["out-of-place", "in-place"]
    parts = [" ".join(layout.prefix)]
    for name, group in zip(halves, layout.groups, strict=False):
        parts.append(f"{name}: {' '.join(group)}")
    return "; ".join(parts)


def _read_row(text: str, header: _Layout | None, source: str, number: int) -> NcclRow:
    """One table row in SI units; :class:`ParseError` if it does not fit its grammar."""
    tokens = text.split()
    while tokens and (_DATE.match(tokens[-1]) or _CLOCK.match(tokens[-1])):
        tokens.pop()  # the newest nccl-tests can end a row with a timestamp

    layout, halves = _row_layout(tokens, header, source, number)
    place = RowPlace(source, number, f"columns: {_describe(layout)}")

    values = dict(zip(layout.prefix, tokens, strict=False))
    size_text, count_text, dtype = tokens[0], tokens[1], tokens[2]
    if not _UINT.match(size_text):
        raise place.error(f"size {size_text!r} is not a whole number of bytes")
    if not _UINT.match(count_text):
        raise place.error(f"count {count_text!r} is not a whole number of elements")
    if not _WORD.match(dtype):
        raise place.error(f"type {dtype!r} is not a data type name such as 'float'")
    redop = values.get("redop", values.get("op", "none"))
    if not _WORD.match(redop):
        raise place.error(f"redop {redop!r} is not a reduction name such as 'sum'")
    root_text = values.get("root", "-1")
    if not _INT.match(root_text):
        raise place.error(f"root {root_text!r} is not a whole number (-1 when unused)")

    measured = measured_halves(tokens, len(layout.prefix), halves, place)
    for half_name, (time_s, _, _) in zip(("out-of-place", "in-place"), measured, strict=False):
        if time_s == 0 and int(size_text) > 0:  # nccl-tests prints 0.00 only below 5 ns
            raise place.error(f"{half_name} time is 0 us for {size_text} bytes: no "
                              "collective moves bytes in no time (a failed call, or a "
                              "column that is not the time); remove the row or rerun")
    out_of_place = measured[0]
    in_place: tuple[float | None, float | None, float | None] = (
        measured[1] if len(measured) > 1 else (None, None, None))
    return NcclRow(
        size_bytes=int(size_text), count=int(count_text), dtype=dtype, redop=redop,
        root=int(root_text),
        out_of_place_time_s=out_of_place[0],
        out_of_place_algbw_bytes_per_s=out_of_place[1],
        out_of_place_busbw_bytes_per_s=out_of_place[2],
        in_place_time_s=in_place[0],
        in_place_algbw_bytes_per_s=in_place[1],
        in_place_busbw_bytes_per_s=in_place[2],
        line=number,
        wrong_results=wrong_results(tokens, len(layout.prefix), halves),
    )


def _row_layout(tokens: list[str], header: _Layout | None, source: str, number: int,
                ) -> tuple[_Layout, tuple[tuple[str, ...], ...]]:
    """The row's grammar (the header's, else guessed from its width) and the halves it has."""
    if header is not None:
        layout = header
        full = len(layout.prefix) + sum(len(g) for g in layout.groups)
        out_only = len(layout.prefix) + len(layout.groups[0])
        if len(tokens) not in (full, out_only):
            counts = f"{full}" if full == out_only else f"{full} (or {out_only} out-of-place only)"
            raise RowPlace(source, number, f"columns: {_describe(layout)}").error(
                f"expected {counts} fields as the table header declares, found {len(tokens)}")
        return layout, layout.groups if len(tokens) == full else layout.groups[:1]
    fallback = _fallback_layout(tokens)
    if fallback is None:
        raise RowPlace(source, number, _ROW_EXAMPLE).error(
            f"found {len(tokens)} fields, expected 7 to 9 (out-of-place only) or 11 to 13")
    return fallback, fallback.groups


# --- helpers ---------------------------------------------------------------------------


def _clean(raw: str) -> str:
    """A line without its decoration: quoting, colour codes, launcher tags, padding."""
    text = _ANSI.sub("", raw.rstrip("\r\n")).replace("\t", " ")
    text = _LEAD.sub("", text)
    tag = _TAG.match(text)
    if tag:
        text = _LEAD.sub("", text[tag.end():])
    return text.strip()


def _op_name(binary: str) -> str | None:
    name = os.path.basename(binary)
    for suffix in ("_perf_mpi", "_perf"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name if name in _KNOWN_OPS else None


def _version_from_code(code: int) -> str:
    """NCCL_VERSION_CODE as a version: 21803 -> 2.18.3 (2.9 on), 2708 -> 2.7.8 before."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _common(values: Iterable[_T]) -> _T | None:
    """The value every run shares, or ``None`` where runs differ."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else None


def _read_text(path_or_text: str | os.PathLike[str], source: str | None) -> tuple[str, str]:
    """(text, source): a ``str`` holding a newline (or empty) is log text, else a path."""
    if isinstance(path_or_text, str) and ("\n" in path_or_text or not path_or_text):
        return path_or_text, source or "<text>"
    path = Path(path_or_text)
    name = source or str(path)
    # A regular file of at most 256 MiB (a log of a thousand runs is a few MB): a device
    # such as /dev/zero would be read without end.
    data = read_input_bytes(path, "nccl-tests log", error=ParseError,
                            hint="give the path of a saved nccl-tests output")
    return data.decode("utf-8-sig", errors="replace"), name


def _runs(path_or_text: str | os.PathLike[str], source: str | None) -> list[NcclLog]:
    text, name = _read_text(path_or_text, source)
    runs = _Reader(name).feed(text.split("\n"))
    if not runs and _is_csv_table(text):  # nccl-tests' table saved as CSV (Alps's runs)
        runs = _Reader(name).feed(text.replace(",", " ").split("\n"))
    if not runs:
        raise ParseError("no nccl-tests rows were found", source=name,
                         hint=_other_kind(text) or _ROW_EXAMPLE)
    return runs


def _other_kind(text: str) -> str | None:
    """What a file without rows is, where it is one of the inputs other commands read: a
    user who hands a trace to an nccl-tests command is told where it goes."""
    if text.startswith("\x1f"):  # gzip's magic byte, decoded
        return ("the file is gzip-compressed, as a profiler trace .json.gz is; traces go to "
                "'distsim trace summary' or 'distsim validate trace', and a compressed "
                "nccl-tests log must be decompressed first")
    if text.lstrip().startswith("{") and '"traceEvents"' in text:
        return ("the file is a PyTorch profiler (Kineto) trace; traces go to "
                "'distsim trace summary' or 'distsim validate trace'")
    return None


def _is_csv_table(text: str) -> bool:
    """A header of nccl-tests' columns joined by commas: ``size,count,type,...,time,...``."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    columns = [c.strip().lower() for c in first.split(",")]
    return len(columns) >= 7 and columns[:2] == ["size", "count"] and "time" in columns


# --- public functions ------------------------------------------------------------------


def parse_nccl_log(path_or_text: str | os.PathLike[str], *,
                   source: str | None = None) -> NcclLog:
    """Read an nccl-tests log (a path, or the log text itself) into an :class:`NcclLog`.

    A ``str`` that contains a newline (or is empty) is the log's text, anything else a path.
    ``source`` names the log in errors and in the result (default: the path, or
    ``"<text>"``).  Times are in seconds and bandwidths in bytes per second.  A file
    holding several runs gives one log whose ``sections`` are the runs (see
    :class:`NcclLog`).  Raises :class:`~simcore.errors.ParseError` for a missing file,
    a malformed row (with its line) or a log without rows.
    """
    runs = _runs(path_or_text, source)
    if len(runs) == 1:
        only = runs[0]
        return NcclLog(
            source=only.source, op=only.op, num_ranks=only.num_ranks,
            gpu_model=only.gpu_model, nccl_version=only.nccl_version, rows=only.rows,
            avg_busbw_bytes_per_s=only.avg_busbw_bytes_per_s, sections=(only,),
            max_bytes=only.max_bytes, cut_short=only.cut_short,
        )
    return NcclLog(
        source=runs[0].source,
        op=_common(run.op for run in runs),
        num_ranks=_common(run.num_ranks for run in runs),
        gpu_model=_common(run.gpu_model for run in runs),
        nccl_version=_common(run.nccl_version for run in runs),
        rows=tuple(row for run in runs for row in run.rows),
        avg_busbw_bytes_per_s=_common(run.avg_busbw_bytes_per_s for run in runs),
        sections=tuple(runs), max_bytes=_common(run.max_bytes for run in runs),
        cut_short=any(run.cut_short for run in runs),
    )


def split_nccl_runs(path_or_text: str | os.PathLike[str], *,
                    source: str | None = None) -> list[NcclLog]:
    """The runs an nccl-tests log holds, in file order, one :class:`NcclLog` each.

    A run ends where a new header (command line, ``nThread …``, ``# Using devices``, a
    rank listed again, a column-header line) follows a table; each run keeps its own
    rows, ranks, GPU model, NCCL version and average bus bandwidth.  Runs without rows
    (a header whose test failed) are left out.  Errors as :func:`parse_nccl_log`.
    """
    return _runs(path_or_text, source)
