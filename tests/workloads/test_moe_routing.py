"""MoE routing: Zipf/histogram shares, capacity drops, placement and the slowest EP rank,
against closed forms."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.scenarios.report import format_summary
from distsim_gpu.scenarios.scenario import load_scenario, run_scenario, scenario_from_mapping
from distsim_gpu.scenarios.study.search import Strategy, with_strategy
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster
from distsim_gpu.workloads.cost.bounds import IterationBounds
from distsim_gpu.workloads.cost.compute import RooflineCosts
from distsim_gpu.workloads.cost.layer_shard import LayerShard
from distsim_gpu.workloads.cost.memory import activation_bytes_per_layer
from distsim_gpu.workloads.cost.traffic import alltoall_bytes
from distsim_gpu.workloads.iteration.ops import Collective, Compute, Wait
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.iteration.streams import StreamBuilder
from distsim_gpu.workloads.specs.gpus import get_gpu
from distsim_gpu.workloads.specs.models import model_from_mapping
from distsim_gpu.workloads.specs.moe_routing import (
    MoeRouting,
    alltoall_weights,
    expert_shares,
    moe_from_mapping,
    moe_loads,
    place_experts,
)
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import given, settings
from hypothesis import strategies as st


def test_uniform_is_the_plain_layer():
    loads = moe_loads(MoeRouting(), tokens=4096, experts=8, top_k=2, ep=8)
    assert loads.expert_load == pytest.approx([4096 * 2] * 8)
    assert loads.dropped == 0
    assert loads.pace_factor == pytest.approx(1.0)
    assert loads.receive_weights() == pytest.approx([1.0] * 8)


def test_zipf_shares_by_hand():
    # s = 1 over 4 experts: 1, 1/2, 1/3, 1/4 over their sum 25/12.
    shares = expert_shares(MoeRouting("zipf", 1.0), 4)
    assert shares == pytest.approx([12 / 25, 6 / 25, 4 / 25, 3 / 25])


def test_top_k_caps_a_share_at_one_over_k():
    # Zipf 3 over 4 experts with top-2: expert 0 would take 0.85 of the assignments, but
    # a token picks two distinct experts: it keeps 1/2, the rest spread in proportion.
    shares = expert_shares(MoeRouting("zipf", 3.0), 4, top_k=2)
    raw = [1 / (i + 1) ** 3 for i in range(4)]
    rest = sum(raw[1:])
    assert shares[0] == pytest.approx(0.5)
    assert shares[1:] == pytest.approx([0.5 * r / rest for r in raw[1:]])


@settings(max_examples=60, deadline=None)
@given(s=st.floats(0, 4), experts=st.sampled_from([2, 4, 8, 16, 64]),
       top_k=st.integers(1, 4), tokens=st.integers(1, 10_000), cf=st.floats(0.5, 4))
def test_loads_sum_and_drops_closed_form(s, experts, top_k, tokens, cf):
    top_k = min(top_k, experts)
    ep = 2
    routing = MoeRouting("zipf", s, capacity_factor=cf)
    loads = moe_loads(routing, tokens=tokens, experts=experts, top_k=top_k, ep=ep)
    assert sum(loads.expert_load) == pytest.approx(tokens * top_k * ep)
    assert max(loads.expert_load) <= tokens * ep * (1 + 1e-9)  # one copy per token
    cap = cf * tokens * top_k * ep / experts
    assert loads.dropped == pytest.approx(sum(max(0.0, x - cap) for x in loads.expert_load),
                                          abs=1e-6)
    assert sum(loads.rank_load) == pytest.approx(sum(loads.expert_kept))
    assert loads.pace_factor == pytest.approx(loads.max_rank_load / (tokens * top_k))
    assert sum(loads.receive_weights()) == pytest.approx(ep * sum(loads.expert_kept)
                                                         / loads.assignments)


def test_contiguous_max_load_by_hand():
    # 4 experts, histogram 4:2:1:1, top-1, 2 ranks, 100 tokens each: 200 assignments;
    # contiguous puts experts 0,1 on rank 0 (150) and 2,3 on rank 1 (50).
    routing = MoeRouting("histogram", histogram=(4, 2, 1, 1), placement="contiguous")
    loads = moe_loads(routing, tokens=100, experts=4, top_k=1, ep=2)
    assert loads.rank_load == pytest.approx([150, 50])
    assert loads.pace_factor == pytest.approx(1.5)      # 150 over the uniform 100
    assert loads.imbalance == pytest.approx(1.5)
    assert loads.receive_weights() == pytest.approx([1.5, 0.5])


def test_balanced_placement_beats_contiguous():
    routing = MoeRouting("histogram", histogram=(4, 2, 1, 1), placement="balanced")
    loads = moe_loads(routing, tokens=100, experts=4, top_k=1, ep=2)
    # Greedy: 100 -> rank 0, 50 -> rank 1, 25 -> rank 1, 25 -> rank 0 (one slot each).
    assert loads.rank_of_expert == (0, 1, 1, 0)
    assert loads.rank_load == pytest.approx([125, 75])


def test_capacity_caps_the_hot_expert():
    routing = MoeRouting("histogram", histogram=(4, 2, 1, 1), capacity_factor=1.0)
    loads = moe_loads(routing, tokens=100, experts=4, top_k=1, ep=2)
    # Capacity 1.0 * 200/4 = 50: expert 0 drops 50 of its 100.
    assert loads.expert_kept == pytest.approx([50, 50, 25, 25])
    assert loads.dropped == pytest.approx(50)


def test_round_robin_and_explicit_placement():
    assert place_experts(MoeRouting(), [1.0] * 6, 3) == (0, 1, 2, 0, 1, 2)
    routing = moe_from_mapping({"placement": [1, 1, 0, 0]}, experts=4, ep=2)
    assert place_experts(routing, [1.0] * 4, 2) == (1, 1, 0, 0)


def test_parse_routing_forms():
    spec = moe_from_mapping({"routing": {"zipf": 1.2}, "capacity_factor": 1.25,
                             "placement": "balanced"}, experts=8, ep=4)
    assert (spec.kind, spec.zipf_s, spec.capacity_factor, spec.placement) == (
        "zipf", 1.2, 1.25, "balanced")
    assert moe_from_mapping(None, experts=8).is_default
    hist = moe_from_mapping({"routing": {"histogram": [1, 2]}}, experts=2)
    assert hist.histogram == (1.0, 2.0)


@pytest.mark.parametrize("raw, key, words", [
    ({"routing": {"histogram": [1, 2, 3]}}, "model.moe.routing.histogram", "one count per"),
    ({"routing": {"histogram": [0, 0, 0, 0]}}, "model.moe.routing.histogram", "above 0"),
    ({"routing": {"histogram": [1, -1, 1, 1]}}, "model.moe.routing.histogram[1]", ">= 0"),
    ({"routing": {"zipf": "x"}}, "model.moe.routing.zipf", "a number in [0, 100]"),
    ({"routing": "skewed"}, "model.moe.routing", "must be uniform"),
    ({"routing": {"pareto": 1}}, "model.moe.routing", "unknown routing"),
    ({"capacity_factor": 0}, "model.moe.capacity_factor", "> 0"),
    ({"placement": "random"}, "model.moe.placement", "unknown placement"),
    ({"placement": [0, 0, 0, 1]}, "model.moe.placement", "holds 3 experts"),
    ({"placement": [0, 5, 1, 1]}, "model.moe.placement[1]", "EP rank 0..1"),
    ({"route": "uniform"}, "model.moe.route", "unknown key"),
])
def test_clear_errors(raw, key, words):
    with pytest.raises(ConfigError) as info:
        moe_from_mapping(raw, experts=4, ep=2, source="s.yaml")
    assert info.value.key == key
    assert words in str(info.value)


def test_dense_model_rejects_routing():
    with pytest.raises(ConfigError, match="needs a MoE model"):
        moe_from_mapping({"routing": "uniform"}, experts=1)


def test_zipf_zero_is_uniform():
    assert expert_shares(MoeRouting("zipf", 0.0), 8) == pytest.approx([1 / 8] * 8)
    assert math.isclose(sum(expert_shares(MoeRouting("zipf", 1.2), 64, 8)), 1.0)


# ----------------------------------------------------------------- in the iteration


def _moe_scenario(tiny, moe=None, experts=4, **parallel):
    model = {"name": "tiny-moe", "layers": 2, "hidden": 256, "heads": 8, "seq_len": 128,
             "vocab": 1024, "experts": experts, "top_k": 1}
    if moe is not None:
        model["moe"] = moe
    return tiny(model=model, parallelism={"tp": 1, "pp": 1, "dp": 8, "ep": 4, **parallel},
                training={"micro_batch": 1, "global_batch": 8})


def _mlp_times(scenario):
    builder = StreamBuilder(scenario.model, scenario.parallel, scenario.training,
                            scenario.costs, microbatches=scenario.microbatches)
    ops = builder.stage_stream(0)
    return ([op.duration_s for op in ops if isinstance(op, Compute) and op.label.endswith(" mlp")],
            [op.duration_s for op in ops if isinstance(op, Compute)
             and op.label.endswith(" attention")])


def test_the_slowest_ep_rank_sets_the_mlp_pace(tiny):
    plain = scenario_from_mapping(_moe_scenario(tiny))
    hist = {"routing": {"histogram": [4, 2, 1, 1]}, "placement": "contiguous"}
    skewed = scenario_from_mapping(_moe_scenario(tiny, hist))
    # Contiguous over ep 4: one expert each, the hot one takes 4/8 of the assignments,
    # twice the uniform 1/4: pace 2, half the layer (the expert work's share by
    # convention) runs twice as long on its rank, and everyone waits.
    (mlp, attention), (mlp_skewed, attention_skewed) = _mlp_times(plain), _mlp_times(skewed)
    assert mlp_skewed == pytest.approx([m + (m + a) / 2 for m, a in zip(mlp, attention,
                                                                         strict=True)])
    assert attention_skewed == pytest.approx(attention)
    assert plain.comm.alltoall_weights == ()
    assert skewed.comm.alltoall_weights == pytest.approx([2.0, 1.0, 0.5, 0.5])
    assert scenario_from_mapping(skewed.resolved()).model.moe == skewed.model.moe


def test_skew_slows_the_iteration(tiny):
    def run(moe=None):
        # 8 experts, 2 per EP rank: room for balancing.
        return run_scenario(scenario_from_mapping(_moe_scenario(tiny, moe, experts=8)))

    plain = run()
    skewed = run({"routing": {"zipf": 1.2}, "placement": "contiguous"})
    balanced = run({"routing": {"zipf": 1.2}, "placement": "balanced"})
    assert plain.iteration_time_s < balanced.iteration_time_s < skewed.iteration_time_s


@pytest.mark.parametrize("moe, key", [
    ({"routing": {"histogram": [1, 1, 1]}}, "model.moe.routing.histogram"),
    ({"placement": [0, 1, 2, 4]}, "model.moe.placement[3]"),
    ({"placement": [0, 0, 1, 2]}, "model.moe.placement"),
])
def test_scenario_errors_name_the_key(tiny, moe, key):
    with pytest.raises(ConfigError) as info:
        scenario_from_mapping(_moe_scenario(tiny, moe), source="s.yaml")
    assert info.value.key == key


def test_overlap_hides_the_all_to_alls(tiny):
    """Two half micro-batches: the iteration gets shorter, but by no more than the expert
    all-to-alls' time (at best all of it hides), and the same bytes are sent."""
    def run(**parallel):
        data = _moe_scenario(tiny, **parallel)
        data["communication"] = {"nccl_sms": 0}  # the overlapped calls' SMs left out
        scenario = scenario_from_mapping(data)
        return scenario, run_scenario(scenario)

    plain_spec, plain = run()
    overlap_spec, overlapped = run(moe_overlap=True)
    assert overlapped.iteration_time_s < plain.iteration_time_s
    # Hiding communication cannot save more than the plain run's exposed communication,
    # and the compute is the same.
    exposed = max(gpu.exposed_communication_s for gpu in plain.per_gpu)
    assert overlapped.iteration_time_s > plain.iteration_time_s - exposed
    assert sum(g.compute_s for g in overlapped.per_gpu) == pytest.approx(
        sum(g.compute_s for g in plain.per_gpu))
    builder = StreamBuilder(overlap_spec.model, overlap_spec.parallel, overlap_spec.training,
                            overlap_spec.costs, microbatches=overlap_spec.microbatches)
    ops = builder.stage_stream(0)
    sent = sum(op.size_bytes for op in ops if isinstance(op, Collective) and op.group == "ep")
    plain_ops = StreamBuilder(plain_spec.model, plain_spec.parallel, plain_spec.training,
                              plain_spec.costs,
                              microbatches=plain_spec.microbatches).stage_stream(0)
    assert sent == pytest.approx(sum(op.size_bytes for op in plain_ops
                                     if isinstance(op, Collective) and op.group == "ep"))
    assert not any(op.blocking for op in ops if isinstance(op, Collective) and op.group == "ep")
    assert sum(isinstance(op, Wait) and (op.handle or "").startswith("ep:") for op in ops) == sum(
        isinstance(op, Collective) and op.group == "ep" for op in ops)


def test_overlapped_and_skewed_blocks_fold_exactly(uniform):
    """Folding EP blocks stays exact with overlapped, skewed all-to-alls (the images'
    async calls run beside the simulated block's, as its blocking ones do)."""
    moe = model_from_mapping({"name": "small-moe", "layers": 2, "hidden": 1024, "heads": 16,
                              "seq_len": 512, "vocab": 32000, "experts": 8, "top_k": 2,
                              "moe": {"routing": {"zipf": 1.0}}})
    topology = build_cluster({"preset": "dgx-a100", "nodes": 4,
                              "fabric": {"kind": "rail-optimized", "routing": "dmodk"}})
    parallel = ParallelConfig(tp=4, pp=1, dp=8, ep=2, moe_overlap=True)
    training = TrainingConfig(micro_batch=1, global_batch=16)
    comm = replace(CommParams(), alltoall_weights=(1.3, 0.7))
    folded = uniform.run(topology, parallel, training, model=moe, comm=comm)
    full = uniform.run(topology, parallel, training, model=moe, comm=comm,
                       fold_replicas=False)
    assert folded.folding == "folded 4 expert-parallel blocks of 2 into 1"
    assert folded.events < full.events
    assert folded.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    for mine, theirs in zip(folded.per_gpu, full.per_gpu, strict=True):
        assert mine.exposed_communication_s == pytest.approx(
            theirs.exposed_communication_s, rel=1e-9, abs=1e-15)


def test_summary_names_the_load(tiny):
    hist = {"routing": {"histogram": [4, 2, 1, 1]}, "placement": "contiguous",
            "capacity_factor": 1.5}
    report = run_scenario(scenario_from_mapping(_moe_scenario(tiny, hist, moe_overlap=True)))
    text = format_summary(report)
    # Capacity 1.5/4 of the assignments: the hot expert keeps 3/8 of its 4/8, 1/8 dropped;
    # kept loads 3:2:1:1 of 8 per rank -> max/mean 3/1.75, pace 3/2 of uniform.
    assert ("4 experts over ep 4, histogram, contiguous, capacity factor 1.5: load per EP "
            "rank max/mean 1.71, slowest at 1.5x uniform, 12.5 % of assignments dropped"
            ) in text
    assert "MoE all-to-alls overlapped" in text


def test_the_example_picks_the_all_to_all_by_nic_count(examples_dir):
    """The study's example: on DGX H100 nodes (8 NICs) auto keeps the flat all-to-all for
    an EP group over two nodes; on the same nodes with one NIC, the hierarchical one."""
    path = examples_dir / "moe-as-it-runs-64-h100.yaml"
    picks = {}
    for cluster in (None, "clusters/h100-1nic-8node.yaml"):
        overrides = [("cluster", cluster)] if cluster else []
        scenario = load_scenario(path, overrides=overrides)
        assert scenario.comm.all_to_all == "auto" and scenario.parallel.moe_overlap
        size = alltoall_bytes(scenario.model, scenario.parallel, scenario.training)
        comm = Communicator(Simulation(), scenario.topology, scenario.comm)
        picks[cluster] = comm.choose("alltoall", scenario.topology.gpus[:16], size).algorithm
    assert picks == {None: "flat", "clusters/h100-1nic-8node.yaml": "hierarchical"}


DGX_A100_2 = {"preset": "dgx-a100", "nodes": 2}


@pytest.mark.parametrize("moe, overlap, cluster", [
    # Drops: the busiest rank's experts compute less than a uniform layer's.
    ({"routing": {"zipf": 2.0}, "capacity_factor": 1.0}, False, DGX_A100_2),
    # Skew: more (a uniform bound would be loose, 0.70 of the iteration).
    ({"routing": {"zipf": 1.2}, "placement": "contiguous"}, False, DGX_A100_2),
    # Overlap: the all-to-alls leave the chain (a uniform bound overshoots by 3-6 %).
    ({}, True, DGX_A100_2),
    ({}, True, {"preset": "switch", "gpus": 16, "link_bandwidth": "20 GB/s"}),
])
def test_the_lower_bound_holds_for_routed_and_overlapped_layers(moe, overlap, cluster):
    """distsim search prunes with workloads.cost.bounds: its lower bound must stay below the
    simulated iteration when the router is skewed or drops tokens (compute at the slowest
    rank's pace, weighted all-to-alls) and when the all-to-alls overlap compute."""
    model = model_from_mapping({"name": "tiny-moe", "layers": 4, "hidden": 1024, "heads": 8,
                                "seq_len": 1024, "vocab": 1000, "experts": 8, "top_k": 2,
                                "moe": moe})
    topology = build_cluster(cluster)
    parallel = ParallelConfig(tp=1, dp=16, ep=4, moe_overlap=overlap)
    training = TrainingConfig(micro_batch=1, global_batch=32)
    weights = alltoall_weights(model.moe, experts=8, top_k=2, ep=4)
    comm = replace(CommParams(), alltoall_weights=weights)
    gpu = get_gpu("a100-80gb")
    costs = RooflineCosts(gpu, precision="bf16")
    lower, _estimate = IterationBounds(topology, model, costs, comm=comm).bound(
        parallel, training, 2)
    spec = IterationSpec(topology, model, parallel, training, costs, gpu, comm=comm)
    simulated = simulate_iteration(spec).iteration_time_s
    assert 0 < lower <= simulated
    assert lower > 0.9 * simulated  # and it still says something


def test_the_hot_rank_holds_its_tokens_activations():
    """The routed part of a MoE layer's activations scales with the busiest EP rank's
    load; the rest of the layer does not."""
    def stored(moe, ep):
        model = model_from_mapping({"name": "m", "layers": 2, "hidden": 512, "heads": 8,
                                    "seq_len": 256, "vocab": 1000, "experts": 4, "top_k": 1,
                                    "moe": moe})
        return activation_bytes_per_layer(model, LayerShard(micro_batch=1, seq_len=model.seq_len,
                                                            layer_index=0, ep=ep, recompute="none"))

    hot = {"routing": {"histogram": [4, 2, 1, 1]}, "placement": "contiguous"}
    plain, skewed = stored({}, 4), stored(hot, 4)
    # One expert per rank, the hot one with 2x the uniform tokens: the routed part
    # (FC1 input + the expert's activations, e = 2 bytes) doubles.
    tokens, e = 256.0, 2
    routed = e * tokens * 4 * 512 * 2 + e * tokens * 512
    assert skewed - plain == pytest.approx(routed)
    assert stored(hot, 1) == pytest.approx(plain)  # all experts on one GPU: no hot rank


def test_search_strategies_route_at_their_own_ep(tiny):
    """distsim search's candidates carry the router's weights for their own ep; an
    explicit placement that does not fit a candidate's ep makes it invalid (an error)."""
    hist = {"routing": {"histogram": [4, 2, 1, 1]}, "placement": "contiguous"}
    scenario = scenario_from_mapping(_moe_scenario(tiny, hist))
    assert len(scenario.comm.alltoall_weights) == 4
    two = with_strategy(scenario, Strategy.on(scenario, tp=1, pp=1, dp=8, ep=2))
    # Contiguous over 2 ranks: experts 0-1 (6 of 8 parts) and 2-3 (2 of 8).
    assert two.comm.alltoall_weights == pytest.approx([1.5, 0.5])
    one = with_strategy(scenario, Strategy.on(scenario, tp=1, pp=1, dp=8, ep=1))
    assert one.comm.alltoall_weights == ()
    fixed = scenario_from_mapping(_moe_scenario(tiny, {"placement": [0, 1, 2, 3]}))
    with pytest.raises(ConfigError, match=r"EP rank 0\.\.1"):
        with_strategy(fixed, Strategy.on(fixed, tp=1, pp=1, dp=8, ep=2))


@settings(max_examples=80, deadline=None)
@given(ep=st.sampled_from([2, 3, 4, 8]), per_rank=st.integers(1, 4),
       raw=st.lists(st.floats(0.0, 1.0), min_size=32, max_size=32))
def test_placements_order_for_sorted_loads(ep, per_rank, raw):
    """Experts by decreasing load (a Zipf router's order): every placement fills each EP
    rank's experts/ep slots, and the most loaded rank goes balanced <= round-robin <=
    contiguous (contiguous stacks the heaviest; round-robin gives rank 0 the heaviest of
    every row; greedy never does worse than that)."""
    loads = sorted(raw[:ep * per_rank], reverse=True)

    def busiest(placement):
        ranks = place_experts(MoeRouting(placement=placement), loads, ep)
        assert sorted(ranks) == sorted(list(range(ep)) * per_rank)
        return max(sum(x for x, r in zip(loads, ranks) if r == rank) for rank in range(ep))

    assert busiest("balanced") <= busiest("round-robin") + 1e-12
    assert busiest("round-robin") <= busiest("contiguous") + 1e-12


def test_a_router_left_at_its_default_is_a_note(tiny):
    """A MoE run that never says how its router spreads tokens is told it ran a perfectly
    even one; one that writes a routing (uniform included) is not; a dense run neither."""
    from distsim_gpu.scenarios.run_notes import routing_notes
    data = tiny()
    data["model"].update({"experts": 4, "top_k": 2})
    notes = run_scenario(scenario_from_mapping(data)).notes
    routing = [n for n in notes if n.key == "model.moe.routing"]
    assert len(routing) == 1 and routing[0].kind == "defaulted"
    assert "evenly over its 4 experts" in routing[0].message
    data["model"]["moe"] = {"routing": "uniform"}
    assert not [n for n in run_scenario(scenario_from_mapping(data)).notes
                if n.key == "model.moe.routing"]
    assert routing_notes(scenario_from_mapping(tiny()).model) == []
    # Only the capacity or the placement written: the routing is still the default.
    for moe in ({}, {"placement": "contiguous"}, {"capacity_factor": 1.5}):
        data["model"]["moe"] = moe
        model = scenario_from_mapping(data).model
        assert [n.kind for n in routing_notes(model)] == ["defaulted"]
        assert model.moe == replace(model.moe, routing_given=True)  # the same loads


def test_a_capacity_that_drops_tokens_says_mfu_counts_them(tiny):
    """MFU is the model's FLOPs a token over the peak: dropped assignments stay in it,
    and the run says how many there were (none under a capacity that drops nothing)."""
    from distsim_gpu.scenarios.run_notes import routing_notes
    data = tiny()
    data["model"].update({"experts": 4, "top_k": 2,
                          "moe": {"routing": {"zipf": 1.5}, "capacity_factor": 1.0}})
    data["parallelism"] = {"tp": 1, "pp": 1, "dp": 8, "ep": 4}
    model = scenario_from_mapping(data).model
    dropped = moe_loads(model.moe, tokens=1.0, experts=4, top_k=2, ep=4)
    (note,) = routing_notes(model, 4)
    assert note.kind == "headline" and note.key == "model.moe.capacity_factor"
    assert f"drops {dropped.dropped / dropped.assignments * 100:.3g} % of" in note.message
    data["model"]["moe"]["capacity_factor"] = 4.0
    assert routing_notes(scenario_from_mapping(data).model, 4) == []
