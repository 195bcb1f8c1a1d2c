"""Which run of an nccl-tests log, which collective, on how many ranks: a log's setting
checked against the cluster it is compared with or fitted to, once, for ``validate nccl``
and ``calibrate nccl`` alike.

A log names its collective when it echoes the ``*_perf`` binary; when it does not, its
rows still say much of it: nccl-tests prints the element count per rank's share for
all-gather, reduce-scatter and all-to-all (size / element / ranks) and of the whole
buffer for the others, a reduction name only for the reducing collectives, and a root
only for broadcast and reduce.  A log read as the wrong collective is a wrong answer with
an error of tens of per cent, so a collective the rows leave open is asked for (``--op``),
and an ``--op`` they rule out is taken with a note.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distsim_gpu.collectives.nccl_tests import BENCH_OPS, DTYPE_BYTES
from distsim_gpu.measured.nccl_log import NcclLog, NcclRow
from distsim_gpu.simcore.config import check_choice
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.units import format_bytes
from distsim_gpu.topology import Topology

__all__ = ["LogSetting", "cut_short_note", "empty_rows_note", "log_setting", "ops_the_rows_allow",
           "select_run"]

# nccl-tests' count column holds a rank's share of the buffer for these.
_SHARE_COUNTED = ("all_gather", "reduce_scatter", "alltoall")
_REDUCING = ("all_reduce", "reduce", "reduce_scatter")
_ROOTED = ("broadcast", "reduce")


@dataclass(frozen=True, slots=True)
class LogSetting:
    """The run of the log to use, the collective it measured and what was assumed."""

    log: NcclLog
    op: str
    notes: tuple[RunNote, ...] = ()


def select_run(log: NcclLog, num_gpus: int, run: int | None = None) -> NcclLog:
    """The run of a (possibly multi-run) log to compare with a cluster of ``num_gpus``.

    ``run`` (1-based) picks one explicitly; otherwise a single-run log is its own run and
    a multi-run log must have exactly one run on ``num_gpus`` ranks.
    """
    runs = log.sections or (log,)
    if run is not None:
        if not 1 <= run <= len(runs):
            raise ConfigError(f"the log holds {len(runs)} run(s), there is no run {run}",
                              key="--run", source=log.source,
                              hint=f"choose 1 to {len(runs)}" if len(runs) > 1
                              else "drop --run: the log's one run is compared")
        return runs[run - 1]
    if len(runs) == 1:
        return runs[0]
    matching = [i for i, r in enumerate(runs, 1) if r.num_ranks == num_gpus]
    if len(matching) == 1:
        return runs[matching[0] - 1]
    described = ", ".join(f"run {i}: {r.num_ranks or '?'} ranks, {len(r.rows)} rows"
                          for i, r in enumerate(runs, 1))
    raise ConfigError(f"the log holds {len(runs)} runs ({described}) and "
                      f"{len(matching) or 'none'} of them ran on {num_gpus} ranks",
                      source=log.source, hint="pick one with --run N, or set --nodes so "
                      "that the cluster's GPU count matches one run")


def ops_the_rows_allow(rows: tuple[NcclRow, ...], num_ranks: int) -> tuple[str, ...]:
    """The nccl-tests collectives whose table ``rows`` could be (module docstring): by the
    count per size where the data type's width is known, a reduction name other than
    ``none`` (a log without the column reads ``none``, which rules nothing out) and the
    root."""
    row = next((r for r in rows if r.size_bytes > 0), None)
    if row is None:
        return tuple(BENCH_OPS)
    width = DTYPE_BYTES.get(row.dtype)
    allowed = []
    for op in BENCH_OPS:
        if width is not None:
            share = num_ranks if op in _SHARE_COUNTED else 1
            if row.count * width * share != row.size_bytes:
                continue
        if row.redop != "none" and op not in _REDUCING:
            continue
        if (row.root >= 0) != (op in _ROOTED):
            continue
        allowed.append(op)
    return tuple(allowed)


def empty_rows_note(rows: Sequence[NcclRow]) -> tuple[RunNote, ...]:
    """The note for the rows of 0 bytes a comparison or fit leaves out (none: ()): they
    time the benchmark's per-call overhead, which no link or protocol parameter prices."""
    lines = [row.line for row in rows if row.size_bytes == 0]
    if not lines:
        return ()
    return (RunNote("ignored", f"left out: {len(lines)} row(s) of 0 bytes (line(s) "
                    f"{', '.join(map(str, lines))}): they time the benchmark's per-call "
                    "overhead, not a transfer"),)


def wrong_rows_note(rows: Sequence[NcclRow]) -> tuple[RunNote, ...]:
    """The note for rows whose ``#wrong`` is not 0 (none: ()): nccl-tests' check found
    wrong results there, yet their times are compared (or fitted) like the others."""
    wrong = [row for row in rows if row.wrong_results > 0]
    if not wrong:
        return ()
    sizes = ", ".join(f"{format_bytes(row.size_bytes)} (line {row.line})" for row in wrong)
    return (RunNote("ignored", f"#wrong: nccl-tests found wrong results at {len(wrong)} "
                    f"size(s), {sizes}; their times are used as measured, though a call "
                    "that corrupted its data may not have run as a correct one does"),)


def cut_short_note(log: NcclLog) -> tuple[RunNote, ...]:
    """The note for a run whose table stops before the sweep its header declares (none:
    ()): its errors and medians cover only the sizes it reached, which a reader of the
    summary would otherwise take for the whole sweep."""
    if not log.cut_short or log.max_bytes is None:
        return ()
    largest = max(row.size_bytes for row in log.rows)
    return (RunNote("headline", f"the log's table stops at {format_bytes(largest)}, short "
                    f"of the maxBytes {format_bytes(log.max_bytes)} its header sweeps to, "
                    "and no '# Avg bus bandwidth' line follows: the run was cut short or "
                    "the log copied in part, so only the sizes it reached are compared"),)


def log_setting(log: NcclLog, topology: Topology, *, op: str | None = None,
                run: int | None = None) -> LogSetting:
    """``log``'s run for ``topology`` (:func:`select_run`) and its collective: ``op``,
    else the one the log names, else the one its rows allow; a rank count the log states
    must be the cluster's GPU count."""
    num_gpus = len(topology.gpus)
    chosen_run = select_run(log, num_gpus, run)
    notes = []
    if run is None and len(log.sections) > 1:
        index = log.sections.index(chosen_run) + 1
        notes.append(RunNote("defaulted", f"the log holds {len(log.sections)} runs; run "
                             f"{index} is the one on {num_gpus} ranks (--run N picks "
                             "another)", "--run"))
    if chosen_run.num_ranks is not None and chosen_run.num_ranks != num_gpus:
        nodes = chosen_run.num_ranks / (num_gpus / topology.num_nodes)
        hint = (f"run with --nodes {nodes:.0f}, the cluster of {chosen_run.num_ranks} GPUs"
                if nodes.is_integer() else "choose --nodes so that the GPU counts match")
        raise ConfigError(f"the log ran on {chosen_run.num_ranks} ranks but the cluster has "
                          f"{num_gpus} GPUs", source=log.source, hint=hint)
    chosen, note = _collective(chosen_run, op, num_gpus)
    return LogSetting(chosen_run, chosen, tuple(notes) + note + cut_short_note(chosen_run))


def _collective(log: NcclLog, op: str | None, num_gpus: int,
                ) -> tuple[str, tuple[RunNote, ...]]:
    """The collective to simulate, and a note when the rows chose it."""
    if not any(row.size_bytes > 0 for row in log.rows):
        raise ConfigError("the log has no rows of more than 0 bytes to compare",
                          source=log.source)
    if op is not None:
        check_choice(op, BENCH_OPS, key="--op", what="nccl-tests operation")
        if log.op and log.op != op:
            raise ConfigError(f"the log measured {log.op}, not {op}", source=log.source,
                              hint=f"drop --op or pass --op {log.op}")
    if log.op:
        return log.op, ()
    allowed = ops_the_rows_allow(log.rows, num_gpus)
    if op is not None:  # the user's word, with what the rows say beside it
        return op, (() if op in allowed else (RunNote(
            "defaulted", f"compared as {op}, as --op says; the log does not name its "
            "collective and its rows (count per size, reduction, root) read as "
            f"{' or '.join(allowed) or 'no nccl-tests table'}", "--op"),))
    if len(allowed) != 1:
        raise ConfigError("the log does not name its collective and its rows fit "
                          f"{' or '.join(allowed) or 'none'}", source=log.source,
                          hint="say which with --op")
    return allowed[0], (RunNote("defaulted", "the log does not name its collective: its "
                                f"rows (count per size, reduction, root) read as "
                                f"{allowed[0]}", "--op"),)
