"""The op sequences of the overlaps that interleave a layer's communication with compute.

:class:`OverlappedOps` is the part of :class:`~workloads.iteration.streams.StreamBuilder`
that builds them (a mixin: it uses the builder's costs, bytes and collective helpers):

* ``parallelism.tp_comm_overlap`` — each tensor-parallel all-gather and reduce-scatter
  pipelined with the GEMM it feeds or drains (:mod:`workloads.cost.tp_overlap`): a dense
  layer's both blocks, a MoE layer's attention block (its MLP's are the token
  dispatcher's), before and after the context-parallel ring where there is one;
* context parallelism's ring: the attention's core as ``cp`` blocks, each computed while
  the next step's K/V blocks are sent, or as ``parallelism.cp_comm_type``'s all-gathers
  and all-to-alls run it (:mod:`workloads.cost.context_parallel`);
* ``parallelism.moe_overlap`` — a MoE layer as two half micro-batches, one's all-to-alls
  under the other's compute;
* ``parallelism.fb_overlap`` — a stage's forward and backward of two micro-batches as one
  unit (:mod:`workloads.strategy.fb_pairs`), layer by layer in DeepSeek's order (its
  DualPipe trace, ``../shared/data/traces/deepseek/``): the backward's combine gradients
  go out under the forward's attention, the forward's dispatch and the backward's
  dispatch gradients under the backward's expert weight gradients, the forward's combine
  under the backward's attention.  Each block's time is its share of the layer pass
  (:func:`~workloads.cost.compute.blocks.block_shares`);
* DualPipe's zero-bubble split of a backward (DeepSeek's orders): its input half
  (``"I"``) runs the layers' input gradients and sends the gradient on, its weight half
  (``"W"``) later the weight gradients and the gradient buckets they fill;
* ``parallelism.overlap_param_gather`` — the distributed optimizer's parameter gathers by
  bucket during the forward, and the gradient reductions' dispatch, are Megatron-Core
  DDP's (:mod:`workloads.iteration.ddp_dispatch`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distsim_gpu.workloads.cost.compute.blocks import BlockShares, block_shares
from distsim_gpu.workloads.cost.context_parallel import (
    TORCH_CAST_BYTES,
    TORCH_MERGE_BYTES,
    CpShapes,
    attention_steps,
    core_attention_time_s,
    merge_time_s,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import cp_kv_block_bytes, cp_qkvo_bytes
from distsim_gpu.workloads.cost.tp_overlap import PAIRED_BLOCKS, paired_gemms_s, scatter_is_bulk
from distsim_gpu.workloads.iteration.amax import fp8_linears
from distsim_gpu.workloads.iteration.ddp_dispatch import ParamWaits
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Op, TpOverlap, Wait
from distsim_gpu.workloads.strategy.cp_comm import TORCH_ROTATE_METHODS, a2a_size
from distsim_gpu.workloads.strategy.dimensions import async_handle
from distsim_gpu.workloads.strategy.fb_pairs import Pair
from distsim_gpu.workloads.strategy.schedule import virtual_stage

__all__ = ["BlockPairs", "OverlappedOps"]



@dataclass(frozen=True, slots=True)
class BlockPairs:
    """A block's two userbuffers pairs in one layer pass (:mod:`workloads.cost.tp_overlap`):
    the seconds of the GEMM its all-gather feeds and of the one its reduce-scatter drains,
    whole (the part of the block's compute they are) and as the chunks its collective is
    cut into (what each pair runs).  A GEMM of 0 s is one the block does not have — MLA's
    attention has no ``qkv`` (its down-projections take the gathered input) — and its
    collective then runs whole."""

    gather_s: float
    scatter_s: float
    gather_chunks_s: float
    scatter_chunks_s: float
    bulk: bool = False  # the scatter whole beside its GEMM (a backward's weight gradient)

    @property
    def paired_s(self) -> float:
        """The block's compute its pairs run (whole GEMMs, alone on the GPU)."""
        return self.gather_s + self.scatter_s


class OverlappedOps:
    """Op sequences of the overlaps (module docstring), for a ``StreamBuilder``."""

    # The builder's state and helpers these methods use (streams.StreamBuilder sets them).
    costs: Any
    model: Any
    parallel: Any
    training: Any
    chunks: Any
    virtual_stages: int
    entries: tuple[int, ...]  # virtual stages where micro-batches enter (the embedding's)
    exits: tuple[int, ...]  # and where they leave (the output layer's)
    dispatch_bytes: float
    a2a_bytes: float
    tp_bytes: float
    tp_gather_bytes: float
    cp_bytes: float
    seq_len: int
    rs_stretch: float
    moe_pace: float
    amax: Any
    _fp8_linears: dict[int, int]
    _passes: dict[Any, tuple[Op, ...]]
    _gemm_pairs: dict[tuple[str, LayerShard, tuple[int, int]], dict[str, tuple[float, float]]]
    _tp_ops: Any
    _edge: Any
    _mtp: Any
    _layer_pass: Any
    _layer_cost: Any
    _pass_buckets: Any
    _bucket_reduction: Any
    _async_dp: Any
    _fused: Any
    _attention_share: Any

    def _tp_pairs(self, pass_: str, shard: LayerShard, blocks: int) -> dict[str, BlockPairs]:
        """``parallelism.tp_comm_overlap``: the pairs of the first ``blocks`` blocks of a
        layer pass (:func:`~workloads.cost.tp_overlap.paired_blocks`)."""
        par = self.parallel
        whole = self._paired_gemms(pass_, shard, (1, 1))
        # Each GEMM runs as the chunks its collective is cut into, a slice of rows each.
        chunks = self._paired_gemms(pass_, shard, (par.tp, par.tp_comm_overlap_splits))
        return {block: BlockPairs(*whole[block], *chunks[block], scatter_is_bulk(pass_))
                for block in PAIRED_BLOCKS[:blocks]}

    def _paired_gemms(self, pass_: str, shard: LayerShard, chunks: tuple[int, int],
                      ) -> dict[str, tuple[float, float]]:
        """:func:`~workloads.cost.tp_overlap.paired_gemms_s` of the builder's costs and
        model, once per (pass, shard, chunks): every pipeline pass of a layer (each
        micro-batch kind, folded or not) asks again, and the answer, read only, is the same."""
        key = (pass_, shard, chunks)
        cached = self._gemm_pairs.get(key)
        if cached is None:
            cached = self._gemm_pairs[key] = paired_gemms_s(self.costs, pass_, self.model,
                                                            shard, chunks)
        return cached

    def _overlapped_tp_layer(self, ops: list[Op], pass_: str, shard: LayerShard,
                             what: tuple[float, str, tuple[str, str, int]],
                             fold: bool) -> None:
        """``parallelism.tp_comm_overlap`` on a dense layer without context parallelism:
        each block's collectives run against its GEMMs (:meth:`_paired_block`), the rest of
        the layer's compute split evenly between the blocks.  ``what``: the layer pass's
        seconds, label and trace arguments."""
        duration, label, args = what
        pairs = self._tp_pairs(pass_, shard, len(PAIRED_BLOCKS))
        rest = max(duration - sum(pair.paired_s for pair in pairs.values()), 0.0) / 2
        for block, pair in pairs.items():
            self._paired_block(ops, f"{label} {block}", rest + pair.paired_s, pair,
                              (args, fold))

    def _paired_block(self, ops: list[Op], label: str, block_s: float, pair: BlockPairs,
                     where: tuple[tuple[str, str, int], bool]) -> None:
        """A block of ``block_s`` seconds whose collectives run against its GEMMs: the rest
        of its compute, then its all-gather's pair and its reduce-scatter's.  ``where``:
        the trace arguments and whether its TP collectives are exclusive (folded)."""
        args, _ = where
        ops.append(Compute(max(block_s - pair.paired_s, 0.0), label, *args))
        self._gather_pair(ops, label, pair, where)
        self._scatter_pair(ops, label, pair, where)

    def _gather_pair(self, ops: list[Op], label: str, pair: BlockPairs,
                    where: tuple[tuple[str, str, int], bool]) -> None:
        """The block's all-gather against the GEMM it feeds (ring exchange: ``tp`` chunks
        on the copy engines, no SMs), or whole where the block has no such GEMM."""
        args, fold = where
        gather = Collective("all_gather", self.tp_gather_bytes, f"{label} all_gather",
                            exclusive=fold)
        ops.append(TpOverlap(gather, Compute(pair.gather_chunks_s, f"{label} gemm", *args),
                             self.parallel.tp, comm_first=True)
                   if pair.gather_s > 0 else gather)

    def _scatter_pair(self, ops: list[Op], label: str, pair: BlockPairs,
                     where: tuple[tuple[str, str, int], bool]) -> None:
        """The block's reduce-scatter against the GEMM it drains
        (``tp_comm_overlap_splits`` chunks, its kernels on ``tp_comm_overlap_sms`` SMs
        the GEMM cannot use), or in a backward whole beside the weight gradient (bulk,
        the GEMM on every SM); whole alone where the block has no such GEMM."""
        args, fold = where
        par = self.parallel
        scatter = Collective("reduce_scatter", self.tp_bytes, f"{label} reduce_scatter",
                             exclusive=fold)
        gemm = Compute(pair.scatter_chunks_s, f"{label} gemm", *args)
        if pair.scatter_s <= 0:
            ops.append(scatter)
        elif pair.bulk:
            ops.append(TpOverlap(scatter, gemm, 1, comm_first=False, bulk=True))
        else:
            ops.append(TpOverlap(scatter, gemm, par.tp_comm_overlap_splits, comm_first=False,
                                 gemm_stretch=self.rs_stretch))

    def _cp_attention(self, ops: list[Op], cost_pass: str, layer: tuple[float, LayerShard],
                      where: tuple[str, tuple[str, str, int]], fold: bool,
                      block: tuple[BlockPairs | None, float | None]) -> float:
        """Context parallelism: the attention's linear part, then its core attention as
        ``parallelism.cp_comm_type`` runs it — the ring's ``cp`` blocks, each overlapped
        with the send of the blocks the next step needs, or the all-gathers and
        all-to-alls of the other types (:mod:`workloads.cost.context_parallel`); with a
        pair (``tp_comm_overlap``) the linear part's gather and scatter run against its
        input and output GEMMs before and after it.  ``layer``: the pass's seconds and
        shard; ``block``: the pair, and the attention block's seconds where they are not
        its share of the pass (a split backward's input half).  Returns those seconds."""
        (duration, shard), (label, args), (pair, attention) = layer, where, block
        par = self.parallel
        core = self._core_attention_s(cost_pass, shard, args[2], 1)
        # The layer at s/cp tokens holds one block's core attention: the rest of the
        # attention block is its linear part.
        if attention is None:
            attention = duration * self._attention_share(cost_pass, shard)
        linear = max(attention - core, 0.0)
        paired = pair.paired_s if pair is not None else 0.0
        if linear > paired:
            ops.append(Compute(linear - paired, f"{label} attention", *args))
        if pair is not None:
            self._gather_pair(ops, f"{label} attention", pair, (args, fold))
        shapes = self._cp_shapes(cost_pass, core, shard, args[2])
        for step in attention_steps(par.cp_comm_type, cost_pass, shapes):
            handle = None if step.handle is None else async_handle("cp", f"{label} {step.handle}")
            if step.kind == "compute":
                ops.append(Compute(step.seconds, f"{label} {step.name}", *args))
            elif step.kind == "wait":
                ops.append(Wait(handle))
            else:
                ops.append(Collective(step.op, step.size_bytes, f"{label} {step.name}",
                                      group=step.group, blocking=handle is None,
                                      handle=handle))
        if pair is not None:
            self._scatter_pair(ops, f"{label} attention", pair, (args, fold))
        return attention

    def _core_attention_s(self, cost_pass: str, shard: LayerShard, layer: int,
                          heads_split: int) -> float:
        """One block's core attention: ``s/cp`` tokens on a tensor rank's heads, or — its
        heads split over ``heads_split`` CP ranks by an all-to-all — ``heads_split`` times
        the tokens on that share of them."""
        par, train = self.parallel, self.training
        return core_attention_time_s(
            self.costs, cost_pass, self.model, LayerShard(
                train.micro_batch, self.seq_len * heads_split, tp=par.tp * heads_split,
                sequence_parallel=par.sequence_parallel, layer_index=layer,
                recompute=shard.recompute))

    def _cp_shapes(self, cost_pass: str, core: float, shard: LayerShard,
                   layer: int) -> CpShapes:
        """The block times and buffers ``parallelism.cp_comm_type`` moves in one pass of
        ``layer`` (:class:`~workloads.cost.context_parallel.CpShapes`); ``core``: one ring
        block's core attention at ``s/cp`` tokens."""
        par, train, model = self.parallel, self.training, self.model
        kind = par.cp_comm_type
        if kind in ("p2p", "all_gather"):
            return CpShapes(core, self.cp_bytes, par.cp)
        sizes = {"micro_batch": train.micro_batch, "seq_len": self.seq_len * par.cp}
        if kind in TORCH_ROTATE_METHODS:
            # The output's elements, which PyTorch's fp32 merge passes over; its dK/dV go
            # round in fp32.
            outputs = cp_qkvo_bytes(model, **sizes, tp=par.tp, cp=par.cp,
                                    precision="fp32")[1] / 4
            return CpShapes(core, self.cp_bytes, par.cp, dkv_bytes=cp_kv_block_bytes(
                model, **sizes, tp=par.tp, cp=par.cp, precision="fp32"),
                merge_s=merge_time_s(self.costs, (TORCH_CAST_BYTES + TORCH_MERGE_BYTES)
                                     * outputs),
                cast_s=merge_time_s(self.costs, TORCH_CAST_BYTES * outputs))
        group = a2a_size(kind, par.cp, par.cp_a2a_size)
        qkv, out = cp_qkvo_bytes(model, **sizes, tp=par.tp, cp=par.cp,
                                 precision=train.precision)
        return CpShapes(self._core_attention_s(cost_pass, shard, layer, group),
                        cp_kv_block_bytes(model, **sizes, tp=par.tp * group,
                                          cp=par.cp // group, precision=train.precision),
                        par.cp // group, qkv_bytes=qkv, o_bytes=out)

    def _overlapped_moe(self, ops: list[Op], label: str, times_s: tuple[float, float],
                        args: tuple[str, str, int], fold: bool, pass_: str) -> None:
        """``parallelism.moe_overlap``: the layer as two half micro-batches A and B
        (DeepSeek-V3's two micro-batches; its trace shows DeepEP's dispatch and combine
        kernels on their own stream, ~90 % of their time under the other stream's
        compute): A's dispatch runs under B's attention, B's dispatch under A's experts,
        A's combine under B's experts; B's combine is the exposed part.  ``times_s``:
        the attention's and the experts' time for the whole micro-batch."""
        attention_s, mlp_s = times_s
        def launch(what: str, part: str) -> None:
            half_bytes = (self.dispatch_bytes if what == "dispatch" else self.a2a_bytes) / 2
            ops.append(Collective("alltoall", half_bytes, f"{label} {what} {part}",
                                  group="ep", blocking=False,
                                  handle=async_handle("ep", f"{label} {what} {part}")))

        ops.append(Compute(attention_s / 2, f"{label} attention A", *args))
        launch("dispatch", "A")
        ops.append(Compute(attention_s / 2, f"{label} attention B", *args))
        self._tp_ops(ops, f"{label} attention", fold, pass_, "attention")
        launch("dispatch", "B")
        for part in ("A", "B"):
            ops.append(Wait(async_handle("ep", f"{label} dispatch {part}")))
            ops.append(Compute(mlp_s / 2, f"{label} mlp {part}", *args))
            launch("combine", part)
        for part in ("A", "B"):
            ops.append(Wait(async_handle("ep", f"{label} combine {part}")))
        self._tp_ops(ops, f"{label} mlp", fold, pass_, "mlp", moe=True)

    def _exchange(self, ops: list[Op], what: str, label: str) -> None:
        """A MoE layer's ``dispatch`` or ``combine``, blocking; under ``moe_overlap`` as
        its two halves' exchanges one after the other (what a recompute runs there: every
        exchange of such a run carries half a micro-batch's tokens, as DeepEP's per-token
        cost counts them, :mod:`collectives.deepep`)."""
        size = self.dispatch_bytes if what == "dispatch" else self.a2a_bytes
        parts = (" A", " B") if self.parallel.moe_overlap else ("",)
        for part in parts:
            ops.append(Collective("alltoall", size / len(parts), f"{label} {what}{part}",
                                  group="ep"))

    # ----------------------------------------------------------------- fb pairs
    def pair_ops(self, stage: int, pair: Pair, last: bool, fold: bool,
                 waits: ParamWaits | None = None) -> tuple[Op, ...]:
        """A forward-backward pair without its receives and sends (cached): the
        backward's loss and the forward's embedding, then their layers side by side
        (the i-th of the forward's with the i-th of the backward's), then the forward's
        loss and the backward's embedding; ``last``: the backward is the last
        micro-batch's (its gradient buckets go out as its layers end)."""
        (_, _, f_chunk), (_, _, b_chunk) = pair.forward, pair.backward
        key = ("pair", stage, f_chunk, b_chunk, last, fold, waits is not None)
        cached = self._passes.get(key)
        if cached is not None:
            return cached
        par = self.parallel
        vf, vb = (virtual_stage(stage, chunk, par.pp, par.schedule)
                  for chunk in (f_chunk, b_chunk))
        forward = list(range(*self.chunks[vf]))
        backward = list(reversed(range(*self.chunks[vb])))
        buckets = self._pass_buckets(backward, vb, last)
        ops: list[Op] = []
        if vb in self.exits:
            self._mtp(ops, "bwd", fold)
            ops.append(self._edge("loss", "bwd"))
        if waits is not None:
            waits.before(ops, None)
        if vf in self.entries:
            ops.append(self._edge("embedding", "fwd"))
        for position in range(max(len(forward), len(backward))):
            f_layer = forward[position] if position < len(forward) else None
            b_layer = backward[position] if position < len(backward) else None
            if waits is not None and f_layer is not None:
                waits.before(ops, f_layer)
            self._paired_layers(ops, f_layer, b_layer, fold)
            if b_layer is not None and position + 1 in buckets:
                ops.append(self._bucket_reduction(buckets[position + 1], b_layer, b_chunk))
        if vf in self.exits:
            ops.append(self._edge("loss", "fwd"))
            self._mtp(ops, "fwd", fold)
        if vb in self.entries:
            ops.append(self._edge("embedding", "bwd"))
        if None in buckets:
            ops.append(self._bucket_reduction(buckets[None], None, b_chunk))
        ops += self.amax_ops("F", vf) + self.amax_ops("B", vb)
        cached = self._passes[key] = self._fused(ops, stage)
        return cached

    def amax_ops(self, pass_: str, vs: int) -> list[Op]:
        """FP8 delayed scaling's amax all-reduce at the end of a forward (``F``) or a
        backward (``B``, a split backward's ``I``) of virtual stage ``vs``
        (:mod:`~workloads.iteration.amax`); none without it, after a ``W``, or where the
        chunk holds no FP8 linear (Transformer Engine then has no amax to reduce)."""
        if self.amax is None or pass_ == "W":
            return []
        linears = self._fp8_linears.get(vs)
        if linears is None:
            linears = self._fp8_linears[vs] = sum(
                fp8_linears(self.costs, self.model, self._layer_cost("fwd", layer)[1])
                for layer in range(*self.chunks[vs]))
        name = "fwd" if pass_ == "F" else "bwd"
        return [self.amax.op(name, linears, f"amax {name} (FP8 scales)")] if linears else []

    def _paired_layers(self, ops: list[Op], f_layer: int | None, b_layer: int | None,
                       fold: bool) -> None:
        """Forward layer ``f_layer`` beside backward layer ``b_layer`` (either None past
        the shorter chunk's end): interleaved when both are expert-parallel MoE layers,
        else one after the other."""
        moe = self.model.is_moe_layer
        if f_layer is None or b_layer is None or not (moe(f_layer) and moe(b_layer)):
            if f_layer is not None:
                self._layer_pass(ops, "fwd", f_layer, fold)
            if b_layer is not None:
                self._layer_pass(ops, "recompute", b_layer, fold)
                self._layer_pass(ops, "bwd", b_layer, fold)
            return
        f_label, b_label = f"L{f_layer} fwd", f"L{b_layer} bwd"
        f_args, b_args = ("moe_layer", "fwd", f_layer), ("moe_layer", "bwd", b_layer)
        fwd, bwd = self._block_times("fwd", f_layer), self._block_times("bwd", b_layer)
        recompute_s = (self._layer_cost("recompute", b_layer, "selective")[0]
                       if self.training.recompute == "selective" else 0.0)

        def launch(size_bytes: float, label: str) -> None:
            ops.append(Collective("alltoall", size_bytes, label, group="ep", blocking=False,
                                  handle=async_handle("ep", label)))

        def wait(label: str) -> None:
            ops.append(Wait(async_handle("ep", label)))

        self._tp_ops(ops, f"{b_label} mlp", fold, "bwd", "mlp", moe=True)
        launch(self.dispatch_bytes, f"{b_label} dispatch")  # combine's gradients, to experts
        ops.append(Compute(fwd.attention, f"{f_label} attention", *f_args))
        self._tp_ops(ops, f"{f_label} attention", fold, "fwd", "attention")
        launch(self.dispatch_bytes, f"{f_label} dispatch")
        wait(f"{b_label} dispatch")
        ops.append(Compute(bwd.mlp, f"{b_label} mlp", *b_args))
        launch(self.a2a_bytes, f"{b_label} combine")  # dispatch's gradients, back
        ops.append(Compute(bwd.mlp_weights, f"{b_label} mlp weights", *b_args))
        wait(f"{f_label} dispatch")
        ops.append(Compute(fwd.mlp, f"{f_label} mlp", *f_args))
        launch(self.a2a_bytes, f"{f_label} combine")
        wait(f"{b_label} combine")
        ops.append(Compute(recompute_s + bwd.attention, f"{b_label} attention", *b_args))
        ops.append(Compute(bwd.attention_weights, f"{b_label} attention weights", *b_args))
        self._tp_ops(ops, f"{b_label} attention", fold, "bwd", "attention")
        wait(f"{f_label} combine")
        self._tp_ops(ops, f"{f_label} mlp", fold, "fwd", "mlp", moe=True)

    def _block_times(self, pass_: str, layer: int) -> BlockShares:
        """Seconds of each block of a layer's pass: its share of the pass's time, a MoE
        layer's MLP input and weight parts each with its part of the skewed router's
        extra time, counted as the plain layer counts it (half the layer at the most
        loaded expert-parallel rank's pace), so the pass's total is the plain layer's."""
        duration, shard = self._layer_cost(pass_, layer)
        share = block_shares(self.costs, pass_, self.model, shard)
        mlp = share.mlp + share.mlp_weights
        skewed = self.model.is_moe_layer(layer) and mlp > 0
        extra = (self.moe_pace - 1.0) * duration / 2 / mlp if skewed else 0.0
        return BlockShares(share.attention * duration, share.attention_weights * duration,
                           share.mlp * (duration + extra), share.mlp_weights * (duration + extra))

    # ----------------------------------------------------------------- zero bubble
    def input_gradient_times(self, layer: int) -> tuple[float, float]:
        """The attention's and the MLP's input-gradient seconds of ``layer``'s backward
        (a split backward's ``"I"``: :mod:`workloads.strategy.schedule`)."""
        times = self._block_times("bwd", layer)
        return times.attention, times.mlp

    def weight_pass(self, vs: int, chunk: int, last: bool) -> list[Op]:
        """A split backward's ``"W"`` of virtual stage ``vs``: each layer's weight
        gradients in backward order, the embedding's on the first virtual stage, and on
        the last micro-batch the gradient buckets each fills (DualPipe's deferred
        weight passes: the input gradients went to the stage before without them)."""
        order = list(reversed(range(*self.chunks[vs])))
        buckets = self._pass_buckets(order, vs, last)
        ops: list[Op] = []
        for position, layer in enumerate(order):
            times = self._block_times("bwd", layer)
            kind = "moe_layer" if self.model.is_moe_layer(layer) else "transformer_layer"
            ops.append(Compute(times.attention_weights + times.mlp_weights,
                               f"L{layer} bwd weights", kind, "bwd", layer))
            if position + 1 in buckets:
                ops.append(self._bucket_reduction(buckets[position + 1], layer, chunk))
        if vs in self.entries:
            ops.append(self._edge("embedding", "bwd"))
        if None in buckets:
            ops.append(self._bucket_reduction(buckets[None], None, chunk))
        return ops
