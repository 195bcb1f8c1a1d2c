"""Per-operator sharding (OSDP): which operators' parameters are sharded, which replicated.

Jiang et al. 2022, "OSDP: Optimal Sharded Data Parallel for Distributed Deep Learning"
(arXiv:2209.13258), choose for every operator of the model either

* **sharded** (ZeRO-3 / FSDP style): its parameters, gradients and optimizer state are split
  over the data-parallel group; its parameters are all-gathered before the forward and again
  before the backward, and its gradients reduce-scattered, every micro-batch; or
* **replicated** (plain data parallel): everything held whole; its gradients all-reduced once
  per iteration in buckets,

and may **split** a large operator's GEMM into ``k`` slices computed one after the other, so
only ``1/k`` of its gathered parameters (and workspace) are live at once.

``parallelism.operator_sharding`` in a scenario::

    operator_sharding:
      default: replicated          # or sharded: what every operator not listed below is
      sharded: [mlp_fc1, mlp_fc2]  # operators sharded whatever the default
      replicated: [qkv]            # operators replicated whatever the default
      split: {mlp_fc1: 4}          # slices of an operator's gathered parameters

The operators are the parameter-holding ones of :mod:`workloads.cost.compute.operators`
(``input_norm``, ``qkv``, ``attn_out``, ``post_attn_norm``, ``mlp_fc1``, ``mlp_fc2``);
the embeddings and the output layer follow ``default``.  The iteration gathers a layer's
sharded operators in one all-gather (one FSDP unit per layer, prefetched as ZeRO-3 is,
:mod:`workloads.iteration.streams`), so ``default: sharded`` with nothing listed is exactly ZeRO-3
and ``default: replicated`` exactly plain data parallelism.  Not modelled: MoE layers,
2-D/2.5-D/3-D tensor parallelism, pipeline parallelism (as for ZeRO-3), offload, and
mixing with ``zero``/``fsdp`` (the plan says what is sharded).

Splitting an operator ``k`` ways runs each of its GEMMs (forward, data and weight
gradient) as ``k`` GEMMs of ``1/k`` of the weight's columns (:func:`split_extra_s`): the
roofline's efficiency of the smaller shape and ``k`` launches decide what it costs; the
activation input re-read by each slice is not counted (a slice's bytes are ``1/k``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol

from distsim_gpu.simcore.config import check_choice, check_keys, check_mapping, check_whole
from distsim_gpu.simcore.errors import ConfigError

__all__ = [
    "DEFAULTS",
    "SHARDABLE_OPERATORS",
    "OperatorSharding",
    "ShardedStrategy",
    "check_operator_sharding",
    "operator_params",
    "operator_sharding_from_mapping",
    "peak_gathered_params",
    "sharded_fraction",
    "sharded_params",
    "split_extra_s",
]

#: The operators of a dense transformer layer that hold parameters, in forward order.
SHARDABLE_OPERATORS = ("input_norm", "qkv", "attn_out", "post_attn_norm", "mlp_fc1", "mlp_fc2")
DEFAULTS = ("replicated", "sharded")
_KEYS = ("default", "sharded", "replicated", "split")


@dataclass(frozen=True, slots=True)
class OperatorSharding:
    """Which operators are sharded over the data-parallel group, and their splits."""

    default: str = "replicated"
    sharded: tuple[str, ...] = ()
    replicated: tuple[str, ...] = ()
    split: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    def is_sharded(self, operator: str) -> bool:
        """Whether ``operator`` (one of :data:`SHARDABLE_OPERATORS`) is sharded."""
        if operator in self.sharded:
            return True
        return operator not in self.replicated and self.default == "sharded"

    @property
    def sharded_operators(self) -> tuple[str, ...]:
        return tuple(op for op in SHARDABLE_OPERATORS if self.is_sharded(op))

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default, "sharded": list(self.sharded),
                "replicated": list(self.replicated), "split": dict(self.split)}


def operator_sharding_from_mapping(data: Any, *, source: str | None = None,
                                   prefix: str = "parallelism.operator_sharding",
                                   ) -> OperatorSharding:
    """An :class:`OperatorSharding` from YAML (unknown keys and operators are errors with
    the closest valid name)."""
    data = check_mapping(data, key=prefix, source=source)
    check_keys(data, _KEYS, prefix=prefix, source=source)
    default = check_choice(str(data.get("default", "replicated")).lower(), DEFAULTS,
                           key=f"{prefix}.default", source=source)
    lists: dict[str, tuple[str, ...]] = {}
    for kind in ("sharded", "replicated"):
        raw = data.get(kind) or []
        if isinstance(raw, str) or not isinstance(raw, list | tuple):
            raise ConfigError(f"must be a list of operator names, got {raw!r}",
                              key=f"{prefix}.{kind}", source=source,
                              hint=f"valid: {', '.join(SHARDABLE_OPERATORS)}")
        lists[kind] = tuple(_operator(name, f"{prefix}.{kind}", source) for name in raw)
    both = set(lists["sharded"]) & set(lists["replicated"])
    if both:
        raise ConfigError(f"{sorted(both)} listed as both sharded and replicated",
                          key=prefix, source=source)
    split_data = check_mapping(data.get("split"), key=f"{prefix}.split", source=source,
                               optional=True)
    split = {_operator(name, f"{prefix}.split", source):
             check_whole(k, key=f"{prefix}.split.{name}", source=source)
             for name, k in split_data.items()}
    return OperatorSharding(default, lists["sharded"], lists["replicated"],
                            MappingProxyType(split))


def _operator(name: Any, key: str, source: str | None) -> str:
    return check_choice(str(name), SHARDABLE_OPERATORS, key=key, source=source,
                        what="operator (one holding parameters)")


class ShardedStrategy(Protocol):
    """What :func:`check_operator_sharding` reads of a
    :class:`~distsim_gpu.workloads.strategy.parallel.ParallelConfig` (named structurally:
    that module imports this one)."""

    @property
    def operator_sharding(self) -> OperatorSharding | None: ...
    @property
    def zero(self) -> int: ...
    @property
    def fsdp(self) -> bool: ...
    @property
    def pp(self) -> int: ...
    @property
    def tp_mode(self) -> str: ...
    @property
    def offload(self) -> Any: ...
    @property
    def layer_groups(self) -> tuple[Any, ...]: ...


def check_operator_sharding(parallel: ShardedStrategy, *, experts: int,
                            source: str | None = None, model: Any = None,
                            tp: int = 1) -> None:
    """The combinations per-operator sharding does not model are clear errors (a model
    with ``experts`` experts per MoE layer), and so is a split into more slices than the
    operator's weight has output columns on one tensor-parallel rank (of ``model``,
    where given: a slice of no column computes nothing)."""
    plan = parallel.operator_sharding
    if plan is None:
        return
    key = "parallelism.operator_sharding"
    tp_mode = parallel.tp_mode
    refused = (
        (parallel.zero != 0 or parallel.fsdp, "with zero/fsdp",
         "the plan says what is sharded: use zero: 0"),
        (parallel.pp > 1, "with pipeline parallelism", "use pp: 1 (as for ZeRO-3)"),
        (tp_mode != "1d", f"with tp_mode {tp_mode}", "use tp_mode: 1d"),
        (parallel.offload.enabled, "with offload", "drop parallelism.offload"),
        (experts > 1, "with MoE layers", "per-operator sharding covers dense layers only"),
        (bool(parallel.layer_groups), "with layer groups", "drop parallelism.layer_groups"))
    for bad, what, hint in refused:
        if bad:
            raise ConfigError(f"per-operator sharding {what} is not modelled", key=key,
                              source=source, hint=hint)
    columns = _output_columns(model, tp) if model is not None else {}
    for name, k in plan.split.items():
        if not plan.is_sharded(name):
            raise ConfigError(f"operator {name!r} is split but not sharded (only a gathered "
                              "operator's parameters are live whole)",
                              key=f"{key}.split.{name}", source=source,
                              hint=f"add {name} to {key}.sharded")
        if name in columns and k > columns[name]:
            raise ConfigError(f"{k:,} slices of {name}, whose weight has {columns[name]:,} "
                              f"output columns on a tensor-parallel rank (tp {tp})",
                              key=f"{key}.split.{name}", source=source,
                              hint=f"at most {columns[name]:,}: each slice takes a column")


def _output_columns(model: Any, tp: int) -> dict[str, int]:
    """Each shardable operator's output columns on one tensor-parallel rank (the norms:
    their ``hidden`` scales); empty where the attention is not one per-operator sharding
    models (multi-head latent attention, refused by :func:`operator_params`)."""
    if getattr(model, "mla", None) is not None:
        return {}
    h = model.hidden
    qkv = model.heads // tp * model.head_dim + 2 * max(1, model.kv_heads // tp) * model.head_dim
    fc1 = (2 if model.gated_mlp else 1) * model.ffn_hidden // tp
    return {"input_norm": h, "qkv": qkv, "attn_out": h, "post_attn_norm": h,
            "mlp_fc1": max(1, fc1), "mlp_fc2": h}


def operator_params(model: Any, tp: int) -> dict[str, float]:
    """Parameters of each shardable operator of one dense layer on one tensor-parallel
    rank (Megatron's layout, as :func:`workloads.cost.memory.layer_params_local`: QKV biases
    split over tp, the output projection's and FC2's bias replicated); they sum to it."""
    if getattr(model, "mla", None) is not None:
        raise ConfigError("per-operator sharding with multi-head latent attention is not "
                          "modelled", key="model.mla",
                          hint="drop parallelism.operator_sharding or model.mla")
    h, hd = model.hidden, model.head_dim
    kv_local = max(1, model.kv_heads // tp)
    q_local = model.heads // tp * hd
    qkv = float(h * q_local + 2 * h * kv_local * hd)
    attn_out = float(q_local * h)
    if model.attention_bias:
        qkv += q_local + 2 * kv_local * hd
        attn_out += h
    f_local = model.ffn_hidden / tp
    gates = 2 if model.gated_mlp else 1
    fc1, fc2 = gates * h * f_local, h * f_local
    if model.mlp_bias:
        fc1 += gates * f_local
        fc2 += h
    norm = float(model.norm_params())
    return {"input_norm": norm, "qkv": qkv, "attn_out": attn_out, "post_attn_norm": norm,
            "mlp_fc1": fc1, "mlp_fc2": fc2}


def sharded_fraction(plan: OperatorSharding, model: Any, tp: int) -> float:
    """The share of a dense layer's parameters the plan shards: exactly 1 when every
    operator is sharded and 0 when none is (so those plans equal ZeRO-3 and plain DP)."""
    sharded = plan.sharded_operators
    if len(sharded) == len(SHARDABLE_OPERATORS):
        return 1.0
    if not sharded:
        return 0.0
    params = operator_params(model, tp)
    return sum(params[op] for op in sharded) / sum(params.values())


def peak_gathered_params(plan: OperatorSharding, model: Any, tp: int) -> float:
    """Parameters of the largest gathered operator live at once: its whole parameters
    divided by its split (0 when nothing is sharded)."""
    params = operator_params(model, tp)
    return max((params[op] / plan.split.get(op, 1) for op in plan.sharded_operators),
               default=0.0)


def sharded_params(plan: OperatorSharding, model: Any, tp: int, *, stage_params: float,
                   layer_params: float) -> float:
    """Parameters of a stage the plan shards (of ``stage_params`` on the GPU, of which
    ``layer_params`` in its layers): each layer's sharded share, and the embeddings and
    output layer when the default is ``sharded`` (exactly all with nothing replicated)."""
    fraction = sharded_fraction(plan, model, tp)
    if plan.default == "sharded" and fraction == 1.0:
        return stage_params
    rest = stage_params - layer_params if plan.default == "sharded" else 0.0
    return layer_params * fraction + rest


def split_extra_s(plan: OperatorSharding | None, costs: Any, pass_: str, model: Any,
                  shard: Any) -> float:
    """Seconds a layer pass gains from the plan's splits: each split operator's GEMMs as
    ``k`` GEMMs of ``1/k`` of the weight (the weight's output columns ``n``, or ``k`` of a
    data gradient), timed by ``costs`` (a roofline: ``layer_work`` and ``kernel_time_s``;
    0 for cost models without per-operator shapes).  ``shard``: the
    :class:`~distsim_gpu.workloads.cost.layer_shard.LayerShard` ``layer_work`` takes (a
    cost-tier type, so not named here)."""
    if plan is None or not plan.split or not hasattr(costs, "layer_work"):
        return 0.0
    extra = 0.0
    for kernel in costs.layer_work(pass_, model, shard).kernels:
        k = plan.split.get(kernel.base_name, 1)
        if k == 1 or kernel.kind != "gemm":
            continue
        dgrad = ".dgrad" in kernel.name
        sliced = replace(kernel, flops=kernel.flops / k, bytes_moved=kernel.bytes_moved / k,
                         n=kernel.n if dgrad else max(1, kernel.n // k),
                         k=max(1, kernel.k // k) if dgrad else kernel.k,
                         count=kernel.count * k)
        extra += costs.kernel_time_s(sliced) - costs.kernel_time_s(kernel)
    return extra
