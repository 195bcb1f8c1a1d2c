"""What a scenario run reports: the :class:`Report` record of one simulated iteration.

A :class:`Report` holds one simulated iteration's results in SI units: the iteration time,
throughput (samples and tokens per second), model FLOP/s per GPU and MFU (model FLOP
utilisation: achieved model FLOP/s per GPU over the GPU's dense peak at the training
precision — recomputation does not count, as in Narayanan et al. 2021), and per GPU the
time in compute, communication (overlapped or not), exposed communication, pipeline bubble
and idle, plus the memory it needs.  It also records the resolved configuration the run
used, so it can be reproduced from its own output, and the typed model, strategy, training
and GPU it was built from, which the summary prints from.

:func:`build_report` makes one from an iteration's result and its :class:`RunSetup`;
:meth:`Report.to_json_dict` is its JSON (``--json``, ``summary.json``).  The writers of
the other outputs (the terminal summary, ``--out DIR``) are their own modules of
:mod:`scenarios.report`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distsim_gpu.scenarios.report.bottlenecks import add_to_trace, bottlenecks
from distsim_gpu.scenarios.report.linkmap import LinkMap, link_map
from distsim_gpu.scenarios.report.timelines import Timeline, timelines_of
from distsim_gpu.simcore.notes import RunNote
from distsim_gpu.simcore.trace import Tracer
from distsim_gpu.workloads.cost.memory import MemoryBreakdown
from distsim_gpu.workloads.cost.traffic import seq_len_of
from distsim_gpu.workloads.iteration.offload_step import OffloadStep
from distsim_gpu.workloads.iteration.simulator import GpuTimes, IterationResult, PathEntry
from distsim_gpu.workloads.specs.gpus import GpuSpec
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

__all__ = [
    "GROUP_TOLERANCE",
    "GpuGroup",
    "JobRun",
    "Report",
    "RunSetup",
    "build_report",
    "group_gpus",
]

# GPUs of a stage whose times agree within this fraction of the iteration (and whose
# memory agrees within 1 MiB) are shown as one group: replicas of a stage differ by a few
# microseconds of contention that a summary should not spell out GPU by GPU.
GROUP_TOLERANCE = 0.005

_TIME_FIELDS = ("compute_s", "host_s", "communication_s", "exposed_communication_s",
                "bubble_s", "idle_s")


@dataclass(frozen=True, slots=True)
class GpuGroup:
    """GPUs of one pipeline stage with the same times (within ``GROUP_TOLERANCE`` of the
    iteration) and memory.  Times are the members' means (seconds); ``spread_s`` is the
    largest deviation of any member's time from them; ``memory`` the first member's."""

    stage: int
    gpus: tuple[str, ...]
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    bubble_s: float
    idle_s: float
    spread_s: float
    memory: MemoryBreakdown
    host_s: float = 0.0


def _close(a: GpuTimes, b: GpuTimes, tolerance_s: float) -> bool:
    return (all(abs(getattr(a, f) - getattr(b, f)) <= tolerance_s for f in _TIME_FIELDS)
            and abs(a.peak_memory_bytes - b.peak_memory_bytes) < 2**20)


def group_gpus(per_gpu: Sequence[GpuTimes], iteration_time_s: float,
               tolerance: float = GROUP_TOLERANCE) -> list[GpuGroup]:
    """Group GPUs per stage: a GPU joins the first group whose first member it matches
    within ``tolerance × iteration_time_s`` in every time, else starts a new group."""
    tolerance_s = tolerance * iteration_time_s
    clusters: list[list[GpuTimes]] = []
    for g in sorted(per_gpu, key=lambda x: (x.stage, x.rank)):
        for members in clusters:
            if members[0].stage == g.stage and _close(members[0], g, tolerance_s):
                members.append(g)
                break
        else:
            clusters.append([g])
    groups = []
    for members in clusters:
        means = {f: sum(getattr(m, f) for m in members) / len(members) for f in _TIME_FIELDS}
        spread = max(abs(getattr(m, f) - means[f]) for m in members for f in _TIME_FIELDS)
        groups.append(GpuGroup(members[0].stage, tuple(m.gpu for m in members),
                               spread_s=spread, memory=members[0].memory, **means))
    return groups


@dataclass(frozen=True, slots=True)
class Report:
    """One simulated iteration (seconds, bytes, FLOP/s; ``mfu`` a fraction).

    ``config`` is the resolved scenario (see :meth:`scenarios.scenario.Scenario.resolved`);
    ``tracer`` the simulation's tracer when the run traced (spans, link counters), else
    None; ``bottlenecks`` the critical path and busiest links
    (:func:`scenarios.report.bottlenecks.bottlenecks`).
    """

    name: str
    iteration_time_s: float
    samples_per_s: float
    tokens_per_s: float
    model_flops: float
    model_tflops_per_gpu: float
    mfu: float
    peak_flops_per_s: float
    num_gpus: int
    microbatches: int
    wall_time_s: float
    events: int
    flows: int
    gpu_memory_bytes: float
    per_gpu: tuple[GpuTimes, ...]
    config: dict[str, Any]
    source: str | None = None
    tracer: Tracer | None = field(default=None, repr=False, compare=False)
    bottlenecks: dict[str, Any] = field(default_factory=dict, repr=False)
    folding: str = ""  # which simulation ran (workloads.iteration.records.IterationResult.folding)
    # The iteration's result, for what only report.html and the per-GPU trace draw
    # (timelines, link map): made when asked, as binning every link of a 16,384-GPU run
    # costs seconds that a search or sweep point would spend for nothing.
    result: IterationResult | None = field(default=None, repr=False, compare=False)
    critical_path: tuple[PathEntry, ...] = field(default=(), repr=False, compare=False)
    # Each stage's offloaded optimizer step (workloads.iteration.offload_step); () when none.
    offload: tuple[OffloadStep, ...] = ()
    # Seconds a data-parallel rank's loader needs per iteration (workloads.strategy.data_loading);
    # 0 when the scenario gives no loader.
    data_loading_s: float = 0.0
    # What the run was built from, for the summary to print (``config`` is their JSON).
    # When several jobs share the cluster (scenarios.disruptions) they are the first
    # job's, whose figures the report holds, and ``jobs`` counts the jobs.
    model: ModelSpec | None = field(default=None, repr=False, compare=False)
    parallel: ParallelConfig | None = field(default=None, repr=False, compare=False)
    training: TrainingConfig | None = field(default=None, repr=False, compare=False)
    gpu: GpuSpec | None = field(default=None, repr=False, compare=False)
    jobs: int = field(default=1, repr=False, compare=False)
    # With several jobs: each job's name and what it trains how (the summary prints them).
    job_runs: tuple[JobRun, ...] = field(default=(), repr=False, compare=False)
    # The cluster's GPUs, which with several jobs are more than the first job's
    # ``num_gpus``; 0 when not known (a Report built by hand): then ``num_gpus``.
    cluster_gpus: int = field(default=0, repr=False, compare=False)
    # What the run assumed that moves its answer (simcore.notes): every output prints them.
    notes: tuple[RunNote, ...] = ()

    @property
    def timelines(self) -> tuple[Timeline, ...]:
        """Each simulated schedule and the GPUs it stands for
        (:mod:`scenarios.report.timelines`)."""
        return timelines_of(self.result) if self.result is not None else ()

    @property
    def link_map(self) -> LinkMap | None:
        """Link utilisation by link class and place (:mod:`scenarios.report.linkmap`)."""
        return link_map(self.result) if self.result is not None else None

    def groups(self, tolerance: float = GROUP_TOLERANCE) -> list[GpuGroup]:
        """GPUs with (nearly) equal timings and memory, per pipeline stage (see
        :func:`group_gpus`)."""
        return group_gpus(self.per_gpu, self.iteration_time_s, tolerance)

    def to_json_dict(self) -> dict[str, Any]:
        """Everything as one JSON-ready object (SI units; the resolved config under
        ``config``).  ``wall_time_s`` is the only field that varies between identical runs.
        """
        data = {
            "name": self.name,
            "scenario": self.source,
            "iteration_time_s": self.iteration_time_s,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "model_flops": self.model_flops,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "peak_flops_per_gpu": self.peak_flops_per_s,
            "num_gpus": self.num_gpus,
            "microbatches": self.microbatches,
            "wall_time_s": self.wall_time_s,
            "events": self.events,
            "flows": self.flows,
            "folding": self.folding,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "per_gpu": [_gpu_dict(g) for g in self.per_gpu],
            "bottlenecks": self.bottlenecks,
            "config": self.config,
            "notes": [note.to_dict() for note in self.notes],
        }
        if self.offload:  # absent without offload, as before it existed
            data["offload"] = [step.to_dict() for step in self.offload]
        if self.data_loading_s:  # absent without a data loader
            data["data_loading_s"] = self.data_loading_s
        return data


def _gpu_dict(g: GpuTimes) -> dict[str, Any]:
    return {
        "gpu": g.gpu, "rank": g.rank, "stage": g.stage, "replica": g.replica,
        "tp_rank": g.tp_rank, "compute_s": g.compute_s, "host_s": g.host_s,
        "communication_s": g.communication_s,
        "exposed_communication_s": g.exposed_communication_s, "bubble_s": g.bubble_s,
        "idle_s": g.idle_s, "peak_memory_bytes": g.peak_memory_bytes,
        "memory": g.memory.to_dict(),
    }


@dataclass(frozen=True, slots=True)
class JobRun:
    """One job of several sharing the cluster: its name, model, strategy and batch."""

    name: str
    model: ModelSpec
    parallel: ParallelConfig
    training: TrainingConfig


@dataclass(frozen=True, slots=True)
class RunSetup:
    """The typed objects a run was built from, and their resolved configuration.

    ``config`` is the resolved scenario (:meth:`scenarios.scenario.Scenario.resolved`),
    which the report keeps as its JSON.  ``jobs``: how many jobs share the cluster
    (scenarios.disruptions); with more than one, ``model`` / ``parallel`` / ``training``
    are the first job's, which set the headline figures.
    """

    model: ModelSpec
    parallel: ParallelConfig
    training: TrainingConfig
    gpu: GpuSpec
    config: dict[str, Any]
    jobs: int = 1
    job_runs: tuple[JobRun, ...] = ()
    cluster_gpus: int = 0  # the cluster's GPUs (0: as many as the run's)


def build_report(*, name: str, source: str | None, result: IterationResult,
                 setup: RunSetup, wall_time_s: float) -> Report:
    """A :class:`Report` from an iteration's result and the setup it is judged by: the
    batch and sequence of ``setup.training``, the peak FLOP/s of ``setup.gpu`` at its
    precision and the GPU's memory."""
    t = result.iteration_time_s
    num_gpus = len(result.per_gpu)
    flops_per_gpu = result.model_flops / t / num_gpus if t > 0 else 0.0
    training = setup.training
    global_batch = training.global_batch
    seq_len = seq_len_of(setup.model, training)
    peak_flops_per_s = setup.gpu.peak_flops(training.precision)
    tracer = result.simulation.tracer
    found = bottlenecks(result)
    if tracer.enabled:
        add_to_trace(tracer, result.critical_path, found)
    return Report(
        name=name, iteration_time_s=t,
        samples_per_s=global_batch / t if t > 0 else 0.0,
        tokens_per_s=global_batch * seq_len / t if t > 0 else 0.0,
        model_flops=result.model_flops, model_tflops_per_gpu=flops_per_gpu / 1e12,
        mfu=flops_per_gpu / peak_flops_per_s, peak_flops_per_s=peak_flops_per_s,
        num_gpus=num_gpus, microbatches=result.microbatches,
        wall_time_s=wall_time_s, events=result.events, flows=result.flows,
        gpu_memory_bytes=setup.gpu.memory_bytes, per_gpu=result.per_gpu, config=setup.config,
        source=source, tracer=tracer if tracer.enabled else None, bottlenecks=found,
        folding=result.folding, result=result,
        critical_path=result.critical_path, offload=result.offload,
        data_loading_s=result.data_loading_s,
        model=setup.model, parallel=setup.parallel, training=training, gpu=setup.gpu,
        jobs=setup.jobs, job_runs=setup.job_runs, cluster_gpus=setup.cluster_gpus)
