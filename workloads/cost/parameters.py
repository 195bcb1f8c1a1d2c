"""Parameters one GPU holds, by layer and pipeline stage: what memory, bytes on the wire and
the op streams all count from.

Parameters on one GPU follow Megatron-LM's layout: a pipeline stage holds ``layers/pp``
layers (with ``interleave = v`` model chunks, chunk ``j`` of stage ``r`` holds layers
``[(j·pp + r)·L/(pp·v), …)``); tensor parallelism splits attention heads, the MLP width
and the vocabulary, and replicates norms, row-parallel biases, routers and learned
position embeddings; expert parallelism places ``experts/ep`` whole experts on each GPU.
The first stage holds the embeddings, the last the final norm and output layer (a tied
output layer is a second copy of the word embedding there when pp > 1).  Expert
parallelism is carved out of data parallelism (``ep`` divides ``dp``), so expert
parameters are replicated — and ZeRO-sharded — over ``dp/ep`` GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from distsim_gpu.simcore.config import check_whole
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    check_ep_split,
    check_tp_split,
    check_uniform_split,
    chunk_layers,
)
from distsim_gpu.workloads.strategy.schedule import end_stages, model_chunks, virtual_stage

__all__ = [
    "Chunking",
    "StageParams",
    "check_model_split",
    "check_stage",
    "layer_group_extra_params",
    "layer_params_local",
    "params_on_gpu",
    "stage_layers",
]


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU holds before ZeRO sharding: dense (replicated over dp) and
    expert (replicated over dp/ep)."""

    dense: float
    expert: float

    @property
    def total(self) -> float:
        """dense + expert."""
        return self.dense + self.expert


@dataclass(frozen=True, slots=True)
class Chunking:
    """How a pipeline stage's layers are chosen: ``interleave`` model chunks a stage, the
    ``partition`` of the layers into chunks, and the ``schedule``'s placement of them (a V
    for dualpipev: the first stage holds the first and the last chunk)."""

    interleave: int = 1
    partition: str = "uniform"
    schedule: str = "1f1b"

    @classmethod
    def of(cls, parallel: ParallelConfig) -> Chunking:
        return cls(parallel.interleave, parallel.partition, parallel.schedule)


def stage_layers(model: ModelSpec, *, pp: int = 1, stage: int = 0,
                 interleave: int = 1, partition: str = "uniform",
                 schedule: str = "1f1b") -> tuple[int, ...]:
    """Indices of the layers pipeline stage ``stage`` holds (all its model chunks).

    ``partition`` as :func:`workloads.strategy.parallel.layer_partition`; ``schedule``
    places the chunks (:func:`workloads.strategy.schedule.virtual_stage`).
    """
    check_whole(pp, key="pp")
    check_whole(interleave, key="interleave")
    check_stage(stage, pp)
    if partition == "uniform":
        check_uniform_split(model.layers, model_chunks(schedule, pp, interleave))
    chunks = chunk_layers(model.layers, pp, interleave, partition, schedule)
    return tuple(i for chunk in range(interleave)
                 for i in range(*chunks[virtual_stage(stage, chunk, pp, schedule)]))


def layer_params_local(model: ModelSpec, index: int, tp: int, ep: int,
                       etp: int | None = None) -> tuple[float, float]:
    """(dense, expert) parameters of layer ``index`` on one GPU.  Shared experts are
    dense: on every EP rank, split over tp; the routed ones over ``etp`` (None: tp)."""
    dense = _attention_params_local(model, tp) + 2 * model.norm_params()
    if model.is_moe_layer(index):
        shared = _mlp_params_local(model, model.ffn_hidden, tp)
        expert = _mlp_params_local(model, model.ffn_hidden, tp if etp is None else etp)
        return (dense + model.router_params() + model.shared_experts * shared,
                model.experts / ep * expert)
    return dense + _mlp_params_local(model, model.mlp_width(index), tp), 0.0


def _attention_params_local(model: ModelSpec, tp: int) -> float:
    """One attention block on one TP rank: Q, K, V split by heads (KV heads replicated
    below tp), the output projection's bias replicated; MLA's down projections and
    latent norms duplicated, its up and output projections split by heads."""
    if model.mla:
        return model.mla.weight_params(model.hidden, model.heads // tp) + (
            model.attention_params() - model.attention_weight_params())
    h, hd = model.hidden, model.head_dim
    kv_local = max(1, model.kv_heads // tp)
    q_local = model.heads // tp * hd
    attention = h * q_local + 2 * h * kv_local * hd + q_local * h
    if model.attention_bias:
        attention += q_local + 2 * kv_local * hd + h  # QKV biases split, out bias replicated
    return attention


def _mlp_params_local(model: ModelSpec, ffn: int, tp: int) -> float:
    """One MLP of width ``ffn`` on one TP rank (FC2's bias replicated)."""
    h, f_local = model.hidden, ffn / tp
    mlp = (3 if model.gated_mlp else 2) * h * f_local
    if model.mlp_bias:
        mlp += (2 if model.gated_mlp else 1) * f_local + h
    return mlp


def params_on_gpu(model: ModelSpec, *, tp: int = 1, pp: int = 1, ep: int = 1, stage: int = 0,
                  etp: int | None = None, chunking: Chunking = Chunking()) -> StageParams:
    """Parameters held by one GPU of pipeline stage ``stage`` (see the module docstring);
    ``etp``: the routed experts' tensor parallelism (None: ``tp``); ``chunking``: which
    chunks the stage holds (one by default)."""
    check_model_split(model, tp=tp, ep=ep)
    dense = expert = 0.0
    for index in stage_layers(model, pp=pp, stage=stage, interleave=chunking.interleave,
                              partition=chunking.partition, schedule=chunking.schedule):
        d, e = layer_params_local(model, index, tp, ep, etp)
        dense += d
        expert += e
    word = model.vocab * model.hidden / tp
    # The output layer sits with the last chunk: the last stage, or the first in a V;
    # DualPipe's two ends hold both it and the embedding.
    firsts, lasts = end_stages(chunking.schedule, pp, chunking.interleave)
    if stage in firsts:
        dense += word
        if model.position == "learned":
            dense += model.seq_len * model.hidden
        if model.embedding_norm:
            dense += model.norm_params()
    if stage in lasts:
        dense += model.final_norm_params()
        if not model.tied_embeddings or stage not in firsts:
            dense += word
        if model.mtp_depth:  # beside the output head they share (column-parallel 2h -> h)
            d, e = layer_params_local(model, model.layers - 1, tp, ep, etp)
            projection = 2 * model.hidden * model.hidden / tp + 2 * model.norm_params()
            dense += model.mtp_depth * (d + projection)
            expert += model.mtp_depth * e
    return StageParams(dense, expert)


def layer_group_extra_params(model: ModelSpec, parallel: ParallelConfig, stage: int) -> float:
    """Parameters one GPU of stage ``stage`` holds beyond the count at ``parallelism.tp``
    under layer groups (:mod:`workloads.strategy.layer_groups`): each narrower layer's
    ``P/tp_i − P/tp``; 0 without groups."""
    if not parallel.layer_groups:
        return 0.0
    tps = [g.tp for g in parallel.layer_groups for _ in range(g.layers)]
    extra = 0.0
    for i in stage_layers(model, pp=parallel.pp, stage=stage, interleave=parallel.interleave,
                          partition=parallel.partition, schedule=parallel.schedule):
        if tps[i] != parallel.tp:
            extra += (sum(layer_params_local(model, i, tps[i], parallel.ep))
                      - sum(layer_params_local(model, i, parallel.tp, parallel.ep)))
    return extra


def check_stage(stage: int, pp: int) -> None:
    if isinstance(stage, bool) or not isinstance(stage, int) or not 0 <= stage < pp:
        raise ConfigError(f"stage {stage!r} is outside 0..{pp - 1}", key="stage")


def check_model_split(model: ModelSpec, *, tp: int, ep: int) -> None:
    check_whole(tp, key="tp")
    check_whole(ep, key="ep")
    check_tp_split(heads=model.heads, kv_heads=model.kv_heads, tp=tp)
    check_ep_split(experts=model.experts, ep=ep)

