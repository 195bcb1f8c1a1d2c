"""A lower bound on one training iteration's time, and an estimate of it, without simulating.

The bound follows chains of work that the simulator (:mod:`workloads.iteration`) runs one
after another, and adds up a lower bound of each link of a chain:

* *compute* — a layer pass, the embedding and the loss take their cost-model time,
  scaled by the group's straggler factor, never below ``min(1, factors)``;
* *a transfer* — a collective or point-to-point call runs as flows that start after a
  latency and move their bytes at their max-min fair rate; a flow's rate is at most the
  capacity over the multiplicity of every link it holds, so a call takes at least
  ``latency + wire bytes · max over links (weight / capacity)`` of its coflow form
  (:func:`transfer_lower_bound_s`), which is also at most its step-by-step closed form
  (summing per-step maxima is at least the maximum of the sums): a lower bound at both
  fidelities, whatever else shares the links, and exactly the time the simulator gives a
  tensor-parallel call it folds into the compute.

The chains, for data-parallel replica 0 (every replica must end before the gradient-norm
meeting, so any one replica's chains bound the iteration):

1. a pass of a model chunk is its compute plus every blocking call inside it: the
   tensor-parallel collectives after each attention and MLP block (also in the recomputed
   forward with full recomputation, and those a selective one's ``moe`` or
   ``shared_experts`` runs again), the expert all-to-alls of MoE layers (not with
   ``parallelism.moe_overlap`` or ``fb_overlap``: then they run beside the compute; a MoE
   layer's MLP half runs at the slowest EP rank's pace,
   :mod:`workloads.specs.moe_routing`), and with ZeRO-3 each layer's parameter
   all-gather — the gathers run one after another on their stream from the pass's
   start and layer ``k`` waits for gather ``k``, so a pass takes at least
   ``max_k (Σ_{j≤k} gather_j + Σ_{j≥k} layer_j)`` (:func:`gathered_pass_s`), after the
   root unit's gather (embeddings, final norm, output layer), which a forward waits for
   before anything else — under a pipeline only each chunk's first forward gathers
   (parameters kept gathered: the stage's root and each layer), so a chunk's first
   forward has a bound of its own and its other passes none of the gathers;
2. stage ``s`` cannot start before the first micro-batch's forward passed the virtual
   stages before it (each pass, then its send to the next stage); from then on it runs all
   its passes, ``m`` micro-batches of each of its chunks (one forward of each the chunk's
   first), in sequence.  Its last pass, the backward of chunk 0 for the last micro-batch,
   also waits for the same pass of stage ``s + 1`` and the gradient's send from there.
   No backward starts before the first micro-batch's forward has passed every virtual
   stage (gpipe, 1f1b, interleaved: the last chunk runs its forwards in micro-batch
   order), so each stage's ``m`` backwards of every chunk also follow that ramp;
3. its data-parallel gradient buckets of that last pass are reduced in order on one
   stream: bucket ``k`` starts no earlier than the part of the pass before it is done, and
   the group reaches the gradient-norm meeting only after the last bucket is done (so
   after ``max_k (start_k + Σ_{j≥k} bucket_j)``); the first and last stage also
   all-reduce the tied embedding gradients first;
4. everyone meets for the gradient norm, then each group runs its optimizer step and,
   with ZeRO-1/2, all-gathers its stage's updated parameters;
5. apart from these chains, a link moves at most its capacity: a flow at rate ``r``
   holding it with weight ``w`` loads it with ``w·r`` and max-min sharing keeps the sum
   within the capacity, so the iteration lasts at least the bytes that the calls counted
   here put on a link over its capacity (counted: every data-parallel call, ZeRO-3's root
   gathers among them, every expert all-to-all, the pipeline sends of replica 0, and with
   ZeRO-3 every tensor-parallel call — distinct flows, a subset of all, so their bytes on
   a link are at most what it carries; a spine link shared by many tensor-parallel groups
   that cross nodes shows here.  Without ZeRO-3 the simulator may fold tensor-parallel
   calls into the compute as closed forms that load no link, so they are left out).

A call the simulator runs as one collective per tensor-parallel lane (data-parallel,
expert and tied-embedding calls) launches its lanes together and ends when all are done,
so it also takes at least the bytes its lanes put together on one link over that link's
capacity.

The bound is the largest chain, less a relative 1e-6 for the rounding of sums and of the
flow network's finish tolerance (1e-9 of a flow's bytes).  It is never above the
simulated iteration: with uniform stages and no network it is ``(m + pp − 1)·t`` for 1F1B
and GPipe and ``(m + (pp − 1)/v)·t`` interleaved.  The **estimate** adds the uncontended
data-parallel reduction to the compute-and-collectives critical path instead (a guess,
for ordering strategies, not a bound).  Every byte count comes from :mod:`workloads.cost.traffic`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import distsim_gpu.workloads.cost.traffic as traffic
import numpy as np
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.cost.bound_shape import Lanes, StrategyShape
from distsim_gpu.workloads.cost.compute import CostModel
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.tp_overlap import paired_blocks
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.moe_routing import moe_pace
from distsim_gpu.workloads.specs.recompute_modules import pass_communication
from distsim_gpu.workloads.strategy.expert_grid import expert_block
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from distsim_gpu.workloads.strategy.schedule import BIDIRECTIONAL, V_SCHEDULES

__all__ = ["IterationBound", "IterationBounds", "gathered_pass_s", "transfer_lower_bound_s"]

# Relative margin of the lower bound for the rounding of sums (module docstring).
BOUND_SLACK = 1e-6

# Bytes per link of a call: (link positions, bytes), for adding up with numpy.
_Loads = tuple[np.ndarray, np.ndarray]
_NO_LOADS: _Loads = (np.zeros(0, np.int64), np.zeros(0))


class IterationBound(NamedTuple):
    """A lower bound of one iteration's time and an estimate of it (seconds)."""

    lower_bound_s: float
    estimate_s: float


def gathered_pass_s(layers: Sequence[tuple[float, float]]) -> float:
    """A lower bound of a pass's layers, each ``(its own time, its parameter gather)``:
    layer ``k`` waits for the gathers up to its own, which run one after another from
    the pass's start (all zero without ZeRO-3: the sum of the layers)."""
    own = sum(t for t, _ in layers)
    if not any(g for _, g in layers):
        return own
    best, gathered, rest = own, 0.0, own
    for t, g in layers:
        gathered += g
        best = max(best, gathered + rest)
        rest -= t
    return best


def transfer_lower_bound_s(comm: Communicator, plan: CollectivePlan, size_bytes: float,
                           ) -> tuple[float, dict[Any, float]]:
    """The least time a call of ``plan`` at ``size_bytes`` can take under any sharing, and
    the bytes it moves over each link.

    As one coflow it moves ``W`` wire bytes after its latency, holding link ``l`` with
    weight ``w_l``; its max-min rate never exceeds ``capacity_l / w_l``, so it takes at
    least ``latency + W · max_l w_l / capacity_l``.  Step by step it is slower still (each
    step's bottleneck is at least its share of that maximum).  For a one-step plan this
    equals :meth:`~collectives.Communicator.time_s`.  Either way link ``l`` carries
    ``W · w_l`` bytes.
    """
    total, weights = plan.coflow(size_bytes)
    capacity = comm.capacity
    slowest = max((w / capacity[link] for link, w in weights.items()), default=0.0)
    return plan.latency_s + total * slowest, {link: total * w for link, w in weights.items()}


# --------------------------------------------------------------------------- one strategy


@dataclass(slots=True)
class _Tally:
    """How often each call runs in the iteration, for the link volume (chain 5).

    ``replica0``: calls of replica 0 by their lower-bound cache key; ``everyone``:
    ``(op, groups, size)`` of calls of every replica, one independent call per group.
    """

    replica0: dict[tuple[Any, ...], float] = field(default_factory=dict)
    everyone: dict[tuple[Any, ...], float] = field(default_factory=dict)

    def add(self, key: tuple[Any, ...], times: float) -> None:
        self.replica0[key] = self.replica0.get(key, 0.0) + times

    def add_everyone(self, key: tuple[Any, ...], times: float) -> None:
        self.everyone[key] = self.everyone.get(key, 0.0) + times


@dataclass(frozen=True, slots=True)
class _Layer:
    """One layer's terms: compute, blocking calls (estimate and bound), ZeRO-3 traffic."""

    fwd_s: float
    bwd_s: float  # with its recomputed forward
    calls_s: float  # estimate of the blocking calls of one pass
    calls_low_s: float  # their lower bound
    gather_s: float  # ZeRO-3: the parameter gather's estimate
    gather_low_s: float  # and its lower bound (in every forward)
    reduce_s: float  # ZeRO-3: the gradient reduce-scatter's estimate
    rerun_s: float = 0.0  # a selective recompute's calls in the backward (moe, shared_experts)
    rerun_low_s: float = 0.0  # their lower bound
    first_gather_low_s: float = 0.0  # the gather's bound in the chunk's first forward


@dataclass(slots=True)
class _Chunk:
    """One virtual stage's forward and backward pass: compute, the communication of the
    estimate, the lower bounds, and (chunk 0 of a stage) the last backward's gradient
    buckets as ``(bound of the pass before it, its own bound)``."""

    fwd_s: float = 0.0
    bwd_s: float = 0.0
    fwd_comm_s: float = 0.0
    bwd_comm_s: float = 0.0
    fwd_lower_s: float = 0.0
    bwd_lower_s: float = 0.0
    first_fwd_lower_s: float = 0.0  # the chunk's first forward (ZeRO-3's gathers in it)
    buckets: list[tuple[float, float]] = field(default_factory=list)


# --------------------------------------------------------------------------- the bound


class IterationBounds:
    """Lower bounds and estimates of an iteration's time (module docstring) for strategies
    of one model on one cluster, with caches shared between strategies.

    ``comm``: the collective parameters the simulation would use; ``stragglers``: GPU name
    -> compute slowdown factor (the fastest factor below 1 scales every compute term).
    """

    def __init__(self, topology: Topology, model: ModelSpec, costs: CostModel, *,
                 comm: CommParams | None = None,
                 stragglers: Mapping[str, float] | None = None) -> None:
        self.topology = topology
        self.model = model
        self.costs = costs
        self.comm = Communicator(Simulation(0), topology, comm or CommParams())
        self.speedup_factor = min([1.0, *(stragglers or {}).values()])
        self._layer_times: dict[tuple[Any, ...], float] = {}
        self._collective: dict[tuple[Any, ...], float] = {}
        # Per call: its lower bound and its bytes per link.
        self._lower: dict[tuple[Any, ...], tuple[float, _Loads]] = {}
        self._volumes: dict[tuple[Any, ...], _Loads] = {}
        self._link_pos = {link: i for i, link in enumerate(self.comm.capacity)}
        self._capacity = np.array(list(self.comm.capacity.values()), dtype=float)

    def bound(self, parallel: ParallelConfig, training: TrainingConfig, microbatches: int,
              *, everyone: bool = True) -> IterationBound:
        """The lower bound and estimate of one iteration with ``parallel`` and ``training``
        (``microbatches`` per pipeline, as :func:`~workloads.strategy.parallel.check_strategy`
        gives them).

        ``everyone=False`` leaves the calls of replicas other than 0 out of the link volume
        (chain 5): a weaker bound, ~3x cheaper for many replicas, for ranking strategies.
        """
        shape = StrategyShape.of(self.model, parallel, training, microbatches)
        tally = _Tally()
        chunks = [self._chunk(shape, vs, tally, everyone)
                  for vs in range(shape.virtual_stages)]
        last_end = self._last_pass_ends(shape, chunks, tally)
        arrive = self._meeting_arrivals(shape, chunks, last_end, tally)
        optimizer_s, finish_s, dp_comm_s = self._after_meeting(shape, tally)
        lower = max(max(arrive) + finish_s, self._busiest_link_s(tally)) * (1.0 - BOUND_SLACK)
        f = self.speedup_factor
        estimate = max(_stage_estimate_s(shape, chunks) * f + optimizer_s + dp_comm_s, lower)
        return IterationBound(lower, estimate)

    # ----------------------------------------------------------------- cached terms
    def _layer_time(self, pass_: str, layer: int, shape: StrategyShape) -> float:
        model, parallel = self.model, shape.parallel
        moe = model.is_moe_layer(layer)
        recompute = shape.training.recompute
        modules = shape.training.recompute_modules
        key = (pass_, moe, shape.training.micro_batch, shape.seq_len, parallel.tp,
               parallel.sequence_parallel, parallel.ep if moe else 1, recompute, modules,
               parallel.etp if moe else 1, model.attention_pair_fraction(layer, shape.seq_len))
        cached = self._layer_times.get(key)
        if cached is None:
            # The recompute mode matters to the recompute pass only (else the default, full).
            mode = recompute if pass_ == "recompute" else "full"
            shard = LayerShard(
                shape.training.micro_batch, shape.seq_len, tp=parallel.tp,
                sequence_parallel=parallel.sequence_parallel, ep=parallel.ep,
                layer_index=layer, recompute=mode, expert_tp=parallel.expert_tp,
                recompute_modules=modules)
            # The exchange is not known here: the cheaper of DeepEP's token copies (and its
            # FP8 cast) and Megatron-Core's all-to-all dispatcher's keeps a bound.
            deepep = moe and traffic.exchanges_by_deepep("deepep", parallel.ep)
            cached = min(self.costs.layer_time_s(pass_, model, replace(shard, deepep=d))
                         for d in {False, deepep})
            if moe:  # the MLP half at the slowest EP rank's pace, as the streams run it
                cached *= (1.0 + moe_pace(model.moe, experts=model.experts,
                                          top_k=model.top_k, ep=parallel.ep)) / 2
            self._layer_times[key] = cached
        return cached

    def _estimate(self, op: str, ranks: Sequence[int], size: float) -> float:
        """The uncontended time of one call (for the estimate)."""
        if len(ranks) < 2 or size <= 0:
            return 0.0
        key = (op, tuple(ranks), size)
        cached = self._collective.get(key)
        if cached is None:
            gpus = self.topology.gpus
            cached = self.comm.estimate_s(op, [gpus[r] for r in ranks], size)
            self._collective[key] = cached
        return cached

    def _call(self, op: str, lanes: Lanes, size: float) -> tuple[float, _Loads]:
        """A call the simulator runs as one collective per lane (``lanes``: rank tuples,
        one per tensor-parallel rank for data-parallel, expert and tied-embedding calls),
        all launched together and done when all are: a lower bound of its time (module
        doc) and the bytes it puts on each link."""
        key = (op, lanes, size)
        cached = self._lower.get(key)
        if cached is None:
            gpus = self.topology.gpus
            lower = 0.0
            loads: dict[Any, float] = {}
            for ranks in lanes:
                if len(ranks) < 2:
                    continue
                plan = self.comm.choose(op, [gpus[r] for r in ranks], size)
                lane_lower, lane_loads = transfer_lower_bound_s(self.comm, plan, size)
                lower = max(lower, lane_lower)
                for link, carried in lane_loads.items():
                    loads[link] = loads.get(link, 0.0) + carried
            capacity = self.comm.capacity
            lower = max(lower, max((carried / capacity[link]
                                    for link, carried in loads.items()), default=0.0))
            cached = self._lower[key] = (lower, self._arrays(loads))
        return cached

    def _counted_call(self, tally: _Tally, op: str, lanes: Lanes, size: float,
                      times: float = 1.0) -> float:
        """:meth:`_call`'s bound, the call counted ``times`` on the link volume."""
        tally.add((op, lanes, size), times)
        return self._call(op, lanes, size)[0]

    def _arrays(self, loads: Mapping[Any, float]) -> _Loads:
        pos = self._link_pos
        return (np.fromiter((pos[link] for link in loads), np.int64, len(loads)),
                np.fromiter(loads.values(), float, len(loads)))

    def _everyone(self, op: str, groups: Lanes, size: float) -> _Loads:
        """The bytes per link of independent calls, one per group of ranks."""
        key = ("everyone", op, groups, size)
        cached = self._volumes.get(key)
        if cached is None:
            gpus = self.topology.gpus
            loads: dict[Any, float] = {}
            for group in groups:
                if len(group) < 2:
                    continue
                plan = self.comm.choose(op, [gpus[r] for r in group], size)
                for link, carried in transfer_lower_bound_s(self.comm, plan, size)[1].items():
                    loads[link] = loads.get(link, 0.0) + carried
            cached = self._volumes[key] = self._arrays(loads)
        return cached

    def _send(self, src: Sequence[int], dst: Sequence[int], size: float,
              ) -> tuple[float, _Loads]:
        """A pipeline send between two rank groups, lane by lane: as :meth:`_call`."""
        if tuple(src) == tuple(dst):
            return 0.0, _NO_LOADS
        key = ("pairs", tuple(src), tuple(dst), size)
        cached = self._lower.get(key)
        if cached is None:
            gpus = self.topology.gpus
            plan = self.comm.pairs_plan([(gpus[a], gpus[b]) for a, b in zip(src, dst)], size)
            lower, loads = transfer_lower_bound_s(self.comm, plan, size)
            cached = self._lower[key] = (lower, self._arrays(loads))
        return cached

    # ----------------------------------------------------------------- chain 1: passes
    def _chunk(self, shape: StrategyShape, vs: int, tally: _Tally, everyone: bool) -> _Chunk:
        """Virtual stage ``vs``'s passes (chain 1) and, with data parallelism, the
        gradient reductions of its last backward (chain 3)."""
        model, costs, f = self.model, self.costs, self.speedup_factor
        head_f = head_b = tail_f = tail_b = 0.0  # embedding and loss, per pass
        if vs in shape.ends[0]:
            head_f = costs.embedding_time_s("fwd", model, **shape.shard)
            tail_b = costs.embedding_time_s("bwd", model, **shape.shard)
        if vs in shape.ends[1]:
            tail_f = costs.loss_time_s("fwd", model, **shape.shard)
            head_b = costs.loss_time_s("bwd", model, **shape.shard)
        layers = self._chunk_layers(shape, vs, tally, everyone)
        chunk = _Chunk()
        chunk.fwd_s += head_f + tail_f
        chunk.bwd_s += head_b + tail_b
        for layer in layers:
            chunk.fwd_s += layer.fwd_s
            chunk.bwd_s += layer.bwd_s
            chunk.fwd_comm_s += layer.calls_s
            chunk.bwd_comm_s += layer.calls_s * shape.backward_passes + layer.rerun_s
            if shape.sharded and shape.parallel.dp_cp > 1:
                chunk.fwd_comm_s += layer.gather_s
                chunk.bwd_comm_s += layer.reduce_s + (
                    layer.gather_s if traffic.reshards_after_forward(shape.parallel) else 0.0)
        passes_b = shape.backward_passes
        regather = traffic.reshards_after_forward(shape.parallel)  # else none in a backward
        backward = [(layer.bwd_s * f + layer.calls_low_s * passes_b + layer.rerun_low_s,
                     layer.gather_low_s if regather else 0.0) for layer in reversed(layers)]
        # ZeRO-3's root unit is gathered before anything else of a forward: kept gathered
        # (a pipeline's stages) by the chunk's first forward only, else by every forward.
        size, times = shape.root_gather(self.model, vs)
        root = (self._counted_call(tally, "all_gather", shape.dp_lanes[shape.stage(vs)], size,
                                   times) if size else 0.0)
        kept = traffic.keeps_params_gathered(shape.parallel)
        edges = (head_f + tail_f) * f
        chunk.fwd_lower_s = edges + (0.0 if kept else root) + gathered_pass_s(
            [(layer.fwd_s * f + layer.calls_low_s, layer.gather_low_s) for layer in layers])
        chunk.first_fwd_lower_s = edges + root + gathered_pass_s(
            [(layer.fwd_s * f + layer.calls_low_s, layer.first_gather_low_s)
             for layer in layers])
        chunk.bwd_lower_s = (head_b + tail_b) * f + gathered_pass_s(backward)
        if shape.parallel.dp_cp > 1:
            chunk.buckets = self._last_reductions(shape, vs, backward, head_b * f,
                                                  chunk.bwd_lower_s, tally)
        return chunk

    def _chunk_layers(self, shape: StrategyShape, vs: int, tally: _Tally, everyone: bool,
                      ) -> list[_Layer]:
        """The layers of virtual stage ``vs``, their blocking calls counted in ``tally``."""
        model, parallel, placement = self.model, shape.parallel, shape.placement
        stage, m = shape.stage(vs), shape.chunk_mb
        tp_ranks, tp_lane = shape.tp_ranks[stage], (shape.tp_ranks[stage],)
        # The stage's expert groups, and the first block's (the simulator's unit).
        ep_all = tuple(placement.ep_groups(stage)) if parallel.ep > 1 else ()
        ep_lanes = ep_all[:len(expert_block(parallel.expert_grid())[1])] if ep_all else ()
        if everyone:
            tp_all = tuple(placement.tp_group(d, stage) for d in range(parallel.dp_cp))
        else:
            ep_all, tp_all = ep_lanes, (tp_ranks,)
        tp_call = sum(self._estimate(kind, tp_ranks, shape.tp_size(kind))
                      for kind in shape.tp_kinds)
        tp_low = sum(self._call(kind, tp_lane, shape.tp_size(kind))[0]
                     for kind in shape.tp_kinds)
        # Each kind runs after every block, in each pass of every micro-batch.
        calls_per_layer = 2 * m * (1 + shape.backward_passes)
        gathered = shape.sharded and parallel.dp_cp > 1
        hidden = tp_call - self._exposed_tp_chunks(shape, tp_ranks)
        layers = []
        for layer in range(*shape.chunks[vs]):
            calls, calls_low = 2 * tp_call, 2 * tp_low
            # tp_comm_overlap: a paired block's collectives run against its GEMMs, whose
            # chunks are never faster than the whole GEMM, so the compute bounds the pair
            # (none of its calls is a link of the chain); the estimate keeps the chunk of
            # each that the pipeline leaves exposed (workloads.cost.tp_overlap).
            paired = paired_blocks(model, parallel, layer)
            calls, calls_low = calls - paired * hidden, calls_low - paired * tp_low
            if gathered:  # else the simulator may fold them (module doc, chain 5)
                for kind in shape.tp_kinds:
                    tally.add_everyone((kind, tp_all, shape.tp_size(kind)), calls_per_layer)
            if model.is_moe_layer(layer) and parallel.ep > 1:
                # The MLP block's TP calls carry the routed tokens' bytes (or none): its
                # time scaled with them, the lower bound's by no more than the dense one's.
                scale = traffic.moe_tp_scale(model, parallel)
                calls += (scale - 1) * tp_call
                calls_low += (min(scale, 1.0) - 1) * tp_low
                a2a = 2 * self._estimate("alltoall", ep_lanes[0],
                                         shape.a2a_bytes)
                if parallel.moe_overlap or parallel.fb_overlap:
                    # Half micro-batches' (or paired passes') all-to-alls run beside
                    # compute: none is a link of the chain; the estimate takes a quarter
                    # of them as exposed (the last half's combine).
                    calls += a2a / 4
                else:
                    calls += a2a
                    calls_low += 2 * self._call("alltoall", ep_lanes, shape.a2a_bytes)[0]
                tally.add_everyone(("alltoall", ep_all, shape.a2a_bytes), calls_per_layer)
            terms = self._layer_terms(shape, layer, stage, calls, calls_low, gathered, tally)
            rerun = self._rerun_calls(shape, layer, (tp_call, tp_low), ep_lanes, ep_all, tally)
            layers.append(replace(terms, rerun_s=rerun[0], rerun_low_s=rerun[1]))
        return layers

    def _exposed_tp_chunks(self, shape: StrategyShape, tp_ranks: Any) -> float:
        """``tp_comm_overlap``: the estimate of one block's TP collectives left exposed
        by their pipelines, the first chunk of the gather (``tp`` chunks) and the last of
        the forward's scatter (``tp_comm_overlap_splits``), taken for both passes (a
        backward's scatter, beside the weight gradient, is mostly hidden); 0 without."""
        parallel = shape.parallel
        if not parallel.tp_comm_overlap:
            return 0.0
        chunks = {"all_gather": parallel.tp, "reduce_scatter": parallel.tp_comm_overlap_splits}
        return sum(self._estimate(kind, tp_ranks, shape.tp_size(kind) / chunks[kind])
                   for kind in shape.tp_kinds)

    def _rerun_calls(self, shape: StrategyShape, layer: int, tp: tuple[float, float],
                     ep_lanes: tuple[Any, ...], ep_all: tuple[Any, ...], tally: _Tally,
                     ) -> tuple[float, float]:
        """The calls a selective recompute runs again in layer ``layer``'s backward, as
        ``(estimate, lower bound)`` (``tp``: one pass's TP calls of a block, likewise):
        a recomputed MoE layer (``moe``) its two all-to-alls, counted in ``tally``, and
        its MLP block's TP calls; recomputed shared experts a dense MLP's TP calls."""
        model, parallel, training = self.model, shape.parallel, shape.training
        rerun = pass_communication("recompute", training.recompute,
                                   training.recompute_modules, model.is_moe_layer(layer))
        if rerun.moe:
            scale = traffic.moe_tp_scale(model, parallel) if parallel.ep > 1 else 1.0
            estimate, low = scale * tp[0], min(scale, 1.0) * tp[1]
            if parallel.ep > 1:
                estimate += 2 * self._estimate("alltoall", ep_lanes[0], shape.a2a_bytes)
                low += 2 * self._call("alltoall", ep_lanes, shape.a2a_bytes)[0]
                tally.add_everyone(("alltoall", ep_all, shape.a2a_bytes),
                                   2 * shape.chunk_mb)
            return estimate, low
        if rerun.shared_experts and model.shared_experts:
            return tp
        return 0.0, 0.0

    def _layer_terms(self, shape: StrategyShape, layer: int, stage: int, calls: float,
                     calls_low: float, gathered: bool, tally: _Tally) -> _Layer:
        """One layer's terms; with ZeRO-3 its gathers and reductions counted in ``tally``."""
        fwd = self._layer_time("fwd", layer, shape)
        bwd = self._layer_time("bwd", layer, shape)
        if shape.training.recompute != "none":
            bwd += self._layer_time("recompute", layer, shape)
        gather = gather_low = reduce = 0.0
        if gathered:
            grads = traffic.layer_shard_grad_bytes(self.model, layer, shape.parallel)
            params = traffic.layer_gather_bytes(self.model, layer, shape.parallel,
                                                shape.training)
            dp_ranks, lanes, m = shape.dp_ranks[stage], shape.dp_lanes[stage], shape.chunk_mb
            gather = self._estimate("all_gather", dp_ranks, params)
            reduce = self._estimate("reduce_scatter", dp_ranks, grads)
            if traffic.keeps_params_gathered(shape.parallel):
                # Gathered by the first forward only (no pass but one waits for it) and
                # reduced by the last backward only: once each on the links; the
                # estimate's per-pass terms take 1/m of them.
                first = self._counted_call(tally, "all_gather", lanes, params)
                self._counted_call(tally, "reduce_scatter", lanes, grads)
                return _Layer(fwd, bwd, calls, calls_low, gather / m, 0.0, reduce / m,
                              first_gather_low_s=first)
            # The backward gathers again unless the forward's gathers are kept.
            passes = 2 if traffic.reshards_after_forward(shape.parallel) else 1
            gather_low = self._counted_call(tally, "all_gather", lanes, params, passes * m)
            self._counted_call(tally, "reduce_scatter", lanes, grads, m)
        return _Layer(fwd, bwd, calls, calls_low, gather, gather_low, reduce,
                      first_gather_low_s=gather_low)

    # ----------------------------------------------------------------- chain 3: DP tail
    def _last_reductions(self, shape: StrategyShape, vs: int,
                         backward: Sequence[tuple[float, float]], head_s: float,
                         pass_s: float, tally: _Tally) -> list[tuple[float, float]]:
        """The last micro-batch's gradient reductions of virtual stage ``vs``'s backward
        (``backward``: its layers' bounds in backward order; ``head_s``: the loss's
        backward before them; ``pass_s``: the whole pass), each as ``(bound of the pass
        before it, its own bound)``: with ZeRO-3 one reduce-scatter per layer (counted
        with the layer), else the buckets as the simulator forms them (ZeRO-2 reduces
        every micro-batch's alike: counted ``m`` times on the links)."""
        parallel = shape.parallel
        lanes = shape.dp_lanes[shape.stage(vs)]
        first, stop = shape.chunks[vs]
        order = range(stop - 1, first - 1, -1)
        done = [head_s]
        for t, _ in backward:
            done.append(done[-1] + t)
        if shape.sharded:
            # Kept gathered (a pipeline's stages): reduced after the whole pass, one at a
            # time.  (A per-operator plan's replicated buckets are left out: still a bound.)
            kept = traffic.keeps_params_gathered(parallel)
            return [(pass_s if kept else done[k + 1], self._call("reduce_scatter", lanes,
                                            traffic.layer_shard_grad_bytes(
                                                self.model, layer, parallel))[0])
                    for k, layer in enumerate(order)]
        # ZeRO-2 reduces every micro-batch's buckets: all of them on the links' volume.
        times = shape.chunk_mb if traffic.reduces_every_microbatch(parallel) else 1.0
        return [(pass_s if bucket.after_layers is None else done[bucket.after_layers],
                 self._counted_call(tally, shape.grad_op, lanes, bucket.size_bytes, times))
                for bucket in traffic.gradient_buckets(
                    self.model, parallel, order, first_chunk=vs in shape.ends[0],
                    head_bytes=traffic.head_grad_bytes(self.model, parallel, vs),
                    bucketed=traffic.chunk_is_bucketed(parallel, vs))]

    # ----------------------------------------------------------------- chain 2: pipeline
    def _pipeline_sends(self, shape: StrategyShape, tally: _Tally) -> list[float]:
        """Per virtual stage, the lower bound of its forward send to the next one; both
        directions counted on the link volume for every micro-batch."""
        p2p, m = shape.p2p_bytes, shape.chunk_mb
        send_f = [0.0] * shape.virtual_stages
        for j in range(shape.virtual_stages - 1):
            if j in shape.ends[1] or shape.stage(j) == shape.stage(j + 1):
                continue  # no micro-batch goes on, or it stays on the stage (a V's turn)
            here, there = shape.tp_ranks[shape.stage(j)], shape.tp_ranks[shape.stage(j + 1)]
            send_f[j] = self._send(here, there, p2p)[0]
            self._send(there, here, p2p)  # the gradient's way back
            tally.add(("pairs", here, there, p2p), m)
            tally.add(("pairs", there, here, p2p), m)
        return send_f

    def _last_pass_ends(self, shape: StrategyShape, chunks: Sequence[_Chunk], tally: _Tally,
                        ) -> list[float]:
        """Per stage, the bound of when its last pass (chunk 0's last backward) ends.
        Under DualPipe a stage may start with either direction's passes; a two-chunk
        schedule may end with a split backward's weight half, after the input half the
        stage before waited for: there only the stage's own work and ramp count."""
        pp, m = shape.parallel.pp, shape.chunk_mb
        send_f = self._pipeline_sends(shape, tally)
        one_way = shape.parallel.schedule not in BIDIRECTIONAL
        chained = shape.parallel.schedule not in V_SCHEDULES
        first_start = [0.0] * pp
        for s in range(1, pp if one_way else 0):  # micro-batch 0: each chunk's first forward
            first_start[s] = (first_start[s - 1] + chunks[s - 1].first_fwd_lower_s
                              + send_f[s - 1])
        last_end = [0.0] * pp
        # Kept gathered (FSDP under a pipeline): the last gradient a stage sends waits for
        # its chunk 0's reductions, one after another (workloads.iteration.param_shards).
        kept = traffic.keeps_params_gathered(shape.parallel)
        held = [sum(r for _, r in chunks[s].buckets) if kept else 0.0 for s in range(pp)]
        # Micro-batch 0's forward through every chunk (each chunk's first) ends before any
        # backward starts: the last chunk runs its forwards in micro-batch order.
        through = sum(c.first_fwd_lower_s for c in chunks) + sum(send_f) if chained else 0.0
        for s in reversed(range(pp)):
            # m forwards and backwards of each chunk, one of the forwards its first.
            last_end[s] = max(first_start[s] + sum(
                m * (chunks[j].fwd_lower_s + chunks[j].bwd_lower_s)
                + chunks[j].first_fwd_lower_s - chunks[j].fwd_lower_s for j in shape.own(s)),
                through + m * sum(chunks[j].bwd_lower_s for j in shape.own(s)))
            if s + 1 < pp and chained:
                gradient = self._send(shape.tp_ranks[s + 1], shape.tp_ranks[s],
                                      shape.p2p_bytes)[0]
                last_end[s] = max(last_end[s], last_end[s + 1] + held[s + 1] + gradient
                                  + chunks[s].bwd_lower_s)
        return last_end

    def _meeting_arrivals(self, shape: StrategyShape, chunks: Sequence[_Chunk],
                          last_end: Sequence[float], tally: _Tally) -> list[float]:
        """Per stage, when it reaches the gradient-norm meeting: after its last pass, its
        gradient buckets (chain 3) and the tied-embedding all-reduce."""
        arrive = []
        for s in range(shape.parallel.pp):
            start = last_end[s] - chunks[s].bwd_lower_s
            reduced, tail = last_end[s], 0.0
            for done, reduction in reversed(chunks[s].buckets):
                tail += reduction
                reduced = max(reduced, start + done + tail)
            arrive.append(reduced)
        entries, exits = ({shape.stage(vs) for vs in ends} for ends in shape.ends)
        if entries != exits and self.model.tied_embeddings:  # not on one stage (a V)
            size = traffic.word_embedding_grad_bytes(self.model, shape.parallel)
            lanes = tuple(zip(shape.tp_ranks[0], shape.tp_ranks[-1]))
            tied = max(arrive[0], arrive[-1]) + self._counted_call(tally, "all_reduce",
                                                                   lanes, size)
            arrive[0] = arrive[-1] = tied
        return arrive

    # ----------------------------------------------------------------- chain 4: the step
    def _after_meeting(self, shape: StrategyShape, tally: _Tally) -> tuple[float, float, float]:
        """``(optimizer_s, finish_s, dp_comm_s)``: the longest optimizer step, the bound
        of the longest step and ZeRO-1/2 gather after the meeting, and the uncontended
        data-parallel reduction of a whole stage (for the estimate)."""
        model, parallel, training = self.model, shape.parallel, shape.training
        dp, f = parallel.dp_cp, self.speedup_factor
        optimizer = finish = dp_comm = 0.0
        for s in range(parallel.pp):
            step = self.costs.optimizer_step_time_s(traffic.optimizer_params(model, parallel, s))
            optimizer = max(optimizer, step)
            gather_low = 0.0
            if parallel.zero in (1, 2) and dp > 1:
                gather_low = self._counted_call(
                    tally, "all_gather", shape.dp_lanes[s],
                    traffic.stage_param_bytes(model, parallel, training, s))
            finish = max(finish, step * f + gather_low)
            if not shape.sharded and dp > 1:
                t = self._estimate(shape.grad_op, shape.dp_ranks[s],
                                   traffic.stage_grad_bytes(model, parallel, s))
                if traffic.reduces_every_microbatch(parallel):
                    t *= shape.chunk_mb
                if parallel.zero >= 1:
                    t += self._estimate("all_gather", shape.dp_ranks[s],
                                        traffic.stage_param_bytes(model, parallel, training, s))
                dp_comm = max(dp_comm, t)
        return optimizer, finish, dp_comm

    # ----------------------------------------------------------------- chain 5: links
    def _busiest_link_s(self, tally: _Tally) -> float:
        """The most bytes the counted calls put on one link, over its capacity."""
        where: list[np.ndarray] = []
        carried: list[np.ndarray] = []
        for key, times in tally.replica0.items():
            if key in self._lower:
                links, loads = self._lower[key][1]
                where.append(links)
                carried.append(loads * times)
        for (op, groups, size), times in tally.everyone.items():
            links, loads = self._everyone(op, groups, size)
            where.append(links)
            carried.append(loads * times)
        if not where:
            return 0.0
        volume = np.bincount(np.concatenate(where), weights=np.concatenate(carried),
                             minlength=self._capacity.size)
        return float((volume / self._capacity).max())


def _stage_estimate_s(shape: StrategyShape, chunks: Sequence[_Chunk]) -> float:
    """The compute-and-collectives critical path of the slowest stage: the ramp of the
    stages before it, then ``m`` micro-batches of its chunks' passes."""
    pp, m = shape.parallel.pp, shape.chunk_mb
    worst = 0.0
    for s in range(pp):
        own = shape.own(s)
        work = sum(chunks[j].fwd_s + chunks[j].bwd_s for j in own)
        ramp = sum(chunks[j].fwd_s + chunks[j].bwd_s for j in range(s))
        work += sum(chunks[j].fwd_comm_s + chunks[j].bwd_comm_s for j in own)
        ramp += sum(chunks[j].fwd_comm_s + chunks[j].bwd_comm_s for j in range(s))
        worst = max(worst, ramp + m * work)
    return worst
