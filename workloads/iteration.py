"""One training iteration, simulated: per-GPU op streams composed by the parallel strategy.

The unit of simulation is a **rank group**: the ``tp`` GPUs of one pipeline stage of one
data-parallel replica.  Tensor-parallel ranks run the same kernels and meet in a
collective after every attention and MLP block, so they move in lockstep; one SimPy
process walks their shared op stream (a straggler among them slows all of them, as it
does on real hardware).  Everything between rank groups is simulated explicitly:

* **pipeline** — each stage runs its schedule (:mod:`workloads.schedule`); an activation
  (forward) or its gradient (backward) goes to the neighbouring stage as point-to-point
  flows, one per tensor-parallel rank, on the real route; the receiver waits for it.
  Sends are asynchronous, receives block, as in Megatron-LM.
* **data parallel** — gradients are reduced in buckets as the backward pass of the last
  micro-batch produces them (all-reduce, or reduce-scatter with ZeRO ≥ 1), on a separate
  stream that overlaps the remaining backward compute; the optimizer step waits for all
  buckets; ZeRO ≥ 1 all-gathers the updated parameters after it.  ZeRO-3/FSDP all-gathers
  each layer's parameters before its forward and backward (prefetching the next layer)
  and reduce-scatters its gradients after the backward, every micro-batch.
* **expert parallel** — a MoE layer dispatches tokens to experts and combines them back
  with two all-to-alls per pass, inside the layer (blocking).
* **iteration end** — tied word-embedding gradients are all-reduced between the first and
  last stage, every rank meets at the gradient-norm reduction, then the optimizer runs.

Collectives are :class:`~collectives.Communicator` flows that contend for links with
everything else.  A tensor-parallel collective is timed by its closed form instead, and
folded with the surrounding compute into one event, when nothing else can be on its
links meanwhile: no pipeline send can cross them, and its stage's data-parallel
collectives cannot have started yet (they start only after every replica launched them,
and from its first launch on a group runs its TP collectives as flows).  Exact, and it
keeps a 1024-GPU GPT-3 iteration to a few hundred thousand events.

Time on a rank group's main stream is split into **compute**, **exposed communication**
(blocked in a collective or waiting for an asynchronous one, or for activations already
in flight), **bubble** (waiting for a pipeline neighbour that has not sent yet, and for
the slowest stage at the end) and **idle** (waiting for data-parallel or expert peers that
arrived late, and the rest).  **Communication** is the time any collective of the group
was in flight, overlapped or not.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import simpy
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.collectives.plan import CollectivePlan
from distsim_gpu.simcore.errors import ConfigError, SimulationError, closest
from distsim_gpu.simcore.simulation import Simulation
from distsim_gpu.topology import Topology
from distsim_gpu.workloads.costs import CostModel, stores_attention_scores
from distsim_gpu.workloads.gpus import GpuSpec
from distsim_gpu.workloads.memory import (
    MemoryBreakdown,
    layer_params_local,
    memory_per_gpu,
    params_on_gpu,
)
from distsim_gpu.workloads.models import ModelSpec
from distsim_gpu.workloads.parallel import (
    ParallelConfig,
    Placement,
    TrainingConfig,
    check_strategy,
    layer_partition,
)
from distsim_gpu.workloads.schedule import stage_program, virtual_stage

__all__ = ["CRITICAL_KINDS", "GpuTimes", "IterationResult", "IterationSpec", "PathEntry",
           "simulate_iteration"]

#: What a stretch of the critical path is spent on.
CRITICAL_KINDS = ("compute", "tp comm", "pp transfer", "dp comm", "ep comm", "bubble wait")

_GRAD_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
_ACTIVATION_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}


@dataclass(frozen=True, slots=True)
class IterationSpec:
    """Everything one iteration depends on (a scenario, resolved)."""

    topology: Topology
    model: ModelSpec
    parallel: ParallelConfig
    training: TrainingConfig
    costs: CostModel
    gpu: GpuSpec
    comm: CommParams = field(default_factory=CommParams)
    seed: int = 0
    trace: bool = False
    stragglers: Mapping[str, float] = field(default_factory=dict)
    allow_oom: bool = False
    source: str | None = None
    # Time tensor-parallel collectives on links nobody else can use by their closed form
    # (exact; off only to check that it is).
    fold_exclusive_tp: bool = True


@dataclass(frozen=True, slots=True)
class GpuTimes:
    """Where one GPU's iteration went (seconds) and the memory it needs (bytes)."""

    gpu: str
    rank: int
    stage: int
    replica: int
    tp_rank: int
    compute_s: float
    communication_s: float
    exposed_communication_s: float
    bubble_s: float
    idle_s: float
    memory: MemoryBreakdown

    @property
    def peak_memory_bytes(self) -> float:
        return self.memory.total_bytes


@dataclass(frozen=True, slots=True)
class PathEntry:
    """One stretch ``[start_s, end_s]`` of the iteration's critical path: what rank group
    ``group`` (first GPU ``gpu``) spent it on (``kind``, one of :data:`CRITICAL_KINDS`).
    A ``compute`` entry is a run of local ops, which may include tensor-parallel
    collectives timed by their closed form: ``tp_comm_s`` of it."""

    start_s: float
    end_s: float
    kind: str
    label: str
    group: str
    gpu: str
    tp_comm_s: float = 0.0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class IterationResult:
    """The simulated iteration: its time, per-GPU breakdowns, and what it cost to run.

    ``critical_path`` covers ``[0, iteration_time_s]`` in time order: the chain of ops and
    transfers that set the iteration's length, walked back from the rank group that
    finished last.  ``topology`` is the cluster it ran on (link kinds for reports).
    """

    iteration_time_s: float
    microbatches: int
    per_gpu: tuple[GpuTimes, ...]
    model_flops: float
    events: int
    flows: int
    simulation: Simulation
    critical_path: tuple[PathEntry, ...] = ()
    topology: Topology | None = field(default=None, repr=False, compare=False)


class _Group:
    """One rank group's identity and its accumulated time accounting."""

    __slots__ = ("bubble_s", "comm_intervals", "compute_s", "end_s", "exposed_s", "gpus",
                 "handles", "idle_s", "name", "path", "pending", "replica", "slowdown",
                 "stage", "streams")

    def __init__(self, stage: int, replica: int, gpus: tuple[str, ...], slowdown: float):
        self.stage = stage
        self.replica = replica
        self.gpus = gpus
        self.slowdown = slowdown
        self.name = f"stage {stage} replica {replica} ({gpus[0]}" + (
            f" +{len(gpus) - 1})" if len(gpus) > 1 else ")")
        self.compute_s = 0.0
        self.exposed_s = 0.0
        self.bubble_s = 0.0
        self.idle_s = 0.0
        self.end_s = 0.0
        self.comm_intervals: list[tuple[float, float]] = []
        self.pending: list[_Meeting] = []  # async collectives waited for at the end
        self.handles: dict[str, _Meeting] = {}  # async collectives waited for by name
        self.streams: dict[str, _Meeting] = {}  # the last collective of each stream
        # The main stream's segments, contiguous from 0, for the critical path:
        # (start_s, end_s, kind, info, dep).  ``dep`` says what the segment waited for
        # when it started: None (this group's previous segment), (group, n) (that group's
        # segment n - 1) or a _Meeting (a collective that held it back on its stream).
        self.path: list[tuple[float, float, str, Any, Any]] = []


class _Meeting:
    """A collective among rank groups: it starts when the last member arrives."""

    __slots__ = ("arrivals", "arrived", "cause", "done", "end_s", "label", "start_s")

    def __init__(self, env: simpy.Environment) -> None:
        self.arrived = 0
        self.arrivals: dict[_Group, float] = {}
        self.start_s: float | None = None
        self.end_s: float | None = None
        self.done = env.event()
        # What the last arrival waited for (a path ``dep``, see _Group.path).
        self.cause: Any = None
        self.label = ""


# An item of a rank group's op stream.  Local items (compute, closed-form TP collectives)
# are folded into one timeout; the others talk to the rest of the simulation.
#   ("local", compute_s, comm_s, spans)   spans: ((offset_s, dur_s, is_comm, label,
#                                         trace_args), …)
#   ("tp", kind, size_bytes, label)       a TP collective that must be simulated as flows
#   ("ep", kind, size_bytes, label)       an expert-parallel all-to-all (blocking)
#   ("dp", kind, size_bytes, label, handle)  an asynchronous data-parallel collective;
#                                         with a handle it is waited for by name, else
#                                         at the end of the iteration
#   ("dp_wait", handle)                   wait for the named async collective
Item = tuple[Any, ...]


class _IterationSimulator:
    def __init__(self, spec: IterationSpec) -> None:
        self.spec = spec
        model, par, train = spec.model, spec.parallel, spec.training
        topo = spec.topology
        self.microbatches = check_strategy(
            par, train, num_gpus=len(topo.gpus), layers=model.layers, heads=model.heads,
            kv_heads=model.kv_heads, experts=model.experts, source=spec.source)
        self.seq_len = train.seq_len or model.seq_len
        self.sim = Simulation(spec.seed, trace=spec.trace)
        self.env = self.sim.env
        self.comm = Communicator(self.sim, topo, spec.comm)
        self.placement = Placement(par)
        self.chunks = layer_partition(model.layers, par.pp * par.interleave, par.partition)
        self.virtual_stages = par.pp * par.interleave
        self.act_bytes = _ACTIVATION_BYTES[train.precision]
        self.grad_bytes = _GRAD_BYTES[par.grad_reduce_precision]
        tokens = train.micro_batch * self.seq_len
        self.tp_bytes = tokens * model.hidden * self.act_bytes
        self.p2p_bytes = self.tp_bytes / par.tp
        self.a2a_bytes = (tokens * model.top_k * model.hidden * self.act_bytes
                          / (par.tp if par.sequence_parallel else 1))
        for gpu, factor in spec.stragglers.items():
            if gpu not in topo.gpus:  # an unknown GPU is an error, not a silent no-op
                raise ConfigError(f"no GPU named {gpu!r} in the cluster",
                                  key=f"stragglers.{gpu}", source=spec.source,
                                  hint=closest(str(gpu), topo.gpus))
            if (isinstance(factor, bool) or not isinstance(factor, (int, float))
                    or not factor > 0):
                raise ConfigError(f"a slowdown factor must be a positive number, got "
                                  f"{factor!r}", key=f"stragglers.{gpu}", source=spec.source,
                                  hint="e.g. 1.2 for 20 % slower compute")
        self.groups = [[self._make_group(s, d) for d in range(par.dp)] for s in range(par.pp)]
        self.memory = [self._memory(s) for s in range(par.pp)]
        self._check_memory()
        self._meetings: dict[Any, _Meeting] = {}
        self._p2p: dict[Any, simpy.Event] = {}
        self._p2p_sent: dict[Any, tuple[float, tuple[_Group, int]]] = {}
        self._items: dict[Any, list[Item]] = {}
        self._tp_exclusive = spec.fold_exclusive_tp and self._find_exclusive_tp()
        self._tp_time: dict[tuple[str, int], float] = {}
        self._send_plans: dict[tuple[_Group, _Group], CollectivePlan] = {}

    # ----------------------------------------------------------------- set-up
    def _make_group(self, stage: int, replica: int) -> _Group:
        gpus_all = self.spec.topology.gpus
        ranks = self.placement.tp_group(replica, stage)
        gpus = tuple(gpus_all[r] for r in ranks)
        slowdown = max((self.spec.stragglers.get(g, 1.0) for g in gpus), default=1.0)
        return _Group(stage, replica, gpus, slowdown)

    def _memory(self, stage: int) -> MemoryBreakdown:
        s, par, train = self.spec, self.spec.parallel, self.spec.training
        return memory_per_gpu(
            s.model, tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep,
            sequence_parallel=par.sequence_parallel, zero_stage=par.zero, fsdp=par.fsdp,
            micro_batch=train.micro_batch, seq_len=self.seq_len, recompute=train.recompute,
            schedule=par.schedule, interleave=par.interleave,
            num_microbatches=self.microbatches, precision=train.precision, stage=stage,
            flash_attention=not stores_attention_scores(s.costs), partition=par.partition)

    def _check_memory(self) -> None:
        if self.spec.allow_oom:
            return
        capacity = self.spec.gpu.memory_bytes
        for stage, mem in enumerate(self.memory):
            if mem.total_bytes > capacity:
                gpu = self.groups[stage][0].gpus[0]
                gib = 2.0**30
                raise ConfigError(
                    f"out of memory: {gpu} (pipeline stage {stage}) needs "
                    f"{mem.total_bytes / gib:.1f} GiB of the {capacity / gib:.1f} GiB "
                    f"its GPU ({self.spec.gpu.name}) has — weights {mem.weights_bytes / gib:.1f}, "
                    f"gradients {mem.gradients_bytes / gib:.1f}, optimizer "
                    f"{mem.optimizer_bytes / gib:.1f}, activations "
                    f"{mem.activations_bytes / gib:.1f} GiB", source=self.spec.source,
                    hint="more tensor/pipeline parallelism, ZeRO, recompute, a smaller "
                    "micro-batch, or --allow-oom to simulate anyway")

    def _lanes(self, stage: int, replicas: range | tuple[int, ...]) -> list[list[str]]:
        """Per tensor-parallel rank, the GPUs of the given replicas of a stage."""
        return [[self.groups[stage][d].gpus[t] for d in replicas]
                for t in range(self.spec.parallel.tp)]

    def _find_exclusive_tp(self) -> bool:
        """Whether TP collectives may be timed by their closed form before data parallelism.

        Only traffic that can run *while* a TP group computes could share its links:
        pipeline sends (asynchronous) and other TP groups.  Expert all-to-alls block every
        group they involve, and data-parallel collectives start only after every replica
        of the stage launched them — after which the group runs its TP collectives as
        flows (see ``_rank_group``) — so neither can overlap a closed-form TP collective.
        """
        par = self.spec.parallel
        if par.tp == 1:
            return True
        comm = self.comm
        other: set[Any] = set()
        for stage in range(par.pp):
            for replica in range(par.dp):
                here = self.groups[stage][replica].gpus
                for neighbour in (stage - 1, stage + 1):
                    if 0 <= neighbour < par.pp or par.interleave > 1:
                        there = self.groups[neighbour % par.pp][replica].gpus
                        if there != here:
                            plan = comm.pairs_plan(list(zip(here, there)), 1.0,
                                                   protocol="simple")
                            other |= comm.plan_links(plan)
        seen: set[Any] = set()
        for stage_groups in self.groups:
            for group in stage_groups:
                links: set[Any] = set()
                gpus = list(group.gpus)
                for op in ("all_reduce", "all_gather", "reduce_scatter"):
                    for algo in ("ring", "tree") if op == "all_reduce" else ("ring",):
                        links |= comm.plan_links(comm.plan(op, gpus, algorithm=algo,
                                                           protocol="simple"))
                if links & other or links & seen:
                    return False
                seen |= links
        return True

    # ----------------------------------------------------------------- op streams
    def _tp_items(self, stage_items: list[Item], label: str, fold: bool) -> None:
        """The TP collectives after an attention or MLP block (forward or backward)."""
        par = self.spec.parallel
        if par.tp == 1:
            return
        kinds = (("all_gather", "reduce_scatter") if par.sequence_parallel
                 else ("all_reduce",))
        for kind in kinds:
            if fold:
                stage_items.append(("tpa", kind, self.tp_bytes, f"{label} {kind}"))
            else:
                stage_items.append(("tp", kind, self.tp_bytes, f"{label} {kind}"))

    def _layer_pass(self, items: list[Item], pass_: str, layer: int, fold: bool) -> None:
        """One layer's compute and in-layer communication for ``fwd``/``bwd``/recompute."""
        spec, par, train = self.spec, self.spec.parallel, self.spec.training
        model = spec.model
        if pass_ == "recompute" and train.recompute == "none":
            return
        cost_pass = "recompute" if pass_ == "recompute" else pass_
        extra = {"recompute": train.recompute} if pass_ == "recompute" else {}
        duration = spec.costs.layer_time_s(
            cost_pass, model, micro_batch=train.micro_batch, seq_len=self.seq_len,
            tp=par.tp, sequence_parallel=par.sequence_parallel, layer_index=layer,
            ep=par.ep, **extra)
        label = f"L{layer} {pass_}"
        # What a cost table calls this layer pass (trace args, read by ``trace costs``).
        args = {"layer": "moe_layer" if model.is_moe_layer(layer) else "transformer_layer",
                "pass": "recompute_selective" if extra.get("recompute") == "selective"
                else cost_pass, "index": layer}
        moe = model.is_moe_layer(layer) and par.ep > 1
        with_comm = pass_ != "recompute" or train.recompute == "full"
        items.append(("c", duration / 2, f"{label} attention", args))
        if with_comm:
            self._tp_items(items, f"{label} attention", fold)
        if moe and with_comm:
            items.append(("ep", "alltoall", self.a2a_bytes, f"{label} dispatch"))
        items.append(("c", duration / 2, f"{label} mlp", args))
        if moe and with_comm:
            items.append(("ep", "alltoall", self.a2a_bytes, f"{label} combine"))
        if with_comm:
            self._tp_items(items, f"{label} mlp", fold)

    def _chunk_items(self, stage: int, chunk: int, pass_: str, last: bool,
                     fold: bool) -> list[Item]:
        """The op stream of one pass of one model chunk (cached); ``fold``: TP collectives
        by their closed form, folded with the compute around them."""
        key = (stage, chunk, pass_, last, fold)
        cached = self._items.get(key)
        if cached is not None:
            return cached
        spec, par, train = self.spec, self.spec.parallel, self.spec.training
        vs = virtual_stage(stage, chunk, par.pp)
        layers = range(*self.chunks[vs])
        shard = {"micro_batch": train.micro_batch, "seq_len": self.seq_len, "tp": par.tp,
                 "sequence_parallel": par.sequence_parallel}
        sharded = par.fsdp or par.zero == 3
        items: list[Item] = []
        if pass_ == "F":
            if vs == 0:
                items.append(("c", spec.costs.embedding_time_s("fwd", spec.model, **shard),
                              "embedding fwd", {"layer": "embedding", "pass": "fwd"}))
            order = list(layers)
            for position, layer in enumerate(order):
                if sharded:
                    self._gather_params(items, order, position)
                self._layer_pass(items, "fwd", layer, fold)
            if vs == self.virtual_stages - 1:
                items.append(("c", spec.costs.loss_time_s("fwd", spec.model, **shard),
                              "loss fwd", {"layer": "loss", "pass": "fwd"}))
        else:
            if vs == self.virtual_stages - 1:
                items.append(("c", spec.costs.loss_time_s("bwd", spec.model, **shard),
                              "loss bwd", {"layer": "loss", "pass": "bwd"}))
            bucket = 0.0
            order = list(reversed(layers))
            for position, layer in enumerate(order):
                if sharded:
                    self._gather_params(items, order, position)
                self._layer_pass(items, "recompute", layer, fold)
                self._layer_pass(items, "bwd", layer, fold)
                grads = self._layer_grad_bytes(layer)
                if sharded:
                    items.append(("dp", "reduce_scatter", grads, f"L{layer} reduce grads",
                                  None))
                elif last and par.dp > 1:
                    bucket += grads
                    if bucket >= par.bucket_params * self.grad_bytes:
                        items.append(("dp", self._grad_op(), bucket, f"grads to L{layer}",
                                      None))
                        bucket = 0.0
            if vs == 0:
                items.append(("c", spec.costs.embedding_time_s("bwd", spec.model, **shard),
                              "embedding bwd", {"layer": "embedding", "pass": "bwd"}))
                if last and par.dp > 1 and not sharded:
                    bucket += spec.model.vocab * spec.model.hidden / par.tp * self.grad_bytes
            if last and par.dp > 1 and not sharded and bucket > 0:
                items.append(("dp", self._grad_op(), bucket, f"grads of chunk {chunk}", None))
        folded = self._fold(items, stage)
        self._items[key] = folded
        return folded

    def _gather_params(self, items: list[Item], order: list[int], position: int) -> None:
        """ZeRO-3/FSDP: the first layer's all-gather, the next one's as prefetch, then wait.

        The gather of layer ``order[position + 1]`` is launched before layer
        ``order[position]`` computes, so it overlaps that compute (FSDP's forward and
        backward prefetch).
        """
        if self.spec.parallel.dp == 1:
            return
        layer = order[position]
        if position == 0:
            items.append(("dp", "all_gather", self._layer_param_bytes(layer),
                          f"L{layer} gather params", f"L{layer}"))
        if position + 1 < len(order):
            ahead = order[position + 1]
            items.append(("dp", "all_gather", self._layer_param_bytes(ahead),
                          f"L{ahead} gather params", f"L{ahead}"))
        items.append(("dp_wait", f"L{layer}"))

    def _grad_op(self) -> str:
        return "reduce_scatter" if self.spec.parallel.zero >= 1 else "all_reduce"

    def _layer_param_bytes(self, layer: int) -> float:
        dense, expert = layer_params_local(self.spec.model, layer, self.spec.parallel.tp,
                                           self.spec.parallel.ep)
        return (dense + expert) * self.act_bytes

    def _layer_grad_bytes(self, layer: int) -> float:
        dense, expert = layer_params_local(self.spec.model, layer, self.spec.parallel.tp,
                                           self.spec.parallel.ep)
        return (dense + expert) * self.grad_bytes

    def _tp_analytic_s(self, kind: str, size: float, stage: int) -> float:
        key = (kind, stage)
        cached = self._tp_time.get(key)
        if cached is None:
            gpus = list(self.groups[stage][0].gpus)
            cached = self.comm.estimate_s(kind, gpus, size)
            self._tp_time[key] = cached
        return cached

    def _fold(self, items: list[Item], stage: int) -> list[Item]:
        """Merge runs of local items (compute, closed-form TP) into single ``local`` items."""
        folded: list[Item] = []
        compute = comm = 0.0
        spans: list[tuple[float, float, bool, str]] = []

        def flush() -> None:
            nonlocal compute, comm, spans
            if spans:
                folded.append(("local", compute, comm, tuple(spans)))
            compute = comm = 0.0
            spans = []

        for item in items:
            if item[0] == "c":
                spans.append((compute + comm, item[1], False, item[2], item[3]))
                compute += item[1]
            elif item[0] == "tpa":
                duration = self._tp_analytic_s(item[1], item[2], stage)
                spans.append((compute + comm, duration, True, item[3],
                              {"collective": item[1]}))
                comm += duration
            else:
                flush()
                folded.append(item)
        flush()
        return folded

    # ----------------------------------------------------------------- running
    def run(self) -> IterationResult:
        par = self.spec.parallel
        for stage in range(par.pp):
            program = stage_program(par.schedule, pp=par.pp, stage=stage,
                                    microbatches=self.microbatches,
                                    interleave=par.interleave)
            for replica in range(par.dp):
                self.env.process(self._rank_group(self.groups[stage][replica], program))
        self.sim.run()
        if any(m.arrived for m in self._meetings.values()) or self._p2p:
            raise SimulationError("the iteration deadlocked: some rank groups wait for "
                                  "peers that never came (a bug in the schedule)",
                                  source=self.spec.source)
        return self._result()

    def _meet(self, key: Any, group: _Group, members: list[_Group],
              launch: Callable[[], simpy.Event]) -> _Meeting:
        """``group`` arrives at the collective ``key`` now; the last arrival launches it."""
        meeting = self._meeting(key)
        self._arrive(meeting, key, group, members, launch)
        return meeting

    def _meeting(self, key: Any) -> _Meeting:
        meeting = self._meetings.get(key)
        if meeting is None:
            meeting = self._meetings[key] = _Meeting(self.env)
        return meeting

    def _arrive(self, meeting: _Meeting, key: Any, group: _Group, members: list[_Group],
                launch: Callable[[], simpy.Event], cause: Any = None) -> None:
        """``cause``: what held the arrival back (a previous collective of its stream);
        None: the group's main stream, arriving now."""
        meeting.arrived += 1
        meeting.arrivals[group] = self.env.now
        if meeting.arrived < len(members):
            return
        del self._meetings[key]
        meeting.start_s = self.env.now
        meeting.cause = cause if cause is not None else (group, len(group.path))
        done = launch()

        def finish(_event: simpy.Event) -> None:
            meeting.end_s = self.env.now
            for member in members:
                member.comm_intervals.append((meeting.start_s, self.env.now))
            meeting.done.succeed()

        done.callbacks.append(finish)

    def _wait(self, group: _Group, meeting: _Meeting, *, kind: str, label: str,
              flush: bool = False) -> Generator[simpy.Event, Any, None]:
        """Wait for a collective.  Waiting for late peers is idle — or bubble when it is
        the pipeline's ``flush``; the rest (the transfer, and earlier collectives on the
        same stream) is exposed communication."""
        began = self.env.now
        if not meeting.done.triggered:
            yield meeting.done
        ready = max(began, meeting.arrivals.get(group, began))
        started = meeting.start_s if meeting.start_s is not None else ready
        late = max(started - ready, 0.0)
        if flush:
            group.bubble_s += late
        else:
            group.idle_s += late
        group.exposed_s += self.env.now - began - late
        self._record_wait(group, meeting, began, kind, label)

    def _record_wait(self, group: _Group, meeting: _Meeting, began: float, kind: str,
                     label: str) -> None:
        """A wait for a collective on the critical path: from its start, following what
        its last arrival waited for — or, when it had started before the wait began,
        from then on, following the group's own stream."""
        now = self.env.now
        start = meeting.start_s
        if start is not None and start > began:
            group.path.append((start, now, kind, label, meeting.cause))
        elif now > began:
            group.path.append((began, now, kind, label, None))

    def _run_plans(self, lanes: list[list[str]], op: str, size: float,
                   tag: str) -> simpy.Event:
        events = [self.comm.run_plan(self.comm.choose(op, gpus, size), size, tag=tag)
                  for gpus in lanes]
        return events[0] if len(events) == 1 else simpy.AllOf(self.env, events)

    def _rank_group(self, group: _Group, program: list[tuple[str, int, int]],
                    ) -> Generator[simpy.Event, Any, None]:
        par = self.spec.parallel
        last_mb = self.microbatches - 1
        sharded = (par.fsdp or par.zero == 3) and par.dp > 1
        dp_seq = 0
        for pass_, mb, chunk in program:
            vs = virtual_stage(group.stage, chunk, par.pp)
            if pass_ == "F" and vs > 0:
                yield from self._receive(group, ("F", group.replica, mb, vs))
            elif pass_ == "B" and vs < self.virtual_stages - 1:
                yield from self._receive(group, ("B", group.replica, mb, vs))
            last = mb == last_mb
            # Closed-form TP only while no data-parallel collective of this stage can be in
            # flight: before the group launched one, and not in a pass that launches one.
            fold = (self._tp_exclusive and not group.streams and not sharded
                    and not (last and pass_ == "B" and par.dp > 1))
            items = self._chunk_items(group.stage, chunk, pass_, last, fold)
            dp_seq = yield from self._run_items(group, items, dp_seq, (pass_, mb, chunk))
            if pass_ == "F" and vs < self.virtual_stages - 1:
                self._send(group, ("F", group.replica, mb, vs + 1), vs + 1)
            elif pass_ == "B" and vs > 0:
                self._send(group, ("B", group.replica, mb, vs - 1), vs - 1)
        yield from self._finish(group)

    def _run_items(self, group: _Group, items: list[Item], dp_seq: int, where: Any,
                   ) -> Generator[simpy.Event, Any, int]:
        env, tracer = self.env, self.sim.tracer
        par = self.spec.parallel
        for item in items:
            kind = item[0]
            if kind == "local":
                _, compute, comm, spans = item
                start = env.now
                scale = group.slowdown
                yield env.timeout(compute * scale + comm)
                group.path.append((start, env.now, "compute", item, None))
                group.compute_s += compute * scale
                group.exposed_s += comm
                offset = 0.0
                for _, duration, is_comm, label, args in spans:
                    length = duration if is_comm else duration * scale
                    if is_comm:
                        group.comm_intervals.append((start + offset, start + offset + length))
                    if tracer.enabled:
                        tracer.span(group.name, "tp comm" if is_comm else "compute", label,
                                    start + offset, start + offset + length, **args)
                    offset += length
            elif kind == "tp":
                _, op, size, label = item
                start = env.now
                yield self.comm.collective(op, list(group.gpus), size, tag="tp")
                group.path.append((start, env.now, "tp comm", label, None))
                group.exposed_s += env.now - start
                group.comm_intervals.append((start, env.now))
                tracer.span(group.name, "tp comm", label, start, env.now, collective=op)
            elif kind == "ep":
                _, op, size, label = item
                block = group.replica // par.ep * par.ep
                replicas = range(block, block + par.ep)
                members = [self.groups[group.stage][d] for d in replicas]
                key = ("ep", group.stage, block, where, label)
                start = env.now
                meeting = self._meet(key, group, members, lambda r=replicas, o=op, s=size:
                                     self._run_plans(self._lanes(group.stage, r), o, s, "ep"))
                yield from self._wait(group, meeting, kind="ep comm", label=label)
                # The span is the collective itself, as the GPU's communication time
                # counts it; waiting for late peers before it is idle time.
                tracer.span(group.name, "ep comm", label, _started(meeting, start), env.now,
                            collective=op)
            elif kind == "dp":
                _, op, size, label, handle = item
                members = self.groups[group.stage]
                key = ("dp", group.stage, dp_seq)
                dp_seq += 1
                meeting = self._meeting(key)
                meeting.label = label
                launch = partial(self._run_plans, self._lanes(group.stage, range(par.dp)),
                                 op, size, "dp")
                # One NCCL stream per kind: a collective starts after the previous one of
                # its stream (DDP's bucket all-reduces, FSDP's gathers and its reductions
                # each run in order).
                stream = "gather" if op == "all_gather" else "reduce"
                previous = group.streams.get(stream)
                group.streams[stream] = meeting
                if previous is None or previous.done.triggered:
                    self._arrive(meeting, key, group, members, launch)
                else:
                    previous.done.callbacks.append(
                        lambda _e, m=meeting, k=key, ms=members, f=launch, p=previous:
                        self._arrive(m, k, group, ms, f, cause=p))
                if handle is None:
                    group.pending.append(meeting)
                else:
                    group.handles[handle] = meeting
                if tracer.enabled:
                    self._trace_async(group, meeting, label, op)
            elif kind == "dp_wait":
                meeting = group.handles.pop(item[1])
                yield from self._wait(group, meeting, kind="dp comm", label=meeting.label)
        return dp_seq

    def _trace_async(self, group: _Group, meeting: _Meeting, label: str, op: str) -> None:
        def record(_event: simpy.Event) -> None:
            start = meeting.start_s if meeting.start_s is not None else self.env.now
            self.sim.tracer.span(group.name, "dp comm", label, start, self.env.now,
                                 collective=op)

        meeting.done.callbacks.append(record)

    def _receive(self, group: _Group, key: Any) -> Generator[simpy.Event, Any, None]:
        began = self.env.now
        arrived = self._p2p.pop(key, None)
        if arrived is None:
            arrived = self._p2p[key] = self.env.event()
        if not arrived.triggered:
            yield arrived
        self._p2p.pop(key, None)
        sent, sender = self._p2p_sent.pop(key, (began, None))
        now = self.env.now
        waiting_for_sender = max(min(sent, now) - began, 0.0)
        group.bubble_s += waiting_for_sender
        group.exposed_s += now - began - waiting_for_sender
        if sender is not None and sent > began:
            group.path.append((sent, now, "pp transfer", key, sender))
        elif now > began:
            group.path.append((began, now, "pp transfer", key, None))

    def _send(self, group: _Group, key: Any, target_vs: int) -> None:
        par = self.spec.parallel
        target = self.groups[target_vs % par.pp][group.replica]
        self._p2p_sent[key] = (self.env.now, (group, len(group.path)))
        event = self._p2p.get(key)
        if event is None:
            event = self._p2p[key] = self.env.event()
        start = self.env.now
        if target is group:
            event.succeed()  # the next chunk lives on this stage: nothing to move
            return
        plan = self._send_plans.get((group, target))
        if plan is None:
            pairs = list(zip(group.gpus, target.gpus))
            plan = self._send_plans[(group, target)] = self.comm.pairs_plan(pairs,
                                                                            self.p2p_bytes)
        process = self.comm.run_plan(plan, self.p2p_bytes, tag="pp")

        def arrive(_event: simpy.Event) -> None:
            for member in (group, target):
                member.comm_intervals.append((start, self.env.now))
            # ``to``: the receiver's GPUs are busy with the transfer too.
            self.sim.tracer.span(group.name, "pp send", f"{key[0]} mb{key[2]}", start,
                                 self.env.now, collective="send", to=target.name)
            event.succeed()

        process.callbacks.append(arrive)

    def _finish(self, group: _Group) -> Generator[simpy.Event, Any, None]:
        spec, par = self.spec, self.spec.parallel
        env = self.env
        while group.pending:
            pending = group.pending.pop(0)
            yield from self._wait(group, pending, kind="dp comm", label=pending.label)
        if par.pp > 1 and spec.model.tied_embeddings and group.stage in (0, par.pp - 1):
            members = [self.groups[0][group.replica], self.groups[par.pp - 1][group.replica]]
            size = spec.model.vocab * spec.model.hidden / par.tp * self.grad_bytes
            lanes = [[a, b] for a, b in zip(members[0].gpus, members[1].gpus)]
            meeting = self._meet(("embedding", group.replica), group, members,
                                 lambda: self._run_plans(lanes, "all_reduce", size, "dp"))
            # The first and last stage finish their backward passes apart: the flush.
            yield from self._wait(group, meeting, flush=True, kind="dp comm",
                                  label="tied embedding grads")
            self.sim.tracer.span(group.name, "dp comm", "tied embedding grads",
                                 _started(meeting, env.now), env.now,
                                 collective="all_reduce")
        # Gradient-norm reduction: every rank meets; a late stage is the pipeline's flush.
        everyone = [g for stage_groups in self.groups for g in stage_groups]
        began = env.now
        meeting = self._meet("grad-norm", group, everyone, lambda: env.timeout(0))
        if not meeting.done.triggered:
            yield meeting.done
        if par.pp > 1:
            group.bubble_s += env.now - began
        else:
            group.idle_s += env.now - began
        self._record_wait(group, meeting, began, "bubble wait", "gradient norm")
        stage_params = params_on_gpu(spec.model, tp=par.tp, pp=par.pp, ep=par.ep,
                                     stage=group.stage, interleave=par.interleave,
                                     partition=par.partition)
        params = stage_params.dense + stage_params.expert
        sharded = params / par.dp if (par.zero >= 1 or par.fsdp) else params
        optimizer_s = spec.costs.optimizer_step_time_s(sharded) * group.slowdown
        start = env.now
        yield env.timeout(optimizer_s)
        group.path.append((start, env.now, "compute", "optimizer step", None))
        group.compute_s += optimizer_s
        self.sim.tracer.span(group.name, "compute", "optimizer step", start, env.now)
        if par.zero in (1, 2) and par.dp > 1:
            size = params * self.act_bytes
            members = self.groups[group.stage]
            meeting = self._meet(("params", group.stage), group, members,
                                 lambda: self._run_plans(self._lanes(group.stage,
                                                                     range(par.dp)),
                                                         "all_gather", size, "dp"))
            start = env.now
            yield from self._wait(group, meeting, kind="dp comm", label="gather params")
            self.sim.tracer.span(group.name, "dp comm", "gather params",
                                 _started(meeting, start), env.now, collective="all_gather")
        group.end_s = env.now

    # ----------------------------------------------------------------- results
    def _result(self) -> IterationResult:
        par = self.spec.parallel
        iteration = max(g.end_s for stage_groups in self.groups for g in stage_groups)
        per_gpu: list[GpuTimes] = []
        topo = self.spec.topology
        for stage_groups in self.groups:
            for group in stage_groups:
                communication = _union_length(group.comm_intervals)
                tail = iteration - group.end_s
                if par.pp > 1:
                    group.bubble_s += tail
                else:
                    group.idle_s += tail
                accounted = group.compute_s + group.exposed_s + group.bubble_s + group.idle_s
                idle = group.idle_s + max(iteration - accounted, 0.0)
                if idle < 1e-12 * iteration:
                    idle = 0.0  # rounding of the sums, not time
                for t, gpu in enumerate(group.gpus):
                    per_gpu.append(GpuTimes(
                        gpu, topo.rank_of(gpu), group.stage, group.replica, t,
                        group.compute_s, communication, group.exposed_s, group.bubble_s,
                        idle, self.memory[group.stage]))
        per_gpu.sort(key=lambda g: g.rank)
        flops = self.spec.model.model_flops_per_iteration(self.spec.training.global_batch,
                                                          self.seq_len)
        return IterationResult(iteration, self.microbatches, tuple(per_gpu), flops,
                               self.env.events_processed, self.sim.network.completed_flows,
                               self.sim, self._critical_path(iteration), topo)

    def _critical_path(self, iteration: float) -> tuple[PathEntry, ...]:
        """Walk back from the group that finished last to time 0, following at each
        segment what it waited for when it started; stretches no segment explains (there
        should be none but rounding) are ``bubble wait``."""
        groups = [g for stage_groups in self.groups for g in stage_groups]
        if not groups:
            return ()
        tiny = 1e-12 * iteration
        out: list[PathEntry] = []
        cursor = iteration

        def emit(start: float, end: float, kind: str, info: Any, group: _Group) -> None:
            nonlocal cursor
            end = min(end, cursor)
            start = min(start, end)
            if cursor - end > tiny:
                out.append(PathEntry(end, cursor, "bubble wait", "waiting", group.name,
                                     group.gpus[0]))
            if end > start:
                tp = 0.0
                if isinstance(info, tuple) and info and info[0] == "local":
                    tp = min(info[2], end - start)
                out.append(PathEntry(start, end, kind, _path_label(kind, info), group.name,
                                     group.gpus[0], tp))
            cursor = start

        group = max(groups, key=lambda g: g.end_s)
        n = len(group.path)
        steps = sum(len(g.path) for g in groups) + len(groups) + 16
        while n > 0 and steps > 0:
            steps -= 1
            start, end, kind, info, dep = group.path[n - 1]
            emit(start, end, kind, info, group)
            while isinstance(dep, _Meeting) and steps > 0:
                # Held back by the previous collective of the same stream.
                steps -= 1
                emit(dep.start_s or 0.0, dep.end_s or 0.0, "dp comm", dep.label, group)
                dep = dep.cause
            if dep is None:
                n -= 1
            elif isinstance(dep, tuple):
                group, n = dep
        if cursor > tiny:
            emit(0.0, 0.0, "bubble wait", "waiting", group)
        out.reverse()
        return tuple(out)


def _started(meeting: _Meeting, default: float) -> float:
    """When a collective started (``default`` if it never did)."""
    return meeting.start_s if meeting.start_s is not None else default


def _path_label(kind: str, info: Any) -> str:
    """A critical-path entry's label from what a segment recorded (built only here)."""
    if isinstance(info, str):
        return info
    if kind == "pp transfer" and isinstance(info, tuple):
        what = "activation" if info[0] == "F" else "gradient"
        return f"{what} mb{info[2]} to virtual stage {info[3]}"
    if isinstance(info, tuple) and info and info[0] == "local":
        spans = info[3]
        first, last = spans[0][3], spans[-1][3]
        return first if len(spans) == 1 else f"{first} … {last}"
    return str(info)

def _union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by a set of intervals."""
    total = 0.0
    end = float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def simulate_iteration(spec: IterationSpec) -> IterationResult:
    """Simulate one training iteration of ``spec``; see the module docstring."""
    simulator = _IterationSimulator(spec)
    if spec.trace:
        _record_link_counters(simulator.sim)
    result = simulator.run()
    if spec.trace:
        simulator.sim.tracer.metadata["distsim"] = _trace_metadata(simulator, result)
    return result


def _trace_metadata(simulator: _IterationSimulator, result: IterationResult) -> dict[str, Any]:
    """What a reader of trace.json needs beyond the spans (the ``otherData.distsim``
    object): the shape keys of a cost table, and which GPUs each rank-group process
    stands for (its spans are every member's), so the trace imports back per GPU
    (:mod:`measured.distsim_trace`)."""
    spec, par, train = simulator.spec, simulator.spec.parallel, simulator.spec.training
    topo = spec.topology
    groups = {group.name: {"stage": group.stage, "replica": group.replica,
                           "gpus": list(group.gpus),
                           "ranks": [topo.rank_of(g) for g in group.gpus],
                           "slowdown": group.slowdown}
              for stage_groups in simulator.groups for group in stage_groups}
    return {"format": 1, "source": spec.source, "model": spec.model.name,
            "gpu": spec.gpu.name, "precision": train.precision,
            "micro_batch": train.micro_batch, "seq_len": simulator.seq_len,
            "hidden": spec.model.hidden, "tp": par.tp,
            "sequence_parallel": par.sequence_parallel, "recompute": train.recompute,
            "microbatches": result.microbatches, "world_size": len(topo.gpus),
            "iteration_time_s": result.iteration_time_s, "groups": groups}


def _record_link_counters(sim: Simulation) -> None:
    """Link utilisation (fraction of capacity) as counter tracks, one per loaded link."""
    network = sim.network
    ids = network.link_ids

    def listener(now: float, links: list[int], loads: Any) -> None:
        for idx, load in zip(links, loads):
            link_id = ids[idx]
            capacity = network.capacity(link_id)
            sim.tracer.counter("links", f"{link_id[0]}->{link_id[1]}", now,
                               float(load) / capacity if capacity else 0.0)

    network.add_listener(listener)
