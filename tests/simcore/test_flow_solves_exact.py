"""The flow network's per-solve and per-flow shortcuts change nothing: solves kept by
their flows' link sets give each flow its own rate (the key is as fine as the rates'
inputs), a finished flow is freed without the cyclic garbage collector, and the link
statistics' sort by link is the same permutation however the links are counted."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.network import Flow, FlowNetwork


def _network(capacities: dict[str, float]) -> tuple[Simulation, FlowNetwork]:
    sim = Simulation()
    for link, capacity in capacities.items():
        sim.network.add_link(link, capacity)
    return sim, sim.network


def _finish_times(sim: Simulation, flows: list) -> list[float]:
    sim.run()
    return [flow.finish_s for flow in flows]


def test_a_kept_solve_tells_link_sets_apart_by_multiplicity():
    # Same link, multiplicity 1 then 2: alone on a 4 B/s link the rates are 4 and 2, so
    # 8 B take 2 s and then 4 s.  A key by the links alone would reuse the first rate.
    sim, net = _network({"l": 4.0})
    once, twice = net.link_set({"l": 1.0}), net.link_set({"l": 2.0})
    first = net.transfer(once, 8.0)
    sim.run()
    second = net.transfer(twice, 8.0)
    assert _finish_times(sim, [first, second]) == [2.0, 6.0]


def test_a_kept_solve_gives_each_flow_its_own_rate_in_either_order():
    # x crosses a (1 B/s) and b; y crosses b (4 B/s) twice.  Max-min: x is held at 1 by a,
    # y gets (4 - 1) / 2 = 1.5: 3 B each, y done at 2 s, x (alone, still 1 B/s) at 3 s.
    # Started x-first and then y-first, the component's flows come in the other order: a
    # key that ignored the order would swap their rates.
    sim, net = _network({"a": 1.0, "b": 4.0})
    xs, ys = net.link_set(["a", "b"]), net.link_set({"b": 2.0})
    x, y = net.transfer(xs, 3.0), net.transfer(ys, 3.0)
    assert _finish_times(sim, [x, y]) == [3.0, 2.0]
    y2, x2 = net.transfer(ys, 3.0), net.transfer(xs, 3.0)
    assert _finish_times(sim, [x2, y2]) == [6.0, 5.0]
    assert len(net._solved) == 3  # (x, y), (y, x) and x alone


def test_a_capacity_change_drops_the_kept_solves():
    # 8 B on a 4 B/s link: 2 s; after the link drops to 1 B/s the same link set takes 8 s.
    sim, net = _network({"l": 4.0})
    links = net.link_set(["l"])
    first = net.transfer(links, 8.0)
    sim.run()
    net.set_capacity("l", 1.0)
    second = net.transfer(links, 8.0)
    assert _finish_times(sim, [first, second]) == [2.0, 10.0]


def test_repeated_components_are_solved_once():
    sim, net = _network({"a": 2.0, "b": 2.0})
    # 1 B over a and b, 2 B over b: 1 B/s each until the first is done at 1 s, then the
    # second alone at 2 B/s for 0.5 s; every round the same two components.
    first, second = net.link_set(["a", "b"]), net.link_set(["b"])
    for round_ in range(50):
        flows = [net.transfer(first, 1.0), net.transfer(second, 2.0)]
        assert _finish_times(sim, flows) == [1.5 * round_ + 1.0, 1.5 * round_ + 1.5]
    assert net.solves == 150  # both started, the first done, the second done
    assert len(net._solved) == 2


@contextmanager
def _no_cycle_collector() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _live_flows() -> int:
    """Flows the garbage collector tracks (a Flow has no weak references: slots)."""
    return sum(isinstance(thing, Flow) for thing in gc.get_objects())


def test_a_finished_flow_and_its_event_are_freed_by_reference_counting():
    # The event's value is the flow and the flow named the event: a cycle that only the
    # collector freed (7 % of a large run's CPU).  With the collector off, both go as soon
    # as nobody holds them.
    with _no_cycle_collector():
        sim, net = _network({"l": 1.0})
        before = _live_flows()
        flow = net.transfer(["l"], 2.0, 0.5)
        event_ref = weakref.ref(flow.done)
        assert _live_flows() == before + 1
        sim.run()
        net.link_stats()  # finished flows' bytes are counted in batches: flush them
        assert flow.finish_s == 2.5
        del flow
        assert event_ref() is None and _live_flows() == before


def test_done_reads_the_same_after_its_event_was_freed():
    with _no_cycle_collector():
        sim, net = _network({"l": 1.0})
        flow = net.transfer(["l"], 2.0)
        sim.run()
        done = flow.done  # made again: nobody held the original
        assert done.triggered and done.processed and done.ok and done.value is flow
        assert flow.done is done

        def waiter():
            got = yield flow.done  # an event already processed resumes at once
            assert got is flow
            return sim.now

        process = sim.env.process(waiter())
        sim.run()
        assert process.value == 2.0


def test_done_is_the_event_a_waiter_holds():
    sim, net = _network({"l": 1.0})
    flow = net.transfer(["l"], 2.0)
    held = flow.done
    sim.run()
    assert flow.done is held and held.value is flow


@pytest.mark.parametrize("padding", [0, 70_000])
def test_link_statistics_are_the_same_below_and_above_65536_links(padding):
    # The statistics' batch sorts its entries by link with 16-bit keys while every link
    # index fits them (a radix sort): a stable sort's permutation is the same either way.
    # Two networks with the same links 0..11, one padded to more than 65,536 links.
    def run(pad: int) -> list:
        sim, net = _network({f"l{i}": 1e9 * (1 + i % 3) for i in range(12)})
        for i in range(pad):
            net.add_link(("pad", i), 1.0)
        rng = np.random.default_rng(5)
        for _ in range(300):
            chosen = rng.choice(12, size=int(rng.integers(1, 5)), replace=False)
            net.transfer([f"l{i}" for i in chosen], float(rng.uniform(1, 1e9)),
                         float(rng.uniform(0, 1e-2)))
        sim.run()
        return [net.link_stats()[f"l{i}"] for i in range(12)]

    assert run(padding) == run(0)
