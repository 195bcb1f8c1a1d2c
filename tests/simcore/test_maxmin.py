"""Max-min fair rates on textbook instances, computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from distsim_gpu.simcore.maxmin import max_min_fair, solve_max_min


@pytest.mark.parametrize("k", [1, 2, 3, 7, 64])
def test_single_link_shared_equally_by_k_flows(k):
    rates = max_min_fair([{"l": 1}] * k, {"l": 12.0})
    assert rates == pytest.approx([12.0 / k] * k, rel=1e-15)


def test_three_link_line_network_all_get_half():
    # Bertsekas & Gallager's line: one long flow crosses links 1..3, one short flow on
    # each link, unit capacities.  Every link carries two flows -> 1/2 each.
    caps = {1: 1.0, 2: 1.0, 3: 1.0}
    flows = [{1: 1, 2: 1, 3: 1}, {1: 1}, {2: 1}, {3: 1}]
    assert max_min_fair(flows, caps) == pytest.approx([0.5] * 4, rel=1e-15)


def test_docstring_example_two_links():
    # a=10 shared by f0,f1; b=4 shared by f1,f2.  b saturates first at 2 (f1,f2 frozen);
    # a then has 10-2 = 8 left for f0.
    assert max_min_fair([{"a": 1}, {"a": 1, "b": 1}, {"b": 1}], {"a": 10.0, "b": 4.0}) == (
        pytest.approx([8.0, 2.0, 2.0], rel=1e-15))


def test_unequal_capacities_give_different_bottlenecks():
    # Links A=1, B=3, C=8.  f1:A  f2:A,B  f3:B  f4:B,C  f5:C  f6:C
    # Progressive filling at common level t:
    #   load A = 2t -> full at 1/2;  B = 3t -> 1;  C = 3t -> 8/3.  Min 1/2: freeze f1,f2.
    #   B: residual 3 - 1/2 = 5/2 over f3,f4 -> 5/4;  C: 8/3.  Min 5/4: freeze f3,f4.
    #   C: residual 8 - 5/4 = 27/4 over f5,f6 -> 27/8.
    # Bottlenecks: A for f1,f2; B for f3,f4; C for f5,f6.
    caps = {"A": 1.0, "B": 3.0, "C": 8.0}
    flows = [{"A": 1}, {"A": 1, "B": 1}, {"B": 1}, {"B": 1, "C": 1}, {"C": 1}, {"C": 1}]
    assert max_min_fair(flows, caps) == pytest.approx(
        [0.5, 0.5, 1.25, 1.25, 27 / 8, 27 / 8], rel=1e-15)


def test_bertsekas_gallager_four_sessions_five_links():
    # After B&G §6.5.2: links L1..L4 of capacity 1, L5 of capacity 10.
    #   s0: L1,L3   s1: L2,L3   s2: L3,L4   s3: L4,L5
    # L3 carries three sessions: 3t = 1 -> t = 1/3 freezes s0,s1,s2 (bottleneck L3).
    # L4 has 1 - 1/3 = 2/3 left for s3 alone; L5 would allow 10 -> s3 = 2/3 (bottleneck L4).
    caps = {"L1": 1.0, "L2": 1.0, "L3": 1.0, "L4": 1.0, "L5": 10.0}
    flows = [{"L1": 1, "L3": 1}, {"L2": 1, "L3": 1}, {"L3": 1, "L4": 1}, {"L4": 1, "L5": 1}]
    assert max_min_fair(flows, caps) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 2 / 3], rel=1e-15)


def test_multiplicity_two_halves_the_rate():
    assert max_min_fair([{"l": 2}], {"l": 10.0}) == [5.0]


def test_multiplicity_weights_the_load_not_the_share():
    # f0 puts 2 streams on the link, f1 one: load 2r + r = 9 -> r = 3 for both.
    rates = max_min_fair([{"l": 2}, {"l": 1}], {"l": 9.0})
    assert rates == pytest.approx([3.0, 3.0], rel=1e-15)


def test_fractional_multiplicity():
    # A ring all-reduce over n=4 moves 2(n-1)/n = 1.5 of its bytes over each hop.
    assert max_min_fair([{"hop": 1.5}], {"hop": 300.0}) == pytest.approx([200.0], rel=1e-15)


def test_ideal_link_does_not_constrain():
    rates = max_min_fair([{"ideal": 1}, {"ideal": 1, "slow": 1}], {"ideal": math.inf,
                                                                    "slow": 4.0})
    assert rates == [math.inf, 4.0]


def test_flow_without_links_is_unconstrained():
    assert max_min_fair([{}, {"l": 1}], {"l": 2.0}) == [math.inf, 2.0]


def test_zero_flows():
    assert max_min_fair([], {"l": 1.0}) == []
    rates = solve_max_min(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                          np.ones(3), 0)
    assert rates.shape == (0,)


def test_solver_without_entries_gives_inf_to_everyone():
    rates = solve_max_min(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                          np.ones(2), 3)
    assert rates.tolist() == [math.inf] * 3


def test_solver_array_form_matches_convenience_form():
    # Same instance as the docstring: entries (flow, link, mult).
    rates = solve_max_min(
        np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]), np.array([1.0, 1.0, 1.0, 1.0]),
        np.array([10.0, 4.0]), 3)
    assert rates.tolist() == pytest.approx([8.0, 2.0, 2.0], rel=1e-15)


def test_solver_does_not_modify_its_inputs():
    capacity = np.array([10.0, 4.0])
    mult = np.array([1.0, 1.0, 2.0, 1.0])
    solve_max_min(np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]), mult, capacity, 3)
    assert capacity.tolist() == [10.0, 4.0]
    assert mult.tolist() == [1.0, 1.0, 2.0, 1.0]


def test_unused_links_do_not_matter():
    assert max_min_fair([{"a": 1}], {"a": 3.0, "b": 1e-9, "c": math.inf}) == [3.0]


@pytest.mark.parametrize("mult", [0, -1, -0.5])
def test_non_positive_multiplicity_is_rejected(mult):
    with pytest.raises(ValueError, match="multiplicity"):
        max_min_fair([{"a": mult}], {"a": 1.0})
