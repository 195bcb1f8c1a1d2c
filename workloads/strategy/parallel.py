"""Parallel strategy: how a model and a batch are split over GPUs, and where ranks sit.

Megatron-LM's 3D parallelism plus what PyTorch adds:

* ``tp`` tensor parallel (heads, MLP width and vocabulary split; ``sequence_parallel``
  splits the element-wise part along the sequence),
* ``pp`` pipeline parallel (layers split into stages; ``schedule`` gpipe, 1f1b,
  interleaved with ``interleave`` model chunks per stage, dualpipev with two placed as a
  V, or dualpipe's two directions, :mod:`workloads.strategy.schedule`),
* ``dp`` data parallel (``zero`` stage 0-3 of ZeRO sharding, or ``fsdp``),
* ``ep`` expert parallel for MoE layers and ``expert_tp`` the experts' own tensor
  parallelism (Megatron-Core's ``expert_tensor_parallel_size``; unset: ``tp``): the routed
  experts are laid out on a grid of their own over each stage's ``tp·cp·dp`` GPUs, so
  expert parallelism is carved out of ``dp·cp`` (and of ``tp`` where ``expert_tp < tp``)
  as Megatron-Core does it (:mod:`workloads.strategy.expert_grid`),
* ``cp`` context parallel (Megatron-Core with Transformer Engine's ring attention): each
  sequence is cut into ``2·cp`` chunks and CP rank ``i`` keeps chunks ``i`` and
  ``2·cp − 1 − i`` (so every rank has the same share of a causal mask's work); attention
  passes key/value blocks around the CP ring (:mod:`workloads.cost.context_parallel`).  CP
  ranks hold the same parameters, so gradients are reduced over ``dp·cp`` ranks
  (Megatron's data-parallel group "with context parallel"), and ZeRO shards over them.

**Placement** maps a GPU's global rank to its (tp, cp, dp, pp) coordinates.  ``order``
names the axes from innermost (fastest-varying rank) out; Megatron's default ``tp-dp-pp``
keeps a tensor-parallel group on consecutive ranks (inside a node when ``tp`` ≤ GPUs per
node), and any other order shows what a bad placement costs.  An order without ``cp``
puts it right after ``tp``, as Megatron-Core's ``tp-cp-ep-dp-pp`` does; the permutations
of the four axes name it explicitly.

A **replica** (the simulator's unit beside the tensor-parallel group) is one (cp, dp)
coordinate: replica ``r`` is CP rank ``r mod cp`` of data-parallel rank ``r div cp``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import permutations
from typing import Any

from distsim_gpu.simcore.config import (
    check_bool,
    check_choice,
    check_keys,
    check_mapping,
    check_whole,
)
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.simcore.units import parse_count
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.recompute import RECOMPUTE_MODES
from distsim_gpu.workloads.specs.recompute_modules import (
    DEFAULT_RECOMPUTE_MODULES,
    check_recompute_modules,
    recompute_modules_from,
)
from distsim_gpu.workloads.strategy.cp_comm import check_cp_comm
from distsim_gpu.workloads.strategy.data_loading import DataLoader, data_loader_from_mapping
from distsim_gpu.workloads.strategy.expert_grid import ExpertGrid, check_expert_grid
from distsim_gpu.workloads.strategy.fb_pairs import check_fb_overlap
from distsim_gpu.workloads.strategy.framework_names import PARALLELISM_NAMES, TRAINING_NAMES
from distsim_gpu.workloads.strategy.layer_groups import (
    LayerGroup,
    check_layer_group_strategy,
    check_layer_groups,
    layer_groups_from,
)
from distsim_gpu.workloads.strategy.offload import (
    NO_OFFLOAD,
    OffloadConfig,
    check_offload,
    offload_from_mapping,
)
from distsim_gpu.workloads.strategy.operator_sharding import (
    OperatorSharding,
    check_operator_sharding,
    operator_sharding_from_mapping,
)
from distsim_gpu.workloads.strategy.partition import PARTITIONS, chunk_layers, layer_partition
from distsim_gpu.workloads.strategy.precision import (
    FP8_AMAX_REDUCTIONS,
    GRAD_REDUCE_PRECISIONS,
    OPTIMIZER_MOMENTS,
    PRECISIONS,
    check_activation_fp8_store,
    check_fp8_recipe,
)
from distsim_gpu.workloads.strategy.schedule import (
    BIDIRECTIONAL,
    SCHEDULES,
    V_SCHEDULES,
    check_interleave,
    check_schedule_microbatches,
    model_chunks,
)
from distsim_gpu.workloads.strategy.sharding import check_fsdp_layout, check_zero
from distsim_gpu.workloads.strategy.tp_nd import check_tp_nd

__all__ = [
    "PLACEMENT_ORDERS",
    "Coordinates",
    "ParallelConfig",
    "Placement",
    "TrainingConfig",
    "check_cp_split",
    "check_ep_split",
    "check_strategy",
    "check_tp_split",
    "check_uniform_split",
    "check_zero",
    "chunk_layers",
    "layer_partition",
    "parallel_from_mapping",
    "placement_axes",
    "training_from_mapping",
]

PLACEMENT_ORDERS = (tuple("-".join(p) for p in permutations(("tp", "dp", "pp")))
                    + tuple("-".join(p) for p in permutations(("tp", "cp", "dp", "pp"))))
RECOMPUTE = RECOMPUTE_MODES  # one home: workloads.specs.recompute
#: Which model chunks' gradients go in buckets of ``bucket_params`` (the others' in one, after
#: the chunk's last backward): every chunk, or — Megatron-Core's DistributedDataParallel,
#: ``disable_bucketing`` for chunks after the first and ``pp_rank > 0`` — the first
#: pipeline stage's first chunk only.
BUCKETINGS = ("every_chunk", "first_chunk")
# Whole-number keys for which 0 is a valid setting.
_MAY_BE_ZERO = ("zero", "tp_comm_overlap_sms")


#: The overlaps a resolved configuration names only when they are on.
_OVERLAP_KEYS = ("overlap_param_gather", "tp_comm_overlap", "moe_overlap", "fb_overlap")


@dataclass(frozen=True, slots=True)
class ParallelConfig:
    """Degrees of parallelism and how they run (see the module docstring)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    # How CP's attention communicates (workloads.strategy.cp_comm), a2a+p2p's inner group.
    cp_comm_type: str = "p2p"
    cp_a2a_size: int = 1
    # The routed experts' tensor parallelism (None: tp's); expert_grid() lays it out.
    expert_tp: int | None = None
    sequence_parallel: bool = False
    # 1d: Megatron's; 2d / 2.5d / 3d: a mesh of the tp GPUs (workloads.strategy.tp_nd), 2.5d with
    # tp_depth layers.
    tp_mode: str = "1d"
    tp_depth: int = 1
    schedule: str = "1f1b"
    interleave: int = 1
    zero: int = 0
    fsdp: bool = False
    # HSDP: the ZeRO-3/FSDP shards replicated over this many groups (workloads.strategy.sharding).
    dp_replicate: int = 1
    # FSDP's reshard_after_forward; None: torchtitan's default, True without PP, False with.
    reshard_after_forward: bool | None = None
    order: str = "tp-dp-pp"
    partition: str = "uniform"
    # Megatron-LM's DDP: gradients reduced in buckets of 40M parameters, in fp32 when the
    # model trains in bf16 (its default ``accumulate_allreduce_grads_in_fp32``); which
    # chunks are cut into buckets (BUCKETINGS; the default comes from compute.stack).
    bucket_params: int = 40_000_000
    bucketing: str = "every_chunk"
    grad_reduce_precision: str = "fp32"
    # Optimizer state / parameters in host memory or on NVMe (workloads.strategy.offload).
    offload: OffloadConfig = NO_OFFLOAD
    # DeepSeek-V3 style: each MoE layer runs as two half micro-batches, one's dispatch /
    # combine overlapping the other's compute (workloads.iteration.streams).
    moe_overlap: bool = False
    # DualPipe's / Megatron-Core's combined 1F1B: steady-state forward-backward pairs
    # interleaved, each one's all-to-alls under the other's compute (workloads.strategy.fb_pairs).
    fb_overlap: bool = False
    # Megatron-Core's distributed optimizer (ZeRO 1/2) with ``--overlap-param-gather``: the
    # updated parameters all-gathered by bucket during the next forward instead of after the
    # optimizer step (workloads.iteration.streams); the default comes from compute.stack.
    overlap_param_gather: bool = False
    # Megatron's align_param_gather / align_grad_reduce: the schedule dispatches a chunk's
    # gathers / reductions at once, at the same point on every stage (interleaved only;
    # workloads.iteration.ddp_dispatch); None: gathers aligned with interleaving (Megatron-LM's
    # rule), reductions not (PyTorch's DDP; the Megatron-Core stacks set it).
    align_param_gather: bool | None = None
    align_grad_reduce: bool | None = None
    # Transformer Engine's userbuffers (Megatron ``--tp-comm-overlap``, torchtitan's
    # async-TP): with sequence parallelism each TP all-gather / reduce-scatter runs in
    # ``tp_comm_overlap_splits`` chunks pipelined with its GEMM, the reduce-scatter's
    # kernels holding ``tp_comm_overlap_sms`` SMs (workloads.cost.tp_overlap); the default
    # comes from compute.stack, the two figures from TE's defaults.
    tp_comm_overlap: bool = False
    tp_comm_overlap_splits: int = 4
    tp_comm_overlap_sms: int = 16
    # Galvatron's per-layer strategies: groups of layers with their own tp and recompute
    # (workloads.strategy.layer_groups); empty: every layer as above.
    layer_groups: tuple[LayerGroup, ...] = ()
    # OSDP: operators whose parameters are sharded, the rest replicated
    # (workloads.strategy.operator_sharding); None: the zero/fsdp setting alone.
    operator_sharding: OperatorSharding | None = None

    @property
    def num_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def etp(self) -> int:
        """The routed experts' tensor parallelism: ``expert_tp``, else ``tp``."""
        return self.tp if self.expert_tp is None else self.expert_tp

    def expert_grid(self) -> ExpertGrid:
        """The dense and expert rank grids of this strategy (which GPUs form each group)."""
        return ExpertGrid(self.tp, self.etp, self.cp, self.ep, self.dp, self.pp,
                          placement_axes(self.order))

    @property
    def dp_cp(self) -> int:
        """Ranks that hold the same parameters and reduce gradients together: ``dp·cp``
        (the simulator's replicas of a stage, see the module docstring)."""
        return self.dp * self.cp

    def to_dict(self) -> dict[str, Any]:
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        if self.offload.enabled:  # absent when off, so resolved configs stay as they were
            data["offload"] = self.offload.to_dict()
        else:
            del data["offload"]
        for key, default in (("dp_replicate", 1), ("cp_comm_type", "p2p"), ("cp_a2a_size", 1),
                             ("bucketing", "every_chunk"), ("expert_tp", None),
                             ("reshard_after_forward", None), ("align_param_gather", None),
                             ("align_grad_reduce", None)):
            if data[key] == default:  # likewise
                del data[key]
        for key in _OVERLAP_KEYS:  # likewise, while their overlap is off
            if not getattr(self, key):
                del data[key]
        if not self.tp_comm_overlap:
            del data["tp_comm_overlap_splits"], data["tp_comm_overlap_sms"]
        if self.layer_groups:  # likewise
            data["layer_groups"] = [g.to_dict() for g in self.layer_groups]
        else:
            del data["layer_groups"]
        if self.operator_sharding is None:  # likewise
            del data["operator_sharding"]
        else:
            data["operator_sharding"] = self.operator_sharding.to_dict()
        return data


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """The batch and how it is computed."""

    micro_batch: int = 1
    global_batch: int = 1
    recompute: str = "none"
    precision: str = "bf16"
    seq_len: int | None = None  # None: the model's
    data_loader: DataLoader | None = None  # None: loading never holds the GPUs up
    fp8_recipe: str | None = None  # None: the compute stack's (FP8 only)
    optimizer_moments: str = "fp32"  # OPTIMIZER_MOMENTS
    fp8_amax_reduction: str = "stage"  # FP8_AMAX_REDUCTIONS (delayed scaling only)
    # What ``selective`` re-runs (workloads.specs.recompute_modules; Megatron-Core's list).
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    activation_func_fp8_input_store: bool = False  # workloads.strategy.precision

    def to_dict(self) -> dict[str, Any]:
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        loader = data.pop("data_loader")
        if loader is not None:
            data["data_loader"] = loader.to_dict()
        if data["fp8_recipe"] is None:  # the stack's default: nothing to record
            del data["fp8_recipe"]
        for key, default in (("optimizer_moments", "fp32"), ("fp8_amax_reduction", "stage")):
            if data[key] == default:  # the default: resolved configs as before
                del data[key]
        data["recompute_modules"] = list(self.recompute_modules)
        if self.recompute_modules == DEFAULT_RECOMPUTE_MODULES:
            del data["recompute_modules"]
        if not self.activation_func_fp8_input_store:
            del data["activation_func_fp8_input_store"]
        return data


@dataclass(frozen=True, slots=True)
class Coordinates:
    """Where a rank sits in the 4D grid (``cp`` 0 without context parallelism)."""

    tp: int
    dp: int
    pp: int
    cp: int = 0


def placement_axes(order: str) -> tuple[str, ...]:
    """The axes of a placement ``order``, innermost first; ``cp`` right after ``tp`` when
    the order does not name it (Megatron-Core's default, see the module docstring)."""
    axes = order.split("-")
    if "cp" not in axes:
        axes.insert(axes.index("tp") + 1, "cp")
    return tuple(axes)


class Placement:
    """Global rank ↔ (tp, cp, dp, pp) coordinates for an axis ``order``, innermost first.

    ``replica`` arguments count (cp, dp) pairs, CP innermost (module docstring); without
    context parallelism a replica is a data-parallel rank.
    """

    def __init__(self, parallel: ParallelConfig) -> None:
        check_choice(parallel.order, PLACEMENT_ORDERS, key="parallelism.order",
                     what="placement order")
        self.parallel = parallel
        self.axes = placement_axes(parallel.order)
        self.sizes = {"tp": parallel.tp, "cp": parallel.cp, "dp": parallel.dp,
                      "pp": parallel.pp}

    def rank(self, tp: int, dp: int, pp: int, cp: int = 0) -> int:
        """Global rank of the GPU at these coordinates."""
        coords = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
        rank, stride = 0, 1
        for axis in self.axes:
            rank += coords[axis] * stride
            stride *= self.sizes[axis]
        return rank

    def coordinates(self, rank: int) -> Coordinates:
        """Coordinates of a global rank."""
        values: dict[str, int] = {}
        for axis in self.axes:
            values[axis] = rank % self.sizes[axis]
            rank //= self.sizes[axis]
        return Coordinates(values["tp"], values["dp"], values["pp"], values["cp"])

    def replica_rank(self, tp: int, replica: int, pp: int) -> int:
        """Global rank of tensor rank ``tp`` of ``replica`` (a (cp, dp) pair) at stage ``pp``."""
        cp = self.parallel.cp
        return self.rank(tp, replica // cp, pp, replica % cp)

    def tp_group(self, replica: int, pp: int) -> tuple[int, ...]:
        """The tensor-parallel group of ``replica`` at stage ``pp``."""
        return tuple(self.replica_rank(t, replica, pp) for t in range(self.parallel.tp))

    def dp_group(self, tp: int, pp: int) -> tuple[int, ...]:
        """The ranks that reduce tensor rank ``tp``'s gradients at stage ``pp``: every
        replica's (``dp·cp`` of them, CP innermost)."""
        return tuple(self.replica_rank(tp, r, pp) for r in range(self.parallel.dp_cp))

    def cp_group(self, tp: int, dp: int, pp: int) -> tuple[int, ...]:
        """The context-parallel ring of tensor rank ``tp``, data-parallel rank ``dp``, in
        ring order."""
        return tuple(self.rank(tp, dp, pp, c) for c in range(self.parallel.cp))

    def ep_groups(self, pp: int) -> list[tuple[int, ...]]:
        """The expert-parallel groups of stage ``pp`` (global ranks), in Megatron-Core's
        order (:mod:`workloads.strategy.expert_grid`): with ``expert_tp = tp`` each
        tensor rank's ``ep`` consecutive replicas, one group per tensor rank."""
        grid = self.parallel.expert_grid()
        stage = set(self.stage_ranks(pp))
        return [g for g in grid.expert_groups("ep") if g[0] in stage]

    def stage_ranks(self, pp: int) -> tuple[int, ...]:
        """Every global rank of pipeline stage ``pp``."""
        return tuple(self.replica_rank(t, r, pp) for r in range(self.parallel.dp_cp)
                     for t in range(self.parallel.tp))


def check_strategy(model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig, *,
                   num_gpus: int, source: str | None = None,
                   seq_len: int | None = None) -> int:
    """Validate a strategy against a model (its layers, heads, KV heads and experts) and a
    cluster of ``num_gpus`` GPUs; returns micro-batches per step.

    ``seq_len``: the sequence trained on (``training.seq_len`` wins), which context
    parallelism must split into ``2·cp`` chunks.  Each violation is a
    :class:`ConfigError` naming the keys and the numbers involved; the checks run in the
    order below, so the first one that fails is the one reported.
    """
    layers, heads, kv_heads, experts = model.layers, model.heads, model.kv_heads, model.experts
    _check_degrees(parallel, num_gpus=num_gpus, heads=heads, kv_heads=kv_heads, source=source)
    _check_pipeline(parallel, layers=layers, source=source)
    _check_sharding(parallel, experts=experts, source=source)
    if model.mtp_depth and (parallel.fsdp or parallel.zero == 3):
        # Its block's parameters would need a gather of their own before each pass.
        raise ConfigError("multi-token prediction with ZeRO-3/FSDP is not modelled",
                          key="model.mtp_depth", source=source,
                          hint="zero 1 or 2 (DeepSeek-V3 trains with ZeRO-1), or mtp_depth 0")
    microbatches = _check_training(training, parallel, source=source)
    check_fb_overlap(parallel, experts=experts, recompute=training.recompute,
                     recompute_modules=training.recompute_modules, source=source)
    check_recompute_modules(training.recompute_modules, model, source=source)
    check_activation_fp8_store(training.activation_func_fp8_input_store,
                               gated_mlp=model.gated_mlp, source=source)
    check_offload(parallel.offload, zero=parallel.zero, fsdp=parallel.fsdp,
                  precision=training.precision, source=source)
    check_tp_nd(parallel, micro_batch=training.micro_batch, heads=heads, kv_heads=kv_heads,
                experts=experts, source=source)
    check_operator_sharding(parallel, experts=experts, source=source, model=model, tp=parallel.tp)
    check_cp_split(training.seq_len or seq_len, parallel.cp, key="parallelism.cp", source=source)
    check_cp_comm(parallel, heads=heads, kv_heads=kv_heads,
                  windowed=model.attention_window is not None, source=source)
    if parallel.layer_groups:
        check_layer_group_strategy(
            tp_mode=parallel.tp_mode, sequence_parallel=parallel.sequence_parallel,
            cp=parallel.cp, ep=parallel.ep, zero=parallel.zero, fsdp=parallel.fsdp,
            offload=parallel.offload.enabled, source=source)
        check_layer_groups(parallel.layer_groups, tp=parallel.tp, dp=parallel.dp,
                           layers=layers, heads=heads, kv_heads=kv_heads,
                           micro_batch=training.micro_batch, source=source)
    return microbatches


def check_cp_split(seq_len: int | None, cp: int, *, key: str = "cp",
                   source: str | None = None) -> None:
    """A sequence that splits into ``2·cp`` equal chunks (written at ``key``): the load
    balancing of causal attention gives each CP rank two of them.  ``None``: unknown."""
    if cp > 1 and seq_len is not None and seq_len % (2 * cp):
        raise ConfigError(f"sequence length {seq_len} does not split into 2·cp = {2 * cp} "
                          "equal chunks", key=key, source=source,
                          hint="context parallelism gives each CP rank two chunks of the "
                          "sequence (for causal load balance): choose cp with 2·cp "
                          f"dividing {seq_len}")


def _check_degrees(p: ParallelConfig, *, num_gpus: int, heads: int, kv_heads: int,
                   source: str | None) -> None:
    """Whole degrees whose product is the cluster, and heads that split over tp."""
    for key in ("tp", "pp", "dp", "ep", "cp", "interleave"):
        check_whole(getattr(p, key), key=f"parallelism.{key}", source=source)
    if p.num_gpus != num_gpus:
        names, values = ("tp·cp·pp·dp", f"{p.tp}·{p.cp}·{p.pp}·{p.dp}") if p.cp > 1 else (
            "tp·pp·dp", f"{p.tp}·{p.pp}·{p.dp}")
        fixed = p.tp * p.cp * p.pp
        raise ConfigError(
            f"{names} = {values} = {p.num_gpus} but the cluster has "
            f"{num_gpus} GPUs", key="parallelism", source=source,
            hint=f"choose degrees whose product is {num_gpus}, e.g. dp = "
            f"{num_gpus // fixed} if {names[:-3]} divides it" if num_gpus % fixed == 0
            else f"choose degrees whose product is {num_gpus}")
    if p.tp_mode == "1d":  # 2-D/3-D meshes split heads over one side (workloads.strategy.tp_nd)
        check_tp_split(heads=heads, kv_heads=kv_heads, tp=p.tp, key="parallelism.tp",
                       source=source)


def check_tp_split(*, heads: int, kv_heads: int, tp: int, key: str = "tp",
                   source: str | None = None) -> None:
    """Attention heads that split over ``tp`` (written at ``key``), and key/value heads
    that split over it or, fewer than tp, are replicated."""
    if heads % tp:
        raise ConfigError(f"{heads} attention heads do not split over tp = {tp}", key=key,
                          source=source, hint=f"tp must divide {heads}: tensor parallelism "
                                              "splits whole attention heads")
    if kv_heads % tp and tp % kv_heads:
        raise ConfigError(f"{kv_heads} key/value heads do not split over tp = {tp}", key=key,
                          source=source, hint="key/value heads are split over tp, or "
                                              "replicated when fewer than tp")


def check_ep_split(*, experts: int, ep: int, key: str = "ep",
                   source: str | None = None) -> None:
    """Experts that split over ``ep`` (written at ``key``), which needs a MoE model."""
    if ep > 1 and experts == 1:
        raise ConfigError(f"ep = {ep} needs a MoE model, one with experts > 1", key=key,
                          source=source, hint="set ep to 1 for a dense model")
    if experts % ep:
        raise ConfigError(f"{experts} experts do not split over ep = {ep}", key=key,
                          source=source, hint="expert parallelism places whole experts on "
                                              "each rank")


def _check_pipeline(p: ParallelConfig, *, layers: int, source: str | None) -> None:
    """A known schedule and partition, and layers that split into the pipeline's chunks."""
    check_choice(p.schedule, SCHEDULES, key="parallelism.schedule", source=source)
    check_interleave(p.schedule, p.interleave, key="parallelism.interleave", source=source)
    if p.schedule in ("interleaved", *V_SCHEDULES) and p.pp < 2:
        raise ConfigError(f"the {p.schedule} schedule needs pp >= 2", key="parallelism.pp",
                          source=source)
    if p.schedule in BIDIRECTIONAL and p.pp % 2:  # a rank holds a stage and its mirror
        raise ConfigError(f"the {p.schedule} schedule needs an even pp, got {p.pp}",
                          key="parallelism.pp", source=source)
    check_choice(p.partition, PARTITIONS, key="parallelism.partition", source=source)
    chunks = model_chunks(p.schedule, p.pp, p.interleave)
    what = "pp" if p.schedule in BIDIRECTIONAL else "pp·interleave"  # DualPipe: pp stages
    if p.partition == "uniform":
        check_uniform_split(layers, chunks, key="parallelism.pp", source=source, what=what)
    # The embedding and the output layer count as a unit each, so the first and the last
    # chunk may hold only them (NeMo's account_for_embedding_in_pipeline_split and
    # account_for_loss_in_pipeline_split: Llama 3.1 405B's 30-layer proxy on pp 4 x vp 8);
    # a chunk with no unit at all would be an empty stage.
    if p.partition == "embedding" and layers + 2 < chunks:
        raise ConfigError(f"{layers} layers and the embedding and output layers leave an "
                          f"empty chunk over {what} = {chunks}",
                          key="parallelism.pp", source=source,
                          hint=f"{what} at most {layers + 2}")


def check_uniform_split(layers: int, chunks: int, *, key: str = "pp",
                        source: str | None = None, what: str = "pp·interleave") -> None:
    """``layers`` that split into ``chunks`` (``what``: pp·interleave, or DualPipe's pp)
    equal pipeline chunks."""
    if layers % chunks:
        raise ConfigError(
            f"{layers} layers do not split into {what} = {chunks} equal chunks",
            key=key, source=source, hint=f"{what} must divide the number of layers; "
            "or use partition: embedding, Megatron-DeepSpeed's balanced split")


def _check_sharding(p: ParallelConfig, *, experts: int, source: str | None) -> None:
    """Experts, ZeRO/FSDP, sequence parallelism, gradient precision and placement order."""
    check_ep_split(experts=experts, ep=p.ep, key="parallelism.ep", source=source)
    _check_expert_tp(p, experts=experts, source=source)
    check_zero(p.zero, p.fsdp, key="parallelism.zero", source=source)
    check_fsdp_layout(p, source=source)
    if p.sequence_parallel and p.tp == 1:
        raise ConfigError("sequence_parallel needs tp > 1", key="parallelism.sequence_parallel",
                          source=source)
    check_choice(p.grad_reduce_precision, GRAD_REDUCE_PRECISIONS,
                 key="parallelism.grad_reduce_precision", source=source,
                 what="gradient precision")
    check_choice(p.order, PLACEMENT_ORDERS, key="parallelism.order", source=source,
                 what="placement order")
    _check_overlaps(p, source=source)


def _check_expert_tp(p: ParallelConfig, *, experts: int, source: str | None) -> None:
    """An expert layout Megatron-Core accepts (:func:`check_expert_grid`) whose expert
    tensor parallelism distsim runs: a divisor of ``tp`` — the dense ``tp`` (Megatron-Core's
    default), 1 (whole experts: DeepSeek-V3, NVIDIA's Grok-1 on H100) or between, each
    expert-tensor group then ``expert_tp`` consecutive ranks of a tensor group."""
    if p.expert_tp is not None:
        check_whole(p.expert_tp, key="parallelism.expert_tp", source=source)
        if experts == 1:
            raise ConfigError("expert_tp needs a MoE model, one with experts > 1",
                              key="parallelism.expert_tp", source=source,
                              hint="remove expert_tp for a dense model")
    if experts > 1:  # a dense model has no expert grid to lay out
        check_expert_grid(p.expert_grid(), source=source)
    if p.tp % p.etp:
        raise ConfigError(f"expert_tp {p.etp} that does not divide tp {p.tp} is not modelled",
                          key="parallelism.expert_tp", source=source,
                          hint=f"a divisor of {p.tp}: 1 (whole experts) … {p.tp} (the dense tp)")
    if 1 < p.etp < p.tp and placement_axes(p.order)[0] != "tp":
        # Each expert-tensor group is then etp consecutive ranks inside a tensor group.
        raise ConfigError(f"expert_tp {p.etp} between 1 and tp needs tp innermost in the "
                          f"order, got {p.order}", key="parallelism.expert_tp", source=source,
                          hint="an order starting with tp (Megatron-Core's), or expert_tp "
                          f"1 or {p.tp}")
    if p.etp != p.tp and p.tp_mode != "1d":
        raise ConfigError(f"expert_tp with tp_mode {p.tp_mode} is not modelled",
                          key="parallelism.expert_tp", source=source,
                          hint="tp_mode: 1d, or remove expert_tp")


def _check_overlaps(p: ParallelConfig, *, source: str | None) -> None:
    """The framework overlaps only where the frameworks run them: the parameter gather
    needs the distributed optimizer, TP overlap sequence-parallel 1-D tensor parallelism."""
    if p.overlap_param_gather and p.zero not in (1, 2):
        raise ConfigError(f"overlap_param_gather needs the distributed optimizer (zero 1 or "
                          f"2), got zero {p.zero}", key="parallelism.overlap_param_gather",
                          source=source, hint="set zero: 1, or overlap_param_gather: false")
    if p.tp_comm_overlap and not (p.sequence_parallel and p.tp > 1 and p.tp_mode == "1d"):
        raise ConfigError("tp_comm_overlap overlaps sequence parallelism's all-gather and "
                          "reduce-scatter with the GEMMs: it needs tp > 1, "
                          "sequence_parallel: true and tp_mode: 1d",
                          key="parallelism.tp_comm_overlap", source=source,
                          hint="set sequence_parallel: true, or tp_comm_overlap: false")
    if p.tp_comm_overlap and p.layer_groups:  # per-group widths: its pairs not modelled
        raise ConfigError("tp_comm_overlap is not modelled with per-layer strategies",
                          key="parallelism.tp_comm_overlap", source=source,
                          hint="set tp_comm_overlap: false, or remove layer_groups")
    if p.moe_overlap and p.cp > 1:
        raise ConfigError("moe_overlap is not modelled with context parallelism (cp > 1): "
                          "each half micro-batch's attention would run a ring of its own",
                          key="parallelism.moe_overlap", source=source,
                          hint="set moe_overlap: false, or cp: 1")
    check_choice(p.bucketing, BUCKETINGS, key="parallelism.bucketing", source=source)
    if p.align_param_gather and not (p.overlap_param_gather and p.schedule == "interleaved"):
        raise ConfigError("align_param_gather dispatches the overlapped parameter gathers "
                          "from the interleaved schedule (Megatron-LM turns it off without "
                          "it): it needs overlap_param_gather: true and schedule: interleaved",
                          key="parallelism.align_param_gather", source=source,
                          hint="set align_param_gather: false, or leave it out")
    if p.align_grad_reduce and p.schedule != "interleaved":
        raise ConfigError("align_grad_reduce dispatches each chunk's gradient reduction from "
                          "the interleaved schedule; without it Megatron's aligned reduction "
                          "is bucketing: first_chunk's", key="parallelism.align_grad_reduce",
                          source=source, hint="set align_grad_reduce: false, or leave it out")
    check_whole(p.tp_comm_overlap_splits, key="parallelism.tp_comm_overlap_splits",
                source=source, minimum=1, maximum=1024)
    check_whole(p.tp_comm_overlap_sms, key="parallelism.tp_comm_overlap_sms", source=source,
                minimum=0, maximum=1024)


#: Micro-batches per pipeline in one iteration (global_batch / (micro_batch·dp)): each is
#: simulated, about 15 kB and 1 ms of host time apiece; real jobs use tens to hundreds.
MAX_MICROBATCHES = 2**16


def _check_training(t: TrainingConfig, p: ParallelConfig, *, source: str | None) -> int:
    """Batch sizes that split over dp and the pipeline; returns micro-batches per step."""
    for key in ("micro_batch", "global_batch"):  # 2^40 sequences: past any batch trained
        check_whole(getattr(t, key), key=f"training.{key}", source=source, maximum=2**40,
                    too_big="larger than any batch trained")
    if t.global_batch % (t.micro_batch * p.dp):
        raise ConfigError(
            f"global_batch {t.global_batch} is not a multiple of micro_batch·dp = "
            f"{t.micro_batch}·{p.dp} = {t.micro_batch * p.dp}", key="training.global_batch",
            source=source, hint=f"use a multiple of {t.micro_batch * p.dp}")
    microbatches = t.global_batch // (t.micro_batch * p.dp)
    if microbatches > MAX_MICROBATCHES:  # each is simulated: bound what the schedule holds
        raise ConfigError(
            f"{microbatches:,} micro-batches per pipeline per iteration, more than distsim "
            f"simulates ({MAX_MICROBATCHES:,})", key="training.global_batch", source=source,
            hint="raise training.micro_batch or parallelism.dp, or lower global_batch")
    check_schedule_microbatches(p.schedule, p.pp, microbatches, source=source)
    check_choice(t.recompute, RECOMPUTE, key="training.recompute", source=source,
                 what="recompute mode")
    if t.seq_len is not None:
        check_whole(t.seq_len, key="training.seq_len", source=source)
    check_choice(t.precision, PRECISIONS, key="training.precision", source=source)
    check_fp8_recipe(t.fp8_recipe, t.precision, source=source)
    check_choice(t.optimizer_moments, OPTIMIZER_MOMENTS, key="training.optimizer_moments",
                 source=source, what="moment precision")
    check_choice(t.fp8_amax_reduction, FP8_AMAX_REDUCTIONS, key="training.fp8_amax_reduction",
                 source=source, what="amax reduction group")
    if t.optimizer_moments != "fp32" and p.offload.optimizer != "none":
        raise ConfigError("bf16 optimizer moments with the optimizer offloaded are not "
                          "modelled (ZeRO-Offload's CPU Adam keeps them in fp32)",
                          key="training.optimizer_moments", source=source,
                          hint="keep fp32 moments, or the optimizer on the GPU")
    return microbatches


def parallel_from_mapping(data: Mapping[str, Any] | None, *, source: str | None = None,
                          prefix: str = "parallelism") -> ParallelConfig:
    """A :class:`ParallelConfig` from YAML keys (unknown keys rejected with a suggestion);
    a two-chunk schedule (dualpipe, dualpipev) runs ``interleave`` 2 unless it is given."""
    parallel = _from_mapping(ParallelConfig, data, source, prefix, PARALLELISM_NAMES)
    given = isinstance(data, Mapping) and "interleave" in data
    return parallel if given or parallel.schedule not in V_SCHEDULES else replace(
        parallel, interleave=2)


def training_from_mapping(data: Mapping[str, Any] | None, *, source: str | None = None,
                          prefix: str = "training") -> TrainingConfig:
    """A :class:`TrainingConfig` from YAML keys (unknown keys rejected with a suggestion)."""
    return _from_mapping(TrainingConfig, data, source, prefix, TRAINING_NAMES)


def _from_mapping(cls: type, data: Mapping[str, Any] | None, source: str | None,
                  prefix: str, names: Mapping[str, str]) -> Any:
    data = check_mapping(data, key=prefix, source=source, optional=True)
    check_keys(data, tuple(cls.__dataclass_fields__), prefix=prefix, source=source,
               synonyms=names)
    values: dict[str, Any] = {}
    for key, value in data.items():
        default = getattr(cls(), key)
        if isinstance(default, bool) or key in ("reshard_after_forward", "align_param_gather",
                                                "align_grad_reduce"):
            check_bool(value, key=f"{prefix}.{key}", source=source)
        elif key == "offload":
            value = offload_from_mapping(value, source=source, prefix=f"{prefix}.offload")
        elif key == "layer_groups":
            value = layer_groups_from(value, source=source, prefix=f"{prefix}.layer_groups")
        elif key == "operator_sharding":
            value = operator_sharding_from_mapping(value, source=source,
                                                   prefix=f"{prefix}.operator_sharding")
        elif key == "recompute_modules":
            value = recompute_modules_from(value, key=f"{prefix}.{key}", source=source)
        elif key == "data_loader":
            value = data_loader_from_mapping(value, source=source,
                                             prefix=f"{prefix}.data_loader")
        elif key == "bucket_params":
            value = parse_count(value, key=f"{prefix}.{key}", source=source)
        elif isinstance(default, str) or (key == "fp8_recipe" and value is not None):
            value = str(value).lower()
        elif isinstance(default, int) or (key in ("seq_len", "expert_tp")
                                          and value is not None):
            # Degrees, batch sizes, the ZeRO stage: whole numbers from the start (how they
            # fit together, the model and the cluster is check_strategy's to check).
            value = check_whole(value, key=f"{prefix}.{key}", source=source,
                                minimum=0 if key in _MAY_BE_ZERO else 1)
        values[key] = value
    return cls(**values)
