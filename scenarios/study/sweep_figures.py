"""A sweep's figures: ``sweep.png`` (a metric against the first swept key, one line per
combination of the other keys; needs matplotlib) and ``report.html`` (the same curves for
the headline metrics; needs Plotly)."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.report.html_report import HtmlUnavailable, sweep_report_html
from distsim_gpu.scenarios.study.sweep_folder import PointResult, is_metric
from distsim_gpu.scenarios.study.sweep_grid import canonical
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.units import parse_bandwidth, parse_duration, parse_flops, parse_size

__all__ = ["draw_figures"]

_PLOT = "sweep.png"
_HTML = "report.html"
# The metrics report.html draws (``--metric`` first).
_HTML_METRICS = ("iteration_time_s", "samples_per_s", "model_tflops_per_gpu", "mfu")


def draw_figures(directory: Path, grids: Sequence[tuple[str, Sequence[Any]]],
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


def _write_html(path: Path, name: str, grids: Sequence[tuple[str, Sequence[Any]]],
                results: Sequence[PointResult], metric: str) -> None:
    """report.html (atomically): every point's metrics against the first key
    (:func:`scenarios.report.html_report.sweep_report_html`).  Raises HtmlUnavailable."""
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
    unit parser; None otherwise (a categorical axis).  Values all written in one unit
    (``100 Gbps, 400 Gbps``) stay in it, as the user gave them; mixed ones are in SI."""
    if all(is_metric(v) for v in values):
        return [float(v) for v in values], ""
    for parser, unit in _UNIT_PARSERS:
        try:
            numbers = [parser(v) for v in values]
        except DistsimError:
            continue
        given = {_UNIT_OF.match(v).group(1) if isinstance(v, str) and _UNIT_OF.match(v)
                 else None for v in values}
        if len(given) == 1 and None not in given:
            (suffix,) = given
            scale = parser(f"1 {suffix}")
            return [n / scale for n in numbers], str(suffix)
        return numbers, unit
    return None


# The unit a value is written in: "400 Gbps" -> "Gbps".
_UNIT_OF = re.compile(r"^\s*[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?\s*([A-Za-zµμ/]+)\s*$")


def _curves(grids: Sequence[tuple[str, Sequence[Any]]], results: Sequence[PointResult],
            metric: str) -> dict[tuple[str, ...], list[tuple[int, float]]]:
    """``metric`` against the first key: per combination of the other keys (its
    ``key=value`` labels), the (index of the first key's value, metric) of every point
    that has it."""
    first, xs = grids[0]
    others = [key for key, _ in grids[1:]]
    lines: dict[tuple[str, ...], list[tuple[int, float]]] = {}
    index = {canonical(v): i for i, v in enumerate(xs)}
    for result in results:
        value = (result.summary or {}).get(metric)
        if result.status != "ok" or not is_metric(value):
            continue
        point = dict(result.overrides)
        label = tuple(f"{key}={point[key]}" for key in others)
        lines.setdefault(label, []).append((index[canonical(point[first])], float(value)))
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
