"""Per-layer strategies (Galvatron): groups of consecutive layers with their own tp / recompute.

Galvatron (Miao et al., VLDB 2023) keeps the pipeline fixed and lets each layer choose how
its stage's ``G`` GPUs split it: ``tp_i`` tensor-parallel ranks times ``dp_i = G/tp_i``
data-parallel ones, and whether to recompute its activations.  Between two layers of
different ``tp`` the activation is resharded: the wider group's GPUs each need the samples
the narrower groups split between them, one all-gather of the ``b·s·h`` activation (the
other direction is a slice, free).  The all-gather runs in the forward pass where ``tp``
grows, and on the activation's gradient in the backward pass where it shrinks.

What distsim models exactly, inside its rank-group model (a rank group is one replica's
``parallelism.tp`` GPUs of a stage):

* ``parallelism.tp`` is the widest group's ``tp``; a layer group with ``tp_i`` dividing it
  runs as ``k = tp/tp_i`` sub-replicas on consecutive blocks of ``tp_i`` GPUs, each taking
  ``micro_batch/k`` of the samples (so ``k`` must divide ``micro_batch``).  Its ``dp_i`` is
  ``k·dp``, and ``tp_i·dp_i = tp·dp`` is the stage's GPUs, as Galvatron requires.
* its compute is the layer at ``micro_batch/k`` on ``tp_i`` GPUs, its tensor-parallel
  collectives run on each block; a group's ``recompute`` replaces ``training.recompute``.
* its gradients (``P/tp_i`` per GPU) are all-reduced over its ``dp_i = k·dp`` GPUs as DDP
  would: one ring per shard through every replica's GPUs holding it, launched on the
  data-parallel stream when the last micro-batch's backward has produced them (the
  ``tp``-wide layers keep their buckets).
* the embedding, the output layer and the pipeline's messages stay at ``parallelism.tp``.

Not modelled with layer groups (clear errors): 2-D/3-D TP meshes, sequence and context
parallelism, expert parallelism, ZeRO/FSDP and offload.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distsim_gpu.simcore.config import check_choice, check_keys, check_mapping, check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.recompute import RECOMPUTE_MODES

__all__ = [
    "LayerGroup",
    "LayerSetting",
    "block_subgroups",
    "check_layer_group_strategy",
    "check_layer_groups",
    "layer_groups_from",
    "layer_settings",
    "reshard_bytes",
    "reshard_subgroups",
    "shard_subgroups",
]

RECOMPUTE = RECOMPUTE_MODES  # one home: workloads.specs.recompute
_KEY = "parallelism.layer_groups"


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """``layers`` consecutive layers at tensor parallelism ``tp`` (``dp``: optional, checked
    against the stage's GPUs), recomputing ``recompute`` (None: ``training.recompute``)."""

    layers: int
    tp: int
    recompute: str | None = None
    dp: int | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"layers": self.layers, "tp": self.tp}
        if self.recompute is not None:
            data["recompute"] = self.recompute
        if self.dp is not None:
            data["dp"] = self.dp
        return data


@dataclass(frozen=True, slots=True)
class LayerSetting:
    """How one layer runs: its ``tp``, ``k = parallelism.tp / tp`` sub-replicas of the
    rank group, the ``micro_batch`` each takes, and its recompute mode."""

    tp: int
    k: int
    micro_batch: int
    recompute: str


def layer_groups_from(value: object, *, source: str | None = None,
                      prefix: str = _KEY) -> tuple[LayerGroup, ...]:
    """The groups from their YAML list (shapes and types; :func:`check_layer_groups`
    checks them against the model and the strategy)."""
    if isinstance(value, tuple) and all(isinstance(g, LayerGroup) for g in value):
        return value
    if not isinstance(value, list) or not value:
        raise ConfigError(f"must be a non-empty list of groups, got {value!r}", key=prefix,
                          source=source, hint="e.g. [{layers: 24, tp: 8}, {layers: 72, tp: 4, "
                          "recompute: full}]")
    groups = []
    for i, item in enumerate(value):
        where = f"{prefix}[{i}]"
        data: Mapping[str, Any] = check_mapping(item, key=where, source=source)
        check_keys(data, ("layers", "tp", "dp", "recompute"), prefix=where, source=source)
        for required in ("layers", "tp"):
            if required not in data:
                raise ConfigError(f"missing '{required}'", key=where, source=source,
                                  hint="each group needs layers and tp")
        recompute = data.get("recompute")
        if recompute is not None:
            recompute = check_choice(str(recompute).lower(), RECOMPUTE,
                                     key=f"{where}.recompute", source=source,
                                     what="recompute mode")
        dp = data.get("dp")
        groups.append(LayerGroup(
            check_whole(data["layers"], key=f"{where}.layers", source=source),
            check_whole(data["tp"], key=f"{where}.tp", source=source), recompute,
            None if dp is None else check_whole(dp, key=f"{where}.dp", source=source)))
    return tuple(groups)


def check_layer_groups(groups: Sequence[LayerGroup], *, tp: int, dp: int, layers: int,
                       heads: int, kv_heads: int, micro_batch: int,
                       source: str | None = None) -> None:
    """Groups that cover the model's ``layers`` and split a rank group of ``tp`` GPUs
    (module docstring); each violation a :class:`ConfigError` naming the group."""
    total = sum(g.layers for g in groups)
    if total != layers:
        raise ConfigError(f"the groups hold {total} layers but the model has {layers}",
                          key=_KEY, source=source,
                          hint="the groups' layers must sum to model.layers")
    for i, g in enumerate(groups):
        where = f"{_KEY}[{i}]"
        if heads % g.tp or (kv_heads % g.tp and g.tp % kv_heads):
            raise ConfigError(f"{heads} attention heads ({kv_heads} key/value) do not split "
                              f"over tp = {g.tp}", key=f"{where}.tp", source=source,
                              hint=f"tp must divide {heads}")
        if tp % g.tp:
            raise ConfigError(f"tp = {g.tp} does not divide parallelism.tp = {tp}",
                              key=f"{where}.tp", source=source,
                              hint="parallelism.tp is the widest group's tp; a narrower "
                              "group runs on consecutive blocks of its GPUs")
        if g.dp is not None and g.tp * g.dp != tp * dp:
            raise ConfigError(f"tp·dp = {g.tp}·{g.dp} = {g.tp * g.dp} but a stage has "
                              f"tp·dp = {tp}·{dp} = {tp * dp} GPUs", key=f"{where}.dp",
                              source=source, hint=f"use dp = {tp * dp // g.tp}, or leave "
                              "dp out (it follows from tp)")
        if micro_batch % (tp // g.tp):
            raise ConfigError(f"micro_batch {micro_batch} does not split over the "
                              f"{tp // g.tp} sub-replicas of tp = {g.tp}", key=f"{where}.tp",
                              source=source, hint=f"use a micro_batch that is a multiple "
                              f"of {tp // g.tp}")


def check_layer_group_strategy(*, tp_mode: str, sequence_parallel: bool, cp: int, ep: int,
                               zero: int, fsdp: bool, offload: bool,
                               source: str | None = None) -> None:
    """The strategies layer groups are modelled with (module docstring)."""
    for bad, what in ((tp_mode != "1d", f"tp_mode {tp_mode}"),
                      (sequence_parallel, "sequence_parallel"), (cp > 1, "cp > 1"),
                      (ep > 1, "ep > 1"), (zero > 0 or fsdp, "ZeRO/FSDP"),
                      (offload, "offload")):
        if bad:
            raise ConfigError(f"layer_groups with {what} is not modelled", key=_KEY,
                              source=source, hint="per-layer strategies run with 1-D tensor, "
                              "pipeline and plain data parallelism")


def layer_settings(groups: Sequence[LayerGroup], *, tp: int, micro_batch: int,
                   recompute: str) -> tuple[LayerSetting, ...]:
    """Each layer's :class:`LayerSetting`, in layer order."""
    out: list[LayerSetting] = []
    for g in groups:
        k = tp // g.tp
        out.extend([LayerSetting(g.tp, k, micro_batch // k, g.recompute or recompute)]
                   * g.layers)
    return tuple(out)


def block_subgroups(tp: int, tp_i: int) -> tuple[tuple[int, ...], ...]:
    """The rank group's local indices as ``tp/tp_i`` consecutive blocks of ``tp_i``: a
    narrower layer's tensor-parallel groups."""
    return tuple(tuple(range(j * tp_i, (j + 1) * tp_i)) for j in range(tp // tp_i))


def shard_subgroups(tp: int, tp_i: int) -> tuple[tuple[int, ...], ...]:
    """The ``tp_i`` groups of the GPUs holding the same shard of a ``tp_i`` layer, one per
    block (``s, s + tp_i, …``): where that layer's gradients are reduced inside a rank
    group."""
    return tuple(tuple(range(s, tp, tp_i)) for s in range(tp_i))


def reshard_subgroups(tp: int, narrow: int, wide: int) -> tuple[tuple[int, ...], ...]:
    """Between layers at ``narrow`` and ``wide`` tp (``narrow`` dividing ``wide``): inside
    each block of ``wide`` GPUs, the ``wide/narrow`` GPUs at the same place of each
    ``narrow`` block, which gather their sample slices."""
    return tuple(tuple(b * wide + j * narrow + s for j in range(wide // narrow))
                 for b in range(tp // wide) for s in range(narrow))


def reshard_bytes(*, micro_batch: int, seq_len: int, hidden: int, tp: int, wide: int,
                  element_bytes: int) -> float:
    """The all-gather's full buffer (nccl-tests' size) between a layer at ``wide`` tp and a
    narrower one: the ``b·s·h`` activation of the ``micro_batch·wide/tp`` samples a
    ``wide`` group runs."""
    return float(micro_batch) * wide / tp * seq_len * hidden * element_bytes
