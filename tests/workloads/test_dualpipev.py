"""The two-chunk schedules: the V (``schedule: dualpipev``) and DeepSeek's bidirectional
DualPipe (``schedule: dualpipe``) — their placement, their programs (every pass once, in
an order that runs), their bubbles in closed form, and where the embedding and the output
layer sit."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.memory import memory_per_gpu
from distsim_gpu.workloads.cost.parameters import Chunking, params_on_gpu, stage_layers
from distsim_gpu.workloads.cost.traffic import optimizer_params
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Fused
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy import schedule
from distsim_gpu.workloads.strategy.fb_pairs import Pair, paired_programs
from distsim_gpu.workloads.strategy.parallel import (
    ParallelConfig,
    TrainingConfig,
    check_strategy,
    chunk_layers,
)
from distsim_gpu.workloads.strategy.schedule import (
    microbatches_in_flight,
    mirror_pair,
    peak_bytes_held,
    peak_chunks_held,
    route_ends,
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


def _span(programs, pair_starts, seconds, pair_s=0.0, schedule=V) -> tuple[float, list[float]]:
    """Run the stages' ``programs`` with each kind of pass taking ``seconds[kind]`` and a
    pair (two passes from a start in ``pair_starts``) ``pair_s``, each unit as soon as
    its stage is free and its inputs are there; the span and each stage's busy time.  A
    backward, or its input half ``I``, needs the gradient of the chunk after; a ``W`` its
    own ``I``.  Asserts that the programs run: no unit waits for ever."""
    pp = len(programs)
    ends = route_ends(schedule, pp, 2)
    units = [_units(program, starts) for program, starts in zip(programs, pair_starts)]
    done: dict[tuple[str, int, int], float] = {}
    clock, busy, position = [0.0] * pp, [0.0] * pp, [0] * pp
    while any(position[s] < len(units[s]) for s in range(pp)):
        moved = False
        for s in range(pp):
            while position[s] < len(units[s]):
                unit = units[s][position[s]]
                keys = [_key(s, step, pp, schedule) for step in unit]
                needs = [_needs(s, step, pp, schedule, ends) for step in unit]
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


def _key(stage, step, pp, schedule) -> tuple[str, int, int]:
    """What a finished pass makes available: a forward's output, a (split) backward's
    input gradient "G", or its weight gradients."""
    pass_, mb, chunk = step
    return ({"F": "F", "B": "G", "I": "G"}.get(pass_, "W"), mb,
            virtual_stage(stage, chunk, pp, schedule))


def _needs(stage, step, pp, schedule, ends) -> tuple[str, int, int] | None:
    """The input a pass waits for (``ends``: where micro-batches enter and leave)."""
    pass_, mb, chunk = step
    vs = virtual_stage(stage, chunk, pp, schedule)
    if pass_ == "F":
        return None if vs in ends[0] else ("F", mb, vs - 1)
    if pass_ == "W":
        return ("G", mb, vs)
    return ("F", mb, vs) if vs in ends[1] else ("G", mb, vs + 1)


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


# ------------------------------------------------------------------ DualPipe: two directions
DUAL = "dualpipe"


def test_dualpipe_places_every_stage_twice() -> None:
    """pp 4: rank s holds model stages s (the first direction's virtual stage s) and
    3 − s (the second's, virtual stage 7 − s); both ends hold the embedding and the
    output layer, and a tied one once."""
    assert [virtual_stage(s, 1, 4, DUAL) for s in range(4)] == [7, 6, 5, 4]
    assert route_ends(DUAL, 4, 2) == ((0, 4), (3, 7))
    assert [mirror_pair(s, 4) for s in range(4)] == [(0, 3), (1, 2), (1, 2), (0, 3)]
    assert chunk_layers(8, 4, 2, "uniform", DUAL) == [(0, 2), (2, 4), (4, 6), (6, 8)] * 2
    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 256, "heads": 4,
                                "seq_len": 128, "vocab": 1000, "position": "rotary"})
    assert [stage_layers(model, pp=4, stage=s, interleave=2, schedule=DUAL)
            for s in range(4)] == [(0, 1, 6, 7), (2, 3, 4, 5), (4, 5, 2, 3), (6, 7, 0, 1)]
    chunking = Chunking(interleave=2, schedule=DUAL)
    end, middle = (params_on_gpu(model, pp=4, stage=s, chunking=chunking) for s in (0, 1))
    one_way = [params_on_gpu(model, pp=4, stage=s).total for s in range(4)]
    # Both ends' stages, with one copy of the tied word embedding (1F1B's last stage
    # holds a second).
    assert end.total == pytest.approx(one_way[0] + one_way[3] - model.vocab * model.hidden)
    assert middle.total == pytest.approx(one_way[1] + one_way[2])
    assert end.total - middle.total == pytest.approx(
        model.vocab * model.hidden + model.final_norm_params())


@settings(max_examples=40, deadline=None)
@given(half=st.integers(1, 8), extra=st.integers(0, 12))
def test_dualpipes_order_is_dualpipev_on_half_the_ranks(half, extra) -> None:
    """DualPipe's eight steps on pp ranks are DualPipeV's on pp/2 with m/2 micro-batches a
    direction: rank s runs the V's stage min(s, pp − 1 − s), the second half with the
    chunks swapped — mirror ranks run mirror images; each direction's passes once and in
    order, a weight half after its input half; a rank starts with its own direction's
    forwards and holds pp + 1 chunks' activations (DualPipe's table)."""
    pp, m = 2 * half, 4 * half + 2 * extra
    programs = [schedule.deepseek_dualpipe_program(pp, m, s) for s in range(pp)]
    for s, (steps, starts) in enumerate(programs):
        v_steps, v_starts = schedule.deepseek_v_program(half, m // 2, min(s, pp - 1 - s))
        assert starts == v_starts
        assert steps == [(p, mb, c if s < half else 1 - c) for p, mb, c in v_steps]
        mirror = programs[pp - 1 - s][0]
        assert steps == [(p, mb, 1 - c) for p, mb, c in mirror]
        for chunk in (0, 1):
            assert [mb for p, mb, c in steps if (p, c) == ("F", chunk)] == list(range(m // 2))
            assert [mb for p, mb, c in steps if p in "BI" and c == chunk] == list(range(m // 2))
        assert [(mb, c) for p, mb, c in steps if p == "W"] == [
            (mb, c) for p, mb, c in steps if p == "I"]
        first = 2 * (half - min(s, pp - 1 - s) - 1)
        assert steps[:first] == [("F", i, int(s >= half)) for i in range(first)]
        assert peak_chunks_held(steps) == pp + 1
        assert stage_program(DUAL, pp=pp, stage=s, microbatches=m) == steps


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 14), (8, 16), (16, 40)])
def test_dualpipes_pairs_never_deadlock(pp, m) -> None:
    """Under fb_overlap DeepSeek's pairs, in program order, with both directions'
    dependencies (``paired_programs`` checks the graph and raises on a cycle)."""
    programs = paired_programs(DUAL, pp=pp, microbatches=m, interleave=2)
    for s, units in enumerate(programs):
        steps, starts = schedule.deepseek_dualpipe_program(pp, m, s)
        assert sum(isinstance(u, Pair) for u in units) == len(starts) > 0
        assert [p for u in units for p in ((u.forward, u.backward) if isinstance(u, Pair)
                                           else (u,))] == steps


@settings(max_examples=40, deadline=None)
@given(half=st.integers(1, 8), extra=st.integers(0, 20),
       forward_s=st.floats(0.1, 10.0), weights=st.floats(0.05, 1.0))
def test_dualpipes_published_bubble(half, extra, forward_s, weights) -> None:
    """DualPipe's table: (PP/2 − 1)(F&B + B − 3W) on every rank, PP its ranks and F, B, W
    a stage's passes (the input half as long as a forward, W ≤ F), with its two
    directions' dependencies: a forward of the second direction waits for the rank
    after, its backward for the rank before."""
    pp, m = 2 * half, 4 * half + 2 * extra
    weight_s = weights * forward_s
    backward_s = forward_s + weight_s
    pair_s = forward_s + backward_s
    programs = [schedule.deepseek_dualpipe_program(pp, m, s) for s in range(pp)]
    span, busy = _span([p for p, _ in programs], [s for _, s in programs],
                       {"F": forward_s, "B": backward_s, "I": forward_s, "W": weight_s},
                       pair_s=pair_s, schedule=DUAL)
    bubble = (half - 1) * (pair_s + backward_s - 3 * weight_s)
    assert [span - b for b in busy] == pytest.approx([bubble] * pp, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 12)])
def test_a_dualpipe_iteration_runs_deepseeks_order(uniform, pp, m) -> None:
    """8 layers, 1 ms forward and 2 ms backward a layer (a split backward's halves 1 ms
    each), ideal links: every rank computes m/2 micro-batches on each of its two stages —
    1F1B's work — and the iteration is DeepSeek's order run on those times, the forwards
    and backwards apart (no pairs without fb_overlap)."""
    layers = uniform.model.layers // pp
    result = uniform.run(uniform.fast_switch(pp),
                         ParallelConfig(pp=pp, schedule=DUAL, interleave=2),
                         TrainingConfig(micro_batch=1, global_batch=m))
    work = m * layers * (uniform.t_fwd_s + uniform.t_bwd_s)
    assert [g.compute_s for g in result.per_gpu] == pytest.approx([work] * pp, rel=1e-9)
    chunk_f = layers * uniform.t_fwd_s
    span, _busy = _span([schedule.deepseek_dualpipe_program(pp, m, s)[0] for s in range(pp)],
                        [[] for _ in range(pp)],
                        {"F": chunk_f, "B": 2 * chunk_f, "I": chunk_f, "W": chunk_f},
                        schedule=DUAL)
    assert result.iteration_time_s == pytest.approx(span, rel=1e-6)
    bubbles = [g.bubble_s for g in result.per_gpu]
    assert bubbles == pytest.approx(bubbles[::-1], abs=1e-9)  # mirror ranks alike


def test_dualpipes_two_copies_sum_their_gradients(uniform) -> None:
    """Each rank all-reduces with its mirror what its optimizer updates (its ZeRO shard of
    both stages' gradients) before the step; no tied-embedding all-reduce besides (the
    ends hold both)."""
    parallel = ParallelConfig(pp=4, dp=2, zero=1, schedule=DUAL, interleave=2)
    builder = StreamBuilder(uniform.model, parallel, TrainingConfig(global_batch=16),
                            RooflineCosts(uniform.gpu), microbatches=8)
    for stage in range(4):
        calls = [op for op in builder._iteration_end(stage) if isinstance(op, Collective)]
        (mirror,) = [op for op in calls if op.group == "mirror"]
        assert mirror.op == "all_reduce"
        assert mirror.size_bytes == pytest.approx(
            optimizer_params(uniform.model, parallel, stage) * 4)  # fp32 gradients
        assert optimizer_params(uniform.model, parallel, stage) == pytest.approx(
            params_on_gpu(uniform.model, pp=4, stage=stage,
                          chunking=Chunking.of(parallel)).total / 2)
        assert not [op for op in calls if op.group == "embedding"]


@pytest.mark.parametrize(("parallel", "batch", "message"), [
    (ParallelConfig(pp=3, dp=1, schedule=DUAL, interleave=2), 12,
     r"parallelism\.pp: the dualpipe schedule needs an even pp"),
    (ParallelConfig(pp=2, dp=2, schedule=DUAL), 16,
     r"parallelism\.interleave: the dualpipe schedule runs two chunks a stage"),
    (ParallelConfig(pp=4, dp=1, schedule=DUAL, interleave=2), 6,
     r"training\.global_batch: DualPipe needs an even number of micro-batches .* at least "
     r"2·pp = 8 .* got 6"),
    (ParallelConfig(pp=2, dp=2, schedule=DUAL, interleave=2), 10,
     r"training\.global_batch: DualPipe needs an even number .* got 5"),
    # The layers split into pp stages (each placed twice), not pp·interleave chunks.
    (ParallelConfig(pp=8, dp=1, schedule=DUAL, interleave=2), 16,
     r"parallelism\.pp: 12 layers do not split into pp = 8 equal chunks"),
])
def test_bad_dualpipe_strategies_are_clear_errors(parallel, batch, message) -> None:
    model = model_from_mapping({"name": "m", "layers": 12, "hidden": 256, "heads": 4,
                                "seq_len": 128, "vocab": 1000})
    gpus = parallel.pp * parallel.dp
    with pytest.raises(ConfigError, match=message):
        check_strategy(model, parallel, TrainingConfig(global_batch=batch), num_gpus=gpus)


@settings(max_examples=30, deadline=None)
@given(schedule_name=st.sampled_from([V, DUAL]), half=st.integers(1, 6),
       extra=st.integers(0, 8), sizes=st.tuples(st.floats(0.0, 10.0), st.floats(0.0, 10.0)))
def test_peak_bytes_weigh_each_chunk_by_what_it_holds(schedule_name, half, extra,
                                                      sizes) -> None:
    """Equal chunks: the peak is :func:`peak_chunks_held` times a chunk; any two sizes:
    between the lighter and the heavier chunk times that count, and never above the
    most each chunk holds on its own."""
    pp, m = 2 * half, 4 * half + 2 * extra
    for stage in range(pp):
        program = stage_program(schedule_name, pp=pp, stage=stage, microbatches=m)
        chunks = peak_chunks_held(program)
        assert peak_bytes_held(program, (1.0, 1.0)) == chunks
        got = peak_bytes_held(program, sizes)
        assert min(sizes) * chunks - 1e-9 <= got <= max(sizes) * chunks + 1e-9
        alone = [peak_bytes_held(program, (1.0, 0.0)), peak_bytes_held(program, (0.0, 1.0))]
        assert got <= alone[0] * sizes[0] + alone[1] * sizes[1] + 1e-9


def test_dualpipes_ends_hold_the_output_head_for_few_micro_batches() -> None:
    """DualPipe's rank 0 runs its first direction's warm-up (the embedding's chunk) before
    the second direction reaches it: of its pp + 1 chunks held at the peak, few are the
    output head's — one — so a larger vocabulary adds its fp32 logits once, not the
    (pp + 1)/2 times an even split of the chunks held would count."""
    model = model_from_mapping({"name": "m", "layers": 8, "hidden": 1024, "heads": 16,
                                "seq_len": 512, "vocab": 32000})
    parallel = ParallelConfig(pp=4, dp=1, interleave=2, schedule=DUAL)
    training = TrainingConfig(micro_batch=1, global_batch=16)
    program = stage_program(DUAL, pp=4, stage=0, microbatches=16)
    head_held = peak_bytes_held(program, (0.0, 1.0))

    def activations(vocab: int) -> float:
        return memory_per_gpu(replace(model, vocab=vocab), parallel, training, stage=0,
                              num_microbatches=16).activations_bytes

    logits = 4 * 512 * 32000  # fp32 logits of 32,000 more words, one micro-batch
    assert head_held == 1  # the second direction's last stage: a forward, then its backward
    assert activations(64000) - activations(32000) == pytest.approx(logits * head_held)


@pytest.mark.parametrize("cp", [1, 2])
def test_a_split_backwards_halves_add_up_to_the_backward(cp) -> None:
    # The input half ("I") and the weight half ("W") of a layer's backward compute what
    # the whole one ("B") does, also where the attention runs around a context-parallel
    # ring (until 6 December "I" ran there the whole backward, weight gradients included,
    # and DualPipe with cp > 1 counted them twice).
    model = model_from_mapping({"name": "cp-split", "layers": 4, "hidden": 2048, "heads": 16,
                                "seq_len": 4096, "vocab": 32000})
    builder = StreamBuilder(model, ParallelConfig(pp=2, cp=cp, schedule=DUAL, interleave=2),
                            TrainingConfig(micro_batch=1, global_batch=4),
                            RooflineCosts(get_gpu("h100")), microbatches=4)

    def compute_s(pass_: str) -> float:
        ops = builder.pass_ops(0, 0, pass_, last=False, fold=True)
        return sum(op.compute_s if isinstance(op, Fused) else op.duration_s
                   for op in ops if isinstance(op, (Fused, Compute)))

    assert compute_s("I") + compute_s("W") == pytest.approx(compute_s("B"), rel=1e-12)
    assert 0 < compute_s("W") < compute_s("I")


@pytest.mark.parametrize("schedule", [V, DUAL])
def test_a_two_chunk_schedule_takes_its_two_chunks_unless_told_otherwise(schedule) -> None:
    """A scenario that names dualpipe or dualpipev and no interleave runs its two chunks a
    stage; one that gives another interleave is refused as before; the interleaved
    schedule's chunk count stays the user's to give."""
    from distsim_gpu.workloads.strategy.parallel import parallel_from_mapping

    assert parallel_from_mapping({"pp": 2, "schedule": schedule}).interleave == 2
    given = parallel_from_mapping({"pp": 2, "dp": 2, "schedule": schedule, "interleave": 1})
    assert given.interleave == 1
    model = model_from_mapping({"name": "m", "layers": 12, "hidden": 256, "heads": 4,
                                "seq_len": 128, "vocab": 1000})
    with pytest.raises(ConfigError, match=r"runs two chunks a stage, got interleave 1"):
        check_strategy(model, given, TrainingConfig(global_batch=16), num_gpus=4)
    assert parallel_from_mapping({"pp": 2, "schedule": "interleaved"}).interleave == 1
