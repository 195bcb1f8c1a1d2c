"""The V-shaped two-chunk schedule (``schedule: dualpipev``): its placement, its programs
(every pass once, in an order that runs), its bubble in closed form, and where the
embedding and the output layer sit."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.memory import microbatches_in_flight
from distsim_gpu.workloads.cost.parameters import Chunking, params_on_gpu, stage_layers
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy import schedule
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
)
from distsim_gpu.workloads.strategy.schedule import (
    peak_chunks_held,
    stage_of,
    stage_program,
    virtual_stage,
)
from hypothesis import given, settings
from hypothesis import strategies as st

V = "dualpipev"


def test_the_v_places_chunk_one_back_up_the_stages() -> None:
    """pp 4: stage s holds virtual stages s and 7 − s; stage 0 the first and the last."""
    assert [virtual_stage(s, 1, 4, V) for s in range(4)] == [7, 6, 5, 4]
    assert [stage_of(vs, 4, V) for vs in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 256, "heads": 4,
                                "seq_len": 128, "vocab": 1000, "tied_embeddings": False,
                                "position": "rotary"})
    assert stage_layers(model, pp=4, stage=0, interleave=2, schedule=V) == (0, 7)
    assert stage_layers(model, pp=4, stage=3, interleave=2, schedule=V) == (3, 4)
    # The output layer sits with the last chunk, on the first stage.
    chunking = Chunking(interleave=2, schedule=V)
    first = params_on_gpu(model, pp=4, stage=0, chunking=chunking)
    last = params_on_gpu(model, pp=4, stage=3, chunking=chunking)
    assert first.total - last.total == pytest.approx(
        2 * model.vocab * model.hidden + model.final_norm_params())


def _runs(pp: int, m: int) -> float:
    """The list schedule's programs run on unit times (forward 1, backward 2 a chunk)."""
    programs = [stage_program(V, pp=pp, stage=s, microbatches=m) for s in range(pp)]
    return _span(programs, [[] for _ in programs], {"F": 1.0, "B": 2.0})[0]


def _span(programs, pair_starts, seconds, pair_s=0.0) -> tuple[float, list[float]]:
    """Run the stages' ``programs`` with each kind of pass taking ``seconds[kind]`` and a
    pair (two passes from a start in ``pair_starts``) ``pair_s``, each unit as soon as
    its stage is free and its inputs are there; the span and each stage's busy time.  A
    backward, or its input half ``I``, needs the gradient of the chunk after; a ``W`` its
    own ``I``.  Asserts that the programs run: no unit waits for ever."""
    pp = len(programs)
    units = [_units(program, starts) for program, starts in zip(programs, pair_starts)]
    done: dict[tuple[str, int, int], float] = {}
    clock, busy, position = [0.0] * pp, [0.0] * pp, [0] * pp
    while any(position[s] < len(units[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            while position[s] < len(units[s]):
                unit = units[s][position[s]]
                keys = [_key(s, step, pp) for step in unit]
                needs = [_needs(s, step, pp) for step in unit]
                if any(need is not None and need not in done for need in needs):
                    break
                start = max([clock[s]] + [done[n] for n in needs if n is not None])
                took = pair_s if len(unit) == 2 else seconds[unit[0][0]]
                clock[s] = start + took
                busy[s] += took
                done.update(dict.fromkeys(keys, clock[s]))
                position[s] += 1
                moved = True
        assert moved, "the programs deadlock"
    return max(clock), busy


def _units(program, starts) -> list[tuple]:
    """``program`` cut into what runs as one: a pair from each start, else one pass."""
    units, index = [], 0
    while index < len(program):
        width = 2 if index in starts else 1
        units.append(tuple(program[index:index + width]))
        index += width
    return units


def _key(stage, step, pp) -> tuple[str, int, int]:
    """What a finished pass makes available: a forward's output, a (split) backward's
    input gradient "G", or its weight gradients."""
    pass_, mb, chunk = step
    return ({"F": "F", "B": "G", "I": "G"}.get(pass_, "W"), mb,
            virtual_stage(stage, chunk, pp, V))


def _needs(stage, step, pp) -> tuple[str, int, int] | None:
    pass_, mb, chunk = step
    vs = virtual_stage(stage, chunk, pp, V)
    if pass_ == "F":
        return None if vs == 0 else ("F", mb, vs - 1)
    if pass_ == "W":
        return ("G", mb, vs)
    return ("F", mb, vs) if vs == 2 * pp - 1 else ("G", mb, vs + 1)


@settings(max_examples=25, deadline=None)
@given(pp=st.sampled_from([2, 4, 8, 16]), m=st.integers(1, 48))
def test_every_pass_once_and_the_programs_run(pp, m) -> None:
    for s in range(pp):
        program = stage_program(V, pp=pp, stage=s, microbatches=m)
        assert sorted(program) == sorted((p, mb, c) for p in "FB" for mb in range(m)
                                         for c in (0, 1))
        assert peak_chunks_held(program) <= 3 * pp
    assert _runs(pp, m) >= 6 * m  # never shorter than the work itself


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (8, 64), (16, 30)])
def test_the_bubble_is_half_of_1f1b(pp, m) -> None:
    """Unit times: (p − 1)/(2m) of the ideal, as two interleaved chunks give (1F1B's is
    (p − 1)/m)."""
    assert _runs(pp, m) == pytest.approx(6 * m * (1 + (pp - 1) / (2 * m)))


@settings(max_examples=40, deadline=None)
@given(pp=st.integers(2, 12), extra=st.integers(0, 40),
       forward_s=st.floats(0.1, 10.0), weights=st.floats(0.05, 3.0))
def test_deepseeks_order_has_dualpipes_published_bubble(pp, extra, forward_s,
                                                        weights) -> None:
    """DualPipe's table (deepseek-ai/DualPipe README; DeepSeek-V3 report, Table 2) gives
    DualPipeV on PP/2 ranks a bubble of (PP/2 − 1)(F&B + B − 3W) a rank and PP + 1 chunks'
    activations, PP being its chunks (2p here), F, B, W a chunk's forward, whole backward
    and weight half, F&B a forward and a backward overlapped.  DeepSeek's order, run with
    the input half as long as a forward (the zero-bubble papers' setting) and a pair as
    long as its two passes, has exactly that bubble on every stage, for any m ≥ 2p, while
    W ≤ F; a longer W no longer fits the gaps, and the bubble stays the one at W = F."""
    m = 2 * pp + extra
    weight_s = weights * forward_s
    backward_s = forward_s + weight_s  # the input half I as long as a forward
    pair_s = forward_s + backward_s
    programs = [schedule.deepseek_v_program(pp, m, stage) for stage in range(pp)]
    span, busy = _span([steps for steps, _ in programs], [starts for _, starts in programs],
                       {"F": forward_s, "B": backward_s, "I": forward_s, "W": weight_s},
                       pair_s=pair_s)
    published = (pp - 1) * (pair_s + backward_s - 3 * weight_s)
    # Past W = F each weight half overruns its gap by W − F: (p − 1)·2F in all.
    bubble = published + (pp - 1) * max(weight_s - forward_s, 0.0)
    assert [span - b for b in busy] == pytest.approx([bubble] * pp, rel=1e-9, abs=1e-9)
    assert [peak_chunks_held(steps) for steps, _ in programs] == [2 * pp + 1] * pp


def test_an_iteration_has_that_bubble(uniform) -> None:
    """8 layers on 4 stages, 1 ms forward and 2 ms backward a layer, ideal links."""
    pp, m = 4, 8
    result = uniform.run(uniform.fast_switch(pp),
                         ParallelConfig(pp=pp, schedule=V, interleave=2),
                         TrainingConfig(micro_batch=1, global_batch=m))
    ideal = m * uniform.model.layers // pp * (uniform.t_fwd_s + uniform.t_bwd_s)
    assert result.iteration_time_s == pytest.approx(ideal * (1 + (pp - 1) / (2 * m)),
                                                    rel=1e-6)


def test_memory_counts_the_programs_peak() -> None:
    peak = max(peak_chunks_held(stage_program(V, pp=4, stage=0, microbatches=32)), 1)
    assert microbatches_in_flight(V, pp=4, stage=0, num_microbatches=32,
                                  interleave=2) == peak / 2


@pytest.mark.parametrize(("parallel", "message"), [
    (ParallelConfig(pp=2, dp=2, schedule=V), r"parallelism\.interleave: the dualpipev "
                                             r"schedule runs two chunks a stage"),
    (ParallelConfig(pp=1, dp=4, schedule=V, interleave=2),
     r"parallelism\.pp: the dualpipev schedule needs pp >= 2"),
])
def test_bad_v_strategies_are_clear_errors(parallel, message) -> None:
    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 256, "heads": 4,
                                "seq_len": 128, "vocab": 1000})
    with pytest.raises(ConfigError, match=message):
        check_strategy(model, parallel, TrainingConfig(global_batch=8), num_gpus=4)
