"""The space a strategy search explores: a :class:`Strategy` (parallel degrees,
micro-batch, schedule, ZeRO, recomputation, sequence parallelism, rank placement), every
strategy of the space for a scenario (:func:`enumerate_strategies`, the rules in
:mod:`.search`'s docstring), and a scenario with a strategy applied."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distsim_gpu.scenarios.scenario import Scenario
from distsim_gpu.simcore.config import check_keys
from distsim_gpu.workloads.specs.moe_routing import routed_comm
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
)

__all__ = [
    "SPACE_KEYS",
    "STRATEGY_KEYS",
    "Strategy",
    "enumerate_strategies",
    "gpus_per_node",
    "strategy_configs",
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


def strategy_configs(scenario: Scenario, strategy: Strategy,
                     ) -> tuple[ParallelConfig, TrainingConfig]:
    """The scenario's parallel and training configurations with ``strategy`` set."""
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
    parallel, training = strategy_configs(scenario, strategy)
    model = scenario.model
    microbatches = check_strategy(model, parallel, training, num_gpus=scenario.num_gpus,
                                  source=scenario.source)
    # The router's skew at this ep (workloads.moe_routing).
    comm = routed_comm(scenario.comm, model, parallel.ep, scenario.source)
    return dataclasses.replace(scenario.with_run(parallel=parallel, training=training, comm=comm,
                                                 microbatches=microbatches),
                               name=name or scenario.name)
