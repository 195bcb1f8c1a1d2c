"""study — many runs of one scenario, side by side.

* :func:`run_sweep` runs a scenario over a grid of ``--set`` overrides
  (:class:`SweepResult`, :func:`format_sweep`);
* :func:`compare_scenarios` runs several scenarios and sets their metrics side by side
  (:class:`Comparison`, :func:`format_comparison`);
* :func:`search_strategies` enumerates the parallel strategies that fit a cluster and a
  model, prunes those a lower bound proves slower, and simulates the rest
  (:class:`Strategy`, :class:`SearchResult`, :func:`format_search`).

Builds on the scenarios core (scenario, report); imports nothing of ``fit`` or ``cli``.
"""

from distsim_gpu.scenarios.study.compare import Comparison, compare_scenarios, format_comparison
from distsim_gpu.scenarios.study.search import (
    SearchResult,
    Strategy,
    format_search,
    search_strategies,
)
from distsim_gpu.scenarios.study.sweep import SweepResult, format_sweep, run_sweep

__all__ = [
    "Comparison",
    "SearchResult",
    "Strategy",
    "SweepResult",
    "compare_scenarios",
    "format_comparison",
    "format_search",
    "format_sweep",
    "run_sweep",
    "search_strategies",
]
