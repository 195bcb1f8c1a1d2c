"""``distsim compare``: run two or more scenarios and show what changed and why.

:func:`compare_scenarios` loads every scenario (all are checked before any runs), applies
the same ``--set`` overrides to each, runs them, and returns a :class:`Comparison`:

* the headline metrics side by side (iteration time, samples/s, tokens/s, TFLOP/s per
  GPU, MFU, peak memory), each with its delta against the first scenario — absolute
  (``B − A``, exactly the difference of the two reports) and in % of the first;
* per pipeline stage, the mean per-GPU time in compute, communication, exposed
  communication, bubble and idle, with deltas, and the same over all GPUs;
* the critical path by kind (seconds), with deltas: which kind of work grew;
* per scenario its most utilised links, with the link kind and the traffic that loads them
  (bytes by class: tp / pp / dp / ep).

:func:`format_comparison` renders the table; :meth:`Comparison.to_json_dict` is ``--json``;
:func:`write_comparison` writes both, the table as a page (``report.html``), for ``--out``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distsim_gpu.scenarios.report import Report, format_table
from distsim_gpu.scenarios.report.bottlenecks import format_link
from distsim_gpu.scenarios.report.html_report import HtmlUnavailable, compare_report_html
from distsim_gpu.scenarios.scenario import Scenario, load_scenario, run_scenario
from distsim_gpu.simcore import progress
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.units import format_duration
from distsim_gpu.workloads.iteration.timeline import critical_path_kinds

__all__ = ["COMPARE_FILES", "METRICS", "TIME_FIELDS", "Comparison", "compare_scenarios",
           "format_comparison", "names_of", "write_comparison"]

#: Headline metrics compared: (key, label, unit).
METRICS = (
    ("iteration_time_s", "iteration time", "s"),
    ("samples_per_s", "samples/s", "1/s"),
    ("tokens_per_s", "tokens/s", "1/s"),
    ("model_tflops_per_gpu", "TFLOP/s per GPU", "TFLOP/s"),
    ("mfu", "MFU", "fraction"),
    ("peak_memory_bytes", "peak memory per GPU", "B"),
)
#: Per-GPU times compared, per pipeline stage (seconds).
TIME_FIELDS = ("compute_s", "host_s", "communication_s", "exposed_communication_s",
               "bubble_s", "idle_s")
_TIME_LABELS = ("compute", "host", "communication", "exposed comm", "bubble", "idle")
_TOP_LINKS = 5


def _metric(report: Report, key: str) -> float:
    if key == "peak_memory_bytes":
        return max((g.peak_memory_bytes for g in report.per_gpu), default=0.0)
    return float(getattr(report, key))


def _deltas(values: Sequence[float | None]) -> tuple[list[float | None], list[float | None]]:
    """``values[i] − values[0]`` and that in % of ``values[0]`` (None where undefined)."""
    base = values[0]
    delta: list[float | None] = []
    percent: list[float | None] = []
    for v in values:
        if v is None or base is None:
            delta.append(None)
            percent.append(None)
            continue
        d = v - base
        delta.append(d)
        percent.append(d / base * 100 if base != 0 else None)
    return delta, percent


def _stage_means(report: Report, stage: int | None) -> dict[str, float] | None:
    gpus = [g for g in report.per_gpu if stage is None or g.stage == stage]
    if not gpus:
        return None
    return {f: sum(getattr(g, f) for g in gpus) / len(gpus) for f in TIME_FIELDS}


@dataclass(frozen=True, slots=True)
class Comparison:
    """Reports of the compared scenarios, in the order given (the first is the baseline);
    ``paths`` the files they came from."""

    paths: tuple[str, ...]
    reports: tuple[Report, ...]

    def metrics(self) -> list[dict[str, Any]]:
        """Per metric: ``values`` per scenario, ``delta`` (B − A) and ``delta_percent``."""
        rows = []
        for key, label, unit in METRICS:
            values = [_metric(r, key) for r in self.reports]
            delta, percent = _deltas(values)
            rows.append({"metric": key, "label": label, "unit": unit, "values": values,
                         "delta": delta, "delta_percent": percent})
        return rows

    def breakdown(self) -> list[dict[str, Any]]:
        """Per pipeline stage (and ``"all"`` GPUs last): the mean per-GPU times of each
        scenario (None where a scenario has no such stage), with deltas."""
        stages = sorted({g.stage for r in self.reports for g in r.per_gpu})
        rows = []
        for stage in [*stages, None]:
            means = [_stage_means(r, stage) for r in self.reports]
            fields = {}
            for f in TIME_FIELDS:
                values = [m[f] if m is not None else None for m in means]
                delta, percent = _deltas(values)
                fields[f] = {"values": values, "delta": delta, "delta_percent": percent}
            rows.append({"stage": "all" if stage is None else stage,
                         "gpus": [sum(1 for g in r.per_gpu if stage is None or g.stage == stage)
                                  for r in self.reports],
                         "times": fields})
        return rows

    def critical_path(self) -> dict[str, dict[str, list[float | None]]]:
        """Seconds per kind on each scenario's critical path, with deltas."""
        out = {}
        for kind in critical_path_kinds():
            values: list[float | None] = []
            for r in self.reports:
                by_kind = r.bottlenecks.get("critical_path", {}).get("by_kind", {})
                values.append(by_kind[kind]["seconds"] if kind in by_kind else None)
            delta, percent = _deltas(values)
            out[kind] = {"values": values, "delta": delta, "delta_percent": percent}
        return out

    def links(self, top: int = _TOP_LINKS) -> list[list[dict[str, Any]]]:
        """Per scenario its ``top`` most utilised links (see
        :func:`scenarios.report.bottlenecks.link_summary`)."""
        return [list(r.bottlenecks.get("top_links_by_utilisation", []))[:top]
                for r in self.reports]

    def to_json_dict(self) -> dict[str, Any]:
        """Everything as one JSON-ready object (SI units)."""
        return {
            "scenarios": [{"name": r.name, "path": p, "num_gpus": r.num_gpus,
                           "notes": [note.to_dict() for note in r.notes]}
                          for p, r in zip(self.paths, self.reports)],
            "baseline": self.reports[0].name,
            "metrics": self.metrics(),
            "breakdown": self.breakdown(),
            "critical_path": self.critical_path(),
            "top_links": [{"scenario": r.name, "links": links}
                          for r, links in zip(self.reports, self.links())],
        }


def _as_pairs(overrides: Iterable[tuple[str, Any] | str]) -> list[tuple[str, Any]]:
    return [parse_assignment(o) if isinstance(o, str) else (o[0], o[1]) for o in overrides]


def _load(path: str, pairs: list[tuple[str, Any]]) -> Scenario:
    """One scenario with the overrides; an override's error names the scenario it broke
    (the same ``--set`` may suit one of them and not another)."""
    try:
        return load_scenario(path, pairs)
    except DistsimError as error:
        if error.source == "--set":
            error.source = f"--set on {path}"
        raise


def compare_scenarios(paths: Sequence[str], overrides: Iterable[tuple[str, Any] | str] = (),
                      *, allow_oom: bool = False) -> Comparison:
    """Load, override and run every scenario of ``paths`` (at least two); ``overrides`` are
    ``(dotted_key, value)`` pairs or ``"KEY=VALUE"`` strings applied to each.  Raises
    :class:`~simcore.errors.ConfigError` / ``ParseError`` for bad input, before running
    anything."""
    paths = [str(p) for p in paths]
    if len(paths) < 2:
        raise ConfigError(f"compare needs at least two scenario files, got {len(paths)}",
                          key="scenarios", hint="e.g. distsim compare a.yaml b.yaml")
    pairs = _as_pairs(overrides)
    scenarios = [_load(path, pairs) for path in paths]
    reporter = progress.current()  # the command's progress line, if it shows one
    reports = []
    for scenario in scenarios:
        if reporter is not None:
            reporter.phase(f"running {scenario.name}")
        reports.append(run_scenario(scenario, allow_oom=allow_oom))
        if reporter is not None:
            reporter.stage(len(reports), len(scenarios), "scenarios")
    return Comparison(tuple(paths), tuple(reports))


def names_of(comparison: Comparison) -> list[str]:
    """The scenarios' names, each made unique by its file where two are alike."""
    names = [r.name for r in comparison.reports]
    return [name if names.count(name) == 1 else f"{name} ({path})"
            for name, path in zip(names, comparison.paths)]


#: What ``distsim compare --out DIR`` writes.
COMPARE_FILES = ("comparison.json", "report.html")


def write_comparison(comparison: Comparison, directory: str | os.PathLike[str]
                     ) -> tuple[list[str], list[str]]:
    """Write ``comparison.json`` (:meth:`Comparison.to_json_dict`) and ``report.html``
    (the scenarios side by side, when Plotly is installed) into ``directory``, each file
    atomically; returns the files written and notes (what was skipped, and why).
    ``directory`` may be new, empty or a previous comparison's; else ConfigError."""
    target = Path(directory)
    label = os.fspath(directory)
    if target.exists() and (not target.is_dir() or not {
            p.name for p in target.iterdir()} <= set(COMPARE_FILES)):
        raise ConfigError("exists and is not an empty directory or a comparison's",
                          key="--out", source=label,
                          hint="give a new or empty directory (a previous comparison's, "
                               "holding only " + ", ".join(COMPARE_FILES) + ", is replaced)")
    files, notes = ["comparison.json"], []
    try:
        atomic_write_text(target / "comparison.json",
                          json.dumps(comparison.to_json_dict(), indent=2) + "\n")
        try:
            page = compare_report_html(names_of(comparison), comparison.reports,
                                       format_comparison(comparison))
        except HtmlUnavailable as missing:
            notes.append(f"report.html skipped: {missing}")
        else:
            atomic_write_text(target / "report.html", page)
            files.append("report.html")
    except OSError as error:
        raise ConfigError(f"cannot write the comparison: {error.strerror or error}",
                          key="--out", source=label) from None
    return files, notes


# --------------------------------------------------------------------------- table


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        return format_duration(value)
    if unit == "fraction":
        return f"{value * 100:.2f}%"
    if unit == "B":
        return f"{value / 2**30:.2f} GiB"
    return f"{value:,.4g}"



def _delta(delta: float | None, percent: float | None, unit: str) -> str:
    if delta is None:
        return ""
    if unit == "fraction":
        text = f"{delta * 100:+.2f} pt"
    else:
        text = _value(delta, unit)
        if not text.startswith("-"):
            text = "+" + text
    return f"{text} ({percent:+.1f}%)" if percent is not None else text


def _cells(entry: dict[str, Any], unit: str) -> list[str]:
    """The first scenario's value, then each later one's value and ``[delta]`` cells."""
    cells = []
    for i, value in enumerate(entry["values"]):
        cells.append(_value(value, unit))
        if i:
            change = _delta(entry["delta"][i], entry["delta_percent"][i], unit)
            cells.append(f"[{change}]" if change else "")
    return cells


def _table(first: str, names: Sequence[str], rows: list[list[str]]) -> list[str]:
    """Aligned columns: values right-aligned, each delta in its own left-aligned column."""
    header = [first, names[0], *(cell for name in names[1:] for cell in (name, ""))]
    deltas = set(range(3, len(header), 2))
    return format_table(header, rows, right=set(range(1, len(header))) - deltas)


def _notes(comparison: Comparison, names: Sequence[str]) -> list[str]:
    """Each scenario's notes: those every scenario shares once, then each one's own."""
    per_report = [[str(note) for note in r.notes] for r in comparison.reports]
    shared = [n for n in per_report[0] if all(n in notes for notes in per_report[1:])]
    lines = [f"  note: {n}" for n in shared]
    for name, notes in zip(names, per_report, strict=True):
        own = [n for n in notes if n not in shared]
        if own:
            lines += [f"  {name}:", *(f"    note: {n}" for n in own)]
    return ["", "Notes (assumptions that move the answers):", *lines] if lines else []


def format_comparison(comparison: Comparison) -> str:
    """The terminal table: metrics, per-stage times and critical path side by side, each
    later scenario with ``[delta vs the first (%)]``; then each scenario's busiest links
    and the notes of each run."""
    names = names_of(comparison)  # (the same name twice: with its path)
    lines = ["distsim compare: " + " vs ".join(names) + " (deltas vs the first)"]
    for name, path, r in zip(names, comparison.paths, comparison.reports, strict=True):
        lines.append(f"  {name}: {path}, {r.num_gpus} GPUs")
    lines += ["", "Metrics:"]
    metric_rows = [[row["label"], *_cells(row, row["unit"])] for row in comparison.metrics()]
    lines += _table("metric", names, metric_rows)
    lines += ["", "Mean time per GPU, by pipeline stage:"]
    rows = []
    for row in comparison.breakdown():
        for f, label in zip(TIME_FIELDS, _TIME_LABELS):
            if f == "host_s" and not any(row["times"][f]["values"]):
                continue  # no offloaded step in any scenario: a row of zeros says nothing
            stage = "all GPUs" if row["stage"] == "all" else f"stage {row['stage']}"
            rows.append([f"{stage} {label}", *_cells(row["times"][f], "s")])
    lines += _table("stage / time", names, rows)
    lines += ["", "Critical path by kind:"]
    rows = [[kind, *_cells(entry, "s")] for kind, entry in comparison.critical_path().items()
            if any(v for v in entry["values"] if v)]
    lines += _table("kind", names, rows)
    lines += ["", "Busiest links (what loads them):"]
    for name, links in zip(names, comparison.links(), strict=True):
        lines.append(f"  {name}:")
        lines += [f"    - {format_link(link)}" for link in links] or ["    (no link traffic)"]
    lines += _notes(comparison, names)
    return "\n".join(lines) + "\n"
