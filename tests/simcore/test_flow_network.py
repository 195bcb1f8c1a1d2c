"""FlowNetwork over simulated time: closed-form finish times under processor sharing."""

from __future__ import annotations

import math

import pytest
import simpy
from distsim_gpu.simcore import link_stats
from distsim_gpu.simcore.errors import SimulationError
from distsim_gpu.simcore.network import FlowNetwork


def make_network(**links: float) -> tuple[simpy.Environment, FlowNetwork]:
    env = simpy.Environment()
    net = FlowNetwork(env)
    for name, capacity in links.items():
        net.add_link(name, capacity)
    return env, net


def start_at(env, net, at_s, *args, **kwargs):
    """Start ``net.transfer(*args)`` at simulated time ``at_s``; returns a holder list."""
    holder = []

    def process():
        yield env.timeout(at_s)
        holder.append(net.transfer(*args, **kwargs))

    env.process(process())
    return holder


# ---------------------------------------------------------------- single flows


def test_one_flow_takes_latency_plus_bytes_over_bandwidth():
    env, net = make_network(nvlink=450e9)
    flow = net.transfer(["nvlink"], 1e9, latency_s=2e-6)
    env.run()
    assert flow.finish_s == pytest.approx(2e-6 + 1e9 / 450e9, rel=1e-12)
    assert flow.transfer_start_s == 2e-6
    assert flow.start_s == 0.0
    assert flow.remaining_bytes == 0.0
    assert flow.done.triggered and flow.done.value is flow


def test_process_can_yield_done_and_resume_at_finish():
    env, net = make_network(link=10.0)
    seen = []

    def rank():
        yield env.timeout(1.0)
        flow = net.transfer({"link": 1}, 30.0, latency_s=0.5)
        got = yield flow.done
        seen.append((env.now, got is flow))

    env.process(rank())
    env.run()
    assert seen == [(pytest.approx(1.0 + 0.5 + 3.0, rel=1e-12), True)]


def test_zero_byte_flow_finishes_after_exactly_its_latency():
    env, net = make_network(link=1.0)
    flow = net.transfer(["link"], 0, latency_s=3.0)
    env.run()
    assert flow.finish_s == 3.0
    assert net.link_bytes("link") == 0.0
    assert net.solves == 0  # nothing to share, nothing solved


def test_flow_without_links_finishes_after_its_latency():
    env, net = make_network(link=1.0)
    flow = net.transfer([], 1e12, latency_s=1.5)
    env.run()
    assert flow.finish_s == 1.5
    assert net.completed_flows == 1


def test_zero_latency_zero_byte_flow_is_done_at_once():
    _env, net = make_network(link=1.0)
    flow = net.transfer(["link"], 0)
    assert flow.done.triggered
    assert flow.finish_s == 0.0


def test_multiplicity_two_takes_twice_as_long():
    env, net = make_network(link=10.0)
    single = net.transfer({"link": 1}, 50.0)
    env.run()
    env2, net2 = make_network(link=10.0)
    double = net2.transfer({"link": 2}, 50.0)
    env2.run()
    assert single.finish_s == pytest.approx(5.0, rel=1e-12)
    assert double.finish_s == pytest.approx(10.0, rel=1e-12)
    assert net2.link_bytes("link") == 100.0


def test_repeated_link_in_iterable_adds_multiplicity():
    env, net = make_network(link=10.0)
    flow = net.transfer(["link", "link"], 50.0)
    env.run()
    assert flow.multiplicities == (2.0,)
    assert flow.finish_s == pytest.approx(10.0, rel=1e-12)


def test_ring_hop_multiplicity_over_several_links():
    # A coflow over a 4-GPU ring: each hop carries 2(n-1)/n = 1.5 x S at the common rate.
    env, net = make_network(h0=100.0, h1=100.0, h2=100.0, h3=50.0)
    flow = net.transfer({"h0": 1.5, "h1": 1.5, "h2": 1.5, "h3": 1.5}, 300.0, latency_s=0.25)
    env.run()
    # Slowest hop: 50 / 1.5 B/s -> 300 * 1.5 / 50 = 9 s.
    assert flow.finish_s == pytest.approx(0.25 + 9.0, rel=1e-12)
    for hop in ("h0", "h1", "h2", "h3"):
        assert net.link_bytes(hop) == pytest.approx(450.0, rel=1e-15)


def test_flow_over_ideal_and_finite_link_runs_at_finite_rate():
    env, net = make_network(ideal=math.inf, slow=8.0)
    flow = net.transfer({"ideal": 1, "slow": 2}, 16.0)
    env.run()
    assert flow.finish_s == pytest.approx(4.0, rel=1e-12)


def test_flow_over_only_ideal_links_finishes_after_its_latency():
    # capacity inf means "ideal" (add_link docstring): infinite rate, the flow takes
    # just its latency.
    env, net = make_network(ideal=math.inf)
    flow = net.transfer(["ideal"], 100.0, latency_s=1.0)
    env.run()
    assert flow.finish_s == 1.0
    assert flow.remaining_bytes == 0.0
    assert net.link_bytes("ideal") == 100.0


def test_flow_over_ideal_link_does_not_stall_later_flows():
    env, net = make_network(ideal=math.inf, slow=10.0)
    net.transfer(["ideal"], 100.0)
    later = start_at(env, net, 1.0, ["slow"], 100.0)
    env.run(until=1000.0)
    assert later[0].finish_s == pytest.approx(11.0, rel=1e-12)


# ---------------------------------------------------------------- sharing


def test_two_flows_on_one_link_each_get_half():
    env, net = make_network(link=10.0)
    a = net.transfer(["link"], 100.0)
    b = net.transfer(["link"], 100.0)
    env.run(until=1.0)
    assert a.rate_bytes_per_s == b.rate_bytes_per_s == 5.0
    assert net.link_load("link") == 10.0
    assert net.flows_on("link") == [a, b]
    env.run()
    assert a.finish_s == b.finish_s == pytest.approx(2 * 100.0 / 10.0, rel=1e-12)
    assert net.flows_on("link") == []
    assert net.link_load("link") == 0.0


def test_later_flow_slows_the_first_by_processor_sharing():
    # Link 1 B/s.  A: 10 B at t=0.  B: 2 B at t=4.
    # 0..4: A alone at 1 -> 6 B left.  From 4 both at 1/2: B needs 4 s -> done at 8;
    # A has 6 - 2 = 4 B left at t=8, alone again at 1 -> done at 12 (not 10).
    env, net = make_network(link=1.0)
    a = net.transfer(["link"], 10.0)
    b = start_at(env, net, 4.0, ["link"], 2.0)
    env.run(until=5.0)
    assert a.rate_bytes_per_s == 0.5
    env.run()
    assert b[0].finish_s == pytest.approx(8.0, rel=1e-12)
    assert a.finish_s == pytest.approx(12.0, rel=1e-12)


def test_latency_delays_when_a_flow_starts_competing():
    # Link 2 B/s.  A: 8 B at t=0.  B: 4 B at t=0 with 1 s latency.
    # 0..1: A alone at 2 -> 6 B left.  From 1 both at 1: B done at 5; A has 2 left at 5,
    # alone at 2 -> done at 6.
    env, net = make_network(link=2.0)
    a = net.transfer(["link"], 8.0)
    b = net.transfer(["link"], 4.0, latency_s=1.0)
    env.run()
    assert b.finish_s == pytest.approx(5.0, rel=1e-12)
    assert a.finish_s == pytest.approx(6.0, rel=1e-12)


def test_three_link_line_network_over_time():
    # Unit links L1-L3.  long: 4 B over L1,L2,L3.  s1: 1 B on L1, s2: 2 B on L2, s3: 3 B on L3.
    # 0..2  all at 1/2 (each link holds two flows).  s1 done at 2; long 3 left, s2 1, s3 2.
    # 2..4  long still shares L2 and L3: all 1/2.     s2 done at 4; long 2 left, s3 1.
    # 4..6  long and s3 share L3: 1/2 each.           s3 done at 6; long 1 left.
    # 6..7  long alone at 1.                          long done at 7.
    env, net = make_network(L1=1.0, L2=1.0, L3=1.0)
    long = net.transfer(["L1", "L2", "L3"], 4.0)
    s1 = net.transfer(["L1"], 1.0)
    s2 = net.transfer(["L2"], 2.0)
    s3 = net.transfer(["L3"], 3.0)
    env.run(until=1.0)
    assert [f.rate_bytes_per_s for f in (long, s1, s2, s3)] == [0.5] * 4
    assert [net.link_load(link) for link in ("L1", "L2", "L3")] == [1.0] * 3
    env.run(until=3.0)
    assert long.rate_bytes_per_s == 0.5
    assert net.link_load("L1") == 0.5  # L1 is not a bottleneck any more
    env.run()
    assert [f.finish_s for f in (s1, s2, s3, long)] == pytest.approx([2.0, 4.0, 6.0, 7.0],
                                                                      rel=1e-12)
    assert net.solves == 5  # t = 0, 2, 4, 6, 7
    assert net.link_bytes("L1") == 5.0
    assert net.link_bytes("L2") == 6.0
    assert net.link_bytes("L3") == 7.0


def test_unequal_capacities_each_flow_limited_by_its_own_bottleneck():
    # Links A=1, B=3 B/s.  f1: A.  f2: A,B.  f3: B.  All 6 B.
    # Rates: A splits 1/2,1/2; B gives f3 3 - 1/2 = 5/2.
    # f3 done at 6/2.5 = 2.4.  Then B has only f2 (held at 1/2 by A): nothing changes.
    # f1, f2 done at 12.
    env, net = make_network(A=1.0, B=3.0)
    f1 = net.transfer(["A"], 6.0)
    f2 = net.transfer(["A", "B"], 6.0)
    f3 = net.transfer(["B"], 6.0)
    env.run()
    assert f3.finish_s == pytest.approx(2.4, rel=1e-12)
    assert f1.finish_s == pytest.approx(12.0, rel=1e-12)
    assert f2.finish_s == pytest.approx(12.0, rel=1e-12)


def test_flows_finish_when_the_timer_lands_an_ulp_early():
    # Link 3 B/s.  A: 6 B, latency 0.1 s, from t=0.  B: 1000 B with multiplicity 3 from t=0.5.
    # 0.1..0.5: A alone at 3 -> 1.2 B sent, 4.8 left (alone it would finish at 2.1).
    # From 0.5: r + 3r = 3 -> r = 0.75 each.  A: 4.8 / 0.75 = 6.4 s -> done at 6.9.
    # B has sent 0.75 * 6.4 = 4.8 B by 6.9; alone at 3 / 3 = 1 -> 995.2 s -> done at 1002.1.
    # (The timer for A's first finish, 2.1, is re-armed at 2.1 for 6.8999999999999995;
    # 2.1 + (6.8999999999999995 - 2.1) rounds to 6.899999999999999, one ulp early.)
    env, net = make_network(link=3.0)
    a = net.transfer(["link"], 6.0, latency_s=0.1)
    b = start_at(env, net, 0.5, {"link": 3}, 1000.0)
    env.run()
    assert a.finish_s == pytest.approx(6.9, rel=1e-12)
    assert b[0].finish_s == pytest.approx(1002.1, rel=1e-12)
    assert net.active_flows == 0


def test_a_finish_closer_than_the_clock_resolution_still_happens():
    # At 1e18 B/s, when the timer fires the bytes left are rate × (clock rounding): above
    # the relative tolerance, yet worth less than an ulp of the clock.  This case once
    # re-armed the timer at the same instant for ever.
    env, net = make_network(link=1e18)
    first = start_at(env, net, 0.0451, ["link"], 1.3e6)
    second = start_at(env, net, 0.0451 + 3e-13, ["link"], 1.0e6)
    env.run()
    assert first[0].finish_s == pytest.approx(0.0451 + 2.3e-12, rel=1e-9)
    assert second[0].finish_s == pytest.approx(0.0451 + 2.3e-12, rel=1e-9)
    assert net.active_flows == 0


# ---------------------------------------------------------------- batching and scope


def test_flows_starting_at_the_same_instant_are_solved_once():
    env, net = make_network(a=1.0, b=1.0)
    for links in (["a"], ["a", "b"], ["b"]):
        start_at(env, net, 0.0, links, 10.0)
    env.run(until=0.5)
    assert net.solves == 1
    assert net.active_flows == 3


def test_flows_activated_at_the_same_instant_through_latency_are_solved_once():
    env, net = make_network(a=1.0)
    net.transfer(["a"], 10.0, latency_s=1.0)
    start_at(env, net, 0.5, ["a"], 10.0, latency_s=0.5)
    env.run(until=1.5)
    assert net.solves == 1


def test_flows_finishing_at_the_same_instant_are_solved_once():
    env, net = make_network(link=4.0)
    net.transfer(["link"], 8.0)
    net.transfer(["link"], 8.0)
    env.run()
    assert net.solves == 2  # start at 0, joint finish at 4
    assert net.active_flows == 0
    assert net.completed_flows == 2


def test_solve_covers_only_the_touched_component():
    env, net = make_network()
    a = net.add_link("a", 1.0)
    b = net.add_link("b", 1.0)
    calls = []
    net.add_listener(lambda now, links, loads: calls.append((now, list(links), list(loads))))
    first = net.transfer(["a"], 100.0)
    start_at(env, net, 1.0, ["b"], 1.0)
    env.run(until=10.0)
    assert calls[0] == (0.0, [a], [1.0])
    assert calls[1] == (1.0, [b], [1.0])  # the flow on "a" is not re-solved
    assert calls[2] == (2.0, [b], [0.0])
    assert first.rate_bytes_per_s == 1.0


def test_a_finish_on_links_no_one_uses_skips_the_solve_and_a_shared_one_does_not():
    """A flow finishing alone on its links leaves an unrelated flow's rate and finish as
    they were (no pass over the transferring flows); one of whose freed links is still
    used hands the bandwidth on (``_component``'s shortcut must tell the two apart)."""
    env, net = make_network(a=1.0, b=1.0, c=1.0)
    far = net.transfer(["c"], 10.0)
    net.transfer(["a"], 0.5)  # done at 1, freeing "a", which `shared` still uses
    shared = net.transfer(["a", "b"], 4.0)
    other = net.transfer(["b"], 2.0)  # done at 4, freeing "b", which `shared` still uses
    env.run()
    # Every flow but `far` at ½ B/s until 1; then `shared` and `other` at ½ on "b" until
    # `other`'s last 1.5 B are done at 4; `shared`'s last 2 B alone at 1 B/s: done at 6,
    # freeing "a" and "b", which nothing uses, while `far` runs on to 10.
    assert other.finish_s == pytest.approx(4.0, rel=1e-12)
    assert shared.finish_s == pytest.approx(6.0, rel=1e-12)
    assert far.finish_s == pytest.approx(10.0, rel=1e-12)
    assert net.active_flows == 0 and net.completed_flows == 4


def test_listener_sees_loads_at_capacity():
    env, net = make_network(x=6.0)
    seen = []
    net.add_listener(lambda now, links, loads: seen.append((now, list(loads))))
    net.transfer({"x": 2}, 6.0)
    net.transfer({"x": 1}, 6.0)
    env.run()
    # Common rate r with load 2r + r = 6 -> r = 2 B/s; both move 6 B -> joint finish at 3.
    assert seen == [(0.0, [6.0]), (3.0, [0.0])]


def test_counters_track_active_and_completed_flows():
    env, net = make_network(link=1.0)
    net.transfer(["link"], 1.0)
    net.transfer(["link"], 3.0)
    env.run(until=0.5)
    assert (net.active_flows, net.completed_flows) == (2, 0)
    env.run(until=2.5)
    assert (net.active_flows, net.completed_flows) == (1, 1)
    env.run()
    assert (net.active_flows, net.completed_flows) == (0, 2)


def test_bytes_are_conserved_per_link():
    env, net = make_network(a=3.0, b=7.0)
    net.transfer({"a": 2, "b": 1}, 10.0)
    net.transfer({"b": 3}, 5.0, latency_s=0.1)
    net.transfer(["a"], 1.0)
    env.run()
    assert net.link_bytes("a") == pytest.approx(2 * 10.0 + 1.0, rel=1e-15)
    assert net.link_bytes("b") == pytest.approx(10.0 + 3 * 5.0, rel=1e-15)


def test_flow_ids_are_per_network():
    _env, net = make_network(a=1.0)
    _env2, net2 = make_network(a=1.0)
    assert [net.transfer(["a"], 1.0).id for _ in range(3)] == [0, 1, 2]
    assert net2.transfer(["a"], 1.0).id == 0


def test_tag_is_kept():
    _env, net = make_network(a=1.0)
    assert net.transfer(["a"], 1.0, tag=("allreduce", 3)).tag == ("allreduce", 3)


def test_link_registry():
    _env, net = make_network()
    assert net.add_link(("n0.gpu0", "n0.nvswitch"), 450e9) == 0
    assert net.add_link("ib0", 5e10) == 1
    assert net.link_ids == (("n0.gpu0", "n0.nvswitch"), "ib0")
    assert net.has_link("ib0") and not net.has_link("ib1")
    assert net.capacity("ib0") == 5e10


# ---------------------------------------------------------------- errors


def test_unknown_link_is_a_simulation_error():
    _env, net = make_network(a=1.0)
    with pytest.raises(SimulationError, match="'nope'"):
        net.transfer(["a", "nope"], 1.0)
    with pytest.raises(SimulationError, match="'nope'"):
        net.transfer({"nope": 1}, 1.0)
    assert net.active_flows == 0


@pytest.mark.parametrize("size", [-1.0, math.nan, math.inf])
def test_bad_size_is_a_simulation_error(size):
    _env, net = make_network(a=1.0)
    with pytest.raises(SimulationError, match="size"):
        net.transfer(["a"], size)


@pytest.mark.parametrize("latency", [-1e-6, math.nan, math.inf])
def test_bad_latency_is_a_simulation_error(latency):
    _env, net = make_network(a=1.0)
    with pytest.raises(SimulationError, match="latency"):
        net.transfer(["a"], 1.0, latency_s=latency)


@pytest.mark.parametrize("mult", [0, -1.0, math.nan])
def test_non_positive_multiplicity_is_a_simulation_error(mult):
    _env, net = make_network(a=1.0)
    with pytest.raises(SimulationError, match="multiplicity"):
        net.transfer({"a": mult}, 1.0)


@pytest.mark.parametrize("capacity", [0.0, -5.0, math.nan])
def test_non_positive_capacity_is_a_simulation_error(capacity):
    _env, net = make_network()
    with pytest.raises(SimulationError, match="capacity"):
        net.add_link("a", capacity)
    assert not net.has_link("a")


def test_duplicate_link_is_a_simulation_error():
    _env, net = make_network(a=1.0)
    with pytest.raises(SimulationError, match="already"):
        net.add_link("a", 2.0)
    assert net.capacity("a") == 1.0


@pytest.mark.parametrize(("solves", "entries"), [(1, 1 << 19), (4096, 1), (4096, 3)])
def test_link_statistics_do_not_depend_on_how_the_log_is_batched(monkeypatch, solves,
                                                                  entries):
    # Busy and saturated seconds are integrated from a log flushed in batches (by solves
    # and by logged links); any batching gives the same statistics.
    def run():
        env, net = make_network(a=10.0, b=4.0, c=6.0)
        for k, (links, size) in enumerate([(["a"], 30.0), (["a", "b"], 8.0),
                                           (["b", "c"], 12.0), (["c"], 5.0), (["a"], 7.0)]):
            start_at(env, net, 0.5 * k, links, size, 0.0)
        env.run()
        return net.link_stats()

    reference = run()
    monkeypatch.setattr(link_stats, "_STATS_BATCH", solves)
    monkeypatch.setattr(link_stats, "_STATS_BATCH_ENTRIES", entries)
    batched = run()
    assert batched.keys() == reference.keys()
    for link, stats in reference.items():
        assert batched[link].busy_s == pytest.approx(stats.busy_s, rel=1e-12)
        assert batched[link].saturated_s == pytest.approx(stats.saturated_s, rel=1e-12)
        assert batched[link].bytes == pytest.approx(stats.bytes, rel=1e-12)
    assert reference["a"].busy_s > 0 and reference["b"].saturated_s > 0
