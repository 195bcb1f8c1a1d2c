"""PNG plots of a scenario run: a pipeline timeline, the per-stage time breakdown, memory.

matplotlib is optional (the ``plot`` and ``dev`` extras) and imported only when a plot is
drawn, through its object-oriented API (``matplotlib.figure.Figure`` rendered by the Agg
canvas) — no pyplot, no global backend switch, nothing shown on screen.  Without it,
:func:`write_plots` raises :class:`PlotsUnavailable` and the caller skips the plots.

* ``timeline.png`` — one pipeline (data-parallel replica 0, one rank group per stage): each
  stage's spans by stream, colour-coded compute / TP comm / PP send / DP comm / EP comm.
  Needs a traced run (``PlottedRun.tracer``).
* ``breakdown.png`` — per stage, the mean GPU's iteration split into compute, exposed
  communication, bubble and idle (stacked; they add up to the iteration time), with the
  total communication time (overlapped or not) as a marker.
* ``memory.png`` — per stage, peak memory split into weights, gradients, optimizer state
  and activations, against the GPU's capacity.

The plots read a run through :class:`PlottedRun`, the few fields they draw; a
``scenarios.report.Report`` is one.  So the report imports the plots and the plots know
nothing of the report: the dependency points one way.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from distsim_gpu.simcore.trace import Tracer
from distsim_gpu.workloads.iteration.simulator import GpuTimes

__all__ = ["STREAM_COLOURS", "PlotsUnavailable", "PlottedRun", "plot_breakdown", "plot_memory",
           "plot_timeline", "write_plots"]

# Trace thread -> colour (matplotlib's tab10).
STREAM_COLOURS = {
    "compute": "#1f77b4",
    "tp comm": "#ff7f0e",
    "pp send": "#2ca02c",
    "dp comm": "#d62728",
    "ep comm": "#9467bd",
    "host": "#17becf",
}
_OTHER_COLOUR = "#7f7f7f"
_BREAKDOWN = (("compute", "compute_s", "#1f77b4"),
              ("host", "host_s", "#17becf"),
              ("exposed comm", "exposed_communication_s", "#ff7f0e"),
              ("bubble", "bubble_s", "#bcbd22"),
              ("idle", "idle_s", "#c7c7c7"))
_MEMORY = (("weights", "weights_bytes", "#1f77b4"), ("gradients", "gradients_bytes", "#ff7f0e"),
           ("optimizer", "optimizer_bytes", "#2ca02c"),
           ("activations", "activations_bytes", "#d62728"))
# The iteration names a rank group's trace process "stage S replica R (GPU …)".
_PROCESS = re.compile(r"^stage (\d+) replica (\d+)\b")


class PlotsUnavailable(ImportError):
    """matplotlib is not installed."""


class PlottedRun(Protocol):
    """What the plots read of one simulated iteration (seconds, bytes)."""

    @property
    def name(self) -> str: ...

    @property
    def iteration_time_s(self) -> float: ...

    @property
    def gpu_memory_bytes(self) -> float: ...

    @property
    def per_gpu(self) -> Sequence[GpuTimes]: ...

    @property
    def tracer(self) -> Tracer | None:
        """The run's spans; None when it did not trace (then there is no timeline)."""


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotsUnavailable("matplotlib is not installed (pip install 'distsim-gpu[plot]')"
                               ) from None
    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def _stages(report: PlottedRun) -> dict[int, list[Any]]:
    by_stage: dict[int, list[Any]] = defaultdict(list)
    for g in report.per_gpu:
        by_stage[g.stage].append(g)
    return dict(sorted(by_stage.items()))


def plot_timeline(report: PlottedRun, path: str | Path) -> None:
    """``timeline.png``: replica 0's rank group of every stage, spans by stream."""
    if report.tracer is None:
        raise ValueError("the timeline needs a traced run (run_scenario(..., trace=True))")
    rows: dict[int, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list))
    labels: dict[int, str] = {}
    for span in report.tracer.spans:
        match = _PROCESS.match(span.process)
        if not match or int(match.group(2)) != 0:
            continue
        stage = int(match.group(1))
        labels.setdefault(stage, span.process)
        rows[stage][span.thread].append((span.start_s, span.end_s - span.start_s))
    streams = [s for s in STREAM_COLOURS if any(s in r for r in rows.values())]
    streams += sorted({t for r in rows.values() for t in r} - set(streams))
    lane = 1.0 / max(len(streams), 1)
    stages = sorted(rows)
    fig = _figure(12, 1.0 + 0.55 * max(len(stages), 1) * max(len(streams), 1) ** 0.5)
    ax = fig.add_subplot()
    for row, stage in enumerate(stages):
        for k, stream in enumerate(streams):
            bars = rows[stage].get(stream)
            if bars:
                ax.broken_barh(bars, (row + k * lane + 0.05 * lane, 0.9 * lane),
                               facecolors=STREAM_COLOURS.get(stream, _OTHER_COLOUR),
                               linewidth=0)
    ax.set_yticks([row + 0.5 for row in range(len(stages))])
    ax.set_yticklabels([f"stage {s}" for s in stages])
    ax.set_ylim(len(stages), 0)
    ax.set_xlim(0, report.iteration_time_s)
    ax.set_xlabel("time (s)")
    ax.set_title(f"{report.name}: one pipeline (replica 0), iteration "
                 f"{report.iteration_time_s:.4g} s")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=STREAM_COLOURS.get(s, _OTHER_COLOUR), label=s)
                       for s in streams], loc="upper left", bbox_to_anchor=(1.0, 1.0),
              fontsize="small")
    fig.savefig(path)


def plot_breakdown(report: PlottedRun, path: str | Path) -> None:
    """``breakdown.png``: per stage, the mean GPU's time split, stacked."""
    stages = _stages(report)
    fig = _figure(max(6.0, 0.5 * len(stages) + 3), 4.5)
    ax = fig.add_subplot()
    x = list(range(len(stages)))
    bottom = [0.0] * len(stages)
    for label, attr, colour in _BREAKDOWN:
        values = [sum(getattr(g, attr) for g in gpus) / len(gpus) for gpus in stages.values()]
        ax.bar(x, values, bottom=bottom, color=colour, label=label, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values)]
    comm = [sum(g.communication_s for g in gpus) / len(gpus) for gpus in stages.values()]
    ax.scatter(x, comm, marker="_", s=400, color="black", zorder=3,
               label="communication (overlapped or not)")
    ax.axhline(report.iteration_time_s, color="black", linestyle="--", linewidth=0.8)
    ax.set_ylim(0, max([report.iteration_time_s, *bottom]) * 1.08 or 1.0)
    ax.set_xticks(x)
    ax.set_xticklabels([str(s) for s in stages])
    ax.set_xlabel("pipeline stage (mean over its GPUs)")
    ax.set_ylabel("time (s)")
    ax.set_title(f"{report.name}: time per GPU, iteration {report.iteration_time_s:.4g} s")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    fig.savefig(path)


def plot_memory(report: PlottedRun, path: str | Path) -> None:
    """``memory.png``: per stage, the largest GPU's memory by kind, GiB."""
    stages = _stages(report)
    fig = _figure(max(6.0, 0.5 * len(stages) + 3), 4.5)
    ax = fig.add_subplot()
    x = list(range(len(stages)))
    peaks = [max(gpus, key=lambda g: g.peak_memory_bytes).memory for gpus in stages.values()]
    bottom = [0.0] * len(stages)
    for label, attr, colour in _MEMORY:
        values = [getattr(m, attr) / 2**30 for m in peaks]
        ax.bar(x, values, bottom=bottom, color=colour, label=label, width=0.7)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.axhline(report.gpu_memory_bytes / 2**30, color="black", linestyle="--", linewidth=0.8,
               label="capacity")
    ax.set_xticks(x)
    ax.set_xticklabels([str(s) for s in stages])
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("memory (GiB)")
    ax.set_title(f"{report.name}: peak memory per GPU")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    fig.savefig(path)


def write_plots(report: PlottedRun, directory: str | Path) -> list[str]:
    """Draw every plot that applies into ``directory``; returns the file names written.

    Raises :class:`PlotsUnavailable` (before writing anything) without matplotlib.
    """
    _figure(1, 1)  # fail early and whole when matplotlib is missing
    out = Path(directory)
    written: list[str] = []
    if report.tracer is not None:
        plot_timeline(report, out / "timeline.png")
        written.append("timeline.png")
    plot_breakdown(report, out / "breakdown.png")
    written.append("breakdown.png")
    plot_memory(report, out / "memory.png")
    written.append("memory.png")
    return written
