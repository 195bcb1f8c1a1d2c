"""Forward-backward pairs (``parallelism.fb_overlap``): which passes pair, that pairs never
deadlock, the block shares a pair interleaves, and what the overlap hides."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from distsim_gpu.scenarios.report import format_summary
from distsim_gpu.scenarios.scenario import run_scenario, scenario_from_mapping
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.workloads.cost.bounds import IterationBounds
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.compute.blocks import (
    ATTENTION_OPERATORS,
    block_shares,
    is_weight_gradient,
)
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Recv, Send, Wait
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.strategy import fb_pairs, schedule
from distsim_gpu.workloads.strategy.fb_pairs import Pair, pair_program, paired_programs
from distsim_gpu.workloads.strategy.schedule import (
    microbatches_in_flight,
    peak_chunks_held,
    stage_program,
)
from hypothesis import given, settings
from hypothesis import strategies as st

MOE = {"name": "tiny-moe", "layers": 4, "hidden": 256, "heads": 8, "seq_len": 128,
       "vocab": 1024, "experts": 4, "top_k": 2}


def _scenario(tiny, *, model=None, training=None, communication=None, **parallel):
    return scenario_from_mapping(tiny(
        model=model or MOE,
        parallelism={"tp": 1, "pp": 1, "dp": 8, "ep": 4, **parallel},
        training={"micro_batch": 1, "global_batch": 32, **(training or {})},
        communication=communication or {}))


def _passes(units):
    return [step for unit in units
            for step in ((unit.forward, unit.backward) if isinstance(unit, Pair) else (unit,))]


def test_one_stage_pairs_each_forward_with_the_backward_before_it():
    # pp 1 with one warm-up forward more: F0, then (F k+1, B k), then the last backward.
    (units,) = paired_programs("1f1b", pp=1, microbatches=4)
    assert list(units) == [("F", 0, 0), Pair(("F", 1, 0), ("B", 0, 0)),
                           Pair(("F", 2, 0), ("B", 1, 0)), Pair(("F", 3, 0), ("B", 2, 0)),
                           ("B", 3, 0)]


def test_1f1b_pairs_every_steady_state_forward():
    # Stage s warms up pp - s forwards (one more than 1F1B), then pairs F(w + k) with B(k).
    pp, m = 4, 12
    for stage, units in enumerate(paired_programs("1f1b", pp=pp, microbatches=m)):
        warmup = pp - stage
        pairs = [u for u in units if isinstance(u, Pair)]
        assert [(p.forward[1], p.backward[1]) for p in pairs] == [
            (warmup + k, k) for k in range(m - warmup)]


def test_a_backward_of_the_same_micro_batch_never_pairs():
    program = [("F", 0, 0), ("B", 0, 0), ("F", 1, 0), ("B", 0, 1)]
    assert pair_program(program) == [("F", 0, 0), ("B", 0, 0),
                                     Pair(("F", 1, 0), ("B", 0, 1))]


@settings(max_examples=60, deadline=None)
@given(schedule=st.sampled_from([("1f1b", 1), ("interleaved", 2), ("interleaved", 3),
                                 ("dualpipev", 2)]),
       pp=st.integers(2, 8), groups=st.integers(1, 6))
def test_pairs_hold_every_pass_once_and_never_deadlock(schedule, pp, groups):
    name, interleave = schedule
    m = pp * groups  # the interleaved schedule wants whole groups of pp micro-batches
    programs = paired_programs(name, pp=pp, microbatches=m, interleave=interleave)
    for stage, units in enumerate(programs):
        plain = stage_program(name, pp=pp, stage=stage, microbatches=m, interleave=interleave,
                              fb_overlap=True)
        assert _passes(units) == plain  # the same order, pairs only grouped
        assert all(u.forward[1] != u.backward[1] for u in units if isinstance(u, Pair))
    assert fb_pairs._acyclic(programs, name, pp=pp, interleave=interleave)


def test_a_deadlocking_pairing_falls_back_to_ready_backwards():
    # 1F1B on 8 stages with 8 micro-batches: pairing every candidate would deadlock; what
    # is paired then had its backward's input when the forward began, and is acyclic.
    steps = [stage_program("1f1b", pp=8, stage=s, microbatches=8, fb_overlap=True)
             for s in range(8)]
    greedy = tuple(tuple(pair_program(p)) for p in steps)
    assert not fb_pairs._acyclic(greedy, "1f1b", pp=8, interleave=1)
    programs = paired_programs("1f1b", pp=8, microbatches=8)
    assert fb_pairs._acyclic(programs, "1f1b", pp=8, interleave=1)
    assert 0 < sum(isinstance(u, Pair) for p in programs for u in p) < sum(
        isinstance(u, Pair) for p in greedy for u in p)


@pytest.mark.parametrize(("pp", "m"), [(2, 3), (4, 6), (16, 30)])
def test_with_few_micro_batches_the_v_pairs_where_both_passes_are_ready(pp, m):
    # Below DualPipeV's 2·pp micro-batches the V's list schedule pairs by itself where an
    # idle stage has a forward and a backward both ready (unpaired it pairs none).
    _length, _programs, none = schedule.v_list_schedule(pp, m)
    _length, _programs, starts = schedule.v_list_schedule(pp, m, paired=True)
    assert not any(none) and any(starts)
    assert schedule.v_paired_schedule(pp, m)[1] == starts
    units = paired_programs("dualpipev", pp=pp, microbatches=m, interleave=2)
    assert [[i for i, u in enumerate(_passes_index(p)) if u] for p in units] == [
        list(s) for s in starts]


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 30), (16, 32), (16, 64)])
def test_deepseeks_dualpipev_order(pp, m):
    # Every forward and backward once, each kind in micro-batch order (a backward whole,
    # "B", or split, "I" then later its "W", the weight passes in the order of the input
    # ones); the main part's 2(m - 2p + s + 1) pairs (one fewer on the last stage, which
    # runs its first F0 and B1 apart) and step 5's p - s - 1 more; no deadlock.
    units = paired_programs("dualpipev", pp=pp, microbatches=m, interleave=2)
    for stage, stage_units in enumerate(units):
        steps, starts = schedule.deepseek_v_program(pp, m, stage)
        rest, half = pp - stage - 1, (stage + 1) // 2
        split_b1 = rest + (stage + 1 - half if stage % 2 else stage - half)
        split_b0 = rest + stage + 1 - half
        assert Counter((p, c) for p, _mb, c in steps) == {
            ("F", 0): m, ("F", 1): m, ("B", 0): m - split_b0, ("B", 1): m - split_b1,
            ("I", 0): split_b0, ("I", 1): split_b1, ("W", 0): split_b0, ("W", 1): split_b1}
        for chunk in (0, 1):
            assert [mb for p, mb, c in steps if (p, c) == ("F", chunk)] == list(range(m))
            assert [mb for p, mb, c in steps if p in "BI" and c == chunk] == list(range(m))
        inputs = [(mb, c) for p, mb, c in steps if p == "I"]
        assert [(mb, c) for p, mb, c in steps if p == "W"] == inputs
        for index, (p, mb, c) in enumerate(steps):  # a W after its I, never before
            if p == "W":
                assert steps.index(("I", mb, c)) < index
        assert len(starts) == 2 * (m - 2 * pp + stage + 1) + rest - (stage == pp - 1)
        assert _passes(stage_units) == steps
        assert sum(isinstance(u, Pair) for u in stage_units) == len(starts)
        assert steps[: 2 * (pp - stage - 1)] == [("F", i, 0) for i in range(
            2 * (pp - stage - 1))]
    with pytest.raises(ValueError, match="needs m >= 2·pp"):
        schedule.deepseek_v_program(pp, 2 * pp - 1, 0)


def _passes_index(units):
    """For each pass of ``units`` in order, whether a pair starts there."""
    out = []
    for unit in units:
        out += [True, False] if isinstance(unit, Pair) else [False]
    return out


@pytest.mark.parametrize(("schedule", "interleave"), [("1f1b", 1), ("interleaved", 2),
                                                      ("dualpipev", 2)])
def test_the_extra_warmup_is_a_micro_batch_of_memory(schedule, interleave):
    # The memory model's closed form against the forwards the paired program holds.
    for stage in range(4):
        held = peak_chunks_held(stage_program(schedule, pp=4, stage=stage, microbatches=8,
                                              interleave=interleave, fb_overlap=True))
        assert microbatches_in_flight(schedule, pp=4, stage=stage, num_microbatches=8,
                                      interleave=interleave, fb_overlap=True) == pytest.approx(
            held / interleave)
    assert microbatches_in_flight("1f1b", pp=4, stage=0, num_microbatches=8,
                                  fb_overlap=True) == 5


@pytest.mark.parametrize("pass_", ["fwd", "bwd"])
def test_block_shares_are_the_operators_times(pass_):
    model = model_from_mapping(MOE)
    costs = RooflineCosts(get_gpu("h100-sxm"), precision="bf16")
    shard = LayerShard(1, 128, ep=4, layer_index=1)
    shares = block_shares(costs, pass_, model, shard)
    kernels = costs.layer_work(pass_, model, shard).kernels
    total = sum(costs.kernel_time_s(k) for k in kernels)
    # A MoE layer's norm and router run before its dispatch: the attention block's.
    attention = [k for k in kernels
                 if k.base_name in (*ATTENTION_OPERATORS, "post_attn_norm", "router")]
    assert {k.base_name for k in attention} >= {"post_attn_norm", "router"}
    weights = sum(costs.kernel_time_s(k) for k in attention if is_weight_gradient(k))
    assert shares.attention_weights == pytest.approx(weights / total)
    assert shares.attention + shares.attention_weights == pytest.approx(
        sum(costs.kernel_time_s(k) for k in attention) / total)
    assert (shares.attention + shares.attention_weights + shares.mlp
            + shares.mlp_weights) == pytest.approx(1.0)
    if pass_ == "fwd":
        assert shares.attention_weights == shares.mlp_weights == 0
    mlp = [k for k in kernels if k not in attention]
    assert shares.mlp_weights == pytest.approx(
        sum(costs.kernel_time_s(k) for k in mlp if is_weight_gradient(k)) / total)
    if pass_ == "bwd":  # every GEMM's weight gradient has its input gradient's FLOP
        assert 0 < shares.mlp_weights < shares.mlp


def test_a_cost_model_without_roofline_splits_evenly():
    shares = block_shares(object(), "bwd", model_from_mapping(MOE), LayerShard(1, 128))
    assert (shares.attention, shares.attention_weights, shares.mlp,
            shares.mlp_weights) == (0.25, 0.25, 0.25, 0.25)


@pytest.mark.parametrize("routing", [None, {"routing": {"zipf": 1.2}}])
def test_pairs_hide_all_to_alls_and_keep_the_compute(tiny, routing):
    """The same compute, less exposed all-to-all — with the SMs the overlapped NCCL
    all-to-alls hold left out (``nccl_sms: 0``); with them, the pairs' compute grows, by
    at most the SMs' ratio (gathers, reductions and all-to-alls all in flight)."""
    model = dict(MOE, moe=routing) if routing else MOE
    free = {"nccl_sms": 0}
    plain_scenario = _scenario(tiny, model=model, communication=free)
    paired_scenario = _scenario(tiny, model=model, communication=free, fb_overlap=True)
    plain, paired = run_scenario(plain_scenario), run_scenario(paired_scenario)
    assert sum(g.compute_s for g in paired.per_gpu) == pytest.approx(
        sum(g.compute_s for g in plain.per_gpu))
    held = run_scenario(_scenario(tiny, model=model, fb_overlap=True))
    sms = paired_scenario.costs.compute_sms
    assert sum(g.compute_s for g in paired.per_gpu) < sum(g.compute_s for g in held.per_gpu) \
        <= sum(g.compute_s for g in paired.per_gpu) * sms / (sms - 3 * 16)
    assert paired.iteration_time_s < plain.iteration_time_s
    exposed = max(g.exposed_communication_s for g in plain.per_gpu)
    assert paired.iteration_time_s > plain.iteration_time_s - exposed
    assert "forward-backward pairs overlapped" in format_summary(paired)
    spec = paired_scenario
    ops = StreamBuilder(spec.model, spec.parallel, spec.training, spec.costs,
                        microbatches=spec.microbatches).stage_stream(0)
    ep = [op for op in ops if isinstance(op, Collective) and op.group == "ep"]
    # Bytes conserved: the same all-to-alls as the plain stream, none of them blocking in
    # a pair, and each waited for once.
    plain_ops = StreamBuilder(plain_scenario.model, plain_scenario.parallel,
                              plain_scenario.training, plain_scenario.costs,
                              microbatches=plain_scenario.microbatches).stage_stream(0)
    assert sum(op.size_bytes for op in ep) == pytest.approx(sum(
        op.size_bytes for op in plain_ops if isinstance(op, Collective) and op.group == "ep"))
    waited = Counter(op.handle for op in ops if isinstance(op, Wait)
                     and (op.handle or "").startswith("ep:"))
    assert waited == Counter(op.handle for op in ep if not op.blocking)
    labels = [op.label for op in ops if isinstance(op, Compute)]
    assert any(label.endswith("bwd mlp weights") for label in labels)


def _clear_schedule_caches() -> None:
    for cached in (schedule.v_paired_schedule, schedule._v_programs,
                   fb_pairs.paired_programs):
        cached.cache_clear()


@pytest.fixture
def whole_backwards(monkeypatch):
    """DeepSeek's DualPipeV order with every split backward whole again (its ``I`` a
    ``B``, its ``W`` dropped): what the order would run without zero bubble."""
    split_order = schedule.deepseek_v_program

    def whole(pp, m, stage):
        steps, starts = split_order(pp, m, stage)
        kept = [i for i, step in enumerate(steps) if step[0] != "W"]
        return ([("B", mb, c) if p == "I" else (p, mb, c) for p, mb, c in
                 (steps[i] for i in kept)], [kept.index(i) for i in starts])

    monkeypatch.setattr(schedule, "deepseek_v_program", whole)
    _clear_schedule_caches()
    yield
    _clear_schedule_caches()


def _dualpipev(tiny):
    model = dict(MOE, layers=8)
    # 8 micro-batches: DeepSeek's order (m >= 2·pp); compute not slowed by the SMs its
    # overlapped all-to-alls hold, so that orders are compared by their schedule alone.
    return _scenario(tiny, model=model, pp=2, dp=4, schedule="dualpipev", interleave=2,
                     fb_overlap=True, communication={"nccl_sms": 0})


def test_deepseeks_weight_passes_run_later_without_sends(tiny):
    scenario = _dualpipev(tiny)
    ops = StreamBuilder(scenario.model, scenario.parallel, scenario.training, scenario.costs,
                        microbatches=scenario.microbatches).stage_stream(0)
    steps, _starts = schedule.deepseek_v_program(2, 8, 0)
    weights = [op for op in ops if isinstance(op, Compute)
               and re.fullmatch(r"L\d+ bwd weights", op.label)]
    # Each W runs its chunk's layers' weight gradients, 2 layers a chunk.
    assert len(weights) == 2 * sum(p == "W" for p, _mb, _c in steps) > 0
    # Stage 0 holds virtual stages 0 and 3 of the V: chunk 0's forwards send on, chunk
    # 1's backwards (whole or their input halves) send back, 8 micro-batches each; the
    # receives mirror them.  A weight half neither sends nor receives.
    assert sum(isinstance(op, Send) for op in ops) == 2 * 8
    assert sum(isinstance(op, Recv) for op in ops) == 2 * 8
    costs, model = scenario.costs, scenario.model
    shard = LayerShard(1, 128, ep=4, layer_index=0)
    share = block_shares(costs, "bwd", model, shard)
    layer_bwd = costs.layer_time_s("bwd", model, shard)
    assert weights[0].duration_s == pytest.approx(
        layer_bwd * (share.attention_weights + share.mlp_weights))


def test_deepseeks_weight_passes_shorten_the_v_and_keep_the_compute(tiny, request):
    split = run_scenario(_dualpipev(tiny))
    request.getfixturevalue("whole_backwards")
    whole = run_scenario(_dualpipev(tiny))
    assert sum(g.compute_s for g in split.per_gpu) == pytest.approx(
        sum(g.compute_s for g in whole.per_gpu))
    assert split.iteration_time_s < whole.iteration_time_s
    assert max(g.bubble_s for g in split.per_gpu) < max(g.bubble_s for g in whole.per_gpu)


@pytest.mark.parametrize(("schedule", "interleave"), [("interleaved", 2), ("dualpipev", 2),
                                                      ("dualpipe", 2)])
def test_pairs_in_a_pipeline_stay_above_the_lower_bound(tiny, schedule, interleave):
    scenario = _scenario(tiny, tp=1, pp=2, dp=4, ep=4, schedule=schedule,
                         interleave=interleave, fb_overlap=True)
    report = run_scenario(scenario)
    bounds = IterationBounds(scenario.topology, scenario.model, scenario.costs,
                             comm=scenario.comm)
    lower, _estimate = bounds.bound(scenario.parallel, scenario.training,
                                    scenario.microbatches)
    assert 0 < lower <= report.iteration_time_s
    assert run_scenario(scenario).iteration_time_s == report.iteration_time_s  # same seed


@pytest.mark.parametrize(("changes", "message"), [
    ({"parallelism": {"ep": 1}}, "needs a MoE model and ep > 1"),
    ({"parallelism": {"pp": 2, "dp": 4, "schedule": "gpipe"}}, "gpipe schedule runs them"),
    # Megatron-Core's assertion: plain 1F1B pairs only without a pipeline.
    ({"parallelism": {"pp": 2, "dp": 4}}, "combined 1F1B needs virtual pipeline stages"),
    ({"parallelism": {"moe_overlap": True}}, "with moe_overlap is not modelled"),
    ({"parallelism": {"cp": 2, "dp": 4}}, "with cp > 1 is not modelled"),
    ({"training": {"recompute": "full"}}, "recompute full is not modelled"),
])
def test_unmodelled_combinations_are_refused(tiny, changes, message):
    with pytest.raises(ConfigError, match=message) as caught:
        _scenario(tiny, training=changes.get("training"), fb_overlap=True,
                  **changes.get("parallelism", {}))
    assert caught.value.key == "parallelism.fb_overlap"


def test_too_few_micro_batches_for_deepseeks_order_is_said(tiny):
    def notes(global_batch):
        scenario = _scenario(tiny, model=dict(MOE, layers=8), pp=2, dp=4,
                             schedule="dualpipev", interleave=2, fb_overlap=True,
                             training={"global_batch": global_batch})
        return [n for n in run_scenario(scenario).notes if "DualPipeV order" in n.message]

    (note,) = notes(12)  # 3 micro-batches a pipeline, fewer than 2·pp = 4
    assert note.kind == "defaulted" and note.key == "training.global_batch"
    assert "3 micro-batches" in note.message and "zero-bubble" in note.message
    assert notes(16) == []  # 4: DeepSeek's order runs


def test_dualpipe_says_how_its_copies_sum_their_gradients(tiny):
    scenario = _scenario(tiny, pp=2, dp=4, schedule="dualpipe", interleave=2,
                         fb_overlap=True)
    (note,) = [n for n in run_scenario(scenario).notes if "mirror ranks" in n.message]
    assert note.kind == "defaulted" and note.key == "parallelism.schedule"
