"""``report.html``: one self-contained page a person opens to see a run, a sweep or a
comparison.

Built with Plotly (the ``html`` extra: ``pip install 'distsim-gpu[html]'``), whose
JavaScript is inlined into the page once, so it opens with no network access: a laptop
on a plane, an archived CI artefact.  Plotly is imported only here and only when a page
is made; without it :class:`HtmlUnavailable` says what to install and the run goes on.

A run's page (:func:`run_report_html`) holds its headline figures and

* **Iteration timeline per GPU** — each GPU's main stream over the iteration, coloured by
  what it did (compute, exposed tp / pp / dp / ep / cp communication, bubble), with a thin
  lane below for the time a collective of it was in flight (overlapped or not).  Up to
  :data:`~scenarios.report.timelines.MAX_GPU_ROWS` GPUs one row each, beyond that one row per
  group of GPUs with the same times, labelled with the GPUs it stands for; each of
  1,000 bins across shows the kind that filled most of it (:mod:`scenarios.report.timelines`);
* **Time per GPU** — compute, exposed communication, bubble and idle, stacked to the
  iteration time, with the communication time (overlapped or not) as a marker;
* **Memory per GPU** — weights, gradients, optimizer state and activations against the
  capacity;
* **Link utilisation** — a heat map of link classes × their place in the cluster
  (:mod:`scenarios.report.linkmap`);
* **Critical path** — the chain that set the iteration time, drawn over the rank groups
  it passes through, and its time by kind;
* the terminal summary, verbatim.

A sweep's page (:func:`sweep_report_html`) draws each metric against the first swept key,
one curve per combination of the others; a comparison's (:func:`compare_report_html`)
puts the scenarios side by side.  Each figure's title is also the section's heading, so a
reader (or a test) finds it by name.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from distsim_gpu.scenarios.report.linkmap import LinkMap
from distsim_gpu.scenarios.report.timelines import (
    Row,
    Segment,
    Timeline,
    bin_segments,
    compress_names,
    fine_segments,
    merge_segments,
    schedule_rows,
)
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.workloads.iteration.simulator import GpuTimes, PathEntry

__all__ = ["INSTALL_HINT", "KIND_COLOURS", "HtmlRun", "HtmlUnavailable", "compare_report_html",
           "page", "run_report_html", "sweep_report_html"]

#: What to install for report.html.
INSTALL_HINT = "pip install 'distsim-gpu[html]'"

#: Colour of each kind of time (critical-path kinds; matplotlib's tab10, as plots.py).
KIND_COLOURS = {
    "compute": "#1f77b4", "tp comm": "#ff7f0e", "pp transfer": "#2ca02c",
    "dp comm": "#d62728", "ep comm": "#9467bd", "cp comm": "#8c564b",
    "bubble wait": "#bcbd22", "exposed comm": "#ff7f0e", "bubble": "#bcbd22",
    "data loading": "#17becf", "waiting": "#e4e4c4", "idle": "#c7c7c7", "host": "#e377c2",
}
_OTHER = "#7f7f7f"
_MEMORY = (("weights", "weights_bytes", "#1f77b4"), ("gradients", "gradients_bytes", "#ff7f0e"),
           ("optimizer", "optimizer_bytes", "#2ca02c"),
           ("activations", "activations_bytes", "#d62728"))
_BREAKDOWN = (("compute", "compute_s"), ("host", "host_s"),
              ("exposed comm", "exposed_communication_s"),
              ("bubble", "bubble_s"), ("idle", "idle_s"))
_GiB = 2.0**30
# Bars per GPU up to this many GPUs; beyond, per group of GPUs with the same times.
_MAX_GPU_BARS = 64
# A timeline row is drawn in this many bins across, about a pixel each (the plot area is
# about 1,100 px wide on the page): finer detail is binned.
_PIXELS = 1000
# A legend in one line above a short figure, right-aligned (the title is on the left).
_LEGEND_ABOVE = {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right",
                 "x": 1.0}


class HtmlUnavailable(ImportError):
    """Plotly is not installed."""


class HtmlRun(Protocol):
    """What the pages read of one simulated iteration (seconds, bytes); a
    ``scenarios.report.Report`` is one (the report imports this module, not the other way
    round)."""

    name: str
    iteration_time_s: float
    samples_per_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    mfu: float
    num_gpus: int
    gpu_memory_bytes: float
    folding: str
    per_gpu: tuple[GpuTimes, ...]
    bottlenecks: dict[str, Any]
    timelines: tuple[Timeline, ...]
    link_map: LinkMap | None
    critical_path: tuple[PathEntry, ...]

    def groups(self) -> Sequence[Any]:
        """Groups of GPUs with the same times (``stage``, ``gpus`` and the times)."""


def _go() -> Any:
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise HtmlUnavailable(f"report.html needs Plotly ({INSTALL_HINT})") from None
    return go


# --------------------------------------------------------------------------- the page

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.headline td { padding: 0.1em 1.2em 0.1em 0; }
table.headline td:first-child { color: #666; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; font-size: 0.8em; }
p.note { color: #666; font-size: 0.9em; }
"""


def page(title: str, intro: str, sections: Sequence[tuple[str, Any | str]]) -> str:
    """A whole HTML page: ``title``, ``intro`` (HTML), then per section a Plotly figure
    titled with the section's heading, or the heading and HTML.  Plotly's JavaScript is
    inlined once, before the first figure.  Each figure's element is named by its place
    (``figure-1``…), not by Plotly's random id, so the same run writes the same page."""
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>", intro]
    inline, figures = True, 0
    for heading, body in sections:
        if isinstance(body, str):
            parts += [f"<h2>{html.escape(heading)}</h2>", body]
            continue
        body.update_layout(title={"text": heading, "font": {"size": 17}})
        figures += 1
        parts.append(body.to_html(full_html=False, include_plotlyjs=inline,
                                  config={"displaylogo": False, "responsive": True},
                                  div_id=f"figure-{figures}"))
        inline = False
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _headline(rows: Sequence[tuple[str, str]]) -> str:
    cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                    for k, v in rows)
    return f"<table class=\"headline\">{cells}</table>"


def _run_headline(report: HtmlRun) -> list[tuple[str, str]]:
    return [
        ("iteration", format_duration(report.iteration_time_s)),
        ("throughput", f"{report.samples_per_s:,.4g} samples/s, "
                       f"{report.tokens_per_s:,.0f} tokens/s"),
        ("per GPU", f"{report.model_tflops_per_gpu:.4g} TFLOP/s of model FLOPs, MFU "
                    f"{report.mfu * 100:.1f} %"),
        ("GPUs", f"{report.num_gpus:,}"),
        ("simulated", report.folding or "full"),
    ]


def run_report_html(report: HtmlRun, summary: str = "") -> str:
    """The page of one run (see the module docstring); ``summary`` is the terminal
    summary, shown verbatim at the end."""
    _go()
    notes = getattr(report, "notes", ())
    sections: list[tuple[str, Any]] = [
        *([("Notes: assumptions that move the answer", _notes_html(notes))] if notes else []),
        ("Iteration timeline per GPU", timeline_figure(report)),
        ("Time per GPU", breakdown_figure(report)),
        ("Memory per GPU", memory_figure(report)),
        ("Link utilisation", link_figure(report)),
        ("Critical path", critical_path_figure(report)),
        ("Critical path by kind", critical_kinds_figure([report.name], [report])),
    ]
    if summary:
        sections.append(("Summary", f"<pre>{html.escape(summary)}</pre>"))
    return page(f"distsim report: {report.name}", _headline(_run_headline(report)),
                sections)


def _notes_html(notes: Sequence[Any]) -> str:
    items = "".join(f"<li>{html.escape(str(note))}</li>" for note in notes)
    return f"<ul class=\"notes\">{items}</ul>"


# --------------------------------------------------------------------------- timeline


def _segment_text(kind: str, start: float, end: float, label: str) -> str:
    return (f"{html.escape(kind)}: {html.escape(label)}<br>{format_duration(start)} → "
            f"{format_duration(end)} ({format_duration(end - start)})")


def _timeline_rows(report: HtmlRun) -> list[Row]:
    order = [g.gpu for g in sorted(report.per_gpu, key=lambda g: g.rank)]
    return schedule_rows(report.timelines, report.groups(), order)


def timeline_figure(report: HtmlRun) -> Any:
    """Each row's main stream by kind, and a lane for its collectives in flight."""
    go = _go()
    rows = _timeline_rows(report)
    resolution = report.iteration_time_s / _PIXELS
    by_kind: dict[str, list[tuple[float, float, str]]] = {}
    by_kind_y: dict[str, list[float]] = {}
    comm: list[tuple[float, float, str]] = []
    comm_y: list[float] = []
    # Per schedule and pace: rows of a group share it (a straggler's faster peers, each
    # drawn at its own pace, do not).
    fine: dict[tuple[str, float], list[Segment]] = {}
    for y, row in enumerate(rows):
        pace = next((share for gpu, share, _ in row.timeline.paces if gpu == row.gpus[0]),
                    1.0)
        segments = fine.get((row.timeline.name, pace))
        if segments is None:
            own = fine_segments(row.timeline, row.gpus[0])
            segments = fine[(row.timeline.name, pace)] = bin_segments(
                [*own, *_gaps(own, report.iteration_time_s, 0.0)],
                report.iteration_time_s, _PIXELS)
        for start, end, kind, label in segments:
            by_kind.setdefault(kind, []).append((start, end,
                                                 _segment_text(kind, start, end, label)))
            by_kind_y.setdefault(kind, []).append(y)
        joined = merge_segments([(s, e, "c", "") for s, e in row.timeline.collectives],
                                resolution)
        comm += [(s, e, f"a collective in flight<br>{format_duration(s)} → "
                        f"{format_duration(e)}") for s, e, _, _ in joined]
        comm_y += [y + 0.32] * len(joined)
    width = max(4.0, min(16.0, 420.0 / max(len(rows), 1)))
    fig = go.Figure()
    for kind in sorted(by_kind, key=lambda k: list(KIND_COLOURS).index(k)
                       if k in KIND_COLOURS else 99):
        fig.add_traces(_polyline(go, by_kind[kind], by_kind_y[kind], kind,
                                 KIND_COLOURS.get(kind, _OTHER), width))
    if comm:
        fig.add_traces(_polyline(go, comm, comm_y, "collective in flight", "#555555",
                                 max(2.0, width / 3), hover=False))
    fig.update_yaxes(tickvals=list(range(len(rows))), ticktext=[r.label for r in rows],
                     autorange="reversed", range=None, showgrid=False)
    fig.update_xaxes(title_text="time (s)", range=[0, report.iteration_time_s])
    fig.update_layout(height=160 + 30 * max(len(rows), 1), hovermode="closest",
                      legend={"orientation": "h", "y": -0.12 - 1.5 / max(len(rows), 4)},
                      margin={"l": 10, "r": 10, "t": 50, "b": 40})
    if len(rows) < report.num_gpus:
        _note(fig, f"{report.num_gpus:,} GPUs in {len(rows)} rows: GPUs with the same "
                   "times share a row (hover a row's name for its GPUs)")
    _row_hover(fig, rows)
    return fig


def _gaps(segments: Sequence[tuple[float, float, str, str]], end_s: float,
          resolution_s: float) -> list[tuple[float, float, str, str]]:
    """The stretches no segment covers — waiting for a peer, for the pipeline, or for the
    slowest GPU at the end — as ``waiting`` segments (longer than ``resolution_s``)."""
    out = []
    cursor = 0.0
    for start, end, _, _ in sorted(segments):
        if start - cursor > resolution_s:
            out.append((cursor, start, "waiting", "waiting (bubble or idle)"))
        cursor = max(cursor, end)
    if end_s - cursor > resolution_s:
        out.append((cursor, end_s, "waiting", "waiting for the slowest GPU"))
    return out


def _polyline(go: Any, segments: Sequence[tuple[float, float, str]], ys: Sequence[float],
              name: str, colour: str, width: float, hover: bool = True) -> list[Any]:
    """Segments ``(start, end, hover text)`` at heights ``ys`` as one line broken by NaN
    (one SVG path however many), and invisible markers at their middles that carry the
    hover text once per segment."""
    x = np.full(3 * len(segments), np.nan)
    y = np.full(3 * len(segments), np.nan)
    for i, ((start, end, _), row) in enumerate(zip(segments, ys)):
        x[3 * i], x[3 * i + 1] = start, end
        y[3 * i] = y[3 * i + 1] = row
    traces = [go.Scatter(x=x, y=y, mode="lines", name=name, hoverinfo="skip",
                         line={"color": colour, "width": width}, connectgaps=False,
                         legendgroup=name)]
    if hover:
        traces.append(go.Scatter(
            x=np.array([(s + e) / 2 for s, e, _ in segments]), y=np.array(ys, dtype=float),
            mode="markers", marker={"size": width, "color": colour, "opacity": 0},
            text=[t for _, _, t in segments], hoverinfo="text", showlegend=False,
            legendgroup=name, name=name))
    return traces


def _row_hover(fig: Any, rows: Sequence[Row]) -> None:
    """Invisible markers at each row's start whose hover lists the row's GPUs."""
    fig.add_scatter(x=[0.0] * len(rows), y=list(range(len(rows))), mode="markers",
                    marker={"size": 1, "opacity": 0}, showlegend=False, hoverinfo="text",
                    text=[f"{html.escape(r.label)}: {html.escape(compress_names(r.gpus))}"
                          f"<br>schedule of {html.escape(r.timeline.name)}" for r in rows])


def _note(fig: Any, text: str) -> None:
    fig.add_annotation(text=html.escape(text), xref="paper", yref="paper", x=0, y=1.0,
                       yanchor="bottom", showarrow=False, font={"size": 11, "color": "#666"})


# --------------------------------------------------------------------------- per GPU


def _units(report: HtmlRun) -> list[tuple[str, str, Any]]:
    """What the per-GPU bars draw: (label, hover, times-and-memory) per GPU, or per group
    of GPUs with the same times when there are more than a person can tell apart."""
    if report.num_gpus <= _MAX_GPU_BARS:
        return [(g.gpu, f"{g.gpu} (rank {g.rank}, stage {g.stage})", g)
                for g in sorted(report.per_gpu, key=lambda g: g.rank)]
    return [(f"group {i + 1} (stage {grp.stage})", compress_names(grp.gpus), grp)
            for i, grp in enumerate(report.groups())]


def breakdown_figure(report: HtmlRun) -> Any:
    """Stacked compute / exposed comm / bubble / idle per GPU (or group), seconds."""
    go = _go()
    units = _units(report)
    labels = [u[0] for u in units]
    hover = [html.escape(u[1]) for u in units]
    fig = go.Figure()
    for name, attr in _BREAKDOWN:
        fig.add_bar(x=labels, y=[getattr(u[2], attr) for u in units], name=name,
                    marker_color=KIND_COLOURS[name], customdata=hover,
                    hovertemplate="%{customdata}<br>" + name + " %{y:.4g} s<extra></extra>")
    fig.add_scatter(x=labels, y=[u[2].communication_s for u in units], mode="markers",
                    name="communication (overlapped or not)", customdata=hover,
                    marker={"symbol": "line-ew-open", "size": 18, "color": "black"},
                    hovertemplate="%{customdata}<br>communication %{y:.4g} s<extra></extra>")
    fig.add_hline(y=report.iteration_time_s, line_dash="dash", line_width=1)
    fig.update_layout(barmode="stack", yaxis_title="time (s)", height=460,
                      xaxis_title="GPU" if report.num_gpus <= _MAX_GPU_BARS
                      else "group of GPUs with the same times")
    return fig


def memory_figure(report: HtmlRun) -> Any:
    """Stacked memory by kind per GPU (or group), GiB, against the capacity."""
    go = _go()
    units = _units(report)
    labels = [u[0] for u in units]
    hover = [html.escape(u[1]) for u in units]
    fig = go.Figure()
    for name, attr, colour in _MEMORY:
        fig.add_bar(x=labels, y=[getattr(u[2].memory, attr) / _GiB for u in units],
                    name=name, marker_color=colour, customdata=hover,
                    hovertemplate="%{customdata}<br>" + name + " %{y:.3f} GiB<extra></extra>")
    fig.add_hline(y=report.gpu_memory_bytes / _GiB, line_dash="dash", line_width=1,
                  annotation_text="capacity")
    fig.update_layout(barmode="stack", yaxis_title="memory (GiB)", height=420)
    return fig


# --------------------------------------------------------------------------- links


def link_figure(report: HtmlRun) -> Any | str:
    """Heat map: the hottest link's utilisation per link class and place."""
    go = _go()
    links = report.link_map
    if links is None or not links.classes:
        return "<p class=\"note\">No links carried traffic.</p>"
    peak = np.array(links.peak, dtype=float) * 100
    mean = np.array(links.mean, dtype=float) * 100
    count = np.array(links.count)
    custom = np.dstack([np.nan_to_num(mean), count])
    fig = go.Figure(go.Heatmap(
        z=peak, x=list(links.columns), y=list(links.classes), customdata=custom,
        colorscale="YlOrRd", zmin=0, zmax=100, colorbar={"title": {"text": "%"}},
        hovertemplate="%{y} at %{x}<br>hottest link %{z:.1f} % utilised<br>mean "
                      "%{customdata[0]:.1f} % over %{customdata[1]} links<extra></extra>"))
    fig.update_xaxes(type="category",
                     title_text="place: node (in-node and NIC links), or the source "
                                "switch's number in its tier")
    fig.update_layout(height=200 + 24 * len(links.classes), margin={"l": 10, "r": 10})
    return fig


# --------------------------------------------------------------------------- critical path


def critical_path_figure(report: HtmlRun) -> Any | str:
    """The critical path's entries over the rank groups it passes through."""
    go = _go()
    path = report.critical_path
    if not path:
        return "<p class=\"note\">The run recorded no critical path.</p>"
    groups = list(dict.fromkeys(e.group for e in path))
    by_kind: dict[str, tuple[list[tuple[float, float, str]], list[float]]] = {}
    for y, group in enumerate(groups):
        mine = [(e.start_s, e.end_s, e.kind, e.label) for e in path if e.group == group]
        for s, e, k, label in bin_segments(mine, report.iteration_time_s, _PIXELS):
            segments, ys = by_kind.setdefault(k, ([], []))
            segments.append((s, e, _segment_text(k, s, e, label)))
            ys.append(y)
    fig = go.Figure()
    for kind, (segments, ys) in by_kind.items():
        fig.add_traces(_polyline(go, segments, ys, kind, KIND_COLOURS.get(kind, _OTHER),
                                 max(6.0, min(16.0, 300.0 / len(groups)))))
    fig.update_yaxes(tickvals=list(range(len(groups))), ticktext=groups,
                     autorange="reversed", showgrid=False)
    fig.update_xaxes(title_text="time (s)", range=[0, report.iteration_time_s])
    fig.update_layout(height=200 + 28 * len(groups), hovermode="closest",
                      legend=_LEGEND_ABOVE)
    return fig


def critical_kinds_figure(names: Sequence[str], reports: Sequence[HtmlRun]) -> Any:
    """Seconds on the critical path by kind, one stacked bar per run."""
    go = _go()
    fig = go.Figure()
    kinds = list(dict.fromkeys(k for r in reports for k in
                               r.bottlenecks.get("critical_path", {}).get("by_kind", {})))
    for kind in kinds:
        values = [r.bottlenecks.get("critical_path", {}).get("by_kind", {})
                  .get(kind, {}).get("seconds", 0.0) for r in reports]
        if any(v > 0 for v in values):
            fig.add_bar(y=list(names), x=values, name=kind, orientation="h",
                        marker_color=KIND_COLOURS.get(kind, _OTHER),
                        hovertemplate=kind + " %{x:.4g} s<extra></extra>")
    fig.update_layout(barmode="stack", xaxis_title="seconds on the critical path",
                      height=180 + 40 * len(reports), legend=_LEGEND_ABOVE)
    fig.update_yaxes(autorange="reversed")
    return fig


# --------------------------------------------------------------------------- sweep


def sweep_report_html(title: str, x_key: str, x_labels: Sequence[str],
                      x_values: Sequence[float] | None,
                      curves: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
                      intro: str = "", x_unit: str = "") -> str:
    """A sweep's page: per metric (``curves``' keys) one figure of it against the first
    swept key, one curve per combination of the other keys (``{label: [(index of the x
    value, value), …]}``).  ``x_values`` are the x values as numbers, or None for a
    categorical axis labelled ``x_labels``; ``x_unit`` their unit (SI, e.g. ``B/s``)."""
    go = _go()
    sections = []
    for metric, lines in curves.items():
        fig = go.Figure()
        for label, pairs in lines.items():
            pairs = sorted(pairs, key=lambda p: x_values[p[0]] if x_values else p[0])
            xs = [x_values[i] if x_values else x_labels[i] for i, _ in pairs]
            fig.add_scatter(x=xs, y=[v for _, v in pairs], mode="lines+markers",
                            name=label or metric)
        fig.update_layout(xaxis_title=f"{x_key} ({x_unit})" if x_unit else x_key,
                          yaxis_title=metric, height=420,
                          showlegend=len(lines) > 1)
        if x_values is None:
            fig.update_xaxes(type="category", categoryorder="array",
                             categoryarray=list(x_labels))
        sections.append((f"{metric} against {x_key}", fig))
    return page(title, intro, sections)


# --------------------------------------------------------------------------- compare


def compare_report_html(names: Sequence[str], reports: Sequence[HtmlRun],
                        table: str = "") -> str:
    """Scenarios side by side: headline metrics, time per stage and memory per stage of
    each, the critical path by kind, and ``table`` (the terminal comparison) verbatim."""
    go = _go()
    metrics = go.Figure()
    base = reports[0].iteration_time_s
    metrics.add_bar(x=list(names), y=[r.iteration_time_s for r in reports],
                    text=[format_duration(r.iteration_time_s) for r in reports],
                    customdata=[(r.iteration_time_s / base - 1) * 100 if base else 0.0
                                for r in reports],
                    hovertemplate="%{x}: %{text} (%{customdata:+.1f} %)<extra></extra>",
                    marker_color="#1f77b4")
    metrics.update_layout(yaxis_title="iteration time (s)", height=380)
    sections: list[tuple[str, Any]] = [("Iteration time", metrics),
                                       ("Time per stage", _stage_figure(go, names, reports)),
                                       ("Memory per stage", _stage_memory(go, names, reports)),
                                       ("Critical path by kind",
                                        critical_kinds_figure(names, reports))]
    if table:
        sections.append(("Comparison", f"<pre>{html.escape(table)}</pre>"))
    intro = _headline([(name, f"{format_duration(r.iteration_time_s)}, MFU "
                              f"{r.mfu * 100:.1f} %, {r.num_gpus:,} GPUs")
                       for name, r in zip(names, reports)])
    return page("distsim comparison: " + " vs ".join(names), intro, sections)


def _stage_means(report: HtmlRun) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for stage in sorted({g.stage for g in report.per_gpu}):
        gpus = [g for g in report.per_gpu if g.stage == stage]
        out[stage] = {attr: sum(getattr(g, attr) for g in gpus) / len(gpus)
                      for _, attr in _BREAKDOWN}
        out[stage]["memory"] = max(g.peak_memory_bytes for g in gpus) / _GiB
    return out


def _stage_figure(go: Any, names: Sequence[str], reports: Sequence[HtmlRun]) -> Any:
    """Per scenario and stage, the mean GPU's time, stacked; scenarios side by side."""
    fig = go.Figure()
    x: list[list[str]] = [[], []]
    values: dict[str, list[float]] = {name: [] for name, _ in _BREAKDOWN}
    for name, report in zip(names, reports):
        for stage, means in _stage_means(report).items():
            x[0].append(name)
            x[1].append(f"stage {stage}")
            for kind, attr in _BREAKDOWN:
                values[kind].append(means[attr])
    for kind, _ in _BREAKDOWN:
        fig.add_bar(x=x, y=values[kind], name=kind, marker_color=KIND_COLOURS[kind])
    fig.update_layout(barmode="stack", yaxis_title="time (s)", height=440)
    return fig


def _stage_memory(go: Any, names: Sequence[str], reports: Sequence[HtmlRun]) -> Any:
    fig = go.Figure()
    for name, report in zip(names, reports):
        means = _stage_means(report)
        fig.add_bar(x=[f"stage {s}" for s in means], y=[m["memory"] for m in means.values()],
                    name=name)
    fig.update_layout(barmode="group", yaxis_title="peak memory per GPU (GiB)", height=380)
    return fig

