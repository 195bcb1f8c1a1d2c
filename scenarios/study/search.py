"""Strategy search: the fastest parallel strategies for a scenario's model on its cluster.

``distsim search SCENARIO --out DIR`` enumerates strategies (tensor, pipeline, data and
expert parallel degrees, micro-batch, pipeline schedule, ZeRO stage, activation
recomputation, sequence parallelism, rank placement) at the scenario's global batch,
prunes what cannot run or cannot win, simulates the rest and reports the best ``--top``.

**Enumeration** (each axis can be restricted with ``space``; the defaults in brackets):

* ``tp`` divides the GPUs per node and the attention heads [all such];
* ``pp``: with ``partition: uniform`` a divisor of the layers, with ``embedding`` any
  ``pp`` ≤ layers [all such]; ``tp·pp`` must divide the GPU count, ``dp = GPUs/(tp·pp)``;
* ``ep`` (MoE models only) divides the experts and ``dp`` [all such]; 1 for dense models;
* ``micro_batch`` divides ``global_batch/dp`` [1, 2, 4, 8];
* ``schedule`` [1f1b, gpipe, interleaved]; interleaved only with ``pp`` ≥ 2, once per
  ``interleave`` [2, 4];
* ``zero`` [0, 1, 3]: ZeRO-1 and ZeRO-3 only with ``dp`` > 1, ZeRO-3 only with ``pp`` = 1;
* ``recompute`` [none, selective, full];
* ``sequence_parallel`` [false, true]: true only with ``tp`` > 1;
* ``order`` [tp-dp-pp, dp-tp-pp]: dp-tp-pp (the bad placement) only with ``tp`` > 1 and
  ``dp`` > 1, where it differs.

**Pruning**, in this order, each pruned candidate counted under its reason:

1. ``invalid`` — :func:`~workloads.parallel.check_strategy` rejects it (e.g. ``pp·interleave``
   does not divide the layers, the interleaved schedule's micro-batches are not a multiple
   of ``pp``);
2. ``memory`` — :func:`~workloads.memory.memory_per_gpu` of some pipeline stage exceeds the
   GPU's memory;
3. ``bound`` — branch and bound on a *lower bound* of the iteration time: the longest of
   the chains of work the simulator runs one after another (details in ``_Bounds``) —
   for each stage ``s``, the forward passes of the first micro-batch through the model
   chunks before it and their pipeline sends, then its ``m`` micro-batches' passes, then
   the last gradient's backward passes and sends back through those chunks, then the
   data-parallel reduction of the last gradient buckets and the tied-embedding
   all-reduce, then the largest optimizer step and ZeRO-1's parameter all-gather.  A
   pass is its compute (cost model) plus the calls that block it: tensor-parallel
   collectives, expert all-to-alls, ZeRO-3 parameter gathers.  Each call counts at the
   least time its flows can take under any sharing (bytes over the capacity of the link
   it loads most), so with uniform stages and no network this is ``(m + pp − 1)·t`` for
   1F1B and GPipe and ``(m + (pp − 1)/v)·t`` interleaved.  A second bound: no link
   carries more than its capacity, so the bytes the counted calls put on one link over
   its capacity (candidates are ranked on it with only replica 0's calls counted there,
   which is cheaper, and a candidate's bound counts every replica's calls once it would
   be simulated).  Candidates are simulated in order of an *estimate* (the compute and
   collectives critical path with the uncontended data-parallel reduction added); the
   rule is **a candidate is simulated only while its lower bound is below the K-th best
   simulated iteration time so far**, checked when it would start.  The bound is never
   above the simulated time, so pruning cannot drop a strategy of the true top K.

A time limit (``--time-limit``) stops starting simulations once passed; candidates left
are pruned as ``time limit`` and the answer is the best found, without the guarantee.

Survivors are simulated in parallel (``workers`` processes; 1: in this process), each as the
scenario with the strategy applied.  The best are compared with a naive **baseline**,
simulated too: pure data parallelism (tp = pp = 1, ZeRO 0, no recompute, the scenario's
micro-batch or the largest that fits) when it fits in memory, else the model-parallel
strategy that fits with the fewest ``tp·pp`` GPUs (then 1F1B, full recompute).

``DIR`` receives ``results.csv`` (every simulated candidate), ``pruned.csv`` (every pruned
candidate and why) and ``best.yaml`` (the best scenario, resolved: ``distsim run`` runs it).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import itertools
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from distsim_gpu.collectives import Communicator
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.scenarios.scenario import (
    Scenario,
    load_scenario,
    run_scenario,
    scenario_from_mapping,
)
from distsim_gpu.simcore.config import parse_assignment
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.costs import stores_attention_scores
from distsim_gpu.workloads.memory import layer_params_local, memory_per_gpu, params_on_gpu
from distsim_gpu.workloads.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_strategy,
    layer_partition,
)

__all__ = [
    "SPACE_KEYS",
    "STRATEGY_KEYS",
    "CandidateResult",
    "PrunedCandidate",
    "SearchResult",
    "Strategy",
    "add_parser",
    "enumerate_strategies",
    "format_search",
    "iteration_bounds",
    "search_strategies",
    "with_strategy",
]

STRATEGY_KEYS = ("tp", "pp", "dp", "ep", "micro_batch", "schedule", "interleave", "zero",
                 "recompute", "sequence_parallel", "order")
SPACE_KEYS = ("tp", "pp", "ep", "micro_batch", "schedule", "interleave", "zero", "recompute",
              "sequence_parallel", "order")
_DEFAULT_SPACE: dict[str, tuple[Any, ...]] = {
    "micro_batch": (1, 2, 4, 8),
    "schedule": ("1f1b", "gpipe", "interleaved"),
    "interleave": (2, 4),
    "zero": (0, 1, 3),
    "recompute": ("none", "selective", "full"),
    "sequence_parallel": (False, True),
    "order": ("tp-dp-pp", "dp-tp-pp"),
}
_GRAD_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
_ACTIVATION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}
_GIB = 2.0**30
# Relative margin of the lower bound for the rounding of sums (see _Bounds).
_BOUND_SLACK = 1e-6


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class Strategy:
    """One point of the search space (the scenario's other settings unchanged)."""

    tp: int
    pp: int
    dp: int
    ep: int = 1
    micro_batch: int = 1
    schedule: str = "1f1b"
    interleave: int = 1
    zero: int = 0
    recompute: str = "none"
    sequence_parallel: bool = False
    order: str = "tp-dp-pp"

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in STRATEGY_KEYS}

    def overrides(self) -> dict[str, Any]:
        """The scenario keys (dotted) this strategy sets."""
        data = {f"parallelism.{key}": getattr(self, key)
                for key in ("tp", "pp", "dp", "ep", "schedule", "interleave", "zero",
                            "sequence_parallel", "order")}
        data["parallelism.fsdp"] = False
        data["training.micro_batch"] = self.micro_batch
        data["training.recompute"] = self.recompute
        return data

    def label(self) -> str:
        parts = [f"tp{self.tp} pp{self.pp} dp{self.dp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts.append(f"mb{self.micro_batch}")
        parts.append(f"interleaved×{self.interleave}" if self.schedule == "interleaved"
                     else self.schedule)
        if self.zero:
            parts.append(f"zero{self.zero}")
        parts.append(f"recompute {self.recompute}")
        if self.sequence_parallel:
            parts.append("sp")
        if self.order != "tp-dp-pp":
            parts.append(f"order {self.order}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class CandidateResult:
    """A simulated strategy: its bound, estimate and simulated metrics (SI units)."""

    strategy: Strategy
    lower_bound_s: float
    estimate_s: float
    iteration_time_s: float
    samples_per_s: float
    mfu: float
    peak_memory_bytes: float

    def row(self) -> dict[str, Any]:
        return {**self.strategy.to_dict(), "iteration_time_s": self.iteration_time_s,
                "samples_per_s": self.samples_per_s, "mfu": self.mfu,
                "peak_memory_bytes": self.peak_memory_bytes,
                "lower_bound_s": self.lower_bound_s, "estimate_s": self.estimate_s}


@dataclass(frozen=True, slots=True)
class PrunedCandidate:
    """A strategy not simulated: ``reason`` is invalid, memory, bound, time limit or error
    (its simulation failed)."""

    strategy: Strategy
    reason: str
    detail: str
    peak_memory_bytes: float | None = None
    lower_bound_s: float | None = None

    def row(self) -> dict[str, Any]:
        return {**self.strategy.to_dict(), "reason": self.reason, "detail": self.detail,
                "peak_memory_bytes": "" if self.peak_memory_bytes is None
                else self.peak_memory_bytes,
                "lower_bound_s": "" if self.lower_bound_s is None else self.lower_bound_s}


@dataclass(frozen=True, slots=True)
class SearchResult:
    """What :func:`search_strategies` found.

    ``results`` every simulated candidate, fastest first; ``top`` the first ``k`` of them;
    ``pruned_counts`` candidates pruned per reason (``invalid``, ``memory``, ``bound``,
    ``time limit``, ``error``), ``invalid_reasons`` the invalid ones per key at fault;
    ``best_config`` the best scenario resolved (a scenario mapping); ``speedup`` the
    baseline's iteration time over the best's.
    """

    name: str
    num_gpus: int
    global_batch: int
    k: int
    enumerated: int
    pruned_counts: dict[str, int]
    invalid_reasons: dict[str, int]
    results: tuple[CandidateResult, ...]
    pruned: tuple[PrunedCandidate, ...]
    best_config: dict[str, Any] | None
    baseline: CandidateResult | None
    baseline_kind: str
    wall_time_s: float
    files: tuple[str, ...] = ()

    @property
    def simulated(self) -> int:
        return len(self.results)

    @property
    def top(self) -> tuple[CandidateResult, ...]:
        return self.results[:self.k]

    @property
    def best(self) -> CandidateResult | None:
        return self.results[0] if self.results else None

    @property
    def speedup(self) -> float | None:
        if self.best is None or self.baseline is None:
            return None
        return self.baseline.iteration_time_s / self.best.iteration_time_s


# --------------------------------------------------------------------------- enumeration


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def gpus_per_node(scenario: Scenario) -> int:
    """GPUs on the scenario's first node."""
    topo = scenario.topology
    return len(topo.gpus_on_node(topo.node_of(topo.gpus[0])))


def _space(space: Mapping[str, Iterable[Any]] | None) -> dict[str, tuple[Any, ...] | None]:
    result: dict[str, tuple[Any, ...] | None] = {key: _DEFAULT_SPACE.get(key)
                                                 for key in SPACE_KEYS}
    for key, values in (space or {}).items():
        if key not in SPACE_KEYS:
            raise ConfigError("unknown search axis", key=f"space.{key}",
                              hint="axes: " + ", ".join(SPACE_KEYS))
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            values = [values]
        result[key] = tuple(values)
    return result


def enumerate_strategies(scenario: Scenario, *,
                         space: Mapping[str, Iterable[Any]] | None = None) -> list[Strategy]:
    """Every strategy of the search space for ``scenario``'s model on its GPUs (module
    docstring for the rules); ``space`` restricts axes to the values given."""
    axes = _space(space)
    model, n = scenario.model, scenario.num_gpus
    gpn = gpus_per_node(scenario)
    global_batch = scenario.training.global_batch

    def allowed(key: str, value: Any) -> bool:
        values = axes[key]
        return values is None or value in values

    tps = [t for t in _divisors(gpn) if model.heads % t == 0 and allowed("tp", t)]
    if scenario.parallel.partition == "uniform":
        pps = _divisors(model.layers)
    else:
        pps = list(range(1, model.layers + 1))
    schedules: list[tuple[str, int]] = []
    for name in axes["schedule"] or ():
        if name == "interleaved":
            schedules += [(name, v) for v in axes["interleave"] or ()]
        else:
            schedules.append((str(name), 1))
    out: list[Strategy] = []
    for tp in tps:
        for pp in pps:
            if n % (tp * pp) or not allowed("pp", pp):
                continue
            dp = n // (tp * pp)
            eps = ([e for e in _divisors(model.experts) if dp % e == 0]
                   if model.experts > 1 else [1])
            for ep, mb, (schedule, interleave), zero, recompute, sp, order in itertools.product(
                    [e for e in eps if allowed("ep", e)], axes["micro_batch"] or (),
                    schedules, axes["zero"] or (), axes["recompute"] or (),
                    axes["sequence_parallel"] or (), axes["order"] or ()):
                if global_batch % dp or (global_batch // dp) % mb:
                    continue
                if schedule == "interleaved" and pp < 2:
                    continue
                if (zero and dp == 1) or (zero == 3 and pp > 1):
                    continue
                if sp and tp == 1:
                    continue
                if order != "tp-dp-pp" and (tp == 1 or dp == 1):
                    continue
                out.append(Strategy(tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=mb,
                                    schedule=schedule, interleave=interleave, zero=zero,
                                    recompute=recompute, sequence_parallel=bool(sp),
                                    order=order))
    return out


def _configs(scenario: Scenario, strategy: Strategy) -> tuple[ParallelConfig, TrainingConfig]:
    parallel = dataclasses.replace(
        scenario.parallel, tp=strategy.tp, pp=strategy.pp, dp=strategy.dp, ep=strategy.ep,
        schedule=strategy.schedule, interleave=strategy.interleave, zero=strategy.zero,
        fsdp=False, sequence_parallel=strategy.sequence_parallel, order=strategy.order)
    training = dataclasses.replace(scenario.training, micro_batch=strategy.micro_batch,
                                   recompute=strategy.recompute)
    return parallel, training


def with_strategy(scenario: Scenario, strategy: Strategy, *, name: str | None = None,
                  ) -> Scenario:
    """``scenario`` with ``strategy`` applied (validated: :class:`ConfigError` if invalid)."""
    parallel, training = _configs(scenario, strategy)
    model = scenario.model
    microbatches = check_strategy(parallel, training, num_gpus=scenario.num_gpus,
                                  layers=model.layers, heads=model.heads,
                                  kv_heads=model.kv_heads, experts=model.experts,
                                  source=scenario.source)
    return dataclasses.replace(scenario, parallel=parallel, training=training,
                               microbatches=microbatches, name=name or scenario.name)


def _stage_memory(scenario: Scenario, parallel: ParallelConfig, training: TrainingConfig,
                  microbatches: int) -> float:
    """The largest bytes per GPU over the pipeline stages (as the simulator counts it)."""
    return max(memory_per_gpu(
        scenario.model, tp=parallel.tp, pp=parallel.pp, dp=parallel.dp, ep=parallel.ep,
        sequence_parallel=parallel.sequence_parallel, zero_stage=parallel.zero,
        fsdp=parallel.fsdp, micro_batch=training.micro_batch, seq_len=scenario.seq_len,
        recompute=training.recompute, schedule=parallel.schedule,
        interleave=parallel.interleave, num_microbatches=microbatches,
        precision=training.precision, stage=stage,
        flash_attention=not stores_attention_scores(scenario.costs),
        partition=parallel.partition).total_bytes for stage in range(parallel.pp))


# --------------------------------------------------------------------------- bounds


class _Bounds:
    """Lower bound and estimate of an iteration's time, with caches.

    The **lower bound** follows chains of work that the simulator (workloads/iteration.py)
    runs one after another, and adds up a lower bound of each link of a chain:

    * *compute* — a layer pass, the embedding and the loss take their cost-model time,
      scaled by the group's straggler factor, never below ``min(1, factors)``;
    * *a transfer* — a collective or point-to-point call runs as flows that start after a
      latency and move their bytes at their max-min fair rate; a flow's rate is at most
      the capacity over the multiplicity of every link it holds, so a call takes at least
      ``latency + wire bytes · max over links (weight / capacity)`` of its coflow form
      (:func:`_transfer_lower_bound_s`), which is also at most its step-by-step closed
      form (summing per-step maxima is at least the maximum of the sums): a lower bound
      at both fidelities, whatever else shares the links, and exactly the time the
      simulator gives a tensor-parallel call it folds into the compute.

    The chains, for data-parallel replica 0 (every replica must end before the
    gradient-norm meeting, so any one replica's chains bound the iteration):

    1. a pass of a model chunk is its compute plus every blocking call inside it: the
       tensor-parallel collectives after each attention and MLP block (also in the
       recomputed forward with full recomputation), the expert all-to-alls of MoE layers,
       and with ZeRO-3 each layer's parameter all-gather — the gathers run one after
       another on their stream from the pass's start and layer ``k`` waits for gather
       ``k``, so a pass takes at least ``max_k (Σ_{j≤k} gather_j + Σ_{j≥k} layer_j)``;
    2. stage ``s`` cannot start before the first micro-batch's forward passed the virtual
       stages before it (each pass, then its send to the next stage); from then on it runs
       all its passes, ``m`` micro-batches of each of its chunks, in sequence.  Its last
       pass, the backward of chunk 0 for the last micro-batch, also waits for the same
       pass of stage ``s + 1`` and the gradient's send from there;
    3. its data-parallel gradient buckets of that last pass are reduced in order on one
       stream: bucket ``k`` starts no earlier than the part of the pass before it is done,
       and the group reaches the gradient-norm meeting only after the last bucket is done
       (so after ``max_k (start_k + Σ_{j≥k} bucket_j)``); the first and last stage also
       all-reduce the tied embedding gradients first;
    4. everyone meets for the gradient norm, then each group runs its optimizer step and,
       with ZeRO-1/2, all-gathers its stage's updated parameters;
    5. apart from these chains, a link moves at most its capacity: a flow at rate ``r``
       holding it with weight ``w`` loads it with ``w·r`` and max-min sharing keeps the
       sum within the capacity, so the iteration lasts at least the bytes that the calls
       counted here put on a link over its capacity (counted: every data-parallel call,
       every expert all-to-all, the pipeline sends of replica 0, and with ZeRO-3 every
       tensor-parallel call — distinct flows, a subset of all, so their bytes on a link
       are at most what it carries; a spine link shared by many tensor-parallel groups
       that cross nodes shows here.  Without ZeRO-3 the simulator may fold
       tensor-parallel calls into the compute as closed forms that load no link, so they
       are left out).

    A call the simulator runs as one collective per tensor-parallel lane (data-parallel,
    expert and tied-embedding calls) launches its lanes together and ends when all are
    done, so it also takes at least the bytes its lanes put together on one link over
    that link's capacity.

    The bound is the largest chain, less a relative 1e-6 for the rounding of sums and
    of the flow network's finish tolerance (1e-9 of a flow's bytes).  It is never above
    the simulated iteration, so pruning by it cannot drop a strategy of the true top K.
    The **estimate** (the order in which candidates are simulated) adds the uncontended
    data-parallel reduction to the compute-and-collectives critical path instead.
    """

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.comm = Communicator(Simulation(0), scenario.topology, scenario.comm)
        self._layer: dict[tuple[Any, ...], float] = {}
        self._collective: dict[tuple[Any, ...], float] = {}
        # Per call: its lower bound and its bytes per link as (link positions, bytes).
        self._lower: dict[tuple[Any, ...], tuple[float, _Loads]] = {}
        self._volumes: dict[tuple[Any, ...], _Loads] = {}
        self._link_pos = {link: i for i, link in enumerate(self.comm.capacity)}
        self._capacity = np.array(list(self.comm.capacity.values()), dtype=float)
        factors = list(scenario.stragglers.values())
        self.speedup_factor = min([1.0, *factors])

    def _layer_time(self, pass_: str, layer: int, mb: int, tp: int, sp: bool, ep: int,
                    recompute: str) -> float:
        model = self.scenario.model
        moe = model.is_moe_layer(layer)
        key = (pass_, moe, mb, tp, sp, ep if moe else 1, recompute)
        cached = self._layer.get(key)
        if cached is None:
            extra = {"recompute": recompute} if pass_ == "recompute" else {}
            cached = self.scenario.costs.layer_time_s(
                pass_, model, micro_batch=mb, seq_len=self.scenario.seq_len, tp=tp,
                sequence_parallel=sp, layer_index=layer, ep=ep, **extra)
            self._layer[key] = cached
        return cached

    def _estimate(self, op: str, ranks: Sequence[int], size: float) -> float:
        if len(ranks) < 2 or size <= 0:
            return 0.0
        key = (op, tuple(ranks), size)
        cached = self._collective.get(key)
        if cached is None:
            gpus = self.scenario.topology.gpus
            cached = self.comm.estimate_s(op, [gpus[r] for r in ranks], size)
            self._collective[key] = cached
        return cached

    def _call(self, op: str, lanes: tuple[tuple[int, ...], ...], size: float,
              ) -> tuple[float, _Loads]:
        """A call the simulator runs as one collective per lane (``lanes``: rank tuples,
        one per tensor-parallel rank for data-parallel, expert and tied-embedding calls),
        all launched together and done when all are: a lower bound of its time (class
        doc) and the bytes it puts on each link."""
        key = (op, lanes, size)
        cached = self._lower.get(key)
        if cached is None:
            gpus = self.scenario.topology.gpus
            lower = 0.0
            loads: dict[Any, float] = {}
            for ranks in lanes:
                if len(ranks) < 2:
                    continue
                plan = self.comm.choose(op, [gpus[r] for r in ranks], size)
                lane_lower, lane_loads = _transfer_lower_bound_s(self.comm, plan, size)
                lower = max(lower, lane_lower)
                for link, carried in lane_loads.items():
                    loads[link] = loads.get(link, 0.0) + carried
            capacity = self.comm.capacity
            lower = max(lower, max((carried / capacity[link]
                                    for link, carried in loads.items()), default=0.0))
            cached = self._lower[key] = (lower, self._arrays(loads))
        return cached

    def _arrays(self, loads: Mapping[Any, float]) -> _Loads:
        """Bytes per link as (link positions, bytes), for adding up with numpy."""
        pos = self._link_pos
        return (np.fromiter((pos[link] for link in loads), np.int64, len(loads)),
                np.fromiter(loads.values(), float, len(loads)))

    def _call_lower(self, op: str, lanes: tuple[tuple[int, ...], ...], size: float,
                    ) -> float:
        return self._call(op, lanes, size)[0]

    def _everyone(self, op: str, groups: tuple[tuple[int, ...], ...], size: float,
                  ) -> _Loads:
        """The bytes per link of independent calls, one per group of ranks."""
        key = ("everyone", op, groups, size)
        cached = self._volumes.get(key)
        if cached is None:
            gpus = self.scenario.topology.gpus
            loads: dict[Any, float] = {}
            for group in groups:
                if len(group) < 2:
                    continue
                plan = self.comm.choose(op, [gpus[r] for r in group], size)
                for link, carried in _transfer_lower_bound_s(self.comm, plan, size)[1].items():
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
            gpus = self.scenario.topology.gpus
            plan = self.comm.pairs_plan([(gpus[a], gpus[b]) for a, b in zip(src, dst)], size)
            lower, loads = _transfer_lower_bound_s(self.comm, plan, size)
            cached = self._lower[key] = (lower, self._arrays(loads))
        return cached

    def bounds(self, strategy: Strategy, microbatches: int, *, everyone: bool = True,
               ) -> tuple[float, float]:
        """``(lower_bound_s, estimate_s)`` of one iteration with ``strategy``.

        ``everyone=False`` leaves the calls of replicas other than 0 out of the link
        volume (chain 5): a weaker bound, ~3x cheaper to compute for many replicas, for
        ranking all candidates; the search refines it before it would simulate one.
        """
        scenario, model = self.scenario, self.scenario.model
        parallel, training = _configs(scenario, strategy)
        pp, v, m, dp = parallel.pp, parallel.interleave, microbatches, parallel.dp
        mb, tp, sp, ep = training.micro_batch, parallel.tp, parallel.sequence_parallel, parallel.ep
        recompute = training.recompute
        seq = scenario.seq_len
        costs = scenario.costs
        placement = Placement(parallel)
        f = self.speedup_factor
        act = _ACTIVATION_BYTES[training.precision]
        grad_bytes = _GRAD_BYTES[parallel.grad_reduce_precision]
        tp_bytes = mb * seq * model.hidden * act
        a2a_bytes = mb * seq * model.top_k * model.hidden * act / (tp if sp else 1)
        sharded = parallel.zero == 3 or parallel.fsdp
        grad_op = "reduce_scatter" if parallel.zero >= 1 else "all_reduce"
        shard = {"micro_batch": mb, "seq_len": seq, "tp": tp, "sequence_parallel": sp}
        chunks = layer_partition(model.layers, pp * v, parallel.partition)
        nvs = pp * v
        tp_ranks = [placement.tp_group(0, s) for s in range(pp)]
        dp_ranks = [placement.dp_group(0, s) for s in range(pp)]  # (for the estimate)
        dp_lanes = [tuple(placement.dp_group(t, s) for t in range(tp)) for s in range(pp)]
        tp_lane = [(tp_ranks[s],) for s in range(pp)]
        tp_kinds = (("all_gather", "reduce_scatter") if sp else ("all_reduce",)) if tp > 1 \
            else ()
        # Per virtual stage: forward and backward compute, their communication (for the
        # estimate), and their lower bounds (compute scaled by f plus blocking calls).
        fwd = [0.0] * nvs
        bwd = [0.0] * nvs
        fwd_comm = [0.0] * nvs
        bwd_comm = [0.0] * nvs
        fwd_lower = [0.0] * nvs
        bwd_lower = [0.0] * nvs
        # The last micro-batch's backward of chunk 0 of each stage: the lower bound of the
        # part before each gradient bucket it launches, and the bucket's own bound.
        buckets: list[list[tuple[float, float]]] = [[] for _ in range(pp)]
        # Bytes that calls of the iteration put on each link (chain 5 of the class doc).
        # Counted per distinct call, added up once at the end.
        counted: dict[tuple[Any, ...], float] = {}

        # The same for calls of every replica, counted where all of them are flows.
        counted_all: dict[tuple[Any, ...], float] = {}

        def call(op: str, lanes: tuple[tuple[int, ...], ...], size: float,
                 times: float = 1.0) -> float:
            key = (op, lanes, size)
            counted[key] = counted.get(key, 0.0) + times
            return self._call(op, lanes, size)[0]

        def count_all(op: str, groups: tuple[tuple[int, ...], ...], size: float,
                     times: float) -> None:
            key = (op, groups, size)
            counted_all[key] = counted_all.get(key, 0.0) + times

        for vs, (first, stop) in enumerate(chunks):
            stage = vs % pp
            ep_ranks = placement.ep_groups(0, stage)[0]
            ep_lanes = tuple(placement.ep_groups(t, stage)[0] for t in range(tp))
            if everyone:
                ep_all = tuple(g for t in range(tp) for g in placement.ep_groups(t, stage))
                tp_all = tuple(placement.tp_group(d, stage) for d in range(dp))
            else:
                ep_all, tp_all = ep_lanes, (tp_ranks[stage],)
            tp_call = sum(self._estimate(kind, tp_ranks[stage], tp_bytes) for kind in tp_kinds)
            tp_low = sum(self._call_lower(kind, tp_lane[stage], tp_bytes) for kind in tp_kinds)
            passes_b = 2 if recompute == "full" else 1
            calls_per_layer = 2 * m * (1 + passes_b)  # each kind, every micro-batch
            head_f = head_b = tail_f = tail_b = 0.0  # embedding and loss, per pass
            if vs == 0:
                head_f = costs.embedding_time_s("fwd", model, **shard)
                tail_b = costs.embedding_time_s("bwd", model, **shard)
            if vs == nvs - 1:
                tail_f = costs.loss_time_s("fwd", model, **shard)
                head_b = costs.loss_time_s("bwd", model, **shard)
            fwd[vs] += head_f + tail_f
            bwd[vs] += head_b + tail_b
            layers_f: list[tuple[float, float]] = []  # (layer lower bound, its gather)
            layers_b: list[tuple[float, float, float]] = []  # (+ its gradient bytes)
            for layer in range(first, stop):
                t_f = self._layer_time("fwd", layer, mb, tp, sp, ep, recompute)
                t_b = self._layer_time("bwd", layer, mb, tp, sp, ep, recompute)
                if recompute != "none":
                    t_b += self._layer_time("recompute", layer, mb, tp, sp, ep, recompute)
                fwd[vs] += t_f
                bwd[vs] += t_b
                calls, calls_low = 2 * tp_call, 2 * tp_low
                if sharded and dp > 1:  # else the simulator may fold them (class doc)
                    for kind in tp_kinds:
                        count_all(kind, tp_all, tp_bytes, calls_per_layer)
                if model.is_moe_layer(layer) and ep > 1:
                    calls += 2 * self._estimate("alltoall", ep_ranks, a2a_bytes)
                    calls_low += 2 * self._call_lower("alltoall", ep_lanes, a2a_bytes)
                    count_all("alltoall", ep_all, a2a_bytes, calls_per_layer)
                fwd_comm[vs] += calls
                bwd_comm[vs] += calls * passes_b
                dense, expert = layer_params_local(model, layer, tp, ep)
                gather = gather_low = 0.0
                if sharded and dp > 1:
                    gather = self._estimate("all_gather", dp_ranks[stage], (dense + expert) * act)
                    gather_low = call("all_gather", dp_lanes[stage], (dense + expert) * act,
                                      2 * m)
                    call("reduce_scatter", dp_lanes[stage], (dense + expert) * grad_bytes, m)
                    fwd_comm[vs] += gather
                    bwd_comm[vs] += gather + self._estimate(
                        "reduce_scatter", dp_ranks[stage], (dense + expert) * grad_bytes)
                layers_f.append((t_f * f + calls_low, gather_low))
                layers_b.append((t_b * f + calls_low * passes_b, gather_low,
                                 (dense + expert) * grad_bytes))
            fwd_lower[vs] = (head_f + tail_f) * f + _gathered_pass(layers_f)
            layers_b.reverse()
            bwd_lower[vs] = (head_b + tail_b) * f + _gathered_pass(
                [(t, g) for t, g, _ in layers_b])
            if dp > 1:
                # The last micro-batch's reductions: ZeRO-3 one per layer (counted above),
                # else in buckets, as the simulator forms them.
                done = head_b * f
                bucket = 0.0
                final: list[tuple[float, float]] = []
                for t, _, grads in layers_b:
                    done += t
                    if sharded:
                        final.append((done, self._call_lower("reduce_scatter",
                                                             dp_lanes[stage], grads)))
                        continue
                    bucket += grads
                    if bucket >= parallel.bucket_params * grad_bytes:
                        final.append((done, call(grad_op, dp_lanes[stage], bucket)))
                        bucket = 0.0
                if vs == 0 and not sharded:
                    bucket += model.vocab * model.hidden / tp * grad_bytes
                if not sharded and bucket > 0:
                    final.append((bwd_lower[vs], call(grad_op, dp_lanes[stage], bucket)))
                if vs < pp:
                    buckets[vs] = final

        def stage_bound(with_comm: bool) -> float:
            worst = 0.0
            for s in range(pp):
                own = range(s, nvs, pp)
                work = sum(fwd[j] + bwd[j] for j in own)
                ramp = sum(fwd[j] + bwd[j] for j in range(s))
                if with_comm:
                    work += sum(fwd_comm[j] + bwd_comm[j] for j in own)
                    ramp += sum(fwd_comm[j] + bwd_comm[j] for j in range(s))
                worst = max(worst, ramp + m * work)
            return worst

        # Chains 2 and 3: when each stage's last pass ends, and when it reaches the meeting.
        p2p_bytes = tp_bytes / tp
        send_f = [0.0] * nvs
        for j in range(nvs - 1):
            here, there = tp_ranks[j % pp], tp_ranks[(j + 1) % pp]
            send_f[j] = self._send(here, there, p2p_bytes)[0]
            self._send(there, here, p2p_bytes)  # the gradient's way back
            for key in (("pairs", here, there, p2p_bytes), ("pairs", there, here, p2p_bytes)):
                counted[key] = counted.get(key, 0.0) + m
        first_start = [0.0] * pp
        for s in range(1, pp):
            first_start[s] = first_start[s - 1] + fwd_lower[s - 1] + send_f[s - 1]
        last_end = [0.0] * pp
        for s in reversed(range(pp)):
            own = range(s, nvs, pp)
            last_end[s] = first_start[s] + m * sum(fwd_lower[j] + bwd_lower[j] for j in own)
            if s + 1 < pp:
                gradient = self._send(tp_ranks[s + 1], tp_ranks[s], p2p_bytes)[0]
                last_end[s] = max(last_end[s], last_end[s + 1] + gradient + bwd_lower[s])
        arrive = []
        for s in range(pp):
            start = last_end[s] - bwd_lower[s]
            reduced, tail = last_end[s], 0.0
            for done, reduction in reversed(buckets[s]):
                tail += reduction
                reduced = max(reduced, start + done + tail)
            arrive.append(reduced)
        if pp > 1 and model.tied_embeddings:
            size = model.vocab * model.hidden / tp * grad_bytes
            tied = max(arrive[0], arrive[-1]) + call(
                "all_reduce", tuple(zip(tp_ranks[0], tp_ranks[-1])), size)
            arrive[0] = arrive[-1] = tied

        # Chain 4: the optimizer step (and ZeRO-1/2's parameter gather) after the meeting.
        optimizer = 0.0
        finish = 0.0
        dp_comm = 0.0
        for s in range(pp):
            params = params_on_gpu(model, tp=tp, pp=pp, ep=ep, stage=s, interleave=v,
                                   partition=parallel.partition).total
            updated = params / dp if parallel.zero >= 1 or parallel.fsdp else params
            step = costs.optimizer_step_time_s(updated)
            optimizer = max(optimizer, step)
            gather_low = 0.0
            if parallel.zero in (1, 2) and dp > 1:
                gather_low = call("all_gather", dp_lanes[s], params * act)
            finish = max(finish, step * f + gather_low)
            if not sharded and dp > 1:
                t = self._estimate(grad_op, dp_ranks[s], params * grad_bytes)
                if parallel.zero >= 1:
                    t += self._estimate("all_gather", dp_ranks[s], params * act)
                dp_comm = max(dp_comm, t)
        where: list[np.ndarray] = []
        carried: list[np.ndarray] = []
        for key, times in counted.items():
            if key in self._lower:
                links, loads = self._lower[key][1]
                where.append(links)
                carried.append(loads * times)
        for (op, groups, size), times in counted_all.items():
            links, loads = self._everyone(op, groups, size)
            where.append(links)
            carried.append(loads * times)
        busiest = 0.0
        if where:
            volume = np.bincount(np.concatenate(where), weights=np.concatenate(carried),
                                 minlength=self._capacity.size)
            busiest = float((volume / self._capacity).max())
        lower = max(max(arrive) + finish, busiest) * (1.0 - _BOUND_SLACK)
        estimate = max(stage_bound(True) * f + optimizer + dp_comm, lower)
        return lower, estimate


_Loads = tuple[np.ndarray, np.ndarray]
_NO_LOADS: _Loads = (np.zeros(0, np.int64), np.zeros(0))


def _gathered_pass(layers: Sequence[tuple[float, float]]) -> float:
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


def _transfer_lower_bound_s(comm: Communicator, plan: CollectivePlan, size: float,
                            ) -> tuple[float, dict[Any, float]]:
    """The least time a call of ``plan`` at ``size`` bytes can take under any sharing,
    and the bytes it moves over each link.

    As one coflow it moves ``W`` wire bytes after its latency, holding link ``l`` with
    weight ``w_l``; its max-min rate never exceeds ``capacity_l / w_l``, so it takes at
    least ``latency + W · max_l w_l / capacity_l``.  Step by step it is slower still (each
    step's bottleneck is at least its share of that maximum).  For a one-step plan this
    equals :meth:`~collectives.Communicator.time_s`.  Either way link ``l`` carries
    ``W · w_l`` bytes.
    """
    total, weights = plan.coflow(size)
    capacity = comm.capacity
    slowest = max((w / capacity[link] for link, w in weights.items()), default=0.0)
    return plan.latency_s + total * slowest, {link: total * w for link, w in weights.items()}


def iteration_bounds(scenario: Scenario) -> tuple[float, float]:
    """``(lower_bound_s, estimate_s)`` of ``scenario``'s own strategy (module docstring)."""
    par, train = scenario.parallel, scenario.training
    strategy = Strategy(tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep,
                        micro_batch=train.micro_batch, schedule=par.schedule,
                        interleave=par.interleave, zero=3 if par.fsdp else par.zero,
                        recompute=train.recompute, sequence_parallel=par.sequence_parallel,
                        order=par.order)
    return _Bounds(scenario).bounds(strategy, scenario.microbatches)


# --------------------------------------------------------------------------- simulation

_WORKER: dict[str, Any] = {}


def _worker_init(config: dict[str, Any], source: str | None) -> None:
    _WORKER.clear()
    _WORKER["config"] = config
    _WORKER["source"] = source


def _worker_scenario(strategy: Strategy) -> Scenario:
    cached = _WORKER.get("scenario")
    if cached is None:
        # Built once per process, validated with the first strategy it runs.
        config = _WORKER["config"]
        cached = scenario_from_mapping(config, source=_WORKER["source"],
                                       overrides=list(strategy.overrides().items()))
        _WORKER["scenario"] = cached
    return with_strategy(cached, strategy)


def _metrics(scenario: Scenario) -> tuple[float, float, float, float]:
    report = run_scenario(scenario)
    peak = max(g.peak_memory_bytes for g in report.per_gpu)
    return report.iteration_time_s, report.samples_per_s, report.mfu, peak


def _simulate_in_worker(strategy: Strategy) -> tuple[float, float, float, float] | str:
    try:
        return _metrics(_worker_scenario(strategy))
    except DistsimError as error:
        return str(error)


@dataclass(slots=True)
class _Candidate:
    strategy: Strategy
    microbatches: int
    memory_bytes: float
    lower_bound_s: float = 0.0
    estimate_s: float = 0.0
    refined: bool = False  # lower_bound_s counts every replica's calls (see _Bounds)


def _kth(times: list[float], k: int) -> float:
    if len(times) < k:
        return float("inf")
    return sorted(times)[k - 1]


# --------------------------------------------------------------------------- search


def _restrict_gpus(scenario: Scenario, gpus: int) -> Scenario:
    """``scenario`` on the first ``gpus`` GPUs' worth of nodes (its strategy unchecked)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(f"must be a whole number >= 1, got {gpus!r}", key="--gpus")
    per_node = gpus_per_node(scenario)
    if gpus % per_node:
        raise ConfigError(f"{gpus} GPUs are not whole nodes of {per_node} GPUs",
                          key="--gpus", hint=f"use a multiple of {per_node}")
    if gpus == scenario.num_gpus:
        return scenario
    config = {k: v for k, v in scenario.topology.config.items() if k != "name"}
    config["nodes"] = gpus // per_node
    topology = build_cluster(config)
    if len(topology.gpus) != gpus:
        raise ConfigError(f"the cluster rebuilt with {gpus // per_node} nodes has "
                          f"{len(topology.gpus)} GPUs, not {gpus}", key="--gpus")
    missing = [g for g in scenario.stragglers if g not in topology.gpus]
    if missing:
        raise ConfigError(f"straggler {missing[0]!r} is not among the first {gpus} GPUs",
                          key=f"stragglers.{missing[0]}", source=scenario.source)
    return dataclasses.replace(scenario, topology=topology)


def _check(scenario: Scenario, strategy: Strategy,
           ) -> tuple[_Candidate | None, PrunedCandidate | None]:
    parallel, training = _configs(scenario, strategy)
    model = scenario.model
    try:
        microbatches = check_strategy(parallel, training, num_gpus=scenario.num_gpus,
                                      layers=model.layers, heads=model.heads,
                                      kv_heads=model.kv_heads, experts=model.experts)
    except ConfigError as error:
        return None, PrunedCandidate(strategy, "invalid", f"{error.key}: {error.message}")
    memory = _stage_memory(scenario, parallel, training, microbatches)
    if memory > scenario.gpu.memory_bytes:
        return None, PrunedCandidate(
            strategy, "memory", f"needs {memory / _GIB:.1f} GiB of "
            f"{scenario.gpu.memory_bytes / _GIB:.1f} GiB", peak_memory_bytes=memory)
    return _Candidate(strategy, microbatches, memory), None


def _baseline(scenario: Scenario) -> tuple[Strategy | None, str]:
    """The naive strategy the best is compared with (module docstring)."""
    n = scenario.num_gpus
    own = scenario.training.micro_batch
    sizes = [own, *sorted({1, 2, 4, 8, 16, 32, 64} - {own}, reverse=True)]
    for mb in sizes:
        strategy = Strategy(tp=1, pp=1, dp=n, micro_batch=mb)
        candidate, _ = _check(scenario, strategy)
        if candidate is not None:
            return strategy, "pure data parallel"
    fitting = [s for s in enumerate_strategies(scenario) if _check(scenario, s)[0] is not None]
    if not fitting:
        return None, "none fits"
    best = min(fitting, key=lambda s: (
        s.tp * s.pp, s.schedule != "1f1b", s.recompute != "full", s.zero, s.ep,
        s.order != "tp-dp-pp", s.sequence_parallel, -s.micro_batch, s.tp))
    return best, "smallest model parallel"


def search_strategies(scenario: Scenario, *, gpus: int | None = None, top: int = 10,
                      workers: int | None = None, out_dir: str | os.PathLike[str] | None = None,
                      space: Mapping[str, Iterable[Any]] | None = None,
                      time_limit_s: float | None = None,
                      progress: Callable[[str], None] | None = None) -> SearchResult:
    """Search the parallel strategies of ``scenario`` (module docstring) and return the
    ``top`` fastest with the counts of what was enumerated, pruned and simulated.

    ``gpus``: search on the first ``gpus`` GPUs' worth of nodes instead of the whole
    cluster; ``workers``: simulation processes (default ``os.cpu_count()``, 1 runs in this
    process); ``out_dir``: write ``results.csv``, ``pruned.csv`` and ``best.yaml`` there;
    ``space``: restrict axes (``{"schedule": ["1f1b"], "recompute": ["none"]}``);
    ``time_limit_s``: start no simulation after this many seconds (those in flight finish;
    the rest are pruned as ``time limit`` and the result is then the best *found*, not
    necessarily the optimum; the baseline is simulated first either way);
    ``progress``: called with a line of text as candidates finish.
    """
    started = time.perf_counter()
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"must be a whole number >= 1, got {top!r}", key="--top")
    if workers is None:
        workers = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"must be a whole number >= 1, got {workers!r}", key="--workers")
    if gpus is not None:
        scenario = _restrict_gpus(scenario, gpus)

    strategies = enumerate_strategies(scenario, space=space)
    pruned: list[PrunedCandidate] = []
    alive: list[_Candidate] = []
    for strategy in strategies:
        candidate, rejected = _check(scenario, strategy)
        if rejected is not None:
            pruned.append(rejected)
        else:
            assert candidate is not None
            alive.append(candidate)
    bounds = _Bounds(scenario)
    for candidate in alive:
        candidate.lower_bound_s, candidate.estimate_s = bounds.bounds(
            candidate.strategy, candidate.microbatches, everyone=False)
    alive.sort(key=lambda c: (c.estimate_s, c.lower_bound_s))
    baseline_strategy, baseline_kind = _baseline(scenario)

    results: list[CandidateResult] = []
    times: list[float] = []
    candidates = {c.strategy: c for c in alive}

    def record(candidate: _Candidate, outcome: tuple[float, float, float, float] | str,
               ) -> None:
        if isinstance(outcome, str):
            pruned.append(PrunedCandidate(candidate.strategy, "error", outcome))
            return
        time_s, samples, mfu, peak = outcome
        results.append(CandidateResult(candidate.strategy, candidate.lower_bound_s,
                                       candidate.estimate_s, time_s, samples, mfu, peak))
        times.append(time_s)
        if progress is not None:
            progress(f"[{len(results)}] {time_s * 1e3:.3f} ms  {candidate.strategy.label()}")

    def bound_pruned(candidate: _Candidate, threshold: float) -> None:
        pruned.append(PrunedCandidate(
            candidate.strategy, "bound", f"lower bound {candidate.lower_bound_s:.6g} s >= "
            f"{top}-th best simulated {threshold:.6g} s",
            peak_memory_bytes=candidate.memory_bytes, lower_bound_s=candidate.lower_bound_s))

    # The baseline runs first: as a candidate when it is one (simulated whatever its
    # bound), else on its own; then the candidates in order of their estimate.
    queue: list[tuple[_Candidate | None, bool]] = [(c, False) for c in alive]
    baseline_outcome: tuple[float, float, float, float] | str | None = None
    baseline_future: Future[Any] | None = None
    if baseline_strategy is not None:
        known = candidates.get(baseline_strategy)
        if known is not None:
            queue.remove((known, False))
            queue.insert(0, (known, True))
        else:
            queue.insert(0, (None, True))
    pool: ProcessPoolExecutor | _InProcess
    if workers == 1:
        pool = _InProcess(scenario)
    else:
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init,
                                   initargs=(scenario.resolved(), scenario.source))
    try:
        running: dict[Future[Any], _Candidate | None] = {}
        position = 0
        while position < len(queue) or running:
            while position < len(queue) and len(running) < workers:
                candidate, forced = queue[position]
                position += 1
                if candidate is None:
                    baseline_future = pool.submit(_simulate_in_worker, baseline_strategy)
                    running[baseline_future] = None
                    continue
                threshold = _kth(times, top)
                if (not forced and not candidate.refined
                        and candidate.lower_bound_s < threshold < float("inf")):
                    # About to simulate it: first the full bound (every replica's calls).
                    candidate.lower_bound_s = max(candidate.lower_bound_s, bounds.bounds(
                        candidate.strategy, candidate.microbatches)[0])
                    candidate.refined = True
                if not forced and candidate.lower_bound_s >= threshold:
                    bound_pruned(candidate, threshold)
                    continue
                if (not forced and time_limit_s is not None
                        and time.perf_counter() - started > time_limit_s):
                    pruned.append(PrunedCandidate(
                        candidate.strategy, "time limit",
                        f"not simulated: the {time_limit_s:g} s time limit had passed",
                        peak_memory_bytes=candidate.memory_bytes,
                        lower_bound_s=candidate.lower_bound_s))
                    continue
                running[pool.submit(_simulate_in_worker, candidate.strategy)] = candidate
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                owner = running.pop(future)
                if owner is None:
                    baseline_outcome = future.result()
                else:
                    record(owner, future.result())
    finally:
        pool.shutdown(cancel_futures=True)

    results.sort(key=lambda r: (r.iteration_time_s, r.strategy.label()))
    baseline: CandidateResult | None = None
    if baseline_strategy is not None:
        for r in results:
            if r.strategy == baseline_strategy:
                baseline = r
        if baseline is None and isinstance(baseline_outcome, tuple):
            known = candidates.get(baseline_strategy)
            microbatches = with_strategy(scenario, baseline_strategy).microbatches
            lb, est = ((known.lower_bound_s, known.estimate_s) if known is not None
                       else bounds.bounds(baseline_strategy, microbatches))
            baseline = CandidateResult(baseline_strategy, lb, est, *baseline_outcome)
        elif baseline is None and isinstance(baseline_outcome, str):
            baseline_kind += f" (failed: {baseline_outcome})"

    best_config: dict[str, Any] | None = None
    if results:
        best = with_strategy(scenario, results[0].strategy, name=f"{scenario.name}-best")
        best_config = best.resolved()
        best_config["description"] = (
            f"best of distsim search over {scenario.name}: {results[0].strategy.label()}")
    counts = Counter(p.reason for p in pruned)
    pruned_counts = {reason: counts.get(reason, 0)
                     for reason in ("invalid", "memory", "bound", "time limit", "error")}
    invalid = Counter(p.detail.split(":", 1)[0] for p in pruned if p.reason == "invalid")
    result = SearchResult(
        name=scenario.name, num_gpus=scenario.num_gpus,
        global_batch=scenario.training.global_batch, k=top, enumerated=len(strategies),
        pruned_counts=pruned_counts, invalid_reasons=dict(invalid.most_common()),
        results=tuple(results), pruned=tuple(pruned), best_config=best_config,
        baseline=baseline, baseline_kind=baseline_kind,
        wall_time_s=time.perf_counter() - started)
    if out_dir is not None:
        files = write_search_output(result, out_dir)
        result = dataclasses.replace(result, files=files,
                                     wall_time_s=time.perf_counter() - started)
    return result


class _InProcess:
    """An executor that runs each job at once in this process (``workers=1``)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario

    def submit(self, _fn: Any, strategy: Strategy) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(_metrics(with_strategy(self.scenario, strategy)))
        except DistsimError as error:
            future.set_result(str(error))
        return future

    def shutdown(self, cancel_futures: bool = False) -> None:
        del cancel_futures


# --------------------------------------------------------------------------- output


def _csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()


RESULT_COLUMNS = (*STRATEGY_KEYS, "iteration_time_s", "samples_per_s", "mfu",
                  "peak_memory_bytes", "lower_bound_s", "estimate_s")
PRUNED_COLUMNS = (*STRATEGY_KEYS, "reason", "detail", "peak_memory_bytes", "lower_bound_s")


def write_search_output(result: SearchResult, directory: str | os.PathLike[str],
                        ) -> tuple[str, ...]:
    """Write ``results.csv``, ``pruned.csv`` and (when anything ran) ``best.yaml`` into
    ``directory`` (created if needed), each file atomically; returns the names written."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} exists and is not a directory", key="--out")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create {target}: {error.strerror}", key="--out") from None
    files = ["results.csv", "pruned.csv"]
    atomic_write_text(target / "results.csv",
                      _csv([r.row() for r in result.results], RESULT_COLUMNS))
    atomic_write_text(target / "pruned.csv",
                      _csv([p.row() for p in result.pruned], PRUNED_COLUMNS))
    if result.best_config is not None:
        atomic_write_text(target / "best.yaml",
                          yaml.safe_dump(result.best_config, sort_keys=False))
        files.append("best.yaml")
    return tuple(files)


def format_search(result: SearchResult) -> str:
    """The terminal summary: counts, the top K table and the speed-up over the baseline."""
    counts = result.pruned_counts
    lines = [
        f"distsim search: {result.name} on {result.num_gpus} GPUs, global batch "
        f"{result.global_batch}",
        f"enumerated {result.enumerated}; pruned {sum(counts.values())} (invalid "
        f"{counts['invalid']}, out of memory {counts['memory']}, bound {counts['bound']}"
        + (f", time limit {counts['time limit']}" if counts["time limit"] else "")
        + (f", failed {counts['error']}" if counts["error"] else "")
        + f"); simulated {result.simulated}; {result.wall_time_s:.1f} s",
    ]
    if result.invalid_reasons:
        lines.append("invalid by key: " + ", ".join(
            f"{key} {n}" for key, n in result.invalid_reasons.items()))
    lines.append("")
    if not result.results:
        lines.append("no strategy could be simulated")
        return "\n".join(lines) + "\n"
    header = ("#", "iteration", "samples/s", "MFU", "peak mem", "strategy")
    rows = [(str(i + 1), f"{r.iteration_time_s * 1e3:.2f} ms", f"{r.samples_per_s:.1f}",
             f"{r.mfu * 100:.1f} %", f"{r.peak_memory_bytes / _GIB:.1f} GiB",
             r.strategy.label()) for i, r in enumerate(result.top)]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    for cells in (header, *rows):
        lines.append("  ".join(c.rjust(w) if i < 5 else c
                               for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    lines.append("")
    if result.baseline is not None and result.speedup is not None:
        lines.append(f"baseline ({result.baseline_kind}): {result.baseline.strategy.label()}: "
                     f"{result.baseline.iteration_time_s * 1e3:.2f} ms; best is "
                     f"{result.speedup:.2f}x faster")
    else:
        lines.append(f"baseline: {result.baseline_kind}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- CLI


def _cmd_search(args: argparse.Namespace) -> int:
    overrides = [parse_assignment(text) for text in args.overrides]
    scenario = load_scenario(args.scenario, overrides)
    if args.time_limit is not None and not args.time_limit > 0:
        raise ConfigError(f"must be a number of seconds > 0, got {args.time_limit!r}",
                          key="--time-limit")
    result = search_strategies(
        scenario, gpus=args.gpus, top=args.top, workers=args.workers, out_dir=args.out,
        time_limit_s=args.time_limit,
        progress=(lambda line: print(line, file=sys.stderr)) if args.verbose else None)
    sys.stdout.write(format_search(result))
    print(f"\nwrote {args.out}: {', '.join(result.files)}")
    return 0


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Register ``distsim search`` on an ``add_subparsers()`` object; returns its parser."""
    parser = commands.add_parser(
        "search", help="find the fastest parallel strategies for a scenario",
        description="Enumerate parallel strategies (tp, pp, dp, ep, micro-batch, schedule, "
        "ZeRO, recompute, sequence parallelism, placement) for the scenario's model at its "
        "global batch, prune invalid, out-of-memory and provably slower ones (a lower bound "
        "from compute and the least time of each call on the critical path, against the "
        "K-th best simulated time), simulate the rest in parallel "
        "and print the best K with the speed-up over a naive baseline.")
    parser.add_argument("scenario", help="a scenario YAML file (its model, cluster, batch)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="search on the first N GPUs' worth of nodes (default: all)")
    parser.add_argument("--top", type=int, default=10, metavar="K",
                        help="how many of the best to report (default 10)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="write results.csv, pruned.csv and best.yaml into DIR")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="simulation processes (default: the CPU count; 1: in-process)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        dest="overrides",
                        help="override a scenario field by dotted path before searching "
                        "(repeatable)")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="start no simulation after SECONDS (those running finish); the "
                        "result is then the best found, not necessarily the optimum")
    parser.add_argument("--verbose", action="store_true",
                        help="print each simulated candidate to stderr as it finishes")
    parser.set_defaults(handler=_cmd_search)
    return parser
