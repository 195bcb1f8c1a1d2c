"""Max-min invariants on random instances (hypothesis): feasible, fair, deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest
from distsim_gpu.simcore.maxmin import _fill, _fill_local_minima, max_min_fair, solve_max_min
from hypothesis import given, settings
from hypothesis import strategies as st

RTOL = 1e-9

capacities = st.one_of(
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 2.0, 10.0, 100.0]),
    st.just(math.inf),
)
multiplicities = st.one_of(
    st.sampled_from([1, 2, 3]),
    st.floats(min_value=0.05, max_value=8.0, allow_nan=False, allow_infinity=False),
)


@st.composite
def instances(draw, link_capacities=capacities):
    """1-12 links with random capacities (some ideal; drawn from ``link_capacities``);
    1-30 flows, each on a non-empty random subset of links with multiplicities in
    {1, 2, 3} or floats."""
    num_links = draw(st.integers(1, 12))
    caps = draw(st.lists(link_capacities, min_size=num_links, max_size=num_links))
    flows = draw(st.lists(
        st.dictionaries(st.integers(0, num_links - 1), multiplicities, min_size=1),
        min_size=1, max_size=30))
    return flows, dict(enumerate(caps))


def loads_of(flows, caps, rates):
    load = dict.fromkeys(caps, 0.0)
    for flow, rate in zip(flows, rates):
        for link, mult in flow.items():
            load[link] += mult * rate
    return load


SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(instances())
def test_rates_are_positive_and_infinite_only_over_ideal_links(instance):
    flows, caps = instance
    rates = max_min_fair(flows, caps)
    for flow, rate in zip(flows, rates):
        ideal_only = all(math.isinf(caps[link]) for link in flow)
        assert math.isinf(rate) == ideal_only
        assert rate > 0


@SETTINGS
@given(instances())
def test_no_link_is_loaded_above_capacity(instance):
    flows, caps = instance
    rates = max_min_fair(flows, caps)
    finite = [(f, r) for f, r in zip(flows, rates) if math.isfinite(r)]
    load = loads_of([f for f, _ in finite], caps, [r for _, r in finite])
    for link, cap in caps.items():
        assert load[link] <= cap * (1 + RTOL)


@SETTINGS
@given(instances())
def test_every_flow_has_a_saturated_bottleneck_where_it_is_fastest(instance):
    # The max-min characterisation (Bertsekas & Gallager, Prop. 6.5.1): each flow crosses
    # a saturated link on which no other flow is faster.
    flows, caps = instance
    rates = max_min_fair(flows, caps)
    load = loads_of(flows, caps, rates)
    for f, (flow, rate) in enumerate(zip(flows, rates)):
        if math.isinf(rate):
            continue
        bottlenecks = [
            link for link in flow
            if math.isfinite(caps[link])
            and load[link] >= caps[link] * (1 - 1e-7)
            and all(rate >= rates[g] * (1 - 1e-7)
                    for g, other in enumerate(flows) if link in other)
        ]
        assert bottlenecks, f"flow {f} (rate {rate}) has no bottleneck link"


@SETTINGS
@given(instances())
def test_same_input_same_output(instance):
    flows, caps = instance
    assert max_min_fair(flows, caps) == max_min_fair(flows, caps)


@SETTINGS
@given(instances(), st.randoms(use_true_random=False))
def test_permuting_flows_permutes_rates(instance, rnd):
    flows, caps = instance
    order = list(range(len(flows)))
    rnd.shuffle(order)
    rates = max_min_fair(flows, caps)
    shuffled = max_min_fair([flows[i] for i in order], caps)
    assert shuffled == pytest.approx([rates[i] for i in order], rel=RTOL)


@SETTINGS
@given(instances(), st.randoms(use_true_random=False))
def test_permuting_links_changes_nothing(instance, rnd):
    flows, caps = instance
    names = list(caps)
    rnd.shuffle(names)
    relabel = {old: f"L{new}" for new, old in enumerate(names)}
    caps2 = {relabel[link]: caps[link] for link in names}
    flows2 = [{relabel[link]: m for link, m in flow.items()} for flow in flows]
    assert max_min_fair(flows2, caps2) == pytest.approx(max_min_fair(flows, caps), rel=RTOL)


@SETTINGS
@given(instances(), st.floats(min_value=1e-3, max_value=1e3))
def test_scaling_all_capacities_scales_all_rates(instance, factor):
    flows, caps = instance
    rates = max_min_fair(flows, caps)
    scaled = max_min_fair(flows, {link: cap * factor for link, cap in caps.items()})
    assert scaled == pytest.approx([r * factor for r in rates], rel=1e-8)


@SETTINGS
@given(instances())
def test_array_form_agrees_with_convenience_form(instance):
    flows, caps = instance
    entries = [(f, link, float(m)) for f, flow in enumerate(flows) for link, m in flow.items()]
    rates = solve_max_min(
        np.array([e[0] for e in entries], dtype=np.int64),
        np.array([e[1] for e in entries], dtype=np.int64),
        np.array([e[2] for e in entries]),
        np.array([caps[i] for i in range(len(caps))]),
        len(flows),
    )
    assert rates.tolist() == max_min_fair(flows, caps)


def _arrays(flows, caps):
    entries = [(f, link, float(m)) for f, flow in enumerate(flows) for link, m in flow.items()]
    return (np.array([e[0] for e in entries], dtype=np.int64),
            np.array([e[1] for e in entries], dtype=np.int64),
            np.array([e[2] for e in entries]),
            np.array([caps[i] for i in range(len(caps))]))


# Some links of capacity 0: a flow over one gets rate 0.
zero_or_capacities = st.one_of(capacities, st.just(0.0))


@settings(max_examples=100, deadline=None)
@given(st.one_of(instances(), instances(zero_or_capacities)))
def test_filling_by_local_minima_equals_progressive_filling(instance):
    # The incremental solver fills its subsets by local minima (many links per round);
    # the rates must be those of progressive filling (one level per round).
    flows, caps = instance
    arrays = _arrays(flows, caps)
    want, _ = _fill(*arrays, len(flows))
    got, bottleneck = _fill_local_minima(*arrays, len(flows))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=0)
    # Each finite rate names a bottleneck among its flow's links.
    for f, flow in enumerate(flows):
        assert (bottleneck[f] in flow) == bool(np.isfinite(got[f]))


def test_local_minima_by_hand():
    # Three separate links at three levels (they freeze in one round), and a chain: link
    # 3 (3 B/s over two flows) freezes first at 1.5, then flow 5 takes what link 4 has
    # left, 5 - 1.5.
    caps = {0: 1.0, 1: 2.0, 2: 4.0, 3: 3.0, 4: 5.0}
    flows = [{0: 1}, {1: 1}, {2: 1}, {3: 1, 4: 1}, {3: 1}, {4: 1}]
    rates, _ = _fill_local_minima(*_arrays(flows, caps), len(flows))
    assert rates.tolist() == [1.0, 2.0, 4.0, 1.5, 1.5, 3.5]
