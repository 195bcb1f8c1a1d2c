"""Recorded link usage: a transfer timed by its closed form counts on its links exactly as
the flow it stands for would have (bytes, busy and saturated seconds, bytes per tag).

The reference is always a real flow run alone in a second network with the same links.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from distsim_gpu.simcore.errors import SimulationError
from distsim_gpu.simcore.network import FlowNetwork, LinkUsage
from hypothesis import given, settings
from hypothesis import strategies as st

capacities = st.one_of(
    st.floats(min_value=0.5, max_value=1e3, allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 10.0, 450e9, math.inf]),
)
multiplicities = st.one_of(
    st.sampled_from([1, 2, 3]),
    st.floats(min_value=0.1, max_value=4.0, allow_nan=False, allow_infinity=False),
)
sizes = st.one_of(st.just(0.0), st.sampled_from([1.0, 100.0, 1e9]),
                  st.floats(min_value=1e-3, max_value=1e3, allow_nan=False))


def network(caps: list[float]) -> tuple[simpy.Environment, FlowNetwork]:
    env = simpy.Environment()
    net = FlowNetwork(env)
    for i, cap in enumerate(caps):
        net.add_link(i, cap)
    return env, net


def stats_tuple(net: FlowNetwork) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    _ids, _cap, carried, busy, saturated = net.link_stat_arrays()
    return carried, busy, saturated


@st.composite
def transfers(draw):
    """(capacities, [(size, {link: mult}, tag)]) — transfers that run one after another."""
    num_links = draw(st.integers(1, 5))
    caps = draw(st.lists(capacities, min_size=num_links, max_size=num_links))
    specs = draw(st.lists(st.tuples(
        sizes, st.dictionaries(st.integers(0, num_links - 1), multiplicities, max_size=num_links),
        st.sampled_from(["tp", "dp", None])), min_size=1, max_size=6))
    return caps, specs


@settings(max_examples=150, deadline=None)
@given(transfers())
def test_recorded_solo_usages_count_as_the_flows_run_one_after_another(case):
    caps, specs = case
    env_flows, with_flows = network(caps)

    def one_by_one():
        for size, links, tag in specs:
            yield with_flows.transfer(links, size, tag=tag).done

    env_flows.process(one_by_one())
    env_flows.run()
    _env, recorded = network(caps)
    for size, links, tag in specs:
        recorded.record_usage(recorded.solo_usage(links, size, tag))
    # The flows' busy time is a difference of absolute times: rounding of the clock.
    clock = 1e-13 * env_flows.now
    for got, want in zip(stats_tuple(recorded), stats_tuple(with_flows), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=clock)
    for link in range(len(caps)):
        assert recorded.link_bytes_by_tag(link) == pytest.approx(
            with_flows.link_bytes_by_tag(link), rel=1e-12)
    # The usages' durations add up to the time the flows took back to back.
    total = sum(recorded.solo_usage(links, size).duration_s for size, links, _ in specs)
    assert total == pytest.approx(env_flows.now, rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(transfers(), st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.5]), min_size=6, max_size=6))
def test_a_total_of_usages_is_their_weighted_sum_and_conserves_bytes(case, weights):
    caps, specs = case
    _env, net = network(caps)
    parts = [(net.solo_usage(links, size, tag), w)
             for (size, links, tag), w in zip(specs, weights)]
    total = LinkUsage.total(parts)
    assert len(set(total.indices.tolist())) == total.indices.size  # each link once
    _env, one = network(caps)
    one.record_usage(total)
    _env, many = network(caps)
    for usage, w in parts:
        many.record_usage(usage, w)
    for got, want in zip(stats_tuple(one), stats_tuple(many), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    # Conservation: Σ over links of bytes = Σ over transfers of times × size × Σ weights.
    expected = sum(w * size * sum(links.values())
                   for (size, links, _), w in zip(specs, weights))
    assert stats_tuple(one)[0].sum() == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_a_solo_usage_moves_at_its_bottleneck_and_saturates_only_it():
    _env, net = network([100.0, 1000.0, math.inf])
    usage = net.solo_usage({0: 2, 1: 1, 2: 4}, 300.0, "tp")
    # Bottleneck link 0: 100 / 2 = 50 B/s, so 6 s; loads 2·50, 1·50, 4·50.
    assert usage.duration_s == pytest.approx(6.0)
    assert usage.loads.tolist() == pytest.approx([100.0, 50.0, 200.0])
    assert usage.bytes.tolist() == [600.0, 300.0, 1200.0]
    assert usage.busy_s.tolist() == pytest.approx([6.0, 6.0, 6.0])
    assert usage.saturated_s.tolist() == pytest.approx([6.0, 0.0, 0.0])  # ideal: never
    net.record_usage(usage, 3)
    stats = net.link_stats()
    assert stats[0].bytes == 1800.0 and stats[0].busy_s == pytest.approx(18.0)
    assert stats[0].saturated_s == pytest.approx(18.0)
    assert stats[1].saturated_s == 0.0 and stats[2].bytes_by_tag == {"tp": 3600.0}


def test_usages_and_flows_on_different_links_add_up_in_one_report():
    env, net = network([10.0, 10.0])
    net.transfer([0], 50.0, tag="dp")
    net.record_usage(net.solo_usage([1], 20.0, "tp"))
    env.run()
    stats = net.link_stats()
    assert (stats[0].bytes, stats[0].busy_s, stats[0].bytes_by_tag) == (50.0, 5.0, {"dp": 50.0})
    assert (stats[1].bytes, stats[1].busy_s, stats[1].bytes_by_tag) == (20.0, 2.0, {"tp": 20.0})
    assert net.link_bytes(1) == 20.0


def test_an_empty_or_instant_usage_carries_its_bytes_and_no_time():
    _env, net = network([10.0, math.inf])
    nothing = net.solo_usage([0], 0.0, "tp")
    assert nothing.duration_s == 0.0 and nothing.bytes.tolist() == [0.0]
    ideal = net.solo_usage([1], 5.0, "tp")  # only an ideal link: no time at all
    assert ideal.duration_s == 0.0 and ideal.busy_s.tolist() == [0.0]
    assert net.solo_usage({}, 5.0).indices.size == 0
    net.record_usage(ideal)
    assert net.link_stats()[1].bytes == 5.0


def test_show_usage_tells_listeners_the_load_and_its_end():
    _env, net = network([100.0, 1000.0])
    heard: list[tuple[float, list[int], list[float]]] = []
    net.add_listener(lambda now, links, loads: heard.append((now, links, list(loads))))
    usage = net.solo_usage({0: 1, 1: 1}, 200.0)
    net.show_usage(usage, start_s=3.0)
    assert heard == [(3.0, [0, 1], [100.0, 100.0]), (5.0, [0, 1], [0.0, 0.0])]
    with pytest.raises(SimulationError, match="solo usage"):
        net.show_usage(LinkUsage.total([(usage, 2)]), 0.0)


def test_bad_usage_input_is_a_simulation_error():
    _env, net = network([10.0])
    with pytest.raises(SimulationError, match="finite and >= 0"):
        net.solo_usage([0], -1.0)
    with pytest.raises(SimulationError, match="unknown link"):
        net.solo_usage(["nope"], 1.0)
    with pytest.raises(SimulationError, match="must be positive"):
        net.solo_usage({0: 0.0}, 1.0)
