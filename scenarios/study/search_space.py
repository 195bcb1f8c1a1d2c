"""The space a strategy search explores: a :class:`Strategy` (parallel degrees,
micro-batch, schedule, ZeRO and how it shards, recomputation, sequence parallelism, rank
placement), every
strategy of the space for a scenario (:func:`enumerate_strategies`, the rules in
:mod:`.search`'s docstring), and a scenario with a strategy applied."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distsim_gpu.scenarios.scenario import Scenario, stack_overlap_defaults
from distsim_gpu.simcore.config import check_keys
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.moe_routing import routed_comm
from distsim_gpu.workloads.strategy.dimensions import DIMENSIONS, dimensions
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
)
from distsim_gpu.workloads.strategy.schedule import V_SCHEDULES

__all__ = [
    "SPACE_KEYS",
    "STRATEGY_KEYS",
    "Strategy",
    "enumerate_strategies",
    "gpus_per_node",
    "with_strategy",
]

# The dimensions' degrees first (the registry's order), then how each pipeline runs.
_RUN_KEYS = ("micro_batch", "schedule", "interleave", "zero", "reshard_after_forward",
             "recompute", "sequence_parallel", "order")
STRATEGY_KEYS = (*(d.name for d in DIMENSIONS), *_RUN_KEYS)
# Dimensions the registry does not search but a space may name: HSDP's replicate groups
# and the experts' own tensor parallelism (each left at the frameworks' default unless
# asked: :mod:`.search`'s docstring says why).
_OPT_IN_DIMENSIONS = ("dp_replicate", "expert_tp")
# Data parallelism is not an axis: its degree is what the others leave of the cluster.
SPACE_KEYS = (*(d.name for d in DIMENSIONS if d.searched or d.name in _OPT_IN_DIMENSIONS),
              *_RUN_KEYS)

_DEFAULT_SPACE: dict[str, tuple[Any, ...] | None] = {
    **{d.name: d.search_default for d in DIMENSIONS if d.searched},
    "dp_replicate": (1,),
    "expert_tp": (None,),  # None: the experts run at the dense tp (Megatron-Core's default)
    # None: torchtitan's policy (True at pp 1, else False); False adds ZeRO-3 at pp 1
    # keeping its forward's gathers for the backward (search.py's docstring: why).
    "reshard_after_forward": (None, False),
    "micro_batch": (1, 2, 4, 8),
    "schedule": ("1f1b", "gpipe", "interleaved"),
    "interleave": (2, 4),
    "zero": (0, 1, 3),
    "recompute": ("none", "selective", "full"),  # "op" when asked (module docstring)
    "sequence_parallel": (False, True),
    "order": ("tp-dp-pp", "dp-tp-pp"),
}


#: The strategy fields a search sets on the training configuration; the others are
#: ``parallelism`` keys.
_TRAINING_KEYS = ("micro_batch", "recompute")
#: What a strategy sets where it does not say: one plain 1F1B pipeline per replica, no
#: sharding, no recomputation (whatever the scenario itself runs).
#: The scenario's own HSDP, expert_tp and reshard_after_forward are reset too: left in,
#: they would make every candidate they do not fit (ZeRO below 3, say) invalid.
_UNSAID = {"ep": 1, "cp": 1, "micro_batch": 1, "schedule": "1f1b", "interleave": 1, "zero": 0,
           "recompute": "none", "sequence_parallel": False, "order": "tp-dp-pp",
           "dp_replicate": 1, "expert_tp": None, "reshard_after_forward": None}


@dataclass(frozen=True, slots=True)
class Strategy:
    """One point of the search space: the scenario's own parallel and training
    configurations with the searched fields (:data:`STRATEGY_KEYS`) replaced — the same
    typed objects a scenario runs, so a candidate needs no translation.  Candidates are
    uniform over the layers (no layer groups) and shard with ZeRO, not FSDP."""

    parallel: ParallelConfig
    training: TrainingConfig

    @classmethod
    def on(cls, scenario: Scenario, *, tp: int, pp: int, dp: int, **fields: Any) -> Strategy:
        """``scenario``'s configurations with ``tp``, ``pp``, ``dp`` and ``fields`` set
        (others of :data:`STRATEGY_KEYS`: as :data:`_UNSAID`)."""
        check_keys(fields, _UNSAID, what="strategy field")
        chosen = {**_UNSAID, **fields, "tp": tp, "pp": pp, "dp": dp}
        training = {key: chosen.pop(key) for key in _TRAINING_KEYS}
        parallel = restacked(scenario, dataclasses.replace(
            scenario.parallel, fsdp=False, layer_groups=(), **chosen))
        return cls(parallel, dataclasses.replace(scenario.training, **training))

    def value(self, key: str) -> Any:
        """The strategy's value of one of :data:`STRATEGY_KEYS`."""
        return getattr(self.training if key in _TRAINING_KEYS else self.parallel, key)

    def to_dict(self) -> dict[str, Any]:
        return {key: self.value(key) for key in STRATEGY_KEYS}

    def overrides(self) -> dict[str, Any]:
        """The scenario keys (dotted) this strategy sets."""
        # None (expert_tp, reshard_after_forward) is the framework's default, which a
        # scenario says by leaving the key out: no ``--set`` value spells it.
        data = {f"parallelism.{key}": self.value(key) for key in STRATEGY_KEYS
                if key not in _TRAINING_KEYS and self.value(key) is not None}
        data["parallelism.fsdp"] = False
        data.update({f"training.{key}": self.value(key) for key in _TRAINING_KEYS})
        return data

    def label(self) -> str:
        par, train = self.parallel, self.training
        parts = [f"tp{par.tp} pp{par.pp} dp{par.dp}"]
        parts += [f"{d.name}{d.degree(par)}" for d in dimensions()
                  if d.name not in ("tp", "pp", "dp") and d.degree(par) > 1
                  and (d.set_in is None or d.set_in(par))]
        if par.tp > 1 and par.tp_mode != "1d":
            parts.append(f"tp_mode {par.tp_mode}")
        parts.append(f"mb{train.micro_batch}")
        parts.append(f"interleaved×{par.interleave}" if par.schedule == "interleaved"
                     else par.schedule)
        if par.zero:
            parts.append(f"zero{par.zero}")
        if par.reshard_after_forward is False and par.pp == 1:
            parts.append("no reshard after forward")
        parts.append(f"recompute {train.recompute}")
        if par.sequence_parallel:
            parts.append("sp")
        if par.order != "tp-dp-pp":
            parts.append(f"order {par.order}")
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
        for value in result[key]:
            _check_axis_value(key, value)
    return result


# Axes whose values are whole numbers (None too where marked) or true/false (None too):
# the rest (schedule, recompute, zero, order) are checked with each candidate.
_WHOLE_AXES = {"tp": False, "pp": False, "cp": False, "ep": False, "dp_replicate": False,
               "interleave": False, "micro_batch": False, "expert_tp": True}
_FLAG_AXES = {"sequence_parallel": False, "reshard_after_forward": True}


def _check_axis_value(key: str, value: Any) -> None:
    """A clear error for a value no candidate could take (a word for a degree, ``maybe``
    for a flag), before the enumeration computes with it."""
    if value is None and (_WHOLE_AXES.get(key) or _FLAG_AXES.get(key)):
        return
    if key in _WHOLE_AXES and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"must be whole numbers, got {value!r}", key=f"space.{key}",
                          hint="e.g. --space " + key + "=1,2,4"
                          + (" (null: the default)" if _WHOLE_AXES[key] else ""))
    if key in _FLAG_AXES and not isinstance(value, bool):
        raise ConfigError(f"must be true or false, got {value!r}", key=f"space.{key}",
                          hint=f"e.g. --space {key}=false,true"
                          + (" (null: the default)" if _FLAG_AXES[key] else ""))


def enumerate_strategies(scenario: Scenario, *,
                         space: Mapping[str, Iterable[Any]] | None = None) -> list[Strategy]:
    """Every strategy of the search space for ``scenario``'s model on its GPUs (module
    docstring for the rules); ``space`` restricts axes to the values given."""
    axes = _space(space)
    model, n = scenario.model, scenario.num_gpus
    gpn = gpus_per_node(scenario)

    def allowed(key: str, value: Any) -> bool:
        values = axes[key]
        return values is None or value in values

    tps = [t for t in _divisors(gpn) if model.heads % t == 0 and allowed("tp", t)]
    if scenario.parallel.partition == "uniform":
        pps = _divisors(model.layers)
    else:
        pps = list(range(1, model.layers + 1))
    out: list[Strategy] = []
    seen: set[tuple[Any, ...]] = set()
    seq_len = scenario.training.seq_len or model.seq_len
    cps = [c for c in axes["cp"] or () if c == 1 or seq_len % (2 * c) == 0]
    for tp, cp, pp in itertools.product(tps, cps, pps):
        if n % (tp * pp * cp) or not allowed("pp", pp):
            continue
        dp = n // (tp * pp * cp)
        for etp, ep in _expert_layouts(scenario, axes, tp=tp, cp=cp, dp=dp):
            for (mb, (schedule, interleave), zero, replicate, reshard, recompute, sp,
                 order) in itertools.product(
                    axes["micro_batch"] or (), _schedules(axes), axes["zero"] or (),
                    axes["dp_replicate"] or (), axes["reshard_after_forward"] or (),
                    axes["recompute"] or (), axes["sequence_parallel"] or (),
                    axes["order"] or ()):
                combo = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "expert_tp": etp, "cp": cp,
                         "micro_batch": mb, "schedule": schedule, "interleave": interleave,
                         "zero": zero, "dp_replicate": replicate,
                         "reshard_after_forward": _reshard(reshard, zero=zero, pp=pp),
                         "recompute": recompute, "sequence_parallel": bool(sp),
                         "order": order}
                if not _is_candidate(scenario.training.global_batch, gpn, combo):
                    continue
                # One stage has no pipeline to schedule: gpipe and 1f1b at pp 1 run the
                # same iteration, so only the first of them is a candidate.
                effective = tuple({**combo, "schedule": schedule if pp > 1 else None}.values())
                if effective in seen:
                    continue
                seen.add(effective)
                out.append(Strategy.on(scenario, **combo))
    return out


def _expert_layouts(scenario: Scenario, axes: Mapping[str, tuple[Any, ...] | None], *,
                    tp: int, cp: int, dp: int) -> list[tuple[int | None, int]]:
    """The ``(expert_tp, ep)`` pairs of a ``tp·cp·dp`` replica grid: Megatron-Core folds
    the expert groups over ``tp·cp·dp / expert_tp`` ranks (over ``cp·dp`` at the dense
    ``tp``, expert_tp None); ``expert_tp`` equal to ``tp`` is None's strategy.  A dense
    model has experts of neither."""
    model = scenario.model
    if model.experts <= 1:
        return [(None, 1)]
    ep_values, layouts = axes["ep"], []
    for etp in axes["expert_tp"] or ():
        if etp is not None and (tp % etp or etp == tp):
            continue
        span = tp * cp * dp // (tp if etp is None else etp)
        layouts += [(etp, e) for e in _divisors(model.experts)
                    if span % e == 0 and (ep_values is None or e in ep_values)]
    return layouts


def _reshard(value: bool | None, *, zero: int, pp: int) -> bool | None:
    """The ``reshard_after_forward`` a candidate sets: only False at ZeRO-3 without a
    pipeline differs from the default (True there; False under a pipeline, where True is
    not modelled), so every other value is the default, None."""
    return False if value is False and zero == 3 and pp == 1 else None


def _schedules(axes: Mapping[str, tuple[Any, ...] | None]) -> list[tuple[str, int]]:
    """The (schedule, interleave) pairs of the space: interleaved once per interleave, the
    two-chunk schedules (dualpipev, dualpipe) with their two chunks a stage."""
    schedules: list[tuple[str, int]] = []
    for name in axes["schedule"] or ():
        if name == "interleaved":
            schedules += [(name, v) for v in axes["interleave"] or ()]
        else:
            schedules.append((str(name), 2 if name in V_SCHEDULES else 1))
    return schedules


def _is_candidate(global_batch: int, gpn: int, combo: Mapping[str, Any]) -> bool:
    """Whether a combination of the axes is worth a candidate (the rules of
    :mod:`.search`; ``gpn``: GPUs per node)."""
    tp, pp, dp, cp, mb = (combo[k] for k in ("tp", "pp", "dp", "cp", "micro_batch"))
    schedule, zero, sp, order = (combo[k] for k in ("schedule", "zero", "sequence_parallel",
                                                     "order"))
    if global_batch % dp or (global_batch // dp) % mb:
        return False
    if schedule in ("interleaved", *V_SCHEDULES) and pp < 2:
        return False
    if zero and dp == 1:
        return False
    # ZeRO-3 under a pipeline is FSDP2 as torchtitan runs it, on one-direction schedules
    # only (workloads.strategy.sharding); HSDP splits a ZeRO-3 dense model's replicas.
    if zero == 3 and schedule in V_SCHEDULES:
        return False
    replicate = combo["dp_replicate"]
    if replicate != 1 and (zero != 3 or dp % replicate or replicate >= dp or combo["ep"] > 1):
        return False
    if sp and tp == 1:
        return False
    # Another order moves nothing where a replica's whole tp·cp·dp block sits inside one
    # NVLink domain either way: only orders that change which GPUs share a domain are
    # candidates.
    return order == "tp-dp-pp" or not (tp == 1 or dp == 1 or gpn % (tp * cp * dp) == 0)


def restacked(scenario: Scenario, parallel: ParallelConfig) -> ParallelConfig:
    """``parallel`` (a candidate derived from ``scenario``'s) with the stack's buckets and
    overlaps for its own strategy where the scenario left them to the stack (its value is
    the stack's for its own strategy); a value it set stays."""
    given = stack_overlap_defaults(scenario.parallel, scenario.roofline)
    wanted = stack_overlap_defaults(parallel, scenario.roofline)
    own = {key: getattr(scenario.parallel, key) for key in wanted}
    return dataclasses.replace(parallel, **{
        key: wanted[key] if own[key] == given[key] else own[key] for key in wanted})


def with_strategy(scenario: Scenario, strategy: Strategy, *, name: str | None = None,
                  ) -> Scenario:
    """``scenario`` with ``strategy`` applied (validated: :class:`ConfigError` if invalid)."""
    parallel, training = restacked(scenario, strategy.parallel), strategy.training
    model = scenario.model
    microbatches = check_strategy(model, parallel, training, num_gpus=scenario.num_gpus,
                                  source=scenario.source)
    # The router's skew at this ep (workloads.specs.moe_routing).
    comm = routed_comm(scenario.comm, model, parallel.ep, scenario.source)
    return dataclasses.replace(scenario.with_run(parallel=parallel, training=training, comm=comm,
                                                 microbatches=microbatches),
                               name=name or scenario.name)
