"""The shape of a parallel strategy as an iteration bound reads it
(:mod:`workloads.cost.bounds`): its degrees, message sizes, rank groups and where its
pipeline's chunks sit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import distsim_gpu.workloads.cost.traffic as traffic
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    chunk_layers,
)
from distsim_gpu.workloads.strategy.schedule import (
    chunk_microbatches,
    route_ends,
    stage_of,
    virtual_stage,
)
from distsim_gpu.workloads.strategy.sharding import shard_sets

__all__ = ["Lanes", "StrategyShape"]

#: Communicators as tuples of global ranks.
Lanes = tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class StrategyShape:
    """What one bound needs of a strategy: degrees, message sizes and rank groups."""

    parallel: ParallelConfig
    training: TrainingConfig
    microbatches: int
    seq_len: int
    placement: Placement
    chunks: list[tuple[int, int]]
    tp_bytes: float
    p2p_bytes: float
    a2a_bytes: float
    grad_op: str
    tp_kinds: tuple[str, ...]
    tp_ranks: list[tuple[int, ...]]  # stage -> replica 0's tensor-parallel group
    dp_ranks: list[tuple[int, ...]]  # stage -> tensor rank 0's data-parallel group
    dp_lanes: list[Lanes]  # stage -> its data-parallel groups, one per tensor rank

    def tp_size(self, kind: str) -> float:
        """Bytes of one TP collective of ``kind``: an FP8 run's all-gathers at the FP8
        cast's half, which a stack may or may not gather (a bound must not exceed)."""
        if kind == "all_gather" and self.training.precision == "fp8":
            return self.tp_bytes / 2
        return self.tp_bytes

    def root_gather(self, model: ModelSpec, vs: int) -> tuple[float, float]:
        """ZeRO-3/FSDP's root unit (what no layer holds: embeddings, final norm, output
        layer) that a forward of virtual stage ``vs`` gathers before anything else, as
        ``(bytes, times an iteration)``: kept gathered (a pipeline's stages) the stage's
        root, by the first forward of its entry or exit chunk; else the model's, by every
        forward of the entry chunk (``param_shards._gather_stage_root``, ``_gather_root``).
        ``(0, 0)`` for none, and with a per-operator plan (left out: a lower bound)."""
        parallel, training = self.parallel, self.training
        kept = traffic.keeps_params_gathered(parallel)
        if (not self.sharded or parallel.dp_cp == 1 or parallel.operator_sharding is not None
                or not (vs in self.ends[0] or (kept and vs in self.ends[1]))):
            return 0.0, 0.0
        stage = self.stage(vs)
        whole = traffic.stage_param_bytes(model, parallel, training, stage)
        size = whole - sum(traffic.layer_gather_bytes(model, layer, parallel, training)
                           for j in (self.own(stage) if kept else [vs])
                           for layer in range(*self.chunks[j]))
        if size <= 1e-9 * whole:  # a middle stage's: rounding is no gather
            return 0.0, 0.0
        return size, 1.0 if kept else float(self.chunk_mb)

    @classmethod
    def of(cls, model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
           microbatches: int) -> StrategyShape:
        pp, tp = parallel.pp, parallel.tp
        placement = Placement(parallel)
        # A 2-D/2.5-D/3-D mesh (workloads.strategy.tp_nd) splits the element-wise work as sequence
        # parallelism does; its sub-group collectives are left out, which keeps a bound.
        mesh = parallel.tp_mode != "1d"
        tp_kinds = () if mesh else traffic.tp_collective_kinds(parallel)
        if mesh:
            parallel = replace(parallel, sequence_parallel=True)
        # A context-parallel rank's s/cp tokens: its layers and messages.  Its ring and
        # the cp - 1 further attention blocks are left out, which keeps a lower bound.
        local = traffic.rank_training(model, parallel, training)
        sets = shard_sets(parallel)
        return cls(
            parallel=parallel, training=training, microbatches=microbatches,
            seq_len=traffic.seq_len_of(model, local), placement=placement,
            chunks=chunk_layers(model.layers, pp, parallel.interleave, parallel.partition,
                                parallel.schedule),
            tp_bytes=traffic.tp_message_bytes(model, local),
            p2p_bytes=traffic.pipeline_message_bytes(model, parallel, local),
            # Both expert all-to-alls at the smaller of their sizes (DeepEP's FP8 dispatch
            # is smaller than its combine), which keeps a lower bound.
            a2a_bytes=traffic.dispatch_bytes(model, parallel, local, "deepep"),
            grad_op=traffic.gradient_reduce_op(parallel),
            tp_kinds=tp_kinds,
            tp_ranks=[placement.tp_group(0, s) for s in range(pp)],
            # HSDP: ZeRO-3's calls run in each shard group (its replicate groups' all-reduce
            # is left out, which keeps a lower bound).
            dp_ranks=[tuple(placement.dp_group(0, s)[r] for r in sets[0]) for s in range(pp)],
            dp_lanes=[tuple(tuple(placement.dp_group(t, s)[r] for r in members)
                            for members in sets for t in range(tp)) for s in range(pp)])

    @property
    def virtual_stages(self) -> int:
        return len(self.chunks)

    @property
    def chunk_mb(self) -> int:
        """Micro-batches each chunk runs (half of them each way under DualPipe)."""
        return chunk_microbatches(self.parallel.schedule, self.microbatches)

    @property
    def ends(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Where micro-batches enter and leave (virtual stages)."""
        p = self.parallel
        return route_ends(p.schedule, p.pp, p.interleave)

    def stage(self, vs: int) -> int:
        """The stage holding virtual stage ``vs``."""
        return stage_of(vs, self.parallel.pp, self.parallel.schedule)

    def own(self, stage: int) -> list[int]:
        """The virtual stages ``stage`` holds."""
        p = self.parallel
        return [virtual_stage(stage, c, p.pp, p.schedule) for c in range(p.interleave)]

    @property
    def sharded(self) -> bool:
        return traffic.gathers_layer_params(self.parallel)

    @property
    def backward_passes(self) -> int:
        """Passes of a layer's blocking calls in its backward: two with full recompute
        (the recomputed forward's and the backward's)."""
        return 2 if self.training.recompute == "full" else 1

    @property
    def shard(self) -> dict[str, Any]:
        """The cost model's shard arguments."""
        return {"micro_batch": self.training.micro_batch, "seq_len": self.seq_len,
                "tp": self.parallel.tp, "sequence_parallel": self.parallel.sequence_parallel}
