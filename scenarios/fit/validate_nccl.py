"""Measured vs predicted: a real nccl-tests log held against the simulated cluster.

For every size in the log the same collective is simulated on the described cluster;
the report gives measured and predicted time and bus bandwidth and the signed error of
the predicted time, ``100·(predicted − measured)/measured`` (positive = the simulator is
slow).  Two medians summarise it: over bandwidth-bound sizes (≥ 64 MiB) and over
latency-bound sizes (≤ 64 KiB), where different parts of the model are at work.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from distsim_gpu.collectives import CommParams
from distsim_gpu.collectives.nccl_tests import bus_factor, run_benchmark
from distsim_gpu.measured.nccl_log import NcclLog
from distsim_gpu.scenarios.fit.fitting import error_pct
from distsim_gpu.scenarios.fit.nccl_log_setting import (
    empty_rows_note,
    log_setting,
    select_run,
    wrong_rows_note,
)
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.topology import Topology

__all__ = [
    "LARGE_MIN_BYTES",
    "SMALL_MAX_BYTES",
    "NcclComparison",
    "NcclValidation",
    "format_validation",
    "select_run",
    "validate_nccl_log",
]

LARGE_MIN_BYTES = 64 * 2**20
SMALL_MAX_BYTES = 64 * 2**10


@dataclass(frozen=True, slots=True)
class NcclComparison:
    """One size: measured and predicted time (s) and bus bandwidth (B/s)."""

    size_bytes: int
    measured_time_s: float
    predicted_time_s: float
    measured_busbw_bytes_per_s: float
    predicted_busbw_bytes_per_s: float
    error_pct: float
    algorithm: str
    protocol: str
    line: int


@dataclass(frozen=True, slots=True)
class NcclValidation:
    """A whole log compared; medians of |error| in percent (None when no size qualifies)."""

    source: str
    op: str
    num_ranks: int
    rows: tuple[NcclComparison, ...]
    median_abs_error_large_pct: float | None
    median_abs_error_small_pct: float | None
    median_abs_error_all_pct: float | None
    # Rows of 0 bytes, left out (nccl_log_setting.empty_rows_note says so in ``notes``).
    empty_row_lines: tuple[int, ...] = ()
    notes: tuple[RunNote, ...] = ()  # what was assumed of the log (nccl_log_setting)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows"] = [asdict(r) for r in self.rows]
        data["notes"] = [note.to_dict() for note in self.notes]
        return data


def _median_abs(values: list[float]) -> float | None:
    return statistics.median(abs(v) for v in values) if values else None


def validate_nccl_log(log: NcclLog, topology: Topology, *, op: str | None = None,
                      params: CommParams | None = None,
                      run: int | None = None) -> NcclValidation:
    """Simulate every size of ``log`` on ``topology`` and compare.

    ``op`` defaults to the operation the log names; the log's rank count, when it states
    one, must equal the cluster's GPU count.  A log with several runs is narrowed to one
    by :func:`select_run`.
    """
    setting = log_setting(log, topology, op=op, run=run)
    log, chosen, num_gpus = setting.log, setting.op, len(topology.gpus)
    compared = [r for r in log.rows if r.size_bytes > 0]  # (log_setting: there are some)
    dtype = compared[0].dtype
    predicted = run_benchmark(topology, chosen, [r.size_bytes for r in compared],
                              params=params, dtype=dtype)
    factor = bus_factor(chosen, num_gpus)
    rows = []
    for measured, sim in zip(compared, predicted, strict=True):
        error = error_pct(sim.time_s, measured.time_s)
        measured_busbw = measured.size_bytes / measured.time_s * factor
        rows.append(NcclComparison(measured.size_bytes, measured.time_s, sim.time_s,
                                   measured_busbw, sim.busbw_bytes_per_s, error,
                                   sim.algorithm, sim.protocol, measured.line))
    large = [r.error_pct for r in rows if r.size_bytes >= LARGE_MIN_BYTES]
    small = [r.error_pct for r in rows if r.size_bytes <= SMALL_MAX_BYTES]
    return NcclValidation(log.source, chosen, num_gpus, tuple(rows), _median_abs(large),
                          _median_abs(small), _median_abs([r.error_pct for r in rows]),
                          tuple(r.line for r in log.rows if r.size_bytes == 0),
                          setting.notes + empty_rows_note(log.rows)
                          + wrong_rows_note(log.rows))


def format_validation(report: NcclValidation) -> str:
    """A terminal table: measured vs predicted per size, then the medians."""
    lines = [
        f"# {report.source}: {report.op} on {report.num_ranks} GPUs — measured vs distsim",
        f"#{'size (B)':>12} {'meas (us)':>10} {'pred (us)':>10} {'err %':>7} "
        f"{'meas busbw':>10} {'pred busbw':>10}  algo/proto",
    ]
    for r in report.rows:
        lines.append(
            f" {r.size_bytes:>12} {r.measured_time_s * 1e6:>10.2f} "
            f"{r.predicted_time_s * 1e6:>10.2f} {r.error_pct:>+7.1f} "
            f"{r.measured_busbw_bytes_per_s / 1e9:>10.2f} "
            f"{r.predicted_busbw_bytes_per_s / 1e9:>10.2f}  {r.algorithm}/{r.protocol}")

    def pct(value: float | None) -> str:
        return "n/a (no such sizes)" if value is None else f"{value:.1f} %"

    lines.append(f"# median |error|, sizes >= 64 MiB (bandwidth-bound): "
                 f"{pct(report.median_abs_error_large_pct)}")
    lines.append(f"# median |error|, sizes <= 64 KiB (latency-bound):   "
                 f"{pct(report.median_abs_error_small_pct)}")
    lines.append(f"# median |error|, all sizes:                         "
                 f"{pct(report.median_abs_error_all_pct)}")
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"
