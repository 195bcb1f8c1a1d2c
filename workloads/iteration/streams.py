"""The op streams of one training iteration: what each pipeline stage runs, in order.

Every rank group of a stage (its ``tp`` GPUs of one data-parallel replica) runs the same
stream of :mod:`workloads.iteration.ops`, built here from the model, the parallel strategy, the
training setup and the compute costs:

* per pass of the stage's schedule (:mod:`workloads.strategy.schedule`): receive the input from
  the neighbouring virtual stage, run the chunk's layers, send the output on (with
  ``fb_overlap``, a forward-backward pair as one unit: :mod:`workloads.iteration.overlaps`);
* per layer and pass: attention and MLP compute (each its share of the layer pass from
  the roofline's operators, :mod:`workloads.cost.compute.blocks`), each followed by its
  tensor-parallel collectives (all-reduce; all-gather + reduce-scatter with sequence
  parallelism) and, in a MoE layer with expert parallelism, the dispatch / combine
  all-to-alls; the backward pass re-runs the forward first when activations are recomputed;
* context parallelism (``cp`` > 1): a rank runs the layer at its ``s/cp`` tokens, and
  its core attention as ``cp`` blocks around the CP ring, each block's compute overlapped
  with the asynchronous send of the next K/V block (:mod:`workloads.iteration.overlaps`);
* data parallelism: the last micro-batch's backward (ZeRO-2: every one's) launches the
  gradient buckets as it produces them; ZeRO-3/FSDP gathers each layer's parameters ahead
  of its passes and reduce-scatters its gradients every micro-batch — under a pipeline
  once a step, kept gathered from each chunk's first forward and reduced by the last
  micro-batch's backward (:mod:`workloads.iteration.param_shards`);
* the iteration's end: wait for the gradients, all-reduce the tied embedding between the
  first and last stage, meet every rank for the gradient norm, step the optimizer, and
  (ZeRO-1/2) gather the updated parameters.

A tensor-parallel collective is marked ``exclusive`` when the caller says nothing else can
use its links (:mod:`workloads.iteration` decides); given its closed-form time, runs of
compute and exclusive collectives are fused into one :class:`~workloads.iteration.ops.Fused` op.
A pass's ops are built once and shared by every micro-batch that runs it.

The bytes every transfer carries come from :mod:`workloads.cost.traffic`, which the
iteration's lower bound (:mod:`workloads.cost.bounds`) counts with too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from distsim_gpu.workloads.cost.compute import CostModel
from distsim_gpu.workloads.cost.compute.blocks import block_shares
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.mtp import mtp_projection_s
from distsim_gpu.workloads.cost.parameters import layer_group_extra_params
from distsim_gpu.workloads.cost.tp_overlap import (
    PAIRED_BLOCKS,
    gemm_stretch,
    paired_blocks,
    roofline_of,
)
from distsim_gpu.workloads.cost.traffic import (
    activation_bytes_per_element,
    alltoall_bytes,
    chunk_is_bucketed,
    cp_message_bytes,
    dispatch_bytes,
    entry_grad_bytes,
    exchanges_by_deepep,
    gathers_layer_params,
    grad_bytes_per_element,
    gradient_buckets,
    head_grad_bytes,
    keeps_params_gathered,
    layer_grad_bytes,
    layer_shard_grad_bytes,
    moe_tp_scale,
    optimizer_params,
    pipeline_message_bytes,
    rank_training,
    reduces_every_microbatch,
    reduces_in_buckets,
    reshards_after_forward,
    seq_len_of,
    stage_param_bytes,
    tp_all_gather_bytes,
    tp_collective_kinds,
    tp_message_bytes,
    word_embedding_grad_bytes,
)
from distsim_gpu.workloads.iteration.amax import amax_reduction
from distsim_gpu.workloads.iteration.ddp_dispatch import DdpOps, ParamWaits
from distsim_gpu.workloads.iteration.ops import (
    Barrier,
    Collective,
    Compute,
    Op,
    Recv,
    Send,
    Wait,
    fuse,
)
from distsim_gpu.workloads.iteration.overlaps import BlockPairs, OverlappedOps
from distsim_gpu.workloads.iteration.param_shards import ShardedParamOps, ShardUnit
from distsim_gpu.workloads.iteration.run_hints import PLAIN, RunHints
from distsim_gpu.workloads.specs.models import ModelSpec
from distsim_gpu.workloads.specs.moe_routing import moe_pace
from distsim_gpu.workloads.specs.recompute import table_pass as recompute_table_pass
from distsim_gpu.workloads.specs.recompute_modules import PassCommunication, pass_communication
from distsim_gpu.workloads.strategy import schedule as pipeline
from distsim_gpu.workloads.strategy.dimensions import peer_groups
from distsim_gpu.workloads.strategy.fb_pairs import Pair, Unit, paired_programs
from distsim_gpu.workloads.strategy.layer_groups import (
    LayerSetting,
    block_subgroups,
    layer_settings,
    reshard_bytes,
    reshard_subgroups,
    shard_subgroups,
)
from distsim_gpu.workloads.strategy.operator_sharding import split_extra_s
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig, chunk_layers
from distsim_gpu.workloads.strategy.tp_nd import layer_comm, mesh_of

__all__ = ["StreamBuilder"]

#: Peer groups whose calls are a ring's sends (context parallelism's).
_RINGS = frozenset(name for name, peer in peer_groups().items() if peer.ring)


class StreamBuilder(OverlappedOps, ShardedParamOps, DdpOps):
    """Builds each stage's stream of ops for ``microbatches`` micro-batches, shaped by the
    run's :class:`RunHints` (the plain ops without them)."""

    def __init__(self, model: ModelSpec, parallel: ParallelConfig, training: TrainingConfig,
                 costs: CostModel, *, microbatches: int, hints: RunHints = PLAIN,
                 ) -> None:
        self.model, self.parallel, self.training, self.costs = model, parallel, training, costs
        self.microbatches = microbatches
        self.exclusive_tp = hints.exclusive_tp
        self.dp_apart = hints.dp_apart
        self.tp_time_s = hints.tp_time_s
        # A context-parallel rank computes and sends its s/cp tokens of each sequence.
        local = rank_training(model, parallel, training)
        self.seq_len = seq_len_of(model, local)
        self.virtual_stages = parallel.pp * parallel.interleave
        self.chunks = chunk_layers(model.layers, parallel.pp, parallel.interleave,
                                   parallel.partition, parallel.schedule)
        self.entries, self.exits = pipeline.route_ends(parallel.schedule, parallel.pp,
                                                       parallel.interleave)
        # Every layer and micro-batch sends messages of the same sizes: count them once.
        self.tp_kinds = tp_collective_kinds(parallel)
        self.tp_bytes = tp_message_bytes(model, local)
        stack = getattr(costs, "resolved_stack", None)
        self.tp_gather_bytes = tp_all_gather_bytes(
            model, local, fp8_gather=stack is not None and stack.fp8_tp_all_gather)
        # 2-D/2.5-D/3-D: each block's collectives on the mesh's sub-groups instead, and
        # the element-wise work split over tp too (workloads.strategy.tp_nd).
        mesh = self.mesh = mesh_of(parallel.tp_mode, parallel.tp, parallel.tp_depth)
        self.tp_plan = None if mesh is None else layer_comm(
            mesh, model, tokens=training.micro_batch * self.seq_len,
            element_bytes=activation_bytes_per_element(training.precision))
        self.split_elementwise = parallel.sequence_parallel or mesh is not None
        self.p2p_bytes = pipeline_message_bytes(model, parallel, local)
        self._moe_exchange(local, hints.all_to_all)
        self.amax = amax_reduction(costs, parallel, training.fp8_amax_reduction)
        self._fp8_linears: dict[int, int] = {}
        self.cp_bytes = cp_message_bytes(model, parallel, training)
        self._passes: dict[tuple[int, int, str, bool, bool], tuple[Op, ...]] = {}
        self._gemm_pairs = {}  # OverlappedOps._paired_gemms
        # Per-layer strategies (workloads.strategy.layer_groups): each layer's tp, share of the
        # micro-batch and recompute; None when every layer runs as the strategy says.
        self._uniform = LayerSetting(parallel.tp, 1, training.micro_batch, training.recompute)
        self.settings = (layer_settings(parallel.layer_groups, tp=parallel.tp,
                                        micro_batch=training.micro_batch,
                                        recompute=training.recompute)
                         if parallel.layer_groups else None)
        # Narrower layers reduce their gradients over the rank group's GPUs too.
        self.narrow = any(s.k > 1 for s in self.settings or ())
        # ZeRO-3/FSDP under a pipeline: each chunk's parameters gathered by its first
        # forward only and its gradients reduced by its last backward only.
        self.kept = keeps_params_gathered(parallel)
        # reshard_after_forward (False: the backward finds the forward's gathers).
        self.reshards = reshards_after_forward(parallel)
        # parallelism.overlap_param_gather: the distributed optimizer's parameter gather by
        # bucket during the forward (docs/overlaps.md).
        self.param_gather = (parallel.overlap_param_gather and parallel.zero in (1, 2)
                             and parallel.dp_cp > 1)
        # parallelism.tp_comm_overlap: each TP collective pipelined with its GEMM
        # (workloads.cost.tp_overlap); the reduce-scatter's SMs stretch its GEMM.
        self.tp_overlap = (parallel.tp_comm_overlap and mesh is None
                           and self.tp_kinds == ("all_gather", "reduce_scatter"))
        self.rs_stretch = (gemm_stretch(roofline_of(costs).gpu.sm_count,
                                        parallel.tp_comm_overlap_sms)
                           if self.tp_overlap else 1.0)

    def _moe_exchange(self, local: TrainingConfig, all_to_all: str) -> None:
        """The sizes of a MoE layer's exchanges (``local``: a rank's share of the batch)."""
        model, parallel = self.model, self.parallel
        self.a2a_bytes = alltoall_bytes(model, parallel, local)
        # DeepEP dispatches FP8 (with its scales) under a low-precision run; combines 16-bit.
        self.dispatch_bytes = dispatch_bytes(model, parallel, local, all_to_all)
        self.deepep = exchanges_by_deepep(all_to_all, parallel.ep)
        self.moe_tp_scale = moe_tp_scale(model, parallel)
        # expert_tp between 1 and tp: the routed tokens' collectives on each expert-tensor
        # group, etp consecutive tensor ranks (workloads.strategy.expert_grid).
        etp = parallel.etp
        self.expert_tp_groups = (tuple(tuple(range(g, g + etp))
                                       for g in range(0, parallel.tp, etp))
                                 if 1 < etp < parallel.tp else None)
        # Skewed routing: every EP rank's experts run at the pace of the most loaded one
        # (workloads.specs.moe_routing; 1 for a uniform, dropless router).
        self.moe_pace = moe_pace(model.moe, experts=model.experts, top_k=model.top_k,
                                 ep=parallel.ep)

    # ----------------------------------------------------------------- a stage
    def stage_stream(self, stage: int) -> list[Op]:
        """Everything stage ``stage`` runs in one iteration, in order."""
        par = self.parallel
        last_mb = pipeline.chunk_microbatches(par.schedule, self.microbatches) - 1
        sharded = gathers_layer_params(par) and par.dp_cp > 1
        launched_dp = False
        gathered: set[int] = set()  # the chunks whose parameters are kept gathered
        program: Sequence[Unit] = (
            paired_programs(par.schedule, pp=par.pp, microbatches=self.microbatches,
                            interleave=par.interleave)[stage] if par.fb_overlap
            else pipeline.stage_program(par.schedule, pp=par.pp, stage=stage,
                                        microbatches=self.microbatches,
                                        interleave=par.interleave))
        gathers, dispatch = self._dispatch_plan(stage, program, last_mb)
        stream: list[Op] = list(dispatch.start)
        for unit in program:
            steps = (unit.forward, unit.backward) if isinstance(unit, Pair) else (unit,)
            # Forward: input from the virtual stage before, output to the one after; backward
            # the reverse (a split backward's weight half, "W", neither receives nor sends).
            sides = [("F" if pass_ == "F" else "B", mb,
                      pipeline.virtual_stage(stage, chunk, par.pp, par.schedule))
                     for pass_, mb, chunk in steps if pass_ != "W"]
            stream.extend(Recv(pass_, mb, vs) for pass_, mb, vs in sides
                          if vs not in (self.entries if pass_ == "F" else self.exits))
            if steps[0][0] == "F":
                stream.extend(dispatch.forward())
            # ``last``: the backward reduces its buckets (ZeRO-2: every micro-batch's).
            last = steps[-1][1] == last_mb or reduces_every_microbatch(par)
            # Exclusive TP only while no data-parallel collective of this stage can be in
            # flight (none launched yet nor by this pass, no parameter gather before every
            # chunk's first forward waited), or none can touch a TP group's links (dp_apart).
            apart = self.dp_apart and not self.narrow
            fold = (self.exclusive_tp and (apart or (
                not launched_dp and not sharded and not gathers
                and not (last and steps[-1][0] in ("B", "W")
                         and (par.dp_cp > 1 or self.narrow)))))
            buckets = gathers.pop(steps[0][2], ()) if steps[0][0] == "F" else ()
            # Not dispatched by the schedule (nothing at its start): by the forward (lazy).
            waits = ParamWaits(buckets, lazy=not dispatch.start) if buckets else None
            fold = fold and (apart or waits is None)
            first = self.kept and steps[0][0] == "F" and steps[0][2] not in gathered
            if first:
                gathered.add(steps[0][2])
            ops = (self.pair_ops(stage, unit, last, fold, waits) if isinstance(unit, Pair)
                   else self.pass_ops(stage, unit[2], unit[0], last, fold, waits, first))
            # Aligned reductions go out after the pass (workloads.iteration.ddp_dispatch).
            ops += tuple(op for step in steps if step[0] == "B" for op in dispatch.backward())
            # A ring's sends (context parallelism's) do not count: exclusive_tp has
            # checked they never meet a TP collective on its links.
            launched_dp = launched_dp or any(
                isinstance(op, Collective) and not op.blocking and op.group not in _RINGS
                for op in ops)
            stream.extend(ops)
            stream.extend(Send(pass_, mb, vs + 1 if pass_ == "F" else vs - 1, self.p2p_bytes)
                          for pass_, mb, vs in sides
                          if vs not in (self.exits if pass_ == "F" else self.entries))
        stream.extend(dispatch.end)
        stream.extend(self._fused(self._iteration_end(stage), stage))
        return stream

    def _iteration_end(self, stage: int) -> list[Op]:
        """Gradients in, tied embedding, gradient norm, optimizer, ZeRO-1/2 gather."""
        model, par = self.model, self.parallel
        ops: list[Op] = [Wait()]
        # The tied embedding's two ends: on one stage in a V (no all-reduce between them).
        firsts, lasts = pipeline.end_stages(par.schedule, par.pp, par.interleave)
        if firsts != lasts and model.tied_embeddings and stage in firsts | lasts:
            ops.append(Collective("all_reduce", word_embedding_grad_bytes(model, par),
                                  "tied embedding grads", group="embedding"))
        if par.schedule in pipeline.BIDIRECTIONAL:
            # DualPipe's two copies of each model stage sum their (reduced, ZeRO-sharded)
            # gradients, the tied embedding's among them, before either steps.
            ops.append(Collective("all_reduce", optimizer_params(model, par, stage)
                                  * grad_bytes_per_element(par.grad_reduce_precision),
                                  "mirror stage grads", group="mirror"))
        ops.append(Barrier("gradient norm"))
        step_s = self.costs.optimizer_step_time_s(
            optimizer_params(model, par, stage) + layer_group_extra_params(model, par, stage))
        ops.append(Compute(step_s, "optimizer step"))
        if par.zero in (1, 2) and par.dp_cp > 1 and not self.param_gather:
            ops.append(Collective("all_gather",
                                  stage_param_bytes(model, par, self.training, stage),
                                  "gather params", group="dp"))
        return ops

    # ----------------------------------------------------------------- a pass
    def pass_ops(self, stage: int, chunk: int, pass_: str, last: bool,
                 fold: bool, waits: ParamWaits | None = None, first: bool = False,
                 ) -> tuple[Op, ...]:
        """One pass (``"F"``/``"B"``, or a split backward's ``"I"``/``"W"``) of one model
        chunk, without its receive and send (cached); ``last``: the last micro-batch's;
        ``fold``: its tensor-parallel collectives are exclusive; ``waits``: the parameter
        buckets a first forward waits for (:class:`ParamWaits`); ``first``: the
        chunk's first forward, which gathers the parameters kept gathered (``self.kept``)."""
        key = (stage, chunk, pass_, last, fold, waits is not None, first)
        cached = self._passes.get(key)
        if cached is None:
            vs = pipeline.virtual_stage(stage, chunk, self.parallel.pp,
                                        self.parallel.schedule)
            ops = (self._forward(vs, fold, waits, first) if pass_ == "F"
                   else self.weight_pass(vs, chunk, last) if pass_ == "W"
                   else self._backward(vs, chunk, last, fold, weights=pass_ == "B"))
            cached = self._passes[key] = self._fused(ops + self.amax_ops(pass_, vs), stage)
        return cached

    def _forward(self, vs: int, fold: bool, waits: ParamWaits | None = None,
                 first: bool = False) -> list[Op]:
        # Kept gathered (a pipeline's stages): only the chunk's first forward gathers.
        sharded = gathers_layer_params(self.parallel) and (first or not self.kept)
        # Each parameter bucket is waited for before the first layer that needs it.
        ops: list[Op] = []
        if waits is not None:
            waits.before(ops, None)
        if sharded and self.kept:
            self._gather_stage_root(ops, vs)
        if vs in self.entries:
            self._gather_root(ops, vs)
            ops.append(self._edge("embedding", "fwd"))
        order = list(range(*self.chunks[vs]))
        for position, layer in enumerate(order):
            if waits is not None:
                waits.before(ops, layer)
            if sharded:
                self._gather_params(ops, order, position)
            if self.settings and position:
                self._reshard(ops, order[position - 1], layer)
            self._layer_pass(ops, "fwd", layer, fold)
        if vs in self.exits:
            ops.append(self._edge("loss", "fwd"))
            self._mtp(ops, "fwd", fold)
        return ops

    def _mtp(self, ops: list[Op], pass_: str, fold: bool) -> None:
        """The multi-token-prediction modules after the loss (``model.mtp_depth``; their
        backward before the last layer's): each the 2h → h projection, a block like the
        last layer, and the shared output head and loss once more."""
        model = self.model
        depths = range(model.mtp_depth) if pass_ == "fwd" else reversed(
            range(model.mtp_depth))
        for depth in depths:
            label = f"MTP{depth}"
            duration = mtp_projection_s(self.costs, model, pass_=pass_, tp=self.parallel.tp,
                                        tokens=self.training.micro_batch * self.seq_len)
            projection = Compute(duration, f"{label} {pass_} projection", layer="mtp",
                                 pass_name=pass_)
            if pass_ == "fwd":
                ops.append(projection)
                self._layer_pass(ops, "fwd", model.layers - 1, fold, name=label)
                ops.append(self._edge("loss", "fwd"))
            else:
                ops.append(self._edge("loss", "bwd"))
                self._layer_pass(ops, "recompute", model.layers - 1, fold, name=label)
                self._layer_pass(ops, "bwd", model.layers - 1, fold, name=label)
                ops.append(projection)

    def _backward(self, vs: int, chunk: int, last: bool, fold: bool,
                  weights: bool = True) -> list[Op]:
        """A chunk's backward; without its ``weights`` (a split backward's input half:
        the layers' weight gradients, the embedding's and the gradient reductions are its
        :meth:`weight_pass`; multi-token prediction's modules run whole here)."""
        par = self.parallel
        sharded = gathers_layer_params(par)
        # Kept gathered: no gather, and the reduce-scatters on the last micro-batch only
        # (not resharded after the forward: no gather either), after its backward.
        reduces = sharded and (last or not self.kept)
        ops: list[Op] = []
        units: list[ShardUnit] = []  # kept gathered: reduced after the backward
        if vs in self.exits:
            self._mtp(ops, "bwd", fold)
            ops.append(self._edge("loss", "bwd"))
            if reduces and weights and not reduces_in_buckets(par):  # like a layer's
                self._reduce_unit(ops, units, head_grad_bytes(self.model, par, vs),
                                  "output layer reduce grads", root=True)
        order = list(reversed(range(*self.chunks[vs])))
        # Without ZeRO-3/FSDP the ``last`` micro-batch (ZeRO-2: every one) reduces the
        # gradients in buckets, each launched after the layer that fills it (by backward
        # position); with it, every micro-batch reduce-scatters each layer's.  A per-operator
        # plan does both: its sharded operators' reduce-scattered, its replicated bucketed.
        buckets = self._pass_buckets(order, vs, last) if weights else {}
        for position, layer in enumerate(order):
            if sharded and self.reshards:
                self._gather_params(ops, order, position)
            if self.settings and position:
                self._reshard(ops, order[position - 1], layer)
            self._layer_pass(ops, "recompute", layer, fold)
            self._layer_pass(ops, "bwd", layer, fold, weights=weights)
            if self.settings and last:
                self._reduce_narrow(ops, layer)
            if reduces:
                self._reduce_unit(ops, units, layer_shard_grad_bytes(self.model, layer, par),
                                  f"L{layer} reduce grads")
            if position + 1 in buckets:
                ops.append(self._bucket_reduction(buckets[position + 1], layer, chunk))
        if vs in self.entries and weights:
            ops.append(self._edge("embedding", "bwd"))
            if reduces and not reduces_in_buckets(par):
                # Sharded throughout (ZeRO-3/FSDP): the word embedding's gradients are
                # reduce-scattered like a layer's, not left out with the buckets.
                self._reduce_unit(ops, units, entry_grad_bytes(self.model, par),
                                  "embedding reduce grads", root=True)
        if None in buckets:
            ops.append(self._bucket_reduction(buckets[None], None, chunk))
        self._reduce_after_backward(ops, units)
        return ops

    def _edge(self, layer: str, pass_: str) -> Compute:
        """The embedding or the loss of a pass."""
        par, train = self.parallel, self.training
        timing = (self.costs.embedding_time_s if layer == "embedding"
                  else self.costs.loss_time_s)
        duration = timing(pass_, self.model, micro_batch=train.micro_batch,
                          seq_len=self.seq_len, tp=par.tp,
                          sequence_parallel=self.split_elementwise)
        return Compute(duration, f"{layer} {pass_}", layer=layer, pass_name=pass_)

    @staticmethod
    def _async_dp(op: str, size_bytes: float, label: str, handle: str | None = None,
                  ) -> Collective:
        return Collective(op, size_bytes, label, group="dp", blocking=False, handle=handle)

    def _layer_pass(self, ops: list[Op], pass_: str, layer: int, fold: bool,
                    name: str | None = None, weights: bool = True) -> None:
        """One layer's compute and in-layer communication for ``fwd``/``bwd``/recompute
        (``name``: what its labels call it, ``L<layer>`` by default); a backward without
        its ``weights`` computes only the input gradients (:meth:`weight_pass` the rest)."""
        model, par = self.model, self.parallel
        setting = self._setting(layer)
        if pass_ == "recompute" and setting.recompute == "none":
            return
        cost_pass = "recompute" if pass_ == "recompute" else pass_
        # The recompute mode matters to the recompute pass only (otherwise the default, full).
        mode = setting.recompute if pass_ == "recompute" else "full"
        duration, shard = self._layer_cost(cost_pass, layer, mode)
        label = f"{name or f'L{layer}'} {pass_}"
        # What a cost table calls this layer pass (trace args, read by ``trace costs``).
        kind = "moe_layer" if model.is_moe_layer(layer) else "transformer_layer"
        table_pass = recompute_table_pass(mode) if pass_ == "recompute" else cost_pass
        moe = model.is_moe_layer(layer) and par.ep > 1
        # What this pass runs of the layer's communication (all of it but in a partial
        # recompute: workloads.specs.recompute_modules).
        comm = pass_communication(pass_, setting.recompute, self.training.recompute_modules,
                                  model.is_moe_layer(layer))
        args = (kind, table_pass, layer)
        ring = par.cp > 1 and comm.ring
        # tp_comm_overlap (layer groups refuse it, check_strategy): a whole pass's TP
        # collectives against their GEMMs, block by block; a split backward's input half
        # keeps them whole (the reduce-scatter's partner, the weight gradient, is deferred).
        blocks = (paired_blocks(model, par, layer) if self.tp_overlap and comm.full
                  and weights else 0)
        if blocks == len(PAIRED_BLOCKS) and not ring:
            self._overlapped_tp_layer(ops, pass_, shard, (duration, label, args), fold)
            return
        pairs = self._tp_pairs(pass_, shard, blocks) if blocks else {}
        # A skewed router's MLP runs half the layer at the slowest EP rank's pace.
        extra = (self.moe_pace - 1) * duration / 2 if model.is_moe_layer(layer) else 0.0
        if ring:  # a split backward's input half: each block's input-gradient share
            inputs = None if weights else self.input_gradient_times(layer)
            attention = self._cp_attention(ops, cost_pass, (duration, shard), (label, args),
                                           fold, (pairs.get("attention"),
                                                  inputs[0] if inputs else None))
            mlp = inputs[1] if inputs else duration - attention + extra
        elif not weights:  # each block's input-gradient share, the router's skew with it
            attention, mlp = self.input_gradient_times(layer)
            ops.append(Compute(attention, f"{label} attention", *args))
        else:
            attention = duration * self._attention_share(cost_pass, shard)
            mlp = duration - attention + extra
            if "attention" in pairs:
                self._paired_block(ops, f"{label} attention", attention, pairs["attention"],
                                  (args, fold))
            else:
                ops.append(Compute(attention, f"{label} attention", *args))
        if moe and comm.full and par.moe_overlap:
            ops.pop()  # the attention, split in two below (cp 1: check_strategy)
            self._overlapped_moe(ops, label, (attention, mlp), args, fold, pass_)
            return
        self._block_ops(ops, comm, (label, fold, pass_), mlp, args, moe, pairs)

    def _block_ops(self, ops: list[Op], comm: PassCommunication, where: tuple[str, bool, str],
                   mlp: float, args: tuple[str, str, int], moe: bool,
                   pairs: dict[str, BlockPairs]) -> None:
        """After a layer pass's attention block (``where``: its label, fold and pass): the
        communication ``comm`` says the pass runs around the MLP block of ``mlp`` s;
        ``pairs``: the blocks whose TP collectives run against their GEMMs (their own)."""
        label, fold, pass_ = where
        setting, saved = self._setting(args[2]), comm.saved
        if (comm.full or comm.op_sac) and "attention" not in pairs:
            self._tp_ops(ops, f"{label} attention", fold, pass_, "attention", setting, saved)
        if "mlp" in pairs:  # a dense MLP beside a context-parallel attention
            self._paired_block(ops, f"{label} mlp", mlp, pairs["mlp"], (args, fold))
            return
        if moe and (comm.full or comm.moe):
            self._exchange(ops, "dispatch", label)
        ops.append(Compute(mlp, f"{label} mlp", *args))
        if moe and (comm.full or comm.moe):
            self._exchange(ops, "combine", label)
        if comm.full or comm.op_sac or comm.mlp or comm.moe:
            self._tp_ops(ops, f"{label} mlp", fold, pass_, "mlp", setting, saved, moe=moe)
        elif comm.shared_experts:  # a dense MLP's gather and scatter, on the whole TP group
            self._tp_ops(ops, f"{label} shared experts", fold, pass_, "mlp", setting, saved)

    def _layer_cost(self, cost_pass: str, layer: int, mode: str = "full",
                    ) -> tuple[float, LayerShard]:
        """Seconds of one pass (``fwd``, ``bwd``, ``recompute`` in ``mode``) of ``layer``
        on one rank, and the shard it times."""
        par, setting = self.parallel, self._setting(layer)
        shard = LayerShard(setting.micro_batch, self.seq_len, tp=setting.tp,
                           sequence_parallel=self.split_elementwise, ep=par.ep,
                           layer_index=layer, recompute=mode, expert_tp=par.expert_tp,
                           recompute_modules=self.training.recompute_modules,
                           deepep=self.deepep)
        duration = self.costs.layer_time_s(cost_pass, self.model, shard)
        # OSDP's split operators: their GEMMs in k slices (workloads.strategy.operator_sharding).
        duration += split_extra_s(par.operator_sharding, self.costs, cost_pass, self.model,
                                  shard)
        return duration, shard

    def _attention_share(self, cost_pass: str, shard: LayerShard) -> float:
        """The attention block's share of a layer pass (its input and weight gradients in
        a backward; a recompute's from the operators its mode re-runs:
        :func:`~workloads.cost.compute.blocks.block_shares`)."""
        share = block_shares(self.costs, cost_pass, self.model, shard)
        return share.attention + share.attention_weights

    def _tp_ops(self, ops: list[Op], label: str, fold: bool, pass_: str = "fwd",
                block: str = "attention", setting: LayerSetting | None = None,
                saved: frozenset[str] = frozenset(), moe: bool = False) -> None:
        """The TP collectives after an attention or MLP block (forward or backward); a
        2-D/2.5-D/3-D mesh's run on its sub-groups and are never fused (their closed form
        is the whole group's), as do a narrower layer group's (``setting``).  ``saved``:
        kinds a recompute does not run again (their outputs were kept); ``moe``: an
        expert-parallel MoE block's, whose 1-D collectives carry the routed tokens
        (:func:`~workloads.cost.traffic.moe_tp_scale`; none with expert_tp 1) over the
        expert-tensor groups, and its shared experts' gather over the whole group."""
        scale = self.moe_tp_scale if moe else 1.0
        subgroups = self.expert_tp_groups if moe else None
        if scale == 0:
            return
        if setting is not None and setting.k > 1:
            self._block_tp_ops(ops, label, setting, saved)
            return
        if self.tp_plan is not None:
            mesh_pass = "bwd" if pass_ == "bwd" else "fwd"  # a recompute redoes the fwd's
            for n, step in enumerate(self.tp_plan[(mesh_pass, block)]):
                if step.op in saved:
                    continue
                assert self.mesh is not None  # set with tp_plan
                groups = self.mesh.groups(step.axis, step.root)
                ops.append(Collective(step.op, step.size_bytes,
                                      f"{label} {step.op} {step.what} {step.axis} {n}",
                                      subgroups=groups))
            return
        # Shared experts are dense: on expert-tensor sub-groups their gather is apart, on
        # the whole TP group (the routed tokens' on the sub-groups).
        shared = 1.0 if subgroups is not None and self.model.shared_experts else 0.0
        for kind in self.tp_kinds:
            if kind not in saved:
                size = self.tp_gather_bytes if kind == "all_gather" else self.tp_bytes
                ops.append(Collective(kind, size * (scale - shared), f"{label} {kind}",
                                      exclusive=fold and subgroups is None,
                                      subgroups=subgroups))
                if shared:
                    ops.append(Collective(kind, size, f"{label} shared experts {kind}",
                                          exclusive=fold))

    # ----------------------------------------------------------------- layer groups
    def _setting(self, layer: int) -> LayerSetting:
        return self._uniform if self.settings is None else self.settings[layer]

    def _block_tp_ops(self, ops: list[Op], label: str, setting: LayerSetting,
                      saved: frozenset[str] = frozenset()) -> None:
        """A narrower layer's TP collectives: on each block of its ``tp`` GPUs, at its
        share of the micro-batch (none at tp 1; ``saved`` kinds left out)."""
        if setting.tp == 1:
            return
        size = tp_message_bytes(self.model, replace(self.training,
                                                    micro_batch=setting.micro_batch,
                                                    seq_len=self.seq_len))
        groups = block_subgroups(self.parallel.tp, setting.tp)
        for kind in self.tp_kinds:
            if kind not in saved:
                ops.append(Collective(kind, size, f"{label} {kind} tp{setting.tp}",
                                      subgroups=groups))

    def _reshard(self, ops: list[Op], before: int, layer: int) -> None:
        """Galvatron's resharding where ``layer`` (run after ``before``) is wider: its GPUs
        gather the activation (forward) or its gradient (backward) slices the narrower
        groups hold; a narrowing is a slice, free (workloads.strategy.layer_groups)."""
        narrow, wide = self._setting(before).tp, self._setting(layer).tp
        if wide <= narrow:
            return
        size = reshard_bytes(micro_batch=self.training.micro_batch, seq_len=self.seq_len,
                             hidden=self.model.hidden, tp=self.parallel.tp, wide=wide,
                             element_bytes=activation_bytes_per_element(
                                 self.training.precision))
        ops.append(Collective("all_gather", size, f"L{layer} reshard tp{narrow}->tp{wide}",
                              subgroups=reshard_subgroups(self.parallel.tp, narrow, wide)))

    def _buckets(self, order: list[int], vs: int) -> dict[int | None, float]:
        """The data-parallel buckets of virtual stage ``vs``'s last backward
        (``after_layers`` -> bytes), by position in ``order``; a narrower layer group's
        gradients go on their own (:meth:`_reduce_narrow`), so they are left out."""
        ends = {"first_chunk": vs in self.entries,
                "head_bytes": head_grad_bytes(self.model, self.parallel, vs),
                "bucketed": chunk_is_bucketed(self.parallel, vs)}
        if self.settings is None:
            return {b.after_layers: b.size_bytes for b in gradient_buckets(
                self.model, self.parallel, order, **ends)}
        wide = [p for p, layer in enumerate(order, start=1) if self.settings[layer].k == 1]
        buckets = gradient_buckets(self.model, self.parallel, [order[p - 1] for p in wide],
                                   **ends)
        return {None if b.after_layers is None else wide[b.after_layers - 1]: b.size_bytes
                for b in buckets}

    def _reduce_narrow(self, ops: list[Op], layer: int) -> None:
        """A narrower layer's gradients (``P/tp_i`` per GPU) all-reduced, as DDP does over
        its ``dp_i = k·dp`` ranks: every replica's GPUs holding the same shard, on the
        data-parallel stream, as soon as the last backward produced them."""
        setting = self._setting(layer)
        if setting.k > 1:
            size = layer_grad_bytes(self.model, layer, replace(self.parallel, tp=setting.tp))
            ops.append(Collective("all_reduce", size, f"L{layer} grads tp{setting.tp}",
                                  group="dp", blocking=False,
                                  subgroups=shard_subgroups(self.parallel.tp, setting.tp)))

    # ----------------------------------------------------------------- fusing
    def _fused(self, ops: Sequence[Op], stage: int) -> tuple[Op, ...]:
        if self.tp_time_s is None:
            return tuple(ops)
        tp_time_s = self.tp_time_s
        return fuse(ops, lambda op: tp_time_s(op.op or "", op.size_bytes or 0.0, stage))
