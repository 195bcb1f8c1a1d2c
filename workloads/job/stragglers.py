"""Stragglers as distributions, and what they cost an iteration, by dimension.

A straggler is a GPU whose compute runs slower than the cost model says by a factor
(``1.3``: 30 % slower).  Besides factors written per GPU, a :class:`StragglerModel` draws
them from two sources of slowness seen on real clusters:

* **jitter** — every GPU's speed for the iteration varies a little (clocks, thermals,
  kernel-launch noise): a factor from a lognormal distribution of median 1 and log-spread
  ``sigma`` (its mean is ``exp(sigma²/2)``, a little above 1);
* **slow nodes** — now and then a whole node is slow (a throttled chassis, a bad fan, a
  noisy neighbour on the host): each node is slow with probability ``rate`` and then all
  its GPUs run ``factor`` times slower.

Both are drawn from a :class:`numpy.random.Generator` seeded with the scenario's seed
(``simulation.seed``), so the same seed gives the same factors, and no global random state
is touched.  Factors multiply (a GPU written by name, jittered, on a slow node).

**What they cost** (:func:`straggler_cost`): the iteration with the drawn factors, against
the same iteration with the factors evened out one dimension at a time — first within each
tensor-parallel group (TP ranks run in lockstep: a group runs at its slowest member's
pace), then within each pipeline stage across data-parallel replicas (replicas meet at the
gradient reduction: the slowest replica holds the others at the barrier), then across
pipeline stages (a slow stage sets the pipeline's pace) — and finally without stragglers.
Each step removes one way a slow GPU makes others wait while keeping the average
slowness, so the differences telescope to the whole cost:

    cost = (T - T_tp) + (T_tp - T_dp) + (T_dp - T_mean) + (T_mean - T_0)
           TP lockstep    DP barrier     pipeline          average slowdown

Each term is measured by simulation (five runs in all), not assumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_number,
)

__all__ = [
    "JITTER_DISTRIBUTIONS",
    "MAX_FACTOR",
    "MAX_JITTER_SIGMA",
    "STRAGGLER_KEYS",
    "StragglerCost",
    "StragglerModel",
    "straggler_cost",
    "straggler_model_from_mapping",
]

JITTER_DISTRIBUTIONS = ("lognormal",)
#: Keys of a ``stragglers:`` mapping besides GPU names.
STRAGGLER_KEYS = ("jitter", "slow_nodes", "attribute")


@dataclass(frozen=True, slots=True)
class StragglerModel:
    """Per-GPU slowdown factors: ``fixed`` by name, times lognormal ``jitter_sigma``,
    times ``slow_node_factor`` on nodes drawn slow with probability ``slow_node_rate``.
    ``attribute``: whether a report measures what they cost by dimension."""

    fixed: Mapping[str, float] = field(default_factory=dict)
    jitter_sigma: float = 0.0
    jitter_distribution: str = "lognormal"
    slow_node_rate: float = 0.0
    slow_node_factor: float = 1.0
    attribute: bool = True

    @property
    def random(self) -> bool:
        """Whether anything is drawn (else the factors are the fixed ones)."""
        return self.jitter_sigma > 0 or (self.slow_node_rate > 0 and self.slow_node_factor != 1)

    def draw(self, gpus: Sequence[str], node_of: Callable[[str], int],
             seed: int) -> dict[str, float]:
        """The factor of every GPU of ``gpus`` that is not 1, drawn from ``seed``.

        The draws do not depend on ``fixed``: the slow nodes (by node index, in order) then
        the jitter (by GPU, in the order given) come off one generator.
        """
        rng = np.random.default_rng(seed)
        nodes = sorted({node_of(g) for g in gpus})
        slow = dict(zip(nodes, rng.random(len(nodes)) < self.slow_node_rate, strict=True))
        jitter = (rng.lognormal(0.0, self.jitter_sigma, len(gpus)) if self.jitter_sigma > 0
                  else np.ones(len(gpus)))
        factors: dict[str, float] = {}
        for gpu, jittered in zip(gpus, jitter.tolist(), strict=True):
            factor = self.fixed.get(gpu, 1.0) * jittered
            if slow[node_of(gpu)]:
                factor *= self.slow_node_factor
            if factor != 1.0:
                factors[gpu] = factor
        return factors

    def to_dict(self) -> dict[str, Any]:
        """The ``stragglers:`` mapping that reproduces this model."""
        data: dict[str, Any] = dict(self.fixed)
        if self.jitter_sigma > 0:
            data["jitter"] = {"distribution": self.jitter_distribution,
                              "sigma": self.jitter_sigma}
        if self.slow_node_rate > 0:
            data["slow_nodes"] = {"rate": self.slow_node_rate, "factor": self.slow_node_factor}
        if self.random:
            data["attribute"] = self.attribute
        return data


#: The largest slowdown factor a straggler may have.  Fail-slow GPUs and nodes measured in
#: production run tens of percent to a few times slower than their peers; a GPU a
#: thousand times slower has in effect failed (a ``faults:`` entry says that), and factors
#: past this turn an iteration into years of simulated time that no reading can use.
MAX_FACTOR = 1000.0
#: The largest lognormal jitter sigma: at 1.0 a 4-sigma draw is already a factor of
#: e**4 = 55; measured run-to-run kernel jitter is a few percent (the docs use 0.05).
MAX_JITTER_SIGMA = 1.0
_FACTOR_HINT = (f"a slowdown factor up to {MAX_FACTOR:g}, e.g. 1.2: 20 % slower; a GPU "
                "that stopped is a fault")


def straggler_model_from_mapping(raw: Any, gpus: Iterable[str], *, source: str | None = None,
                                 prefix: str = "stragglers",
                                 check_gpu: Callable[[str, str], None] | None = None,
                                 ) -> StragglerModel:
    """A ``stragglers:`` mapping: GPU names with factors, and ``jitter``, ``slow_nodes``,
    ``attribute``.  ``check_gpu(name, key)`` raises for a name that is no GPU."""
    mapping = _nested(check_mapping(raw, key=prefix, source=source, optional=True))
    known = set(gpus)
    fixed: dict[str, float] = {}
    values: dict[str, Any] = {}
    for name, value in mapping.items():
        key = f"{prefix}.{name}"
        if name == "jitter":
            jitter = check_mapping(value, key=key, source=source)
            check_keys(jitter, ("distribution", "sigma"), prefix=key, source=source)
            values["jitter_distribution"] = check_choice(
                jitter.get("distribution", "lognormal"), JITTER_DISTRIBUTIONS,
                key=f"{key}.distribution", source=source, what="distribution")
            values["jitter_sigma"] = check_number(jitter.get("sigma"), key=f"{key}.sigma",
                                                  maximum=MAX_JITTER_SIGMA, source=source,
                                                  hint="e.g. 0.05: ~5 % spread")
        elif name == "slow_nodes":
            slow = check_mapping(value, key=key, source=source)
            check_keys(slow, ("rate", "factor"), prefix=key, source=source)
            values["slow_node_rate"] = check_number(slow.get("rate"), key=f"{key}.rate",
                                                    maximum=1.0, source=source,
                                                    hint="the chance that a node is slow")
            values["slow_node_factor"] = check_number(slow.get("factor"), key=f"{key}.factor",
                                                      minimum=1.0, maximum=MAX_FACTOR,
                                                      source=source, hint=_FACTOR_HINT)
        elif name == "attribute":
            values["attribute"] = check_bool(value, key=key, source=source)
        else:
            if name not in known and check_gpu is not None:
                check_gpu(str(name), key)
            fixed[str(name)] = check_number(value, key=key, above=True, maximum=MAX_FACTOR,
                                            source=source, hint=_FACTOR_HINT)
    return StragglerModel(fixed=fixed, **values)


def _nested(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
    """``--set stragglers.jitter.sigma=0.1`` arrives as the key ``jitter.sigma`` (GPU names
    hold dots, so everything after ``stragglers.`` is one key): nest it back."""
    nested: dict[Any, Any] = {}
    for name, value in mapping.items():
        head, dot, rest = str(name).partition(".")
        if dot and head in ("jitter", "slow_nodes"):
            inner = nested.setdefault(head, {})
            if isinstance(inner, dict):
                inner[rest] = value
                continue
        if isinstance(value, Mapping) and isinstance(nested.get(name), dict):
            nested[name] = {**value, **nested[name]}
        else:
            nested[name] = value
    return nested


@dataclass(frozen=True, slots=True)
class StragglerCost:
    """What the stragglers cost the iteration (seconds), by where the waits land; the terms
    add up to ``total_s`` (see the module docstring)."""

    iteration_s: float
    without_s: float
    tp_lockstep_s: float
    dp_barrier_s: float
    pipeline_s: float
    average_slowdown_s: float
    slowest_factor: float
    slow_gpus: int  # GPUs whose factor is not 1 (jitter makes some faster than nominal)
    fastest_factor: float = 1.0

    @property
    def total_s(self) -> float:
        return self.iteration_s - self.without_s

    def to_dict(self) -> dict[str, float | int]:
        return {"iteration_s": self.iteration_s, "without_stragglers_s": self.without_s,
                "total_s": self.total_s, "tp_lockstep_s": self.tp_lockstep_s,
                "dp_barrier_s": self.dp_barrier_s, "pipeline_s": self.pipeline_s,
                "average_slowdown_s": self.average_slowdown_s,
                "slowest_factor": self.slowest_factor, "fastest_factor": self.fastest_factor,
                "off_nominal_gpus": self.slow_gpus}


def straggler_cost(spec: Any, result: Any,
                   simulate: Callable[[Any], Any]) -> StragglerCost:
    """The cost of ``spec.stragglers`` on ``result`` (the run with them), by dimension.

    ``spec`` is an :class:`~workloads.iteration.records.IterationSpec`, ``simulate`` what runs
    one (``simulate_iteration``): four more runs with the factors evened out (module
    docstring).  A GPU's place comes from ``result.per_gpu`` (stage, replica).
    """
    factors = {g.gpu: spec.stragglers.get(g.gpu, 1.0) for g in result.per_gpu}

    def mean_by(key: Callable[[Any], Any]) -> dict[str, float]:
        groups: dict[Any, list[str]] = {}
        for g in result.per_gpu:
            groups.setdefault(key(g), []).append(g.gpu)
        means = {k: float(np.mean([factors[x] for x in members]))
                 for k, members in groups.items()}
        return {g.gpu: means[key(g)] for g in result.per_gpu}

    def run(evened: Mapping[str, float]) -> float:
        kept = {g: f for g, f in evened.items() if f != 1.0}
        return simulate(replace(spec, stragglers=kept, trace=False)).iteration_time_s

    t = result.iteration_time_s
    t_tp = run(mean_by(lambda g: (g.stage, g.replica)))
    t_dp = run(mean_by(lambda g: g.stage))
    t_mean = run(mean_by(lambda g: 0))
    t_0 = run({})
    return StragglerCost(t, t_0, t - t_tp, t_tp - t_dp, t_dp - t_mean, t_mean - t_0,
                         max(factors.values(), default=1.0),
                         sum(1 for f in factors.values() if f != 1.0),
                         min(factors.values(), default=1.0))
