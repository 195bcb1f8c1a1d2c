"""The iteration's records: what it is asked to simulate and what it reports.

:class:`IterationSpec` is a scenario resolved into everything one iteration depends on;
:class:`IterationResult` is the simulated iteration, with every GPU's :class:`GpuTimes`
(:func:`per_gpu_times` turns the rank groups' accounting into those).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.intervals import (
    Intervals,
    intersection_length,
    length,
    paced_end,
    union,
    union_length,
)
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.cost.compute import CostModel
from distsim_gpu.workloads.cost.memory import MemoryBreakdown
from distsim_gpu.workloads.iteration.offload_step import OffloadStep
from distsim_gpu.workloads.iteration.timeline import PathEntry, RankGroup
from distsim_gpu.workloads.specs.gpus import GpuSpec
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

__all__ = ["GpuTimes", "IterationResult", "IterationSpec", "per_gpu_times"]


@dataclass(frozen=True, slots=True)
class IterationSpec:
    """Everything one iteration depends on (a scenario, resolved).

    ``microbatches``: the micro-batches per pipeline that the boundary's strategy check
    (:func:`~workloads.strategy.parallel.check_strategy`) returned, for a spec built from
    a validated scenario, job or search candidate: the simulator trusts it.  None (a spec
    written by hand): the simulator checks the strategy itself, once, before it runs.
    """

    topology: Topology
    model: ModelSpec
    parallel: ParallelConfig
    training: TrainingConfig
    costs: CostModel
    gpu: GpuSpec
    comm: CommParams = field(default_factory=CommParams)
    seed: int = 0
    trace: bool = False
    stragglers: Mapping[str, float] = field(default_factory=dict)
    allow_oom: bool = False
    source: str | None = None
    # Time tensor-parallel collectives on links nobody else can use by their closed form
    # (exact; off only to check that it is).
    fold_exclusive_tp: bool = True
    # Simulate symmetric data-parallel replicas once (exact where it applies; off only to
    # check that it is, or to see every replica's process).
    fold_replicas: bool = True
    microbatches: int | None = None


@dataclass(frozen=True, slots=True)
class GpuTimes:
    """Where one GPU's iteration went (seconds) and the memory it needs (bytes).

    ``compute_s``, ``host_s``, ``exposed_communication_s``, ``bubble_s`` and ``idle_s``
    sum to the iteration: ``host_s`` is the GPU waiting out the host's work (an offloaded
    optimizer step's PCIe copies and CPU-Adam), not computing; ``communication_s`` is
    every collective in flight, overlapped or not."""

    gpu: str
    rank: int
    stage: int
    replica: int
    tp_rank: int
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    bubble_s: float
    idle_s: float
    memory: MemoryBreakdown
    host_s: float = 0.0

    @property
    def peak_memory_bytes(self) -> float:
        return self.memory.total_bytes


@dataclass(frozen=True, slots=True)
class IterationResult:
    """The simulated iteration: its time, per-GPU breakdowns, and what it cost to run.

    ``critical_path`` covers ``[0, iteration_time_s]`` in time order: the chain of ops and
    transfers that set the iteration's length, walked back from the rank group that
    finished last.  ``topology`` is the cluster it ran on (link kinds for reports).
    """

    iteration_time_s: float
    microbatches: int
    per_gpu: tuple[GpuTimes, ...]
    model_flops: float
    events: int
    flows: int
    simulation: Simulation
    critical_path: tuple[PathEntry, ...] = ()
    topology: Topology | None = field(default=None, repr=False, compare=False)
    # Which simulation ran: "folded 8 data-parallel replicas into 1" or "full: <why>".
    folding: str = ""
    # Each simulated rank group with the groups it stands for (itself first, then its
    # folded images): its main-stream segments (RankGroup.path) draw report timelines.
    schedules: tuple[tuple[RankGroup, tuple[RankGroup, ...]], ...] = field(
        default=(), repr=False, compare=False)
    # Each pipeline stage's offloaded optimizer step (workloads.iteration.offload_step); () if none.
    offload: tuple[OffloadStep, ...] = ()
    # Seconds a data-parallel rank's data loader needs per iteration (0: none given); the
    # iteration is longer than the training where it binds (workloads.strategy.data_loading).
    data_loading_s: float = 0.0
    # How many all-to-all call shapes ran each algorithm (Communicator.algorithms_chosen):
    # what ``communication.all_to_all: auto`` chose, for the run's notes.
    alltoall_algorithms: Mapping[str, int] = field(default_factory=dict, compare=False)


def per_gpu_times(groups: list[RankGroup], memory: list[MemoryBreakdown], iteration: float,
                   pp: int, topology: Topology, data_wait_s: float = 0.0,
                   ) -> tuple[GpuTimes, ...]:
    """Every GPU's breakdown: its group's, with the wait for the slowest group at the end
    (bubble with a pipeline, else idle), what no category holds and ``data_wait_s`` past
    ``iteration`` waiting for the data loader as idle.

    A group runs at its slowest member's pace; a faster member (``RankGroup.paces``)
    computes its share of each compute span and waits out the rest in the group's next
    collective, as its NCCL kernel would: that rest is its exposed communication, and in
    flight beside whatever else the group had in flight then (the trace draws it so)."""
    per_gpu: list[GpuTimes] = []
    unions: dict[int, float] = {}  # folded images share their group's intervals
    for group in groups:
        communication = unions.get(id(group.comm_intervals))
        if communication is None:
            communication = unions[id(group.comm_intervals)] = union_length(
                group.comm_intervals)
        tail = iteration - group.end_s
        if pp > 1:
            group.bubble_s += tail
        else:
            group.idle_s += tail
        accounted = (group.compute_s + group.host_s + group.exposed_s + group.bubble_s
                     + group.idle_s)
        idle = group.idle_s + max(iteration - accounted, 0.0)
        if idle < 1e-12 * iteration:
            idle = 0.0  # rounding of the sums, not time
        idle += data_wait_s
        merged = union(group.comm_intervals) if group.paced else []
        for t, (gpu, share) in enumerate(zip(group.gpus, group.paces)):
            compute, comm = group.compute_s, communication
            if share != 1.0:
                compute = group.compute_s * share
                comm = communication + _waits_beside_s(group, share, merged)
            waited = group.compute_s - compute
            per_gpu.append(GpuTimes(
                gpu, topology.rank_of(gpu), group.stage, group.replica, t,
                compute, comm, group.exposed_s + waited, group.bubble_s,
                idle, memory[group.stage], group.host_s))
    per_gpu.sort(key=lambda g: g.rank)
    return tuple(per_gpu)


def _waits_beside_s(group: RankGroup, share: float, merged: Intervals) -> float:
    """How much longer than ``merged`` (the group's collectives in flight, as
    :func:`~simcore.intervals.union` gives them) a member computing ``share`` of
    ``group``'s compute spans had some collective in flight: the tail of each span it
    waited out, but for what of it the group's collectives already cover.  The spans are
    in time order (one main stream), so this is one sweep, not a union per GPU."""
    spans = group.compute_intervals
    if spans is None:  # RankGroup records them in any run with a straggler
        raise ValueError(f"{group.name} has a member at {share:g} of its pace but no "
                         "compute spans recorded")
    waits = [(paced_end(spans[i], spans[i + 1], share), spans[i + 1])
             for i in range(0, len(spans), 2)]
    return length(waits) - intersection_length(merged, waits)
