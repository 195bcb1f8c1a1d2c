"""collectives — how a group of GPUs moves a collective's bytes: algorithms as flows.

A call is (operation, group of GPUs, size in bytes); a :class:`Communicator` runs it on a
:class:`~distsim_gpu.topology.Topology` the way NCCL would — ring or double binary tree,
NVLink SHARP (NVLS, NVLS-tree), InfiniBand SHARP (CollNet), all-to-all and send/recv with
or without PXN, with NCCL's channels and protocols (:class:`CommParams`) — as a
:class:`CollectivePlan` of flows on the simulation's flow network.  The nccl-tests twin
(:func:`run_benchmark`) times one collective over a series of sizes like NVIDIA's
``*_perf`` tools.  Knows nothing of models; depends on ``simcore`` and ``topology``.
"""

from distsim_gpu.collectives.algorithms import OPS, ring_channels
from distsim_gpu.collectives.catalog import build_plan, candidates
from distsim_gpu.collectives.communicator import CollectiveRecord, Communicator
from distsim_gpu.collectives.nccl_tests import BenchRow, run_benchmark
from distsim_gpu.collectives.params import (
    ALGORITHMS,
    FIDELITIES,
    PROTOCOLS,
    CommParams,
    comm_params_for,
    comm_params_from_mapping,
)
from distsim_gpu.collectives.plan import CollectivePlan, StepShape

__all__ = [
    "ALGORITHMS",
    "FIDELITIES",
    "OPS",
    "PROTOCOLS",
    "BenchRow",
    "CollectivePlan",
    "CollectiveRecord",
    "CommParams",
    "Communicator",
    "StepShape",
    "build_plan",
    "candidates",
    "comm_params_for",
    "comm_params_from_mapping",
    "ring_channels",
    "run_benchmark",
]
