"""The incremental max-min solver equals a from-scratch solve after every change.

Random sequences of flows starting and ending (hypothesis) on random capacities (some
ideal, some equal so that levels tie), compared after every step with
:func:`solve_max_min` over the flows alive then; and small cases by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from distsim_gpu.simcore import maxmin_incremental
from distsim_gpu.simcore.maxmin import solve_max_min
from distsim_gpu.simcore.maxmin_incremental import IncrementalMaxMin
from hypothesis import given, settings
from hypothesis import strategies as st

RTOL = 1e-12

capacities = st.one_of(
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, 2.0, 10.0, 100.0]),
    st.just(math.inf),
)
multiplicities = st.one_of(
    st.sampled_from([1.0, 2.0, 3.0]),
    st.floats(min_value=0.05, max_value=8.0, allow_nan=False, allow_infinity=False),
)


@st.composite
def histories(draw):
    """1-12 links; 1-25 steps, each starting 0-4 flows (random link subsets) and ending
    a random subset of the flows alive."""
    num_links = draw(st.integers(1, 12))
    caps = draw(st.lists(capacities, min_size=num_links, max_size=num_links))
    flow = st.dictionaries(st.integers(0, num_links - 1), multiplicities, min_size=1)
    steps = draw(st.lists(st.tuples(st.lists(flow, max_size=4),
                                    st.lists(st.booleans(), max_size=40)),
                          min_size=1, max_size=25))
    return np.array(caps, float), steps


def scratch(caps: np.ndarray, flows: list[dict[int, float]]) -> np.ndarray:
    entry_flow = [i for i, f in enumerate(flows) for _ in f]
    entry_link = [link for f in flows for link in f]
    entry_mult = [mult for f in flows for mult in f.values()]
    return solve_max_min(np.array(entry_flow, np.int64), np.array(entry_link, np.int64),
                         np.array(entry_mult, float), caps, len(flows))


def add(solver: IncrementalMaxMin, flow: dict[int, float]) -> int:
    return solver.add(np.array(list(flow), np.int64), np.array(list(flow.values())))


def replay(solver: IncrementalMaxMin, steps):
    """Apply each step's departures (``ends`` flags the live flows in order) and arrivals,
    solve, and yield the live flows by handle with what the solve reported."""
    alive: dict[int, dict[int, float]] = {}
    for starts, ends in steps:
        for handle, end in zip(list(alive), ends):
            if end:
                solver.remove(handle)
                del alive[handle]
        for flow in starts:
            alive[add(solver, flow)] = flow
        yield alive, solver.solve()


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=RTOL, atol=0)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_rates_equal_a_solve_from_scratch_after_every_step(history):
    caps, steps = history
    solver = IncrementalMaxMin(caps)
    for alive, (handles, rates, links, loads) in replay(solver, steps):
        assert len(solver) == len(alive)
        if not alive:
            continue
        want = scratch(caps, list(alive.values()))
        assert_same(np.array([solver.rate(h) for h in alive]), want)
        # What solve reports: rates of the flows it solved, loads of the links it touched.
        assert set(handles.tolist()) <= set(alive)
        for handle, rate in zip(handles.tolist(), rates.tolist()):
            assert rate == solver.rate(handle)
        for link, load in zip(links.tolist(), loads.tolist()):
            if math.isinf(caps[link]):
                continue  # an ideal link may carry flows of infinite rate
            expect = sum(f[link] * solver.rate(h) for h, f in alive.items()
                         if link in f)
            assert load == pytest.approx(expect, rel=1e-12, abs=0)


def test_an_ended_flow_frees_its_bottleneck_for_the_others():
    # Link 0 (cap 6) shared by a, b, c; link 1 (cap 1) under c only: c gets 1, a and b
    # 2.5 each.  When a ends, b takes the rest: 5.
    solver = IncrementalMaxMin(np.array([6.0, 1.0]))
    a = add(solver, {0: 1.0})
    b = add(solver, {0: 1.0})
    c = add(solver, {0: 1.0, 1: 1.0})
    solver.solve()
    assert [solver.rate(h) for h in (a, b, c)] == [2.5, 2.5, 1.0]
    solver.remove(a)
    handles, _rates, links, loads = solver.solve()
    assert solver.rate(b) == 5.0 and solver.rate(c) == 1.0
    assert c not in handles.tolist()  # its rate is below a's: held, not re-solved
    assert dict(zip(links.tolist(), loads.tolist()))[0] == 6.0


def test_a_new_flow_slows_only_the_flows_it_shares_a_bottleneck_with():
    # Two separate links; a flow on link 1 does not touch the flow on link 0.
    solver = IncrementalMaxMin(np.array([4.0, 4.0]))
    a = add(solver, {0: 1.0})
    b = add(solver, {1: 1.0})
    solver.solve()
    c = add(solver, {1: 2.0})  # multiplicity 2: b + 2c = 4 at b = c
    handles, *_ = solver.solve()
    assert solver.rate(a) == 4.0
    assert solver.rate(b) == pytest.approx(4 / 3, rel=1e-15)
    assert solver.rate(c) == pytest.approx(4 / 3, rel=1e-15)
    assert a not in handles.tolist()


def test_handles_are_reused_and_many_ends_compact_the_entries():
    caps = np.array([10.0, 20.0, 30.0])
    solver = IncrementalMaxMin(caps)
    alive = {}
    rng = np.random.default_rng(1)
    for _ in range(3000):  # enough ends to compact the entry arrays several times
        flow = {int(link): 1.0 for link in rng.choice(3, size=2, replace=False)}
        alive[add(solver, flow)] = flow
        if len(alive) > 5:
            victim = next(iter(alive))
            solver.remove(victim)
            del alive[victim]
        solver.solve()
    assert_same(np.array([solver.rate(h) for h in alive]), scratch(caps, list(alive.values())))
    assert max(alive) < 64


def test_links_added_later_take_part():
    solver = IncrementalMaxMin(np.array([1.0]))
    a = add(solver, {0: 1.0})
    solver.solve()
    solver.set_capacity(np.array([1.0, 0.25]))
    b = add(solver, {0: 1.0, 1: 1.0})
    solver.solve()
    assert (solver.rate(a), solver.rate(b)) == (0.75, 0.25)


@st.composite
def hard_histories(draw):
    """As :func:`histories`, with links of capacity 0 and flows that end in the step
    after they start, so arrivals and departures interleave."""
    caps, steps = draw(histories())
    zero = draw(st.lists(st.booleans(), min_size=caps.size, max_size=caps.size))
    caps = np.where(np.array(zero) & (np.arange(caps.size) % 3 == 0), 0.0, caps)
    return caps, steps


def assert_max_min(caps: np.ndarray, flows: list[dict[int, float]], rates: np.ndarray):
    """No link above its capacity; every flow of finite rate has a saturated link on
    which no flow is faster (the max-min characterisation), within 1e-9."""
    load = np.zeros(caps.size)
    for flow, rate in zip(flows, rates):
        if np.isfinite(rate):
            for link, mult in flow.items():
                load[link] += mult * rate
    assert np.all(load <= caps * (1 + 1e-9) + 1e-300)
    for flow, rate in zip(flows, rates):
        if not np.isfinite(rate):
            assert all(np.isinf(caps[link]) for link in flow)
            continue
        assert any(np.isfinite(caps[link]) and load[link] >= caps[link] * (1 - 1e-9)
                   and all(rate >= other * (1 - 1e-9) for g, other in zip(flows, rates)
                           if link in g)
                   for link in flow), (flow, rate)


@settings(max_examples=60, deadline=None)
@given(hard_histories())
def test_every_step_is_feasible_and_max_min_fair_also_with_zero_capacity(history):
    caps, steps = history
    solver = IncrementalMaxMin(caps)
    for alive, _solved in replay(solver, steps):
        if alive:
            rates = np.array([solver.rate(h) for h in alive])
            assert_max_min(caps, list(alive.values()), rates)
            assert_same(rates, scratch(caps, list(alive.values())))


@pytest.mark.parametrize("small", [False, True])
def test_many_flows_on_a_two_level_tree_equal_a_solve_from_scratch(small, monkeypatch):
    # Ties (equal capacities), flows ending in batches; ``small``: the link index is
    # rebuilt and the entries compacted every few steps.
    if small:
        monkeypatch.setattr(maxmin_incremental, "_UNINDEXED_MAX", 8)
        monkeypatch.setattr(maxmin_incremental, "_COMPACT_MIN", 16)
    rng = np.random.default_rng(3)
    caps = np.concatenate([rng.choice([1.0, 2.0, 3.5], size=64), np.full(8, 6.0), [10.0]])
    solver = IncrementalMaxMin(caps)
    alive: dict[int, dict[int, float]] = {}
    for _step in range(60):
        for _ in range(int(rng.integers(0, 80))):
            a, b = rng.choice(32, size=2, replace=False)
            flow = {int(a): 1.0, 32 + int(b): 1.0}
            if a // 8 != b // 8:
                flow.update({64 + int(a) // 8: 1.0, 64 + int(b) // 8: 2.0, 72: 1.0})
            alive[add(solver, flow)] = flow
        for handle in [h for h in alive if rng.random() < 0.3]:
            solver.remove(handle)
            del alive[handle]
        solver.solve()
        rates = np.array([solver.rate(h) for h in alive])
        assert_same(rates, scratch(caps, list(alive.values())))
    assert solver.rounds >= 60
