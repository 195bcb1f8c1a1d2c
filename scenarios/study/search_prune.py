"""Checking and ranking a search's candidates before any is simulated: a strategy the
scenario rejects is pruned as ``invalid``, one whose largest pipeline stage does not fit
in the GPU's memory as ``memory``; the others get their iteration bound and estimate
(:mod:`workloads.cost.bounds`) and are queued for simulation in order of the estimate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distsim_gpu.scenarios.scenario import Scenario
from distsim_gpu.scenarios.study.search_results import PrunedCandidate
from distsim_gpu.scenarios.study.search_space import (
    Strategy,
    enumerate_strategies,
)
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.bounds import IterationBound, IterationBounds
from distsim_gpu.workloads.cost.compute import activation_storage
from distsim_gpu.workloads.cost.memory import memory_of_strategy
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
)

__all__ = [
    "Candidate",
    "StrategyBounds",
    "check_candidate",
    "check_candidates",
    "iteration_bounds",
    "rank_candidates",
    "simulation_queue",
    "stage_memory",
]

_GIB = 2.0**30


def stage_memory(scenario: Scenario, parallel: ParallelConfig, training: TrainingConfig,
                 microbatches: int) -> float:
    """The largest bytes per GPU over the pipeline stages (as the simulator counts it)."""
    storage = activation_storage(scenario.costs)
    return max(memory_of_strategy(scenario.model, parallel, training, seq_len=scenario.seq_len,
                                  microbatches=microbatches, stage=stage, **storage).total_bytes
               for stage in range(parallel.pp))


class StrategyBounds:
    """The iteration bound and estimate (:mod:`workloads.cost.bounds`) of strategies applied to
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
        parallel, training = strategy.parallel, strategy.training
        return self.iteration.bound(parallel, training, microbatches, everyone=everyone)


def iteration_bounds(scenario: Scenario) -> tuple[float, float]:
    """``(lower_bound_s, estimate_s)`` of ``scenario``'s own strategy (module docstring)."""
    par, train = scenario.parallel, scenario.training
    strategy = Strategy.on(scenario, tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep, cp=par.cp,
                           micro_batch=train.micro_batch, schedule=par.schedule,
                           interleave=par.interleave, zero=3 if par.fsdp else par.zero,
                           recompute=train.recompute,
                           sequence_parallel=par.sequence_parallel, order=par.order,
                           dp_replicate=par.dp_replicate, expert_tp=par.expert_tp,
                           reshard_after_forward=par.reshard_after_forward)
    return StrategyBounds(scenario).bounds(strategy, scenario.microbatches)


@dataclass(slots=True)
class Candidate:
    """A strategy that passed the checks, with its micro-batch count, the bytes its largest
    stage needs, and (once ranked) its lower bound and estimate of the iteration time."""

    strategy: Strategy
    microbatches: int
    memory_bytes: float
    lower_bound_s: float = 0.0
    estimate_s: float = 0.0
    refined: bool = False  # lower_bound_s counts every replica's calls (see StrategyBounds)


def check_candidate(scenario: Scenario, strategy: Strategy,
                    ) -> tuple[Candidate | None, PrunedCandidate | None]:
    """``strategy`` on ``scenario`` as a candidate, or pruned: invalid, or out of memory."""
    parallel, training = strategy.parallel, strategy.training
    model = scenario.model
    try:
        microbatches = check_strategy(model, parallel, training, num_gpus=scenario.num_gpus)
    except ConfigError as error:
        return None, PrunedCandidate(strategy, "invalid", f"{error.key}: {error.message}")
    memory = stage_memory(scenario, parallel, training, microbatches)
    if memory > scenario.gpu.memory_bytes:
        return None, PrunedCandidate(
            strategy, "memory", f"needs {memory / _GIB:.1f} GiB of "
            f"{scenario.gpu.memory_bytes / _GIB:.1f} GiB", peak_memory_bytes=memory)
    return Candidate(strategy, microbatches, memory), None


def check_candidates(scenario: Scenario, space: Mapping[str, Iterable[Any]] | None,
                     ) -> tuple[int, list[Candidate], list[PrunedCandidate]]:
    """Enumerate the strategies and check each: ``(how many were enumerated, those valid
    that fit in memory, the others pruned with their reason)``."""
    strategies = enumerate_strategies(scenario, space=space)
    pruned: list[PrunedCandidate] = []
    alive: list[Candidate] = []
    for strategy in strategies:
        candidate, rejected = check_candidate(scenario, strategy)
        if rejected is not None:
            pruned.append(rejected)
        else:
            assert candidate is not None
            alive.append(candidate)
    return len(strategies), alive, pruned


def rank_candidates(alive: list[Candidate], bounds: StrategyBounds) -> None:
    """Each candidate's estimate and ranking bound (only replica 0's calls on the link
    volume); then sort by estimate, ties by bound."""
    for candidate in alive:
        candidate.lower_bound_s, candidate.estimate_s = bounds.bounds(
            candidate.strategy, candidate.microbatches, everyone=False)
    alive.sort(key=lambda c: (c.estimate_s, c.lower_bound_s))


def simulation_queue(alive: list[Candidate], baseline: Strategy | None,
                     ) -> list[tuple[Candidate | None, bool]]:
    """The order of simulation as ``(candidate, forced)``: the baseline first — as a
    candidate when it is one (``forced``: simulated whatever its bound), else on its own
    (``None``) — then the candidates in order of their estimate."""
    queue: list[tuple[Candidate | None, bool]] = [(c, False) for c in alive]
    if baseline is not None:
        known = next((c for c in alive if c.strategy == baseline), None)
        if known is not None:
            queue.remove((known, False))
            queue.insert(0, (known, True))
        else:
            queue.insert(0, (None, True))
    return queue
