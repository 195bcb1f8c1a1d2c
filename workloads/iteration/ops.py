"""Ops: the typed steps of a GPU's (or a rank group's) stream of work.

A stream is a sequence of ops run in order.  The simulated iteration builds one per
pipeline stage from the model and the parallel strategy (:mod:`workloads.iteration.streams`) and
runs it for every rank group of that stage (:mod:`workloads.iteration`); the trace replay
(:mod:`workloads.traces.replay`) says with the same types what each measured GPU op *is*, and
keeps its dependency-graph state in its own nodes around them.

* :class:`Compute` — GPU work of a known duration (a layer block, an embedding, the
  optimizer step; in a replay, a measured kernel).
* :class:`Memcpy` — a measured memory copy or set (replay only).
* :class:`Collective` — a collective among a group of GPUs, blocking or asynchronous.
* :class:`Send` / :class:`Recv` — a pipeline stage hands a micro-batch's activation
  (forward) or gradient (backward) to a neighbouring virtual stage.
* :class:`Wait` — block until asynchronous collectives are done.
* :class:`Barrier` — every rank group meets (the gradient-norm reduction of one scalar).
* :class:`TpOverlap` — a tensor-parallel collective pipelined in chunks with the GEMM it
  feeds or drains (``parallelism.tp_comm_overlap``, :mod:`workloads.cost.tp_overlap`).
* :class:`Fused` — a run of compute and closed-form collectives that nothing outside the
  rank group can delay, simulated as one timeout (:func:`fuse` makes them).

Ops are frozen and hashable: one op object is shared by every rank group (and every
micro-batch) that runs it.  Times are seconds, sizes bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from distsim_gpu.workloads.cost.tp_overlap import bulk_pair_s, pipelined_pair_s

__all__ = ["Barrier", "Collective", "Compute", "FoldedPair", "Fused", "Memcpy", "Op", "Peers",
           "Recv", "Send", "TpOverlap", "Wait", "fuse"]

#: Who takes part in a collective.  In the iteration, the name of a parallelism
#: dimension's communicator, relative to the rank group that runs it
#: (:func:`workloads.strategy.dimensions.peer_group` says who meets): ``"tp"`` its own
#: GPUs, ``"ep"`` its stage's expert-parallel block of replicas, ``"cp"`` its
#: context-parallel ring, ``"dp"`` every replica of its stage, ``"embedding"`` the first
#: and the last stage of its replica (they hold the tied word embedding).  In a replay,
#: the ranks of the process group.
Peers = str | tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Compute:
    """``duration_s`` of GPU work (before a straggler's slowdown).

    ``layer``, ``pass_name`` and ``layer_index`` say what a cost table calls it
    (``"transformer_layer"``, ``"fwd"``, 3); they travel as the trace span's arguments,
    which ``distsim trace costs`` reads back.  ``own_sms``: it runs on an SM share of its
    own (a userbuffers pair's GEMM, :mod:`workloads.cost.tp_overlap`), so an overlapped
    NCCL collective does not slow it (:mod:`workloads.iteration.nccl_sms`).  ``host``: the
    GPU waits out the host's work (the offloaded optimizer step's PCIe transfers and
    CPU-Adam, :mod:`workloads.iteration.offload_step`), which neither a straggling GPU's
    factor nor NCCL's SMs slow.
    """

    duration_s: float
    label: str
    layer: str | None = None
    pass_name: str | None = None
    layer_index: int | None = None
    own_sms: bool = False
    host: bool = False

    def trace_args(self) -> dict[str, Any]:
        """The span arguments: the cost-table keys that are set, in table order."""
        args: dict[str, Any] = {}
        if self.layer is not None:
            args["layer"] = self.layer
        if self.pass_name is not None:
            args["pass"] = self.pass_name
        if self.layer_index is not None:
            args["index"] = self.layer_index
        return args


@dataclass(frozen=True, slots=True)
class Memcpy:
    """A measured memory copy (``memset``: a fill) of ``duration_s`` on a GPU stream."""

    duration_s: float
    label: str
    memset: bool = False


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective ``op`` (``"all_reduce"``, ``"alltoall"``…) of ``size_bytes`` per GPU
    among ``group`` (see :data:`Peers`).

    ``blocking``: the stream waits for it; else it runs on a communication stream, waited
    for by a :class:`Wait` — for its ``handle``, or at the end without one.  ``exclusive``:
    nothing else can use its links while it runs, so its closed form times it exactly (a
    tensor-parallel call that :class:`Fused` may absorb).  ``latency_bound``: a call of a
    few bytes that its members meet for and that then takes its uncontended closed-form
    time, no flows (nothing on its links could slow a few bytes; FP8 delayed scaling's
    amax reduction).  A replay leaves ``op`` or ``size_bytes`` ``None`` where the trace
    does not say them.
    """

    op: str | None
    size_bytes: float | None
    label: str
    group: Peers = "tp"
    blocking: bool = True
    handle: str | None = None
    exclusive: bool = False
    latency_bound: bool = False
    # A 2-D/2.5-D/3-D TP step (workloads.strategy.tp_nd): the call runs on each of these
    # sub-groups of the TP group's local ranks at once, each sub-group's root first.
    subgroups: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class Send:
    """Pipeline hand-off, asynchronous: this pass's output for ``microbatch`` (pass
    ``"F"``: the activation; ``"B"``: its gradient) goes to ``virtual_stage``."""

    pass_name: str
    microbatch: int
    virtual_stage: int
    size_bytes: float


@dataclass(frozen=True, slots=True)
class Recv:
    """Block until ``microbatch``'s activation (``"F"``) or gradient (``"B"``) for this
    stream's ``virtual_stage`` has arrived."""

    pass_name: str
    microbatch: int
    virtual_stage: int

    @property
    def label(self) -> str:
        what = "activation" if self.pass_name == "F" else "gradient"
        return f"{what} mb{self.microbatch} to virtual stage {self.virtual_stage}"


@dataclass(frozen=True, slots=True)
class Wait:
    """Block until the asynchronous collective launched with ``handle`` is done; with
    ``None``, every outstanding one launched without a handle, in launch order."""

    handle: str | None = None


@dataclass(frozen=True, slots=True)
class Barrier:
    """Every rank group meets here; the meeting itself takes no time."""

    label: str


@dataclass(frozen=True, slots=True)
class TpOverlap:
    """A tensor-parallel ``comm`` run in ``splits`` chunks against a GEMM of ``gemm_s``
    (alone on the GPU) that runs ``gemm_stretch`` times longer beside it (the SMs the
    communication holds): chunk by chunk, the collective first (``comm_first``: an
    all-gather feeding the GEMM) or the GEMM first (a reduce-scatter draining it); with
    ``bulk``, the collective whole beside the whole GEMM (a backward's reduce-scatter
    beside the weight gradient).  ``gemm``: the GEMM as a :class:`Compute` of ``gemm_s``
    (its label and cost-table keys)."""

    comm: Collective
    gemm: Compute
    splits: int
    comm_first: bool
    gemm_stretch: float = 1.0
    bulk: bool = False

    @property
    def label(self) -> str:
        return f"{self.comm.label} overlapped"

    @property
    def gemm_s(self) -> float:
        """The GEMM's seconds alone on the GPU."""
        return self.gemm.duration_s

    @property
    def stretched_gemm_s(self) -> float:
        """The GEMM's seconds beside the communication."""
        return self.gemm.duration_s * self.gemm_stretch


@dataclass(frozen=True, slots=True)
class FoldedPair:
    """A :class:`TpOverlap` folded into a :class:`Fused` op: its collective is step
    ``index`` (its GEMM the step before), ``comm_s`` the collective's closed form — one
    chunk's of ``splits``, or the whole collective's when ``bulk``."""

    index: int
    comm_s: float
    splits: int
    bulk: bool

    def exposed_s(self, gemm_s: float) -> float:
        """What the pair takes beyond its GEMM of ``gemm_s`` seconds."""
        pair_s = (bulk_pair_s(self.comm_s, gemm_s) if self.bulk
                  else pipelined_pair_s(self.comm_s, gemm_s, self.splits))
        return pair_s - gemm_s


@dataclass(frozen=True, slots=True)
class Fused:
    """``steps`` run back to back as one timeout: compute and ``exclusive`` collectives,
    the ``i``-th taking ``durations_s[i]`` (a collective's from its closed form).

    ``compute_s`` and ``comm_s`` are the two sums, in step order; a straggler's slowdown
    scales the compute only (less ``host_s``, the part of it that is the host's work,
    :attr:`Compute.host`), and what its folded ``pairs`` expose (:meth:`slowed`).
    """

    steps: tuple[Compute | Collective, ...]
    durations_s: tuple[float, ...]
    compute_s: float
    comm_s: float
    pairs: tuple[FoldedPair, ...] = ()
    host_s: float = 0.0

    def slowed_compute_s(self, slowdown: float) -> float:
        """Its compute on a rank group ``slowdown`` times as slow: the host's part keeps
        its time (a slow GPU does not slow the CPU or PCIe)."""
        return self.compute_s * slowdown - self.host_s * (slowdown - 1.0)

    def gpu_scale(self, computed_s: float, slowdown: float) -> float:
        """The factor on each GPU step's length when the compute took ``computed_s`` in
        all: the host's steps keep theirs (``slowdown`` where there is no GPU step)."""
        gpu_s = self.compute_s - self.host_s
        return (computed_s - self.host_s) / gpu_s if gpu_s > 0.0 else slowdown

    def slowed(self, slowdown: float) -> Fused:
        """This op on a rank group whose compute takes ``slowdown`` times as long: each
        folded pair's collective exposes what its slower GEMM chunks no longer hide, as
        the pair run as flows would (:mod:`workloads.iteration.tp_overlap_run`)."""
        if slowdown == 1.0 or not self.pairs:
            return self
        durations = list(self.durations_s)
        for pair in self.pairs:
            durations[pair.index] = pair.exposed_s(durations[pair.index - 1] * slowdown)
        comm_s = sum(seconds for step, seconds in zip(self.steps, durations, strict=True)
                     if isinstance(step, Collective))
        return Fused(self.steps, tuple(durations), self.compute_s, comm_s, host_s=self.host_s)

    @property
    def label(self) -> str:
        first, last = self.steps[0].label, self.steps[-1].label
        return first if len(self.steps) == 1 else f"{first} … {last}"


#: One step of a stream.
Op = Compute | Memcpy | Collective | Send | Recv | Wait | Barrier | TpOverlap | Fused


def fuse(ops: Sequence[Op], closed_form_s: Callable[[Collective], float]) -> tuple[Op, ...]:
    """``ops`` with each run of compute and exclusive collectives merged into one
    :class:`Fused` op (``closed_form_s`` times the collectives; the host's steps'
    time its ``host_s``); other ops stay."""
    out: list[Op] = []
    run: list[Compute | Collective] = []
    durations: list[float] = []
    pairs: list[FoldedPair] = []
    compute = comm = 0.0

    def flush() -> None:
        nonlocal compute, comm
        if run:
            host = sum(d for op, d in zip(run, durations, strict=True)
                       if isinstance(op, Compute) and op.host)
            out.append(Fused(tuple(run), tuple(durations), compute, comm, tuple(pairs), host))
        run.clear()
        durations.clear()
        pairs.clear()
        compute = comm = 0.0

    for op in ops:
        if isinstance(op, TpOverlap) and op.comm.exclusive:
            # The pair in closed form: the GEMM as compute, the rest of the pipeline as
            # the collective's exposed part (its bytes still count on its links).
            gemm_s = op.stretched_gemm_s
            chunk = replace(op.comm, size_bytes=(op.comm.size_bytes or 0.0) / op.splits)
            pair = FoldedPair(len(run) + 1, closed_form_s(op.comm if op.bulk else chunk),
                              op.splits, op.bulk)
            pairs.append(pair)
            exposed_s = pair.exposed_s(gemm_s)
            run.extend((replace(op.gemm, duration_s=gemm_s, own_sms=True), op.comm))
            durations.extend((gemm_s, exposed_s))
            compute += gemm_s
            comm += exposed_s
            continue
        if isinstance(op, Compute):
            duration = op.duration_s
            compute += duration
        elif isinstance(op, Collective) and op.exclusive:
            duration = closed_form_s(op)
            comm += duration
        else:
            flush()
            out.append(op)
            continue
        run.append(op)
        durations.append(duration)
    flush()
    return tuple(out)
