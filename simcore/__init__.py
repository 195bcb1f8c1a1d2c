"""simcore — the engine: SimPy environment, max-min flow network, tracing, units, errors.

* :class:`Simulation` owns the ``simpy.Environment``, the :class:`FlowNetwork` (links
  shared by max-min fairness, :func:`solve_max_min`), the :class:`Tracer` and the seed.
* :mod:`~distsim_gpu.simcore.units` reads ``"450 GB/s"``-style strings into SI floats and
  formats them back; :mod:`~distsim_gpu.simcore.errors` is the :class:`DistsimError`
  family; :mod:`~distsim_gpu.simcore.config` the configuration toolkit (dotted
  ``--set`` overrides, mapping / key / choice checks with did-you-mean hints);
  :class:`~distsim_gpu.simcore.pool.WorkerPool` runs tasks in worker processes that die
  with their parent (or in this process).

Knows nothing of GPUs or DNNs; every layer above builds on it, and it imports none of them.
"""

from distsim_gpu.simcore.errors import (
    ConfigError,
    DistsimError,
    ParseError,
    SimulationError,
    TopologyError,
)
from distsim_gpu.simcore.maxmin import max_min_fair, solve_max_min
from distsim_gpu.simcore.network import Flow, FlowNetwork, LinkStats
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.simcore.trace import Counter, Span, Tracer
from distsim_gpu.simcore.units import (
    format_bandwidth,
    format_bytes,
    format_duration,
    parse_bandwidth,
    parse_duration,
    parse_flops,
    parse_size,
)

__all__ = [
    "ConfigError",
    "Counter",
    "DistsimError",
    "Flow",
    "FlowNetwork",
    "LinkStats",
    "ParseError",
    "RunNote",
    "Simulation",
    "SimulationError",
    "Span",
    "TopologyError",
    "Tracer",
    "format_bandwidth",
    "format_bytes",
    "format_duration",
    "max_min_fair",
    "parse_bandwidth",
    "parse_duration",
    "parse_flops",
    "parse_size",
    "solve_max_min",
]
