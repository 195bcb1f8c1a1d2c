"""Interval unions and intersections: exact cases and the laws any set of spans obeys."""

from __future__ import annotations

import pytest
from distsim_gpu.simcore.intervals import intersection_length, length, union, union_length
from hypothesis import given
from hypothesis import strategies as st


def test_union_merges_overlaps_and_drops_empty_spans():
    merged = union([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (4.0, 4.0), (7.0, 6.5)])
    assert merged == [(0.0, 3.0), (5.0, 6.0)]
    assert length(merged) == 4.0
    assert union_length([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0


def test_touching_spans_merge_and_nested_ones_vanish():
    assert union([(0.0, 1.0), (1.0, 2.0), (0.5, 0.75)]) == [(0.0, 2.0)]
    assert union_length([(0.0, 1.0), (1.0, 2.0), (0.5, 0.75)]) == 2.0


def test_intersection_of_two_unions():
    a = union([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)])
    assert intersection_length(a, union([(2.5, 5.5)])) == pytest.approx(1.0)
    assert intersection_length(a, []) == 0.0


spans = st.lists(st.tuples(st.integers(-50, 50), st.integers(-10, 30)).map(
    lambda s: (float(s[0]), float(s[0] + s[1]))), max_size=25)  # some reversed: empty


@given(spans)
def test_both_ways_of_measuring_a_union_agree_and_bound_it(intervals):
    covered = union_length(intervals)
    assert covered == length(union(intervals))
    assert covered <= sum(max(b - a, 0.0) for a, b in intervals)
    assert covered >= max((b - a for a, b in intervals), default=0.0)


@given(spans, spans)
def test_inclusion_exclusion(a, b):
    ua, ub = union(a), union(b)
    both = intersection_length(ua, ub)
    assert length(union(a + b)) == length(ua) + length(ub) - both
    assert both <= min(length(ua), length(ub))
