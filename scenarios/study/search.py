"""Strategy search: the fastest parallel strategies for a scenario's model on its cluster.

``distsim search SCENARIO --out DIR`` enumerates strategies (tensor, pipeline, data and
expert parallel degrees, micro-batch, pipeline schedule, ZeRO stage, activation
recomputation, sequence parallelism, rank placement) at the scenario's global batch,
prunes what cannot run or cannot win, simulates the rest and reports the best ``--top``.

**Enumeration** (each axis can be restricted with ``space``; the defaults in brackets):

* ``tp`` divides the GPUs per node and the attention heads [all such];
* ``pp``: with ``partition: uniform`` a divisor of the layers, with ``embedding`` any
  ``pp`` ≤ layers [all such]; ``tp·pp·cp`` must divide the GPU count,
  ``dp = GPUs/(tp·pp·cp)``;
* ``cp`` [1] (a value > 1 needs ``seq_len`` divisible by ``2·cp``);
* ``ep`` (MoE models only) divides the experts and ``cp·dp``, the ranks Megatron-Core
  folds the expert groups over (``tp·cp·dp / expert_tp`` with ``expert_tp``) [all such];
  1 for dense models;
* ``expert_tp`` (MoE models only) [null: the dense ``tp``]: a divisor of ``tp`` below it
  when the space names it (``--space expert_tp=null,1``);
* ``micro_batch`` divides ``global_batch/dp`` [1, 2, 4, 8];
* ``schedule`` [1f1b, gpipe, interleaved]; interleaved only with ``pp`` ≥ 2, once per
  ``interleave`` [2, 4]; dualpipev and dualpipe (two chunks a stage, ``pp`` ≥ 2) when the
  space names them;
* ``zero`` [0, 1, 3]: ZeRO-1 and ZeRO-3 only with ``dp`` > 1; ZeRO-3 under a pipeline
  (FSDP2 as torchtitan runs it: each stage's parameters gathered from its first forward,
  reduce-scattered after the last micro-batch's backward) on gpipe, 1f1b and interleaved,
  not on the two-chunk schedules;
* ``dp_replicate`` [1] (HSDP, ZeRO-3 of a dense model only): a divisor of ``dp`` below it
  when the space names it (``--space dp_replicate=1,2,4,8``);
* ``reshard_after_forward`` [null (torchtitan's policy), false]: false only with ZeRO-3
  at ``pp`` = 1 (FSDP's ``SHARD_GRAD_OP``, torchtitan's ``never``); under a pipeline it is
  false already;
* ``recompute`` [none, selective, full]; ``op`` (torchtitan's per-operator checkpointing)
  only when asked (``--space recompute=none,op,full``): it is one framework's policy,
  between ``selective`` and ``full`` in time and memory, and a fourth mode adds a third more
  candidates;
* ``sequence_parallel`` [false, true]: true only with ``tp`` > 1;
* ``order`` [tp-dp-pp, dp-tp-pp]: dp-tp-pp (the bad placement) only with ``tp`` > 1 and
  ``dp`` > 1, where it differs.

**Pruning**, in this order, each pruned candidate counted under its reason:

1. ``invalid`` — :func:`~workloads.strategy.parallel.check_strategy` rejects it (e.g.
   ``pp·interleave`` does not divide the layers, the interleaved schedule's micro-batches are not a
   multiple of ``pp``);
2. ``memory`` — :func:`~workloads.cost.memory.memory_per_gpu` of some pipeline stage exceeds the
   GPU's memory;
3. ``bound`` — branch and bound on a *lower bound* of the iteration time: the longest of
   the chains of work the simulator runs one after another (see :mod:`workloads.cost.bounds`) —
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

``reshard_after_forward: false`` is in the default space: it adds 2.5-7 % candidates
(ZeRO-3 at ``pp`` 1 only) and wins where the weights fit whole (the quickstart's 16 GPUs:
3 % faster than the best without it).  HSDP and ``expert_tp`` stay out: HSDP adds
~30 % of fitting candidates and did not move the winner of Llama 2 70B on 64 H100s (its
best, 0.29 % behind; ``benchmarks/README.md``); ``expert_tp`` multiplies a MoE model's
expert layouts.  The
scenario's own values of the three do not carry into the candidates (every candidate sets
them, to the defaults unless the space names others).

A search none of whose strategies is valid and fits in memory raises a
:class:`ConfigError` naming the leanest candidate's need against the GPU's memory (after
writing ``pruned.csv``).

A time limit (``--time-limit``) stops starting simulations once passed; candidates left
are pruned as ``time limit`` and the answer is the best found, without the guarantee.

Survivors are simulated in parallel (``workers`` processes; 1: in this process), each as the
scenario with the strategy applied.  The best are compared with a naive **baseline**,
simulated too: pure data parallelism (tp = pp = 1, ZeRO 0, no recompute, the scenario's
micro-batch or the largest that fits) when it fits in memory, else the model-parallel
strategy that fits with the fewest ``tp·pp`` GPUs (then 1F1B, full recompute).

``DIR`` receives ``results.csv`` (every simulated candidate, with its run's notes),
``pruned.csv`` (every pruned candidate and why) and ``best.yaml`` (the best scenario,
resolved: ``distsim run`` runs it).  The summary gives each runner-up's margin over the
best, the best as ``--set`` overrides of the scenario and the notes its run gave.

The space is :mod:`.search_space`, the checks, bounds and order :mod:`.search_prune`, the
simulations :mod:`.search_run`, the records :mod:`.search_results`, the output
:mod:`.search_output`; this module runs a search through them.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from distsim_gpu.scenarios.scenario import Scenario
from distsim_gpu.scenarios.study.search_output import format_search, write_search_output
from distsim_gpu.scenarios.study.search_prune import (
    Candidate,
    StrategyBounds,
    check_candidate,
    check_candidates,
    iteration_bounds,
    rank_candidates,
    simulation_queue,
)
from distsim_gpu.scenarios.study.search_results import (
    CandidateResult,
    PrunedCandidate,
    SearchResult,
)
from distsim_gpu.scenarios.study.search_run import Simulations
from distsim_gpu.scenarios.study.search_space import (
    SPACE_KEYS,
    STRATEGY_KEYS,
    Strategy,
    enumerate_strategies,
    gpus_per_node,
    with_strategy,
)
from distsim_gpu.simcore.config import check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.pool import Workers
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.strategy.sharding import reshards_after_forward

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
    return scenario.with_run(topology=topology)


def _baseline(scenario: Scenario, checked: list[Candidate] | None,
              ) -> tuple[Strategy | None, str]:
    """The naive strategy the best is compared with (module docstring); ``checked``: the
    default space's candidates that fit, where the search checked them already."""
    n = scenario.num_gpus
    own = scenario.training.micro_batch
    sizes = [own, *sorted({1, 2, 4, 8, 16, 32, 64} - {own}, reverse=True)]
    for mb in sizes:
        strategy = Strategy.on(scenario, tp=1, pp=1, dp=n, micro_batch=mb)
        candidate, _ = check_candidate(scenario, strategy)
        if candidate is not None:
            return strategy, "pure data parallel"
    fitting = ([c.strategy for c in checked] if checked is not None else
               [s for s in enumerate_strategies(scenario)
                if check_candidate(scenario, s)[0] is not None])
    if not fitting:
        return None, "none fits"
    best = min(fitting, key=lambda s: (
        s.parallel.tp * s.parallel.pp, s.parallel.schedule != "1f1b",
        s.training.recompute != "full", s.parallel.zero, s.parallel.ep,
        s.parallel.order != "tp-dp-pp", s.parallel.sequence_parallel, -s.training.micro_batch,
        s.parallel.tp, s.parallel.reshard_after_forward is False))
    return best, "smallest model parallel"


def search_strategies(scenario: Scenario, *, gpus: int | None = None, top: int = 10,
                      workers: int | Workers | None = None,
                      out_dir: str | os.PathLike[str] | None = None,
                      space: Mapping[str, Iterable[Any]] | None = None,
                      time_limit_s: float | None = None,
                      progress: Callable[[str], None] | None = None) -> SearchResult:
    """Search the parallel strategies of ``scenario`` (module docstring) and return the
    ``top`` fastest with the counts of what was enumerated, pruned and simulated.

    ``gpus``: search on the first ``gpus`` GPUs' worth of nodes instead of the whole
    cluster; ``workers``: simulation processes, or a :class:`~simcore.pool.Workers` (a Dask
    cluster's scheduler) (default ``os.cpu_count()`` processes, 1 runs in this
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
    enumerated, alive, pruned = check_candidates(scenario, space)
    if not alive:
        if out_dir is not None:  # pruned.csv says why each was dropped
            write_search_output(_assemble(scenario, _Nothing(pruned, top), enumerated, None,
                                          "none fits", started), out_dir)
        raise _nothing_fits(scenario, enumerated, pruned)
    # Without a space the candidates are the default space's: the baseline is among them
    # (chosen in the enumeration's order, before the ranking sorts them).
    baseline_strategy, baseline_kind = _baseline(scenario, alive if not space else None)
    bounds = StrategyBounds(scenario)
    rank_candidates(alive, bounds)
    run = Simulations(scenario, bounds, top=top, workers=workers, pruned=pruned,
                      time_limit_s=time_limit_s, started_s=started, progress=progress)
    run.run(simulation_queue(alive, baseline_strategy), baseline_strategy)
    run.results.sort(key=lambda r: (r.iteration_time_s, r.strategy.label()))
    baseline, baseline_kind = _baseline_result(run, alive, baseline_strategy, baseline_kind)
    result = _assemble(scenario, run, enumerated, baseline, baseline_kind, started)
    if out_dir is not None:
        files = write_search_output(result, out_dir)
        result = dataclasses.replace(result, files=files,
                                     wall_time_s=time.perf_counter() - started)
    return result


@dataclasses.dataclass(frozen=True, slots=True)
class _Nothing:
    """What :func:`_assemble` reads of a search that simulated nothing."""

    pruned: list[PrunedCandidate]
    top: int
    results: tuple[CandidateResult, ...] = ()


def _nothing_fits(scenario: Scenario, enumerated: int,
                  pruned: list[PrunedCandidate]) -> ConfigError:
    """The error of a search none of whose candidates is valid and fits: how many were
    dropped for which reason, the leanest candidate's need against the GPU's memory, and
    what would make room."""
    counts = Counter(p.reason for p in pruned)
    if not enumerated:
        model = scenario.model
        return ConfigError(
            f"the search space has no strategy for {scenario.num_gpus} GPUs at global batch "
            f"{scenario.training.global_batch}: tp divides the {gpus_per_node(scenario)} "
            f"GPUs a node and the {model.heads} heads, pp the {model.layers} layers, and "
            "dp = GPUs/(tp·pp·cp) the global batch", key="space", source=scenario.source,
            hint="another GPU count (--gpus) or global batch (--set training.global_batch="
            "...), or fewer restricted axes (--space)")
    said = f"none of the {enumerated} strategies for {scenario.name} on " \
        f"{scenario.num_gpus} GPUs can run ({counts['memory']} out of memory, " \
        f"{counts['invalid']} invalid)"
    oom = [p for p in pruned if p.reason == "memory" and p.peak_memory_bytes is not None]
    if not oom:
        detail = Counter(p.detail for p in pruned).most_common(1)[0][0]
        return ConfigError(f"{said}; the commonest reason: {detail}", key="space",
                           source=scenario.source,
                           hint="pruned.csv lists each strategy and why it was dropped")
    leanest = min(oom, key=lambda p: (p.peak_memory_bytes, p.strategy.label()))
    assert leanest.peak_memory_bytes is not None
    capacity = scenario.gpu.memory_bytes
    return ConfigError(
        f"{said}: the leanest, {leanest.strategy.label()}, needs "
        f"{leanest.peak_memory_bytes / 2**30:.1f} GiB of the {capacity / 2**30:.1f} GiB a "
        f"{scenario.gpu.name} has", key="compute.gpu", source=scenario.source,
        hint=f"about {leanest.peak_memory_bytes / capacity:.1f}x the memory: more GPUs "
        "(cluster.nodes), a GPU with more memory, optimizer offload (parallelism.offload), "
        "or a smaller global batch")


def _check_options(top: int, workers: int | Workers | None) -> Workers:
    """Check ``top`` and ``workers``; where the simulations run."""
    check_whole(top, key="--top")
    if isinstance(workers, Workers):
        return workers
    return Workers(check_whole((os.cpu_count() or 1) if workers is None else workers,
                               key="--workers"))


def _baseline_result(run: Simulations, alive: list[Candidate], strategy: Strategy | None,
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


def _assemble(scenario: Scenario, run: Simulations | _Nothing, enumerated: int,
              baseline: CandidateResult | None, baseline_kind: str,
              started_s: float) -> SearchResult:
    """The search's result: counts by reason, the best scenario resolved."""
    results, pruned = run.results, run.pruned
    best_config: dict[str, Any] | None = None
    best_overrides: dict[str, Any] | None = None
    if results:
        best = with_strategy(scenario, results[0].strategy, name=f"{scenario.name}-best")
        best_config = best.resolved()
        best_config["description"] = (
            f"best of distsim search over {scenario.name}: {results[0].strategy.label()}")
        best_overrides = _changed_keys(scenario, results[0].strategy)
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
        wall_time_s=time.perf_counter() - started_s, best_overrides=best_overrides,
        gpu_memory_bytes=scenario.gpu.memory_bytes)


def _changed_keys(scenario: Scenario, strategy: Strategy) -> dict[str, Any]:
    """The dotted scenario keys ``strategy`` sets to another value than ``scenario``'s:
    ``distsim run SCENARIO --set KEY=VALUE ...`` of them runs the strategy.  A key the
    strategy leaves to the framework's default (None) that the scenario set is written
    with the value that default takes (``reshard_after_forward``), or the dense ``tp``
    (``expert_tp``)."""
    changed: dict[str, Any] = {}
    for dotted, value in strategy.overrides().items():
        section, key = dotted.split(".", 1)
        own = getattr(scenario.parallel if section == "parallelism" else scenario.training,
                      key)
        if own != value:
            changed[dotted] = value
    par = scenario.parallel
    if par.expert_tp is not None and strategy.parallel.expert_tp is None:
        changed["parallelism.expert_tp"] = strategy.parallel.tp
    if par.reshard_after_forward is not None and strategy.parallel.reshard_after_forward is None:
        changed["parallelism.reshard_after_forward"] = (
            reshards_after_forward(strategy.parallel) if strategy.parallel.zero == 3 else None)
    return changed
