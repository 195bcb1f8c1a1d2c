"""Per-rank, per-step breakdown of imported traces (:mod:`distsim_gpu.measured.traces`).

For every ``ProfilerStep#N`` window of every rank (a rank whose trace has no such
annotation, as a bare ``torch.profiler.profile()`` block records, is summarised over one
window from its first GPU event to its last, with ``step`` None and a note in the table):

* ``step_s`` — the step's duration (the CPU annotation, so it includes launch overhead);
* busy time per class — ``compute_s``, ``communication_s`` (NCCL's kernels and DeepEP's,
  :data:`COMM_KERNEL_NAMES`) and ``memcpy_s``
  (memcpy and memset) — each the length of the *union* of that class's GPU intervals clipped
  to the step window, so concurrent kernels on several streams are not counted twice;
* ``busy_s`` — the union of all GPU intervals in the window; ``idle_s = step_s - busy_s``;
* ``overlap_s`` — the length of (compute union ∩ communication union): compute hidden
  behind communication, or the other way round;
* ``nccl_counts`` — NCCL kernels per collective kind launched in the step (by the CPU launch
  time where the trace links it, else by the kernel's start).

All times are seconds; the table shows milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.measured.records import RankTrace
from distsim_gpu.simcore.intervals import Intervals, intersection_length, length, union

__all__ = ["COMM_KERNEL_NAMES", "StepSummary", "format_summary_table", "summarise", "to_json"]

# Kernels that move data: NCCL's, and DeepEP's dispatch and combine (``dpsk::ep::`` in
# DeepSeek's own build, ``deep_ep::`` in the released one), which are kernels of their own,
# not NCCL calls. Counted as compute, a MoE trace's all-to-alls would read as compute, and
# `calibrate trace --scenario` would fit the GEMM efficiency to them.
COMM_KERNEL_NAMES = re.compile(r"(?i)nccl|dpsk::ep|deep_?ep")

_CLASS_OF_KIND = {"compute": "compute", "communication": "communication",
                  "memcpy": "memcpy", "memset": "memcpy"}



@dataclass(frozen=True, slots=True)
class StepSummary:
    """The breakdown of one profiler step of one rank (times in seconds)."""

    source: str
    rank: int | None
    step: int | None  # None: the whole trace, which has no ProfilerStep annotations
    start_s: float
    step_s: float
    compute_s: float
    communication_s: float
    memcpy_s: float
    busy_s: float
    idle_s: float
    overlap_s: float
    nccl_counts: tuple[tuple[str, int], ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (seconds, counts per collective kind)."""
        return {
            "source": self.source, "rank": self.rank, "step": self.step,
            "start_s": self.start_s, "step_s": self.step_s, "compute_s": self.compute_s,
            "communication_s": self.communication_s, "memcpy_s": self.memcpy_s,
            "busy_s": self.busy_s, "idle_s": self.idle_s, "overlap_s": self.overlap_s,
            "nccl_counts": dict(self.nccl_counts),
        }


def _windows(trace: RankTrace) -> list[tuple[int | None, float, float]]:
    """Each profiler step's (number, start, duration); without any, the whole GPU activity
    as one window (numbered None), so a trace recorded without a schedule still reads."""
    if trace.steps:
        return [(step.number, step.start_s, step.duration_s) for step in trace.steps]
    if not trace.gpu_events:
        return []
    first = min(e.start_s for e in trace.gpu_events)
    return [(None, first, max(e.start_s - first + e.duration_s for e in trace.gpu_events))]


def _summarise_rank(trace: RankTrace) -> list[StepSummary]:
    rows: list[StepSummary] = []
    events = trace.gpu_events
    for number, start, window in _windows(trace):
        end = start + window
        by_class: dict[str, Intervals] = {"compute": [], "communication": [], "memcpy": []}
        for event in events:
            # From the step's start, each event its own duration: Kineto's epoch times in
            # seconds keep only ~0.24 µs (a double near 1.7e9), and an end taken as
            # start + duration there rounds every µs-long kernel (DLRM's compute read
            # 0.7 % long, unlike the replay's of the same kernels).
            offset = event.start_s - start
            if offset + event.duration_s <= 0.0 or offset >= window:
                continue
            kind = ("communication" if event.kind == "compute"
                    and COMM_KERNEL_NAMES.search(event.name) else event.kind)
            by_class[_CLASS_OF_KIND.get(kind, "compute")].append(
                (max(offset, 0.0), min(offset + event.duration_s, window)))
        unions = {name: union(spans) for name, spans in by_class.items()}
        busy = length(union(span for spans in unions.values() for span in spans))
        counts: dict[str, int] = {}
        for kernel in events:
            if kernel.collective is None:
                continue
            when = kernel.launch_s if kernel.launch_s is not None else kernel.start_s
            if start <= when < end:
                counts[kernel.collective] = counts.get(kernel.collective, 0) + 1
        rows.append(StepSummary(
            source=trace.source, rank=trace.rank, step=number, start_s=start,
            step_s=window,
            compute_s=length(unions["compute"]),
            communication_s=length(unions["communication"]),
            memcpy_s=length(unions["memcpy"]),
            busy_s=busy, idle_s=max(window - busy, 0.0),
            overlap_s=intersection_length(unions["compute"], unions["communication"]),
            nccl_counts=tuple(sorted(counts.items()))))
    return rows


def summarise(traces: Iterable[RankTrace]) -> list[StepSummary]:
    """One :class:`StepSummary` per profiler step of every trace, in trace then step order."""
    rows: list[StepSummary] = []
    for trace in traces:
        rows.extend(_summarise_rank(trace))
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def format_summary_table(traces: Sequence[RankTrace], summaries: Sequence[StepSummary]) -> str:
    """A terminal table: one line per rank and step, times in milliseconds."""
    steps = len({s.step for s in summaries if s.step is not None})
    lines = [f"# {len(traces)} rank(s), {steps} profiler step(s) ({len(summaries)} rows: a "
             "rank's step each); times in ms"]
    for trace in traces:
        where = f"rank {trace.rank}" if trace.rank is not None else "rank ?"
        world = f" of {trace.world_size}" if trace.world_size is not None else ""
        gpu = trace.gpu_model or "GPU not recorded"
        note = f"; skipped {len(trace.skipped)} note(s)" if trace.skipped else ""
        if not trace.steps:
            note += ("; no ProfilerStep annotations: one row, step 'all', from its first GPU "
                     "event to its last" if trace.gpu_events else "; no ProfilerStep annotations")
        lines.append(f"# {where}{world}: {trace.source} ({gpu}, {len(trace.gpu_events)} GPU "
                     f"events{note})")
    header = ("rank", "step", "step", "compute", "comm", "memcpy", "idle", "overlap", "nccl")
    table = [header]
    for row in summaries:
        nccl = " ".join(f"{kind}x{count}" for kind, count in row.nccl_counts) or "-"
        table.append((
            "?" if row.rank is None else str(row.rank),
            "all" if row.step is None else str(row.step), _ms(row.step_s),
            _ms(row.compute_s), _ms(row.communication_s), _ms(row.memcpy_s), _ms(row.idle_s),
            _ms(row.overlap_s), nccl))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        cells = [r[i].rjust(widths[i]) for i in range(len(header) - 1)]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
    return "\n".join(lines) + "\n"


def to_json(traces: Sequence[RankTrace], summaries: Sequence[StepSummary]) -> dict[str, Any]:
    """A JSON-ready object: one entry per trace with its steps (seconds)."""
    by_source: dict[str, list[dict[str, Any]]] = {}
    for row in summaries:
        by_source.setdefault(row.source, []).append(row.to_dict())
    return {
        "num_traces": len(traces),
        "ranks": [{
            "source": t.source, "rank": t.rank, "world_size": t.world_size,
            "gpu_model": t.gpu_model, "num_gpu_events": len(t.gpu_events),
            "nccl_counts": t.nccl_counts(), "skipped": list(t.skipped),
            "steps": by_source.get(t.source, []),
        } for t in traces],
    }
