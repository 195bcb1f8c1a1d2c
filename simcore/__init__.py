"""simcore — the engine: SimPy environment, max-min flow network, tracing, units, errors.

Knows nothing of GPUs or DNNs; every layer above builds on it.
"""

from distsim_gpu.simcore.errors import (
    ConfigError,
    DistsimError,
    ParseError,
    SimulationError,
    TopologyError,
)
from distsim_gpu.simcore.maxmin import max_min_fair, solve_max_min
from distsim_gpu.simcore.network import Flow, FlowNetwork
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.simcore.trace import Tracer

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
