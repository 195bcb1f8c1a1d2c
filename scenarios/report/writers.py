"""The files ``--out DIR`` writes, as a registry: one :class:`ReportWriter` per output.

:func:`~scenarios.report.output_dir.write_output_dir` runs the writers of :data:`WRITERS`
in order, each into the staging directory, and gathers the files they wrote and their
notes.  A writer that needs an optional package (matplotlib for the plots, Plotly for
``report.html``) names the exception its module raises without it and the note that says
so; the run goes on without that output.  A new output format is one module that draws it
plus one entry here (or :func:`register_writer` from outside the package).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.report.html_report import HtmlUnavailable, run_report_html
from distsim_gpu.scenarios.report.perfetto import per_gpu_chrome_trace
from distsim_gpu.scenarios.report.plots import PlotsUnavailable, write_plots
from distsim_gpu.scenarios.report.record import Report
from distsim_gpu.scenarios.report.summary import format_summary

__all__ = ["WRITERS", "OutputContext", "ReportWriter", "Written", "register_writer",
           "unregister_writer"]


@dataclass(frozen=True, slots=True)
class OutputContext:
    """What a writer writes from: the report, the directory to write into (a staging
    directory, renamed into place once every writer is done) and the run's further
    findings, each ``name -> (its JSON, its text)`` (e.g. faults and jobs,
    :mod:`scenarios.disruptions`)."""

    report: Report
    directory: Path
    sections: Mapping[str, tuple[Any, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Written:
    """The file names one writer wrote (inside the directory), and what it has to say."""

    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReportWriter:
    """One output of ``--out DIR``.

    ``name``: the writer's key (``write_output_dir``'s ``plots`` / ``html`` switches name
    ``plots`` and ``html``); ``files``: every name it may write, which also marks a
    directory as distsim's previous output; ``write``: the function that writes them.
    ``unavailable``: the exceptions ``write`` raises, before writing anything, when an
    optional package it needs is missing; the run then goes on without this output and
    notes ``"<skipped>: <the exception's message>"``.
    """

    name: str
    files: tuple[str, ...]
    write: Callable[[OutputContext], Written]
    unavailable: tuple[type[Exception], ...] = ()
    skipped: str = ""


def _summary_json(out: OutputContext) -> Written:
    sections = {name: value[0] for name, value in out.sections.items()}
    summary = {**out.report.to_json_dict(), **sections}
    (out.directory / "summary.json").write_text(
        json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return Written(("summary.json",))


def _resolved_yaml(out: OutputContext) -> Written:
    report = out.report
    header = (f"# distsim: the resolved configuration of {report.name!r}, every default "
              "filled in (SI units) but\n# those the run's notes give as assumed, so that a "
              "run of it says so again.\n# Run it again with: distsim run resolved.yaml\n")
    (out.directory / "resolved.yaml").write_text(
        header + yaml.safe_dump(report.config, sort_keys=False, allow_unicode=True),
        encoding="utf-8")
    return Written(("resolved.yaml",))


def _trace_json(out: OutputContext) -> Written:
    report = out.report
    if report.tracer is None:  # the run did not trace
        return Written()
    trace, note = per_gpu_chrome_trace(report.tracer, report.timelines, report.per_gpu)
    with open(out.directory / "trace.json", "w", encoding="utf-8") as handle:
        # json.dump streams the encoding: no second copy of a large trace as text.
        json.dump(trace, handle, separators=(",", ":"))
    del trace
    return Written(("trace.json",), (note,) if note else ())


def _plots(out: OutputContext) -> Written:
    return Written(tuple(write_plots(out.report, out.directory)))


def _report_html(out: OutputContext) -> Written:
    text = format_summary(out.report) + "".join(v[1] for v in out.sections.values())
    page = run_report_html(out.report, text)
    (out.directory / "report.html").write_text(page, encoding="utf-8")
    return Written(("report.html",))


#: The writers ``--out DIR`` runs, in order (the order of its files and notes).
WRITERS: list[ReportWriter] = [
    ReportWriter("summary", ("summary.json",), _summary_json),
    ReportWriter("resolved", ("resolved.yaml",), _resolved_yaml),
    ReportWriter("trace", ("trace.json",), _trace_json),
    ReportWriter("plots", ("timeline.png", "breakdown.png", "memory.png"), _plots,
                 unavailable=(PlotsUnavailable,), skipped="plots skipped"),
    ReportWriter("html", ("report.html",), _report_html,
                 unavailable=(HtmlUnavailable,), skipped="report.html skipped"),
]


def register_writer(writer: ReportWriter) -> None:
    """Add ``writer`` after the others; its name and files must be new."""
    for other in WRITERS:
        if other.name == writer.name:
            raise ValueError(f"a report writer named {writer.name!r} exists")
        clash = set(other.files) & set(writer.files)
        if clash:
            raise ValueError(f"{', '.join(sorted(clash))}: written by {other.name!r}")
    WRITERS.append(writer)


def unregister_writer(name: str) -> None:
    """Remove the writer called ``name`` (a test's or an experiment's) from :data:`WRITERS`."""
    WRITERS[:] = [writer for writer in WRITERS if writer.name != name]
