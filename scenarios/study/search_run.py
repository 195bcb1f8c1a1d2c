"""Simulating a search's queued candidates with branch and bound, on a
:class:`~distsim_gpu.simcore.pool.WorkerPool`: a candidate starts only while its lower
bound is below the ``top``-th best simulated time so far and the time limit has not
passed (the others are pruned); each worker builds the scenario once and applies each
strategy to it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from distsim_gpu.scenarios.scenario import (
    Scenario,
    run_scenario,
    scenario_from_mapping,
    stack_overlap_defaults,
)
from distsim_gpu.scenarios.study.search_prune import Candidate, StrategyBounds
from distsim_gpu.scenarios.study.search_results import CandidateResult, PrunedCandidate
from distsim_gpu.scenarios.study.search_space import Strategy, with_strategy
from distsim_gpu.simcore import progress as progress_line
from distsim_gpu.simcore.errors import DistsimError
from distsim_gpu.simcore.pool import WorkerPool, Workers

__all__ = ["Metrics", "Outcome", "Simulations"]

_WORKER: dict[str, Any] = {}

# A simulated candidate's iteration time (s), samples/s, MFU, peak bytes, notes.
Metrics = tuple[float, float, float, float, tuple[str, ...]]


def _worker_init(config: dict[str, Any], source: str | None) -> None:
    """A worker's start: keep the scenario's resolved configuration (built on first use)."""
    _WORKER.clear()
    _WORKER["config"] = config
    _WORKER["source"] = source


# The parallelism keys whose default a candidate says by leaving them out.
_DEFAULTED_KEYS = ("dp_replicate", "expert_tp", "reshard_after_forward")


def _base_config(scenario: Scenario) -> dict[str, Any]:
    """``scenario`` resolved for the workers, without the keys a candidate sets by leaving
    them out (:meth:`Strategy.overrides`) — the scenario's own HSDP, expert_tp or
    reshard_after_forward would otherwise stay in every candidate's first build — nor
    those it left to its stack (their value is the stack's for its own strategy: the
    buckets at its dp, the interleaved schedule's aligned reductions), which the stack
    sets again for each candidate."""
    config = scenario.resolved()
    stack = stack_overlap_defaults(scenario.parallel, scenario.roofline)
    config["parallelism"] = {key: value for key, value in config["parallelism"].items()
                             if key not in _DEFAULTED_KEYS
                             and not (key in stack and value == stack[key])}
    return config


def _worker_scenario(strategy: Strategy) -> Scenario:
    cached = _WORKER.get("scenario")
    if cached is None:
        # Built once per process, validated with the first strategy it runs.
        config = _WORKER["config"]
        cached = scenario_from_mapping(config, source=_WORKER["source"],
                                       overrides=list(strategy.overrides().items()))
        _WORKER["scenario"] = cached
    return with_strategy(cached, strategy)


def _metrics(scenario: Scenario) -> Metrics:
    """Simulate: iteration time (s), samples/s, MFU, peak bytes on a GPU, the run's notes
    (the assumptions ``distsim run`` of the candidate would print)."""
    report = run_scenario(scenario)
    peak = max(g.peak_memory_bytes for g in report.per_gpu)
    return (report.iteration_time_s, report.samples_per_s, report.mfu, peak,
            tuple(str(note) for note in report.notes))


# A simulation to run: who asked for it (a candidate, or None for a baseline that is none),
# and its strategy.
_Task = tuple[Candidate | None, Strategy]


def _simulate_in_worker(task: _Task) -> Metrics | str:
    try:
        return _metrics(_worker_scenario(task[1]))
    except DistsimError as error:
        return str(error)


def _simulate_here(scenario: Scenario, task: _Task) -> Metrics | str:
    """:func:`_simulate_in_worker` in this process, from the scenario itself (``workers=1``)."""
    try:
        return _metrics(with_strategy(scenario, task[1]))
    except DistsimError as error:
        return str(error)


def _kth(times: list[float], k: int) -> float:
    if len(times) < k:
        return float("inf")
    return sorted(times)[k - 1]


Outcome = Metrics | str


class Simulations:
    """Simulates the queued candidates on ``workers`` processes with branch and bound:
    a candidate starts only while its lower bound is below the ``top``-th best simulated
    time so far (refined to every replica's calls first) and the time limit has not
    passed; the others are pruned."""

    def __init__(self, scenario: Scenario, bounds: StrategyBounds, *, top: int, workers: Workers,
                 pruned: list[PrunedCandidate], time_limit_s: float | None,
                 started_s: float, progress: Callable[[str], None] | None) -> None:
        self.scenario = scenario
        self.bounds = bounds
        self.top = top
        self.workers = workers  # where the simulations run (processes, or a Dask cluster)
        self.time_limit_s = time_limit_s
        self.started_s = started_s
        self.progress = progress
        self.pruned = pruned
        self.results: list[CandidateResult] = []
        self.times: list[float] = []
        self.baseline_outcome: Outcome | None = None
        # A terminal's progress line (simcore.progress): candidates decided of all queued.
        self.reporter = progress_line.current()
        self.decided, self.queued = 0, 0

    def run(self, queue: list[tuple[Candidate | None, bool]],
            baseline: Strategy | None) -> None:
        """Run ``queue`` in order (:func:`simulation_queue`), up to ``workers`` at a time."""
        self.queued = len(queue)
        simulate: Callable[[_Task], Outcome]
        if self.workers == Workers(1):
            pool = WorkerPool(1)
            simulate = partial(_simulate_here, self.scenario)
        else:
            pool = self.workers.pool(initializer=_worker_init,
                                     initargs=(_base_config(self.scenario),
                                               self.scenario.source))
            simulate = _simulate_in_worker
        with pool:
            for done in pool.as_completed(simulate, self._admitted(queue, baseline)):
                owner = done.task[0]
                if owner is None:
                    self.baseline_outcome = done.result()
                else:
                    self._record(owner, done.result())
                self._decided()

    def _admitted(self, queue: list[tuple[Candidate | None, bool]],
                  baseline: Strategy | None) -> Iterator[_Task]:
        """The simulations of ``queue`` to start, each decided when a worker is free."""
        for candidate, forced in queue:
            if candidate is None:
                assert baseline is not None
                yield None, baseline
            elif forced or self._admit(candidate):
                yield candidate, candidate.strategy
            else:  # pruned: decided without a simulation
                self._decided()

    def _decided(self) -> None:
        """One more queued candidate simulated or pruned (the progress line's count)."""
        self.decided += 1
        if self.reporter is not None:
            self.reporter.stage(self.decided, self.queued, "candidates")

    def _admit(self, candidate: Candidate) -> bool:
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

    def _record(self, candidate: Candidate, outcome: Outcome) -> None:
        if isinstance(outcome, str):
            self.pruned.append(PrunedCandidate(candidate.strategy, "error", outcome))
            return
        time_s = outcome[0]
        self.results.append(CandidateResult(candidate.strategy, candidate.lower_bound_s,
                                            candidate.estimate_s, *outcome))
        self.times.append(time_s)
        if self.progress is not None:
            self.progress(f"[{len(self.results)}] {time_s * 1e3:.3f} ms  "
                          f"{candidate.strategy.label()}")
