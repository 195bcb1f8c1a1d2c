"""scenarios — the top of the stack: a scenario file becomes a run and a report.

* :func:`load_scenario` reads and validates a scenario YAML (every error a
  :class:`~distsim_gpu.simcore.DistsimError` naming the file, key and what is valid) into
  a :class:`Scenario`: topology, model, strategy, costs and options;
  :func:`run_scenario` simulates one iteration of it and returns a :class:`Report`.
* A :class:`Report` holds the headline metrics and per-GPU times and memory;
  :func:`format_summary` prints it, :func:`write_output_dir` writes ``--out`` (summary,
  resolved configuration, trace, plots from :mod:`~distsim_gpu.scenarios.report.plots`), and
  :mod:`~distsim_gpu.scenarios.report.bottlenecks` finds the critical path and busiest links.

Above this core sit :mod:`~distsim_gpu.scenarios.study` (sweeps, comparisons, strategy
search) and :mod:`~distsim_gpu.scenarios.fit` (calibration and validation against
measurements), side by side, and on top :mod:`~distsim_gpu.scenarios.cli`, the
``distsim`` command.  The core imports neither of them.
"""

from distsim_gpu.scenarios.report import Report, build_report, format_summary, write_output_dir
from distsim_gpu.scenarios.scenario import (
    Scenario,
    load_scenario,
    run_scenario,
    scenario_from_mapping,
)

__all__ = [
    "Report",
    "Scenario",
    "build_report",
    "format_summary",
    "load_scenario",
    "run_scenario",
    "scenario_from_mapping",
    "write_output_dir",
]
