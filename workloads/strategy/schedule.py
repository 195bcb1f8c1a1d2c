"""Pipeline schedules: the order in which a stage runs forward and backward passes.

A stage's program is a list of ``(pass, micro_batch, chunk)`` with pass ``"F"`` or
``"B"`` — or, in DeepSeek's DualPipeV order, a backward split as zero-bubble schedules
split it (Qi et al. 2024): ``"I"``, the input gradients (what the stage before waits
for), and later ``"W"``, the weight gradients of the oldest ``"I"`` not yet followed by
its ``"W"``; ``chunk`` is the model chunk (always 0 unless interleaved).  Model chunk ``c`` of
stage ``s`` is *virtual stage* ``c·p + s``: a forward pass takes its input from virtual
stage ``v − 1`` and a backward pass its gradient from ``v + 1``.

* **GPipe** (Huang et al. 2019): every forward, then every backward.
* **1F1B** (PipeDream-Flush, Narayanan et al. 2021 §2.2.1): ``p − s − 1`` warm-up
  forwards, then one forward and one backward in turn, then the remaining backwards; the
  same bubble as GPipe, ``(p − 1)/(m + p − 1)``, with at most ``p − s`` micro-batches in
  flight.
* **Interleaved 1F1B** (Narayanan et al. 2021 §2.2.2, Megatron-LM's schedule): ``v``
  chunks per stage, micro-batches in groups of ``p``; warm-up ``2·(p − s − 1) + (v − 1)·p``
  chunk-passes; the bubble shrinks by ``v`` to ``(p − 1)/(v·m)`` of the ideal time.
* **DualPipeV** (DeepSeek's DualPipe cut in half, deepseek-ai/DualPipe; the V-shape of
  Qi et al. 2024, "Zero Bubble Pipeline Parallelism"): two chunks per stage placed as a V —
  stage ``s`` holds virtual stages ``s`` and ``2p − 1 − s`` — so a micro-batch goes down
  the stages and back up, the first stage holding both the embedding and the loss, the
  last stage running its two chunks back to back.  Each stage's order comes from a list
  schedule on unit times (a chunk's forward 1, its backward 2): an idle stage with a ready
  backward (the oldest micro-batch's, the deeper chunk's) and a ready forward (the deeper
  chunk's, else the first's — this one only while fewer than its warm-up depth are ahead
  of their backward) runs the kind it did not run last, else whichever is ready, at most
  ``3p`` chunk activations held.  With ``m ≥ 1.5·p`` micro-batches its bubble is
  ``(p − 1)/(2m)`` of the ideal time on those unit times, as two interleaved chunks'
  (fewer micro-batches fill the V less).
  The list schedule does not split a backward; ``parallelism.fb_overlap`` pairs a forward
  with the backward after it to overlap their all-to-alls (:mod:`workloads.strategy.fb_pairs`;
  with ``m ≥ 2p`` micro-batches in DeepSeek's own DualPipeV order, zero-bubble splits
  included, :func:`deepseek_v_program`), ``parallelism.moe_overlap`` a MoE layer's own
  halves.
* **DualPipe** (DeepSeek-V3 report §3.2.1, deepseek-ai/DualPipe's ``dualpipe.py``): two
  directions.  The model is cut into ``p`` stages and rank ``s`` holds two of them, stage
  ``s`` and stage ``p − 1 − s`` — two copies of every stage's parameters, whose gradients
  the pair sums (:func:`mirror_pair`).  Half the micro-batches go from rank 0 to rank
  ``p − 1``, the other half back: chunk 0 of rank ``s`` is virtual stage ``s`` on the
  first direction's way, chunk 1 virtual stage ``2p − 1 − s`` on the second's (the V's
  numbering; :func:`route_ends` says where each direction enters and leaves), each holding
  the layers of its model stage (``p`` chunks of layers, each placed twice).  The order is
  DeepSeek's, which is DualPipeV's on the ranks ``min(s, p − 1 − s)`` of a half pipeline
  with the chunks of the second half of the ranks swapped (:func:`deepseek_dualpipe_program`);
  it needs an even ``m ≥ 2p``.  Its bubble, ``(p/2 − 1)(F&B + B − 3W)``, is DualPipeV's
  formula on chunks twice as long.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from functools import lru_cache

from distsim_gpu.simcore.config import check_choice, check_whole
from distsim_gpu.simcore.errors import ConfigError, SimulationError

__all__ = [
    "BIDIRECTIONAL",
    "GRADIENT_PASSES",
    "SCHEDULES",
    "V_SCHEDULES",
    "Step",
    "check_interleave",
    "check_schedule_microbatches",
    "chunk_microbatches",
    "deepseek_dualpipe_program",
    "deepseek_v_program",
    "end_stages",
    "microbatches_in_flight",
    "mirror_pair",
    "model_chunks",
    "peak_bytes_held",
    "peak_chunks_held",
    "route_ends",
    "stage_of",
    "stage_program",
    "v_list_schedule",
    "v_paired_schedule",
    "virtual_stage",
]

Step = tuple[str, int, int]
#: Passes that send a gradient to the stage before: a whole backward, or its input half.
GRADIENT_PASSES = ("B", "I")
#: Every schedule a pipeline can run (``parallelism.schedule``).
SCHEDULES = ("gpipe", "1f1b", "interleaved", "dualpipev", "dualpipe")
#: Schedules that place a stage's two chunks as a V (chunk 1 of stage s is 2p − 1 − s).
V_SCHEDULES = ("dualpipev", "dualpipe")
#: Schedules whose micro-batches run in two directions, each through one chunk a stage.
BIDIRECTIONAL = ("dualpipe",)
# Unit times of the list schedule that orders a V pipeline's passes (a chunk's forward,
# its backward): only their ratio matters, backward about twice the forward's FLOP.
_V_FORWARD, _V_BACKWARD = 1, 2


def virtual_stage(stage: int, chunk: int, pp: int, schedule: str = "1f1b") -> int:
    """The position of ``chunk`` of ``stage`` in the whole model's sequence of chunks."""
    if schedule in V_SCHEDULES and chunk == 1:
        return 2 * pp - 1 - stage
    return chunk * pp + stage


def stage_of(vs: int, pp: int, schedule: str = "1f1b") -> int:
    """The pipeline stage that holds virtual stage ``vs``."""
    if schedule in V_SCHEDULES and vs >= pp:
        return 2 * pp - 1 - vs
    return vs % pp


def model_chunks(schedule: str, pp: int, interleave: int) -> int:
    """How many chunks the model's layers are cut into: ``pp·interleave``, or ``pp`` for
    DualPipe, whose virtual stages hold every chunk twice (one a direction)."""
    return pp if schedule in BIDIRECTIONAL else pp * interleave


def route_ends(schedule: str, pp: int, interleave: int) -> tuple[tuple[int, ...],
                                                                  tuple[int, ...]]:
    """The virtual stages where micro-batches enter (the embedding's) and leave (the
    output layer's and the loss's): one each, or DualPipe's two directions'."""
    if schedule in BIDIRECTIONAL:
        return (0, pp), (pp - 1, 2 * pp - 1)
    return (0,), (pp * interleave - 1,)


def end_stages(schedule: str, pp: int, interleave: int) -> tuple[frozenset[int],
                                                                  frozenset[int]]:
    """The stages holding the embedding and those holding the output layer (the last
    stage; the first in a V; both ends under DualPipe, each holding both)."""
    starts, ends = route_ends(schedule, pp, interleave)
    return (frozenset(stage_of(vs, pp, schedule) for vs in starts),
            frozenset(stage_of(vs, pp, schedule) for vs in ends))


def mirror_pair(stage: int, pp: int) -> tuple[int, int]:
    """``stage`` and its mirror ``pp − 1 − stage``, the lower first: the first and the
    last stage (the tied embedding's ends), or the two ranks holding DualPipe's copies of
    the same two model stages."""
    mirror = pp - 1 - stage
    return (stage, mirror) if stage <= mirror else (mirror, stage)


def chunk_microbatches(schedule: str, microbatches: int) -> int:
    """How many micro-batches each chunk of a stage runs: half of them under DualPipe
    (each direction's), else all."""
    return microbatches // 2 if schedule in BIDIRECTIONAL else microbatches


def check_interleave(schedule: str, interleave: int, *, key: str = "interleave",
                     source: str | None = None) -> None:
    """``interleave`` (written at ``key``) >= 2 for the interleaved schedule, 2 for
    dualpipev and dualpipe (their two chunks a stage), 1 otherwise."""
    if schedule == "interleaved" and interleave < 2:
        raise ConfigError("the interleaved schedule needs interleave >= 2", key=key,
                          source=source, hint="or use schedule 1f1b")
    if schedule in V_SCHEDULES and interleave != 2:
        raise ConfigError(f"the {schedule} schedule runs two chunks a stage, got interleave "
                          f"{interleave}", key=key, source=source, hint="set interleave: 2")
    if schedule not in ("interleaved", *V_SCHEDULES) and interleave != 1:
        raise ConfigError(f"interleave {interleave} needs schedule: interleaved", key=key,
                          source=source)


def check_schedule_microbatches(schedule: str, pp: int, microbatches: int, *,
                                source: str | None = None) -> None:
    """The micro-batches a schedule can run: whole groups of ``pp`` interleaved, an even
    number of at least ``2·pp`` under DualPipe (its two directions' halves; DeepSeek's
    order asserts the same)."""
    if schedule == "interleaved" and microbatches % pp:
        raise ConfigError(
            f"the interleaved schedule needs the {microbatches} micro-batches per pipeline "
            f"to be a multiple of pp = {pp}", key="training.global_batch", source=source)
    if schedule in BIDIRECTIONAL and (microbatches % 2 or microbatches < 2 * pp):
        raise ConfigError(
            f"DualPipe needs an even number of micro-batches per pipeline, at least 2·pp = "
            f"{2 * pp} (half go each way), got {microbatches}",
            key="training.global_batch", source=source,
            hint=f"a global batch of at least {2 * pp}·micro_batch·dp sequences, "
                 "an even number of micro-batches")


def _interleaved_unit(k: int, *, pp: int, chunks: int, forward: bool) -> tuple[int, int]:
    """(micro_batch, chunk) of the k-th forward (or backward) of an interleaved stage."""
    in_group = k % (pp * chunks)
    chunk = in_group // pp
    if not forward:
        chunk = chunks - 1 - chunk
    micro_batch = (k // (pp * chunks)) * pp + k % pp
    return micro_batch, chunk


def stage_program(schedule: str, *, pp: int, stage: int, microbatches: int,
                  interleave: int = 1, fb_overlap: bool = False) -> list[Step]:
    """The passes stage ``stage`` of ``pp`` runs, in order, for one iteration;
    ``fb_overlap``: as forward-backward pairs run them (:mod:`workloads.strategy.fb_pairs`:
    a 1F1B or interleaved stage one forward more ahead, the V's list schedule pairing)."""
    extra_warmup = int(fb_overlap)
    m = microbatches
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b":
        warmup = min(pp - stage - 1 + extra_warmup, m)
        program: list[Step] = [("F", i, 0) for i in range(warmup)]
        for i in range(m - warmup):
            program.append(("F", warmup + i, 0))
            program.append(("B", i, 0))
        program.extend(("B", i, 0) for i in range(m - warmup, m))
        return program
    if schedule == "interleaved":
        v = interleave
        total = m * v
        warmup = total if m == pp else min((pp - stage - 1) * 2 + (v - 1) * pp
                                           + extra_warmup, total)
        program = []
        for k in range(warmup):
            mb, chunk = _interleaved_unit(k, pp=pp, chunks=v, forward=True)
            program.append(("F", mb, chunk))
        for k in range(total - warmup):
            mb, chunk = _interleaved_unit(warmup + k, pp=pp, chunks=v, forward=True)
            program.append(("F", mb, chunk))
            mb, chunk = _interleaved_unit(k, pp=pp, chunks=v, forward=False)
            program.append(("B", mb, chunk))
        for k in range(total - warmup, total):
            mb, chunk = _interleaved_unit(k, pp=pp, chunks=v, forward=False)
            program.append(("B", mb, chunk))
        return program
    if schedule in BIDIRECTIONAL:
        return deepseek_dualpipe_program(pp, m, stage)[0]
    if schedule in V_SCHEDULES:
        return list(_v_programs(pp, m, fb_overlap)[stage])
    raise ConfigError(f"unknown schedule {schedule!r}", key="parallelism.schedule",
                      hint="valid: gpipe, 1f1b, interleaved, dualpipev, dualpipe")


def microbatches_in_flight(schedule: str, *, pp: int, stage: int, num_microbatches: int,
                           interleave: int = 1, fb_overlap: bool = False) -> float:
    """Micro-batches whose activations stage ``stage`` holds at its peak, in units of the
    stage's full set of layers (module docstring); ``fb_overlap``: as forward-backward
    pairs run the schedule (:mod:`workloads.strategy.fb_pairs`)."""
    extra_warmup = int(fb_overlap)
    check_choice(schedule, SCHEDULES, key="schedule")
    check_whole(pp, key="pp")
    check_whole(num_microbatches, key="num_microbatches")
    check_whole(interleave, key="interleave")
    if not 0 <= stage < pp:
        raise ConfigError(f"stage {stage!r} is outside 0..{pp - 1}", key="stage")
    if schedule == "gpipe":
        return float(num_microbatches)
    if schedule == "1f1b":
        return float(min(pp - stage + extra_warmup, num_microbatches))
    if schedule in V_SCHEDULES:  # the peak of its program's forwards not yet backward
        return peak_chunks_held(stage_program(schedule, pp=pp, stage=stage,
                                              microbatches=num_microbatches,
                                              fb_overlap=fb_overlap)) / interleave
    chunks = min(2 * (pp - stage - 1) + (interleave - 1) * pp + 1 + extra_warmup,
                 num_microbatches * interleave)
    return chunks / interleave


def peak_chunks_held(program: list[Step]) -> int:
    """The most chunk activations a stage holds at once running ``program``: forwards
    whose backward has not run yet (a split backward frees them with its weight
    gradients, which read the saved inputs)."""
    held = peak = 0
    for pass_, _mb, _chunk in program:
        held += {"F": 1, "I": 0}.get(pass_, -1)
        peak = max(peak, held)
    return peak


def peak_bytes_held(program: list[Step], chunk_bytes: Sequence[float]) -> float:
    """The most activation bytes a stage holds at once running ``program``, a chunk's
    forward holding ``chunk_bytes[chunk]`` until its backward (or a split backward's
    weight half) frees it: :func:`peak_chunks_held` with chunks of different sizes."""
    held = [0] * len(chunk_bytes)
    peak = 0.0
    for pass_, _mb, chunk in program:
        held[chunk] += {"F": 1, "I": 0}.get(pass_, -1)
        peak = max(peak, sum(n * size for n, size in zip(held, chunk_bytes, strict=True)))
    return peak


#: The V list schedule's limits (module docstring): a stage ``s`` runs at most
#: ``⌈3·(2p − 1 − s)/2⌉`` first-chunk forwards ahead of their backward (three times the
#: micro-batches a round trip through the deeper stages keeps busy) and holds at most
#: ``3p`` chunk activations.  Against the best of a grid of both (depth factor 1-6, hold
#: p-4p) on unit times, for p 2-32 and 4-64 micro-batches, these were never longer, and
#: from m = 1.5·p micro-batches on they halve 1F1B's bubble, as two interleaved chunks do.
_V_WARMUP_FACTOR, _V_HOLD_FACTOR = 3, 3


@lru_cache(maxsize=32)
def _v_programs(pp: int, m: int, paired: bool = False) -> tuple[tuple[Step, ...], ...]:
    """Every stage's order of a V pipeline (module docstring); ``paired``: as
    forward-backward pairs run it (:func:`v_paired_schedule`)."""
    return v_paired_schedule(pp, m)[0] if paired else v_list_schedule(pp, m)[1]


@lru_cache(maxsize=32)
def v_paired_schedule(pp: int, m: int) -> tuple[tuple[tuple[Step, ...], ...],
                                                tuple[tuple[int, ...], ...]]:
    """Every stage's order of a V pipeline run as forward-backward pairs, and where each
    stage's pairs start: DeepSeek's DualPipeV order with ``m ≥ 2·pp`` micro-batches
    (:func:`deepseek_v_program`), else the list schedule's pairs."""
    if m >= 2 * pp:
        stages = [deepseek_v_program(pp, m, stage) for stage in range(pp)]
        return (tuple(tuple(steps) for steps, _ in stages),
                tuple(tuple(starts) for _, starts in stages))
    _length, programs, starts = v_list_schedule(pp, m, paired=True)
    return programs, starts


def deepseek_v_program(pp: int, m: int, stage: int) -> tuple[list[Step], list[int]]:
    """Stage ``stage``'s passes in DeepSeek's DualPipeV order (deepseek-ai/DualPipe,
    ``dualpipev.py``; its steps for ``m ≥ 2·pp`` micro-batches), and where its
    forward-backward pairs start.  Chunk 0 is the V's way down, chunk 1 its way back; each
    kind of pass takes its chunk's micro-batches in order.  With ``r = p − s − 1``:

    1. ``2r`` forwards of chunk 0;  2. ``s + 1`` times F0, F1;
    3. ``r`` times I1, W, F1 (zero bubble: the gradient goes out before the weights);
    4. the main part, ``m − 2p + s + 1`` times the pairs (F0, B1) and (F1, B0) — the last
       stage runs its first F0 and B1 apart (which, DeepSeek's code notes, shrinks the
       bubble);
    5. ``r`` times B1 then the pair (F1, B0);
    6. ``s + 1`` times B1, B0, split into I from the middle on (an odd stage from the
       middle one's B1, an even one from its B0);
    7. ``r`` times W, I0;  8. ``s + 1`` times W.

    A ``W`` runs the weight gradients of the oldest ``I`` still waiting for them (the
    order of DualPipe's ``WeightGradStore`` queue)."""
    if m < 2 * pp:  # a caller's mistake: the main part would run a negative count
        raise ValueError(f"DualPipeV's order needs m >= 2·pp micro-batches, got m {m}, pp {pp}")
    order = _StepOrder()
    rest = pp - stage - 1
    _dualpipev_warm_up(order, rest, stage)
    for i in range(m - 2 * pp + stage + 1):
        if i == 0 and stage == pp - 1:
            order.run(("F", 0))
            order.run(("B", 1))
        else:
            order.run(("F", 0), ("B", 1))
        order.run(("F", 1), ("B", 0))
    _dualpipev_cool_down(order, rest, stage)
    if order.deferred:  # DualPipe asserts its queue is empty here
        raise SimulationError(f"DualPipeV's order left {len(order.deferred)} weight passes")
    return order.steps, order.pairs


def deepseek_dualpipe_program(pp: int, m: int, stage: int) -> tuple[list[Step], list[int]]:
    """Stage ``stage``'s passes in DeepSeek's DualPipe order (``dualpipe.py``, ``m ≥ 2·pp``
    micro-batches, ``m/2`` each way), and where its forward-backward pairs start.

    DualPipe's eight steps are DualPipeV's (:func:`deepseek_v_program`) with ``p/2`` ranks,
    ``m/2`` micro-batches and the rank's distance from the nearer end, ``min(s, p − 1 −
    s)``, as its stage: its code names the passes by phase, and a phase is the first
    direction's chunk on the first half of the ranks and the second's on the other half
    (``phase ^= is_in_second_half``) — so a rank of the second half runs its order with
    the two chunks swapped.  The middle ranks run their first forward and backward of the
    main part apart, as DualPipeV's last stage does."""
    if pp % 2 or m % 2:  # a caller's mistake: validation refuses both
        raise ValueError(f"DualPipe's order needs an even pp and m, got pp {pp}, m {m}")
    steps, pairs = deepseek_v_program(pp // 2, m // 2, min(stage, pp - 1 - stage))
    if stage >= pp // 2:
        steps = [(pass_, mb, 1 - chunk) for pass_, mb, chunk in steps]
    return steps, pairs


class _StepOrder:
    """A stage's passes as they are appended: each kind of pass takes its chunk's
    micro-batches in order, a ``W`` the weight gradients of the oldest ``I`` waiting."""

    def __init__(self) -> None:
        self.taken = {("F", 0): 0, ("F", 1): 0, ("B", 0): 0, ("B", 1): 0}
        self.steps: list[Step] = []
        self.pairs: list[int] = []  # where each forward-backward pair starts
        self.deferred: deque[Step] = deque()

    def run(self, *kinds: tuple[str, int]) -> None:
        """Append one pass, or two as a pair."""
        if len(kinds) == 2:
            self.pairs.append(len(self.steps))
        for pass_, chunk in kinds:
            if pass_ == "W":
                self.steps.append(("W", *self.deferred.popleft()[1:]))
                continue
            counter = ("F" if pass_ == "F" else "B", chunk)
            self.steps.append((pass_, self.taken[counter], chunk))
            self.taken[counter] += 1
            if pass_ == "I":
                self.deferred.append(self.steps[-1])


def _dualpipev_warm_up(order: _StepOrder, rest: int, stage: int) -> None:
    """Steps 1–3 of :func:`deepseek_v_program` (``rest``: the stages after ``stage``)."""
    for _ in range(2 * rest):
        order.run(("F", 0))
    for _ in range(stage + 1):
        order.run(("F", 0))
        order.run(("F", 1))
    for _ in range(rest):
        order.run(("I", 1))
        order.run(("W", 1))
        order.run(("F", 1))


def _dualpipev_cool_down(order: _StepOrder, rest: int, stage: int) -> None:
    """Steps 5–8 of :func:`deepseek_v_program`."""
    for _ in range(rest):
        order.run(("B", 1))
        order.run(("F", 1), ("B", 0))
    split = False
    for i in range(stage + 1):
        split = split or (i == (stage + 1) // 2 and stage % 2 == 1)
        order.run(("I" if split else "B", 1))
        split = split or (i == (stage + 1) // 2 and stage % 2 == 0)
        order.run(("I" if split else "B", 0))
    for _ in range(rest):
        order.run(("W", 0))
        order.run(("I", 0))
    for _ in range(stage + 1):
        order.run(("W", 0))


def v_list_schedule(pp: int, m: int, *, paired: bool = False,
                    ) -> tuple[int, tuple[tuple[Step, ...], ...], tuple[tuple[int, ...], ...]]:
    """One list schedule on unit times: its length, every stage's order, which then runs
    under any positive durations without deadlock (each order respects every dependency
    the unit-time run met), and where each stage's forward-backward pairs start.
    ``paired``: a stage with a forward and a backward both ready runs them as one pair
    (DualPipe's overlapped chunks; :mod:`workloads.strategy.fb_pairs`), else none pair."""
    done: set[tuple[str, int, int]] = set()  # (pass, micro-batch, virtual stage) finished
    stages = [_VStage(stage, pp, m,
                      max(1, math.ceil(_V_WARMUP_FACTOR * (2 * pp - 1 - stage) / 2)))
              for stage in range(pp)]
    running: dict[int, tuple[int, list[tuple[str, int, int]]]] = {}  # stage -> (end, passes)
    pairs: list[list[int]] = [[] for _ in range(pp)]
    now, left = 0, 4 * pp * m  # F and B of 2 chunks of m micro-batches on pp stages
    while left:
        for state in stages:
            steps = () if state.stage in running else state.next(done, paired)
            if steps:
                if len(steps) == 2:
                    pairs[state.stage].append(len(state.program) - 2)
                end = now + sum(_V_FORWARD if p == "F" else _V_BACKWARD for p, _, _ in steps)
                running[state.stage] = (end, [(p, mb, state.vs[c]) for p, mb, c in steps])
        if not running:  # a bug in the rules above, not in the user's input
            raise SimulationError(f"the dualpipev schedule stalled with {left} passes left "
                                  f"(pp {pp}, {m} micro-batches)")
        now = min(end for end, _ in running.values())
        for stage in [s for s, (end, _) in running.items() if end == now]:
            finished = running.pop(stage)[1]
            done.update(finished)
            left -= len(finished)
    return (now, tuple(tuple(state.program) for state in stages),
            tuple(tuple(starts) for starts in pairs))


class _VStage:
    """One stage of the V list schedule: what it ran and what it may run next."""

    def __init__(self, stage: int, pp: int, m: int, warmup: int) -> None:
        self.stage, self.pp, self.m, self.last = stage, pp, m, 2 * pp - 1
        self.warmup = warmup  # first-chunk forwards at most ahead of their backward
        self.vs = (virtual_stage(stage, 0, pp, "dualpipev"),
                   virtual_stage(stage, 1, pp, "dualpipev"))
        self.program: list[Step] = []
        self.next_forward = [0, 0]  # per chunk, the next micro-batch to run forward
        self.waiting: list[tuple[int, int]] = []  # (micro-batch, -chunk) run forward only
        self.last_kind = ""

    def next(self, done: set[tuple[str, int, int]], paired: bool = False,
             ) -> tuple[Step, ...]:
        """The passes this idle stage takes (module docstring), none if none is ready:
        with a backward and a forward both ready, the kind it did not run last — or,
        ``paired``, the forward and then the backward as one pair."""
        backward, forward = self._backward(done), self._forward(done)
        if paired and backward is not None and forward is not None:
            self.waiting.remove(backward)
            return (self._take_forward(forward),
                    self._ran(("B", backward[0], -backward[1])))
        if backward is not None and (forward is None or self.last_kind != "B"):
            self.waiting.remove(backward)
            return (self._ran(("B", backward[0], -backward[1])),)
        if forward is not None:
            return (self._take_forward(forward),)
        return ()

    def _take_forward(self, forward: tuple[int, int]) -> Step:
        mb, chunk = forward
        self.next_forward[chunk] += 1
        self.waiting.append((mb, -chunk))
        return self._ran(("F", mb, chunk))

    def _backward(self, done: set[tuple[str, int, int]]) -> tuple[int, int] | None:
        """The oldest (micro-batch, −chunk) whose gradient has arrived, deeper chunk first."""
        for mb, negative in sorted(self.waiting):
            vs = self.vs[-negative]
            if (("F", mb, vs) if vs == self.last else ("B", mb, vs + 1)) in done:
                return mb, negative
        return None

    def _forward(self, done: set[tuple[str, int, int]]) -> tuple[int, int] | None:
        """The next (micro-batch, chunk) whose input has arrived, deeper chunk first,
        within the stage's limits."""
        if len(self.waiting) >= _V_HOLD_FACTOR * self.pp:
            return None
        first_chunk = sum(1 for _mb, negative in self.waiting if negative == 0)
        for chunk in (1, 0):
            mb, vs = self.next_forward[chunk], self.vs[chunk]
            if chunk == 0 and first_chunk >= self.warmup:
                continue
            if mb < self.m and (vs == 0 or ("F", mb, vs - 1) in done):
                return mb, chunk
        return None

    def _ran(self, step: Step) -> Step:
        self.program.append(step)
        self.last_kind = step[0]
        return step
