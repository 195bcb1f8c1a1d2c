"""collectives — ring / tree / all-to-all / point-to-point algorithms as flows on a topology.

Knows nothing of models: a call is (operation, group of GPUs, size in bytes).
"""

from distsim_gpu.collectives.algorithms import OPS, build_plan, ring_channels
from distsim_gpu.collectives.communicator import CollectiveRecord, Communicator
from distsim_gpu.collectives.params import (
    ALGORITHMS,
    FIDELITIES,
    PROTOCOLS,
    CommParams,
    comm_params_from_mapping,
)
from distsim_gpu.collectives.plan import CollectivePlan, StepShape

__all__ = [
    "ALGORITHMS",
    "FIDELITIES",
    "OPS",
    "PROTOCOLS",
    "CollectivePlan",
    "CollectiveRecord",
    "CommParams",
    "Communicator",
    "StepShape",
    "build_plan",
    "comm_params_from_mapping",
    "ring_channels",
]
