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
* ``recompute`` [none, selective, full]; ``op`` (torchtitan's per-operator checkpointing)
  only when asked (space: {recompute: [none, op, full]}): it is one framework's policy,
  between ``selective`` and ``full`` in time and memory, and a fourth mode adds a third more
  candidates;
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
   the chains of work the simulator runs one after another (see :mod:`workloads.bounds`) —
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

import csv
import dataclasses
import io
import itertools
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from distsim_gpu.scenarios.scenario import (
    Scenario,
    run_scenario,
    scenario_from_mapping,
)
from distsim_gpu.simcore.config import check_keys, check_whole
from distsim_gpu.simcore.errors import ConfigError, DistsimError
from distsim_gpu.simcore.fileio import atomic_write_text
from distsim_gpu.simcore.workers import die_with_parent
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.bounds import IterationBound, IterationBounds
from distsim_gpu.workloads.cost.compute import stores_attention_scores
from distsim_gpu.workloads.cost.memory import memory_of_strategy
from distsim_gpu.workloads.specs.moe_routing import routed_comm
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
)

__all__ = [
    "SPACE_KEYS",
    "STRATEGY_KEYS",
    "CandidateResult",
    "PrunedCandidate",
    "SearchResult",
    "Strategy",
    "enumerate_strategies",
    "format_search",
    "iteration_bounds",
    "search_strategies",
    "with_strategy",
]

STRATEGY_KEYS = ("tp", "pp", "dp", "ep", "cp", "micro_batch", "schedule", "interleave",
                 "zero", "recompute", "sequence_parallel", "order")
SPACE_KEYS = ("tp", "pp", "ep", "cp", "micro_batch", "schedule", "interleave", "zero",
              "recompute", "sequence_parallel", "order")
_DEFAULT_SPACE: dict[str, tuple[Any, ...]] = {
    # Context parallelism only when asked for (space: {cp: [1, 2, 4]}): it pays off for
    # long sequences only, and multiplies the candidates.
    "cp": (1,),
    "micro_batch": (1, 2, 4, 8),
    "schedule": ("1f1b", "gpipe", "interleaved"),
    "interleave": (2, 4),
    "zero": (0, 1, 3),
    "recompute": ("none", "selective", "full"),  # "op" when asked (module docstring)
    "sequence_parallel": (False, True),
    "order": ("tp-dp-pp", "dp-tp-pp"),
}
_GIB = 2.0**30


# --------------------------------------------------------------------------- types


@dataclass(frozen=True, slots=True)
class Strategy:
    """One point of the search space (the scenario's other settings unchanged)."""

    tp: int
    pp: int
    dp: int
    ep: int = 1
    cp: int = 1
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
                for key in ("tp", "pp", "dp", "ep", "cp", "schedule", "interleave", "zero",
                            "sequence_parallel", "order")}
        data["parallelism.fsdp"] = False
        data["training.micro_batch"] = self.micro_batch
        data["training.recompute"] = self.recompute
        return data

    def label(self) -> str:
        parts = [f"tp{self.tp} pp{self.pp} dp{self.dp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
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
    check_keys(space or {}, SPACE_KEYS, prefix="space", what="search axis")
    for key, values in (space or {}).items():
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
    seq_len = scenario.training.seq_len or model.seq_len
    cps = [c for c in axes["cp"] or () if c == 1 or seq_len % (2 * c) == 0]
    for tp, cp in itertools.product(tps, cps):
        for pp in pps:
            if n % (tp * pp * cp) or not allowed("pp", pp):
                continue
            dp = n // (tp * pp * cp)
            eps = ([e for e in _divisors(model.experts) if dp % e == 0]
                   if model.experts > 1 and cp == 1 else [1])
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
                out.append(Strategy(tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, micro_batch=mb,
                                    schedule=schedule, interleave=interleave, zero=zero,
                                    recompute=recompute, sequence_parallel=bool(sp),
                                    order=order))
    return out


def _configs(scenario: Scenario, strategy: Strategy) -> tuple[ParallelConfig, TrainingConfig]:
    parallel = dataclasses.replace(
        scenario.parallel, tp=strategy.tp, pp=strategy.pp, dp=strategy.dp, ep=strategy.ep,
        cp=strategy.cp, schedule=strategy.schedule, interleave=strategy.interleave,
        zero=strategy.zero, fsdp=False, sequence_parallel=strategy.sequence_parallel,
        order=strategy.order, layer_groups=())  # candidates are uniform over the layers
    training = dataclasses.replace(scenario.training, micro_batch=strategy.micro_batch,
                                   recompute=strategy.recompute)
    return parallel, training


def with_strategy(scenario: Scenario, strategy: Strategy, *, name: str | None = None,
                  ) -> Scenario:
    """``scenario`` with ``strategy`` applied (validated: :class:`ConfigError` if invalid)."""
    parallel, training = _configs(scenario, strategy)
    model = scenario.model
    microbatches = check_strategy(model, parallel, training, num_gpus=scenario.num_gpus,
                                  source=scenario.source)
    # The router's skew at this ep (workloads.moe_routing).
    comm = routed_comm(scenario.comm, model, parallel.ep, scenario.source)
    return dataclasses.replace(scenario, parallel=parallel, training=training, comm=comm,
                               microbatches=microbatches, name=name or scenario.name)


def _stage_memory(scenario: Scenario, parallel: ParallelConfig, training: TrainingConfig,
                  microbatches: int) -> float:
    """The largest bytes per GPU over the pipeline stages (as the simulator counts it)."""
    flash = not stores_attention_scores(scenario.costs)
    return max(memory_of_strategy(scenario.model, parallel, training, seq_len=scenario.seq_len,
                                  microbatches=microbatches, stage=stage,
                                  flash_attention=flash).total_bytes
               for stage in range(parallel.pp))


# --------------------------------------------------------------------------- bounds


class _Bounds:
    """The iteration bound and estimate (:mod:`workloads.bounds`) of strategies applied to
    one scenario; the caches are shared between the strategies."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.iteration = IterationBounds(scenario.topology, scenario.model, scenario.costs,
                                         comm=scenario.comm, stragglers=scenario.stragglers)

    def bounds(self, strategy: Strategy, microbatches: int, *, everyone: bool = True,
               ) -> IterationBound:
        """``(lower_bound_s, estimate_s)`` of one iteration with ``strategy``.

        ``everyone=False`` leaves the calls of replicas other than 0 out of the link
        volume: a weaker bound, ~3x cheaper to compute for many replicas, for ranking all
        candidates; the search refines it before it would simulate one.
        """
        parallel, training = _configs(self.scenario, strategy)
        return self.iteration.bound(parallel, training, microbatches, everyone=everyone)


def iteration_bounds(scenario: Scenario) -> tuple[float, float]:
    """``(lower_bound_s, estimate_s)`` of ``scenario``'s own strategy (module docstring)."""
    par, train = scenario.parallel, scenario.training
    strategy = Strategy(tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep, cp=par.cp,
                        micro_batch=train.micro_batch, schedule=par.schedule,
                        interleave=par.interleave, zero=3 if par.fsdp else par.zero,
                        recompute=train.recompute, sequence_parallel=par.sequence_parallel,
                        order=par.order)
    return _Bounds(scenario).bounds(strategy, scenario.microbatches)


# --------------------------------------------------------------------------- simulation

_WORKER: dict[str, Any] = {}


def _worker_init(config: dict[str, Any], source: str | None, parent_pid: int) -> None:
    die_with_parent(parent_pid)  # (a killed search leaves no simulation running)
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
    check_whole(gpus, key="--gpus")
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
        microbatches = check_strategy(model, parallel, training,
                                      num_gpus=scenario.num_gpus)
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
    workers = _check_options(top, workers)
    if gpus is not None:
        scenario = _restrict_gpus(scenario, gpus)
    enumerated, alive, pruned = _candidates(scenario, space)
    bounds = _Bounds(scenario)
    _rank(alive, bounds)
    baseline_strategy, baseline_kind = _baseline(scenario)
    run = _Simulations(scenario, bounds, top=top, workers=workers, pruned=pruned,
                       time_limit_s=time_limit_s, started_s=started, progress=progress)
    run.run(_queue(alive, baseline_strategy), baseline_strategy)
    run.results.sort(key=lambda r: (r.iteration_time_s, r.strategy.label()))
    baseline, baseline_kind = _baseline_result(run, alive, baseline_strategy, baseline_kind)
    result = _assemble(scenario, run, enumerated, baseline, baseline_kind, started)
    if out_dir is not None:
        files = write_search_output(result, out_dir)
        result = dataclasses.replace(result, files=files,
                                     wall_time_s=time.perf_counter() - started)
    return result


def _check_options(top: int, workers: int | None) -> int:
    """Check ``top`` and ``workers``; the number of workers to use."""
    check_whole(top, key="--top")
    return check_whole((os.cpu_count() or 1) if workers is None else workers, key="--workers")


def _candidates(scenario: Scenario, space: Mapping[str, Iterable[Any]] | None,
                ) -> tuple[int, list[_Candidate], list[PrunedCandidate]]:
    """Enumerate the strategies and check each: ``(how many were enumerated, those valid
    that fit in memory, the others pruned with their reason)``."""
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
    return len(strategies), alive, pruned


def _rank(alive: list[_Candidate], bounds: _Bounds) -> None:
    """Each candidate's estimate and ranking bound (only replica 0's calls on the link
    volume); then sort by estimate, ties by bound."""
    for candidate in alive:
        candidate.lower_bound_s, candidate.estimate_s = bounds.bounds(
            candidate.strategy, candidate.microbatches, everyone=False)
    alive.sort(key=lambda c: (c.estimate_s, c.lower_bound_s))


def _queue(alive: list[_Candidate], baseline: Strategy | None,
           ) -> list[tuple[_Candidate | None, bool]]:
    """The order of simulation as ``(candidate, forced)``: the baseline first — as a
    candidate when it is one (``forced``: simulated whatever its bound), else on its own
    (``None``) — then the candidates in order of their estimate."""
    queue: list[tuple[_Candidate | None, bool]] = [(c, False) for c in alive]
    if baseline is not None:
        known = next((c for c in alive if c.strategy == baseline), None)
        if known is not None:
            queue.remove((known, False))
            queue.insert(0, (known, True))
        else:
            queue.insert(0, (None, True))
    return queue


_Outcome = tuple[float, float, float, float] | str


class _Simulations:
    """Simulates the queued candidates on ``workers`` processes with branch and bound:
    a candidate starts only while its lower bound is below the ``top``-th best simulated
    time so far (refined to every replica's calls first) and the time limit has not
    passed; the others are pruned."""

    def __init__(self, scenario: Scenario, bounds: _Bounds, *, top: int, workers: int,
                 pruned: list[PrunedCandidate], time_limit_s: float | None,
                 started_s: float, progress: Callable[[str], None] | None) -> None:
        self.scenario = scenario
        self.bounds = bounds
        self.top = top
        self.workers = workers
        self.time_limit_s = time_limit_s
        self.started_s = started_s
        self.progress = progress
        self.pruned = pruned
        self.results: list[CandidateResult] = []
        self.times: list[float] = []
        self.baseline_outcome: _Outcome | None = None

    def run(self, queue: list[tuple[_Candidate | None, bool]],
            baseline: Strategy | None) -> None:
        """Run ``queue`` in order (:func:`_queue`), up to ``workers`` at a time."""
        pool: ProcessPoolExecutor | _InProcess
        if self.workers == 1:
            pool = _InProcess(self.scenario)
        else:
            pool = ProcessPoolExecutor(max_workers=self.workers, initializer=_worker_init,
                                       initargs=(self.scenario.resolved(),
                                                 self.scenario.source, os.getpid()))
        try:
            running: dict[Future[Any], _Candidate | None] = {}
            position = 0
            while position < len(queue) or running:
                while position < len(queue) and len(running) < self.workers:
                    candidate, forced = queue[position]
                    position += 1
                    if candidate is None:
                        running[pool.submit(_simulate_in_worker, baseline)] = None
                    elif forced or self._admit(candidate):
                        running[pool.submit(_simulate_in_worker,
                                            candidate.strategy)] = candidate
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    owner = running.pop(future)
                    if owner is None:
                        self.baseline_outcome = future.result()
                    else:
                        self._record(owner, future.result())
        finally:
            pool.shutdown(cancel_futures=True)

    def _admit(self, candidate: _Candidate) -> bool:
        """Whether ``candidate`` starts now; if not, it is pruned (bound or time limit)."""
        threshold = _kth(self.times, self.top)
        if not candidate.refined and candidate.lower_bound_s < threshold < float("inf"):
            # About to simulate it: first the full bound (every replica's calls).
            candidate.lower_bound_s = max(candidate.lower_bound_s, self.bounds.bounds(
                candidate.strategy, candidate.microbatches)[0])
            candidate.refined = True
        if candidate.lower_bound_s >= threshold:
            self.pruned.append(PrunedCandidate(
                candidate.strategy, "bound", f"lower bound {candidate.lower_bound_s:.6g} s "
                f">= {self.top}-th best simulated {threshold:.6g} s",
                peak_memory_bytes=candidate.memory_bytes,
                lower_bound_s=candidate.lower_bound_s))
            return False
        limit = self.time_limit_s
        if limit is not None and time.perf_counter() - self.started_s > limit:
            self.pruned.append(PrunedCandidate(
                candidate.strategy, "time limit",
                f"not simulated: the {limit:g} s time limit had passed",
                peak_memory_bytes=candidate.memory_bytes,
                lower_bound_s=candidate.lower_bound_s))
            return False
        return True

    def _record(self, candidate: _Candidate, outcome: _Outcome) -> None:
        if isinstance(outcome, str):
            self.pruned.append(PrunedCandidate(candidate.strategy, "error", outcome))
            return
        time_s, samples, mfu, peak = outcome
        self.results.append(CandidateResult(candidate.strategy, candidate.lower_bound_s,
                                            candidate.estimate_s, time_s, samples, mfu,
                                            peak))
        self.times.append(time_s)
        if self.progress is not None:
            self.progress(f"[{len(self.results)}] {time_s * 1e3:.3f} ms  "
                          f"{candidate.strategy.label()}")


def _baseline_result(run: _Simulations, alive: list[_Candidate], strategy: Strategy | None,
                     kind: str) -> tuple[CandidateResult | None, str]:
    """The baseline's result — among the candidates' or simulated on its own — and its
    kind (with why it failed, if it did)."""
    if strategy is None:
        return None, kind
    baseline: CandidateResult | None = None
    for r in run.results:
        if r.strategy == strategy:
            baseline = r
    outcome = run.baseline_outcome
    if baseline is None and isinstance(outcome, tuple):
        known = next((c for c in alive if c.strategy == strategy), None)
        microbatches = with_strategy(run.scenario, strategy).microbatches
        lb, est = ((known.lower_bound_s, known.estimate_s) if known is not None
                   else run.bounds.bounds(strategy, microbatches))
        baseline = CandidateResult(strategy, lb, est, *outcome)
    elif baseline is None and isinstance(outcome, str):
        kind += f" (failed: {outcome})"
    return baseline, kind


def _assemble(scenario: Scenario, run: _Simulations, enumerated: int,
              baseline: CandidateResult | None, baseline_kind: str,
              started_s: float) -> SearchResult:
    """The search's result: counts by reason, the best scenario resolved."""
    results, pruned = run.results, run.pruned
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
    return SearchResult(
        name=scenario.name, num_gpus=scenario.num_gpus,
        global_batch=scenario.training.global_batch, k=run.top, enumerated=enumerated,
        pruned_counts=pruned_counts, invalid_reasons=dict(invalid.most_common()),
        results=tuple(results), pruned=tuple(pruned), best_config=best_config,
        baseline=baseline, baseline_kind=baseline_kind,
        wall_time_s=time.perf_counter() - started_s)


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
