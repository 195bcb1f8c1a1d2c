"""simcore — the engine: SimPy environment, max-min flow network, tracing, units, errors.

Knows nothing of GPUs or DNNs; every layer above builds on it.
"""

from simcore.errors import (
    ConfigError,
    DistsimError,
    ParseError,
    SimulationError,
    TopologyError,
)
from simcore.maxmin import max_min_fair, solve_max_min
from simcore.network import Flow, FlowNetwork
from simcore.simulation import Simulation
from simcore.trace import Tracer

__all__ = [
    "ConfigError",
    "DistsimError",
    "Flow",
    "FlowNetwork",
    "ParseError",
    "Simulation",
    "SimulationError",
    "TopologyError",
    "Tracer",
    "max_min_fair",
    "solve_max_min",
]
