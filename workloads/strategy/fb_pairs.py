"""Forward-backward pairs: a stage's forward and backward run as one interleaved unit.

DeepSeek's DualPipe (deepseek-ai/DualPipe: "overlapped forward and backward chunks";
DeepSeek-V3 report §3.2.1) and Megatron-Core's combined 1F1B with expert-parallel
all-to-all overlap (``--overlap-moe-expert-parallel-comm`` with ``--delay-wgrad-compute``)
run a stage's steady-state forward of one micro-batch together with the backward of
another: layer by layer, each one's expert all-to-alls run while the other computes, and
the backward's weight gradients are computed while both wait (the ops:
:mod:`workloads.iteration.overlaps`).  ``parallelism.fb_overlap`` switches it on.

Which passes pair: a forward immediately followed in the stage's program by a backward of
another micro-batch (a backward of the same micro-batch needs that forward's result).  A
pair receives both inputs before it starts and sends both outputs when it ends, so a
pairing must never make a pair wait, through other stages, for its own outputs:
:func:`paired_programs` checks the dependency graph of every stage's units and raises if
one would.  1F1B and interleaved 1F1B run one more warm-up forward on every stage, as
Megatron-Core's combined 1F1B does, so that the last stage's steady state alternates
micro-batches (without it, its forward and backward are of the same micro-batch); it costs
a micro-batch more of activations, which the memory model counts.  1F1B pairs only
without a pipeline (pp 1): with pp > 1 Megatron-Core runs its combined 1F1B on virtual
pipeline stages only and refuses the plain one, in which each stage's pair would wait for
the next stage's pair of the same micro-batch and neighbouring stages would take turns;
distsim refuses it too.  ``dualpipev`` pairs as
DeepSeek's DualPipeV does with at least ``2·pp`` micro-batches
(:func:`~workloads.strategy.schedule.deepseek_v_program`, zero-bubble split backwards
included: an input half is a backward to the stage before, a weight half follows it on
its own stage); with fewer, its list schedule
pairs where a stage has a forward and a backward both ready
(:func:`~workloads.strategy.schedule.v_list_schedule`).  ``dualpipe`` pairs as DeepSeek's
DualPipe does (:func:`~workloads.strategy.schedule.deepseek_dualpipe_program`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from distsim_gpu.simcore.errors import ConfigError, SimulationError
from distsim_gpu.workloads.specs.recompute_modules import recomputes_communication
from distsim_gpu.workloads.strategy.schedule import (
    GRADIENT_PASSES,
    Step,
    deepseek_dualpipe_program,
    route_ends,
    stage_program,
    v_paired_schedule,
    virtual_stage,
)

__all__ = ["PAIRED_SCHEDULES", "Pair", "Unit", "check_fb_overlap", "pair_program",
           "paired_programs"]

# Unit times of the passes (a backward twice a forward; each half of a split one, one).
_UNIT_TIME = {"F": 1, "B": 2, "I": 1, "W": 1}
#: Schedules whose steady state alternates forwards and backwards (GPipe's does not).
PAIRED_SCHEDULES = ("1f1b", "interleaved", "dualpipev", "dualpipe")


@dataclass(frozen=True, slots=True)
class Pair:
    """A forward and a backward of one stage run as one interleaved unit."""

    forward: Step
    backward: Step


Unit = Step | Pair


class _Strategy(Protocol):
    """What the checks read of a :class:`~workloads.strategy.parallel.ParallelConfig`
    (which validates through this module)."""

    fb_overlap: bool
    moe_overlap: bool
    tp_comm_overlap: bool
    fsdp: bool
    schedule: str
    tp: int
    pp: int
    ep: int
    cp: int
    zero: int
    layer_groups: tuple[object, ...]


def pair_program(program: Sequence[Step],
                 ready: Callable[[int], bool] = lambda _index: True) -> list[Unit]:
    """``program`` with each forward that a backward of another micro-batch follows
    merged with it into a :class:`Pair` — where ``ready(index)`` says the backward at
    ``index`` could have started instead of the forward before it."""
    units: list[Unit] = []
    index = 0
    while index < len(program):
        step = program[index]
        after = program[index + 1] if index + 1 < len(program) else None
        if (step[0] == "F" and after is not None and after[0] == "B" and after[1] != step[1]
                and ready(index + 1)):
            units.append(Pair(step, after))
            index += 2
        else:
            units.append(step)
            index += 1
    return units


@lru_cache(maxsize=32)
def paired_programs(schedule: str, *, pp: int, microbatches: int,
                    interleave: int = 1) -> tuple[tuple[Unit, ...], ...]:
    """Every stage's units under ``fb_overlap``.  ``dualpipev``: the pairs its paired
    program names (module docstring).  1F1B and interleaved: every forward with the
    backward after it, unless that could deadlock; then only where the backward's input
    had arrived when the forward started, the programs run on unit times (a forward 1, a
    backward 2) — such a pair waits for nothing its forward would not have.  A
    SimulationError (a bug, not the user's input) if the pairs could still deadlock."""
    steps = [stage_program(schedule, pp=pp, stage=stage, microbatches=microbatches,
                           interleave=interleave, fb_overlap=True) for stage in range(pp)]
    if schedule in ("dualpipev", "dualpipe"):  # DeepSeek's orders (or the V's list's)
        starts = (tuple(deepseek_dualpipe_program(pp, microbatches, stage)[1]
                        for stage in range(pp)) if schedule == "dualpipe"
                  else v_paired_schedule(pp, microbatches)[1])
        programs = tuple(tuple(pair_program(program, lambda i, s=set(starts[stage]): i - 1 in s))
                         for stage, program in enumerate(steps))
        if not _acyclic(programs, schedule, pp=pp, interleave=interleave):
            raise SimulationError(f"fb_overlap: the {schedule} schedule's pairs would "
                                  f"deadlock (pp {pp}, {microbatches} micro-batches)")
        return programs
    programs = tuple(tuple(pair_program(program)) for program in steps)
    if _acyclic(programs, schedule, pp=pp, interleave=interleave):
        return programs
    starts, arrivals = _unit_times(steps, schedule, pp=pp, interleave=interleave)
    programs = tuple(tuple(pair_program(
        program, lambda i, s=stage: arrivals[s][i] <= starts[s][i - 1]))
        for stage, program in enumerate(steps))
    if not _acyclic(programs, schedule, pp=pp, interleave=interleave):
        raise SimulationError(f"fb_overlap: the {schedule} schedule's forward-backward "
                              f"pairs would deadlock (pp {pp}, {microbatches} micro-batches)")
    return programs


def _source(pass_: str, mb: int, vs: int, ends: tuple[tuple[int, ...], tuple[int, ...]],
            ) -> tuple[str, int, int] | None:
    """The pass whose output pass ``(pass_, mb, vs)`` takes as its input (None: a
    forward where micro-batches enter reads the data; a split backward's weight
    gradients, which follow its input gradients on the same stage).  ``ends``: where
    micro-batches enter and leave (:func:`~workloads.strategy.schedule.route_ends`).  A
    backward's input half counts as the backward (:func:`_node_key`)."""
    entries, exits = ends
    if pass_ == "F":
        return ("F", mb, vs - 1) if vs not in entries else None
    if pass_ == "W":
        return None
    return ("B", mb, vs + 1) if vs not in exits else ("F", mb, vs)


def _node_key(pass_: str, mb: int, vs: int) -> tuple[str, int, int]:
    """A pass as the dependency graph names it: the input half of a split backward is
    what the stage before waits for, as a whole backward is."""
    return ("B" if pass_ in GRADIENT_PASSES else pass_, mb, vs)


def _unit_times(programs: Sequence[Sequence[Step]], schedule: str, *, pp: int,
                interleave: int) -> tuple[list[list[float]], list[list[float]]]:
    """Each step's start, and when its input arrived, with every stage running its
    program in order on unit times (a forward 1, a backward 2)."""
    route = route_ends(schedule, pp, interleave)
    ends: dict[tuple[str, int, int], float] = {}
    starts = [[0.0] * len(p) for p in programs]
    arrivals = [[0.0] * len(p) for p in programs]
    position, free = [0] * pp, [0.0] * pp
    progress = True
    while progress:
        progress = False
        for stage, program in enumerate(programs):
            while position[stage] < len(program):
                pass_, mb, chunk = program[position[stage]]
                vs = virtual_stage(stage, chunk, pp, schedule)
                source = _source(pass_, mb, vs, route)
                if source is not None and source not in ends:
                    break
                arrived = ends[source] if source is not None else 0.0
                start = max(free[stage], arrived)
                arrivals[stage][position[stage]], starts[stage][position[stage]] = (arrived,
                                                                                   start)
                free[stage] = ends[_node_key(pass_, mb, vs)] = start + _UNIT_TIME[pass_]
                position[stage] += 1
                progress = True
    return starts, arrivals


def _acyclic(programs: Sequence[Sequence[Unit]], schedule: str, *, pp: int,
             interleave: int) -> bool:
    """Kahn's algorithm on the units: program order on each stage, and each pass after
    the pass it takes its input from (the forward of the virtual stage before, the
    backward of the one after, the last forward for the last backward)."""
    route = route_ends(schedule, pp, interleave)
    node: dict[tuple[str, int, int], tuple[int, int]] = {}
    for stage, units in enumerate(programs):
        for index, unit in enumerate(units):
            for pass_, mb, chunk in (unit.forward, unit.backward) if isinstance(
                    unit, Pair) else (unit,):
                vs = virtual_stage(stage, chunk, pp, schedule)
                node[_node_key(pass_, mb, vs)] = (stage, index)
    after: dict[tuple[int, int], list[tuple[int, int]]] = {n: [] for n in node.values()}
    for stage, units in enumerate(programs):
        for index in range(1, len(units)):
            after[(stage, index - 1)].append((stage, index))
    for (pass_, mb, vs), unit in node.items():
        source = _source(pass_, mb, vs, route)
        if source is not None:
            after[node[source]].append(unit)
    waiting = {n: 0 for n in after}
    for targets in after.values():
        for target in targets:
            waiting[target] += 1
    ready, done = deque(n for n, count in waiting.items() if count == 0), 0
    while ready:
        done += 1
        for target in after[ready.popleft()]:
            waiting[target] -= 1
            if waiting[target] == 0:
                ready.append(target)
    return done == len(after)


def check_fb_overlap(parallel: _Strategy, *, experts: int, recompute: str,
                     recompute_modules: tuple[str, ...] = (),
                     source: str | None = None) -> None:
    """``fb_overlap`` where its pairs are modelled: expert all-to-alls to hide, a schedule
    that alternates forwards and backwards, and none of the features whose ops a pair
    would have to interleave too (context parallelism's ring, per-layer groups, ZeRO-3
    gathers, full recomputation, a selective one that communicates — ``moe``'s
    all-to-alls, ``shared_experts``' gathers — the other overlaps of the same links)."""
    if not parallel.fb_overlap:
        return
    key = "parallelism.fb_overlap"
    if not (experts > 1 and parallel.ep > 1):
        raise ConfigError("fb_overlap hides expert all-to-alls: it needs a MoE model and "
                          f"ep > 1 (got {experts} experts, ep {parallel.ep})", key=key,
                          source=source, hint="set ep > 1, or fb_overlap: false")
    if parallel.schedule not in PAIRED_SCHEDULES:
        raise ConfigError(f"fb_overlap pairs a forward with a backward; the "
                          f"{parallel.schedule} schedule runs them apart", key=key,
                          source=source, hint="schedule: " + ", ".join(PAIRED_SCHEDULES))
    if parallel.schedule == "1f1b" and parallel.pp > 1:
        # Megatron-Core asserts the same: in plain 1F1B a stage's pair waits for the next
        # stage's pair of the same micro-batch, which waits for this stage's previous
        # one, so neighbouring stages take turns and each idles about half the time.
        raise ConfigError("fb_overlap on a 1F1B pipeline: Megatron-Core's combined 1F1B "
                          "needs virtual pipeline stages when pp > 1", key=key,
                          source=source, hint="schedule: interleaved (Megatron-Core), "
                          "dualpipev or dualpipe, or pp 1")
    clashes = {"moe_overlap": parallel.moe_overlap, "tp_comm_overlap": parallel.tp_comm_overlap,
               "cp > 1": parallel.cp > 1, "layer_groups": bool(parallel.layer_groups),
               "zero 3 / fsdp": parallel.zero == 3 or parallel.fsdp,
               f"recompute {recompute}": recompute not in ("none", "selective"),
               "recompute_modules " + "+".join(recompute_modules): recompute == "selective"
               and recomputes_communication(recompute_modules, tp=parallel.tp,
                                            ep=parallel.ep)}
    named = [name for name, on in clashes.items() if on]
    if named:
        raise ConfigError(f"fb_overlap with {', '.join(named)} is not modelled", key=key,
                          source=source, hint="fb_overlap runs with recompute none or "
                          "selective (without moe, or shared_experts at tp > 1, among its "
                          "modules), cp 1, zero 0-2 and neither moe_overlap nor "
                          "tp_comm_overlap")
