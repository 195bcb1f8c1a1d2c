"""The V-shaped two-chunk schedule (``schedule: dualpipev``): its placement, its programs
(every pass once, in an order that runs), its bubble in closed form, and where the
embedding and the output layer sit."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.memory import microbatches_in_flight
from distsim_gpu.workloads.cost.parameters import Chunking, params_on_gpu, stage_layers
from distsim_gpu.workloads.specs.models import model_from_mapping
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
    """The programs run on unit times (forward 1, backward 2 a chunk): their length, and
    a check that each pass waits only for what it needs."""
    progs = [stage_program(V, pp=pp, stage=s, microbatches=m) for s in range(pp)]
    done: dict[tuple[str, int, int], float] = {}
    clock, position = [0.0] * pp, [0] * pp
    while any(position[s] < len(progs[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            if position[s] == len(progs[s]):
                continue
            pass_, mb, chunk = progs[s][position[s]]
            vs = virtual_stage(s, chunk, pp, V)
            need = (None if vs == 0 else ("F", mb, vs - 1)) if pass_ == "F" else (
                ("F", mb, vs) if vs == 2 * pp - 1 else ("B", mb, vs + 1))
            if need is not None and need not in done:
                continue
            start = max(clock[s], done[need] if need else 0.0)
            clock[s] = done[(pass_, mb, vs)] = start + (1 if pass_ == "F" else 2)
            position[s] += 1
            moved = True
        assert moved, "the programs deadlock"
    return max(clock)


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
