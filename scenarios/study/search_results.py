"""What a strategy search found: each simulated candidate, each pruned one and why, and
the search's result as a whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim_gpu.scenarios.study.search_space import Strategy

__all__ = ["CandidateResult", "PrunedCandidate", "SearchResult"]


@dataclass(frozen=True, slots=True)
class CandidateResult:
    """A simulated strategy: its bound, estimate and simulated metrics (SI units), and the
    notes its run gave (assumptions that move the answer, as ``distsim run`` prints them)."""

    strategy: Strategy
    lower_bound_s: float
    estimate_s: float
    iteration_time_s: float
    samples_per_s: float
    mfu: float
    peak_memory_bytes: float
    notes: tuple[str, ...] = ()

    def row(self) -> dict[str, Any]:
        return {**self.strategy.to_dict(), "iteration_time_s": self.iteration_time_s,
                "samples_per_s": self.samples_per_s, "mfu": self.mfu,
                "peak_memory_bytes": self.peak_memory_bytes,
                "lower_bound_s": self.lower_bound_s, "estimate_s": self.estimate_s,
                "notes": " | ".join(self.notes)}


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
    ``best_config`` the best scenario resolved (a scenario mapping), ``best_overrides``
    the scenario keys (dotted) the best strategy changes: ``distsim run SCENARIO --set
    KEY=VALUE ...`` of them runs it; ``speedup`` the baseline's iteration time over the
    best's.
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
    best_overrides: dict[str, Any] | None = None
    gpu_memory_bytes: float | None = None

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

    def _margin(self, result: CandidateResult) -> float:
        """How much slower than the best ``result`` is (0.01: 1 %)."""
        assert self.best is not None
        return result.iteration_time_s / self.best.iteration_time_s - 1.0

    def to_dict(self) -> dict[str, Any]:
        """The result as ``distsim search --json`` prints it (SI units): the counts, the
        best ``k`` and the baseline as result rows, the speed-up, the files written."""
        return {"name": self.name, "num_gpus": self.num_gpus,
                "global_batch": self.global_batch, "enumerated": self.enumerated,
                "simulated": self.simulated, "pruned": dict(self.pruned_counts),
                "invalid_reasons": dict(self.invalid_reasons),
                "top": [{**result.row(), "notes": list(result.notes),
                         "slower_than_best": self._margin(result)} for result in self.top],
                "best_overrides": self.best_overrides,
                "baseline": None if self.baseline is None else {
                    **self.baseline.row(), "notes": list(self.baseline.notes),
                    "kind": self.baseline_kind},
                "speedup": self.speedup, "wall_time_s": self.wall_time_s,
                "files": list(self.files)}
