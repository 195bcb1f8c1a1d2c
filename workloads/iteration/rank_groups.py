"""An iteration's rank groups, made and checked before it runs.

A rank group is the ``tp`` GPUs of one pipeline stage of one replica
(:class:`~workloads.iteration.timeline.RankGroup`): :func:`make_group` finds its GPUs and
its pace (its slowest GPU's slowdown; each member's share of it), :func:`stage_memory`
what each of a stage's GPUs holds; :func:`check_stragglers` and :func:`check_memory`
reject a spec that names unknown GPUs or does not fit; :func:`tensor_lanes` and
:func:`call_lanes` say which of a call's GPUs form each of its communicators.
"""

from __future__ import annotations

from distsim_gpu.simcore.errors import ConfigError, closest
from distsim_gpu.workloads.cost.compute import activation_storage
from distsim_gpu.workloads.cost.memory import MemoryBreakdown, memory_of_strategy
from distsim_gpu.workloads.iteration.records import IterationSpec
from distsim_gpu.workloads.iteration.timeline import RankGroup
from distsim_gpu.workloads.strategy.expert_grid import BlockLanes
from distsim_gpu.workloads.strategy.parallel import Placement

__all__ = ["call_lanes", "check_memory", "check_stragglers", "make_group", "stage_memory",
           "tensor_lanes"]


def check_stragglers(spec: IterationSpec) -> None:
    gpus = spec.topology.gpus
    for gpu, factor in spec.stragglers.items():
        if gpu not in gpus:  # an unknown GPU is an error, not a silent no-op
            raise ConfigError(f"no GPU named {gpu!r} in the cluster",
                              key=f"stragglers.{gpu}", source=spec.source,
                              hint=closest(str(gpu), gpus))
        if (isinstance(factor, bool) or not isinstance(factor, (int, float))
                or not factor > 0):
            raise ConfigError(f"a slowdown factor must be a positive number, got "
                              f"{factor!r}", key=f"stragglers.{gpu}", source=spec.source,
                              hint="e.g. 1.2 for 20 % slower compute")


def make_group(spec: IterationSpec, placement: Placement, stage: int,
                replica: int) -> RankGroup:
    gpus_all = spec.topology.gpus
    gpus = tuple(gpus_all[r] for r in placement.tp_group(replica, stage))
    factors = [spec.stragglers.get(g, 1.0) for g in gpus]
    slowdown = max(factors, default=1.0)
    # Each member's share of the group's compute: a faster one waits out the rest.  Any
    # group may stand for one that has one (folded), so all record their compute spans.
    return RankGroup(stage, replica, gpus, slowdown, tuple(f / slowdown for f in factors),
                     split=bool(spec.stragglers))


def stage_memory(spec: IterationSpec, stage: int, seq_len: int,
                  microbatches: int) -> MemoryBreakdown:
    return memory_of_strategy(spec.model, spec.parallel, spec.training, seq_len=seq_len,
                              microbatches=microbatches, stage=stage,
                              **activation_storage(spec.costs))


def check_memory(spec: IterationSpec, memory: list[MemoryBreakdown],
                  groups: list[list[RankGroup]]) -> None:
    capacity = spec.gpu.memory_bytes
    for stage, mem in enumerate(memory):
        if mem.total_bytes > capacity:
            gpu = groups[stage][0].gpus[0]
            gib = 2.0**30
            raise ConfigError(
                f"out of memory: {gpu} (pipeline stage {stage}) needs "
                f"{mem.total_bytes / gib:.1f} GiB of the {capacity / gib:.1f} GiB "
                f"its GPU ({spec.gpu.name}) has — weights {mem.weights_bytes / gib:.1f}, "
                f"gradients {mem.gradients_bytes / gib:.1f}, optimizer "
                f"{mem.optimizer_bytes / gib:.1f}, activations "
                f"{mem.activations_bytes / gib:.1f} GiB", source=spec.source,
                hint="more tensor/pipeline parallelism, ZeRO, recompute, a smaller "
                "micro-batch, offloading the optimizer (parallelism.offload), or "
                "--allow-oom (simulation.allow_oom: true) to simulate anyway")


def tensor_lanes(members: list[RankGroup], tp: int) -> list[list[str]]:
    """Per tensor-parallel rank, the GPUs of ``members`` (one collective per lane)."""
    return [[member.gpus[t] for member in members] for t in range(tp)]


def stage_lanes(row: list[RankGroup], tp: int,
                sets: tuple[tuple[int, ...], ...]) -> list[list[str]]:
    """A stage-wide call's communicators: per replica set of ``row`` (a stage's rank
    groups; :func:`~workloads.strategy.dimensions.stage_sets`) and tensor rank, its GPUs."""
    return [[row[r].gpus[t] for r in members] for members in sets for t in range(tp)]


def call_lanes(images: list[list[RankGroup]], layout: BlockLanes | None,
               tp: int) -> tuple[list[list[str]], int]:
    """The communicators of a call among ``images[0]`` (one collective each) and, folded,
    among the other images after them; and how many are the first's.  With a block
    ``layout`` (:attr:`~workloads.strategy.dimensions.Peering.BLOCK`: Megatron-Core's
    expert groups may cross tensor ranks) its lanes; else one per tensor rank."""
    if layout is None:
        return [lane for image in images for lane in tensor_lanes(image, tp)], tp
    lanes = [[image[r].gpus[t] for r, t in lane] for image in images for lane in layout]
    return lanes, len(layout)
