"""The per-event hot path's shortcuts change nothing: finished flows' bytes added in
batches sum exactly as one flow at a time, and the environment's inlined ``step`` keeps
simpy's semantics (retired events, failures, ``until``, bound event factories)."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.network import _DONE_BATCH


def _random_flows(seed: int, count: int) -> list[tuple[dict[str, float], float, float, object]]:
    """Flows over 12 shared links: (links with multiplicities, size, latency, tag)."""
    rng = np.random.default_rng(seed)
    flows = []
    for _ in range(count):
        chosen = rng.choice(12, size=int(rng.integers(1, 6)), replace=False)
        links = {f"l{i}": float(rng.choice([1.0, 0.5, 2.0, 1 / 3])) for i in chosen}
        tag = [None, "tp", "dp", 7, "ep"][int(rng.integers(0, 5))]
        flows.append((links, float(rng.uniform(1, 1e9)), float(rng.uniform(0, 1e-3)), tag))
    return flows


@pytest.mark.parametrize("count", [50, _DONE_BATCH + 123])
def test_batched_link_bytes_equal_one_flow_at_a_time(count):
    # The reference is the arithmetic the network did before batching: at each finish,
    # bytes += size × multiplicity on the flow's links, in finishing order.  The sums must
    # agree to the last bit (a batch that summed sizes first would not), and the tags come
    # out in the order they first finished.
    sim = Simulation()
    net = sim.network
    for i in range(12):
        net.add_link(f"l{i}", 1e9 * (1 + i % 3))
    finished = []
    for links, size, latency, tag in _random_flows(3, count):
        flow = net.transfer(links, size, latency, tag)
        flow.done.callbacks.append(lambda event: finished.append(event.value))
    sim.run()
    assert len(finished) == count
    expected = np.zeros(12)
    by_tag: dict[str, np.ndarray] = {}
    for flow in finished:  # done events are processed in the order the flows completed
        carried = flow.size_bytes * np.asarray(flow.multiplicities)
        expected[list(flow.links)] += carried
        if isinstance(flow.tag, str):
            by_tag.setdefault(flow.tag, np.zeros(12))[list(flow.links)] += carried
    stats = net.link_stats()
    for i in range(12):
        assert stats[f"l{i}"].bytes == expected[i]
        assert stats[f"l{i}"].bytes_by_tag == {t: b[i] for t, b in by_tag.items() if b[i] > 0}
        assert net.link_bytes(f"l{i}") == expected[i]
    assert list(stats["l0"].bytes_by_tag) == [t for t in by_tag if by_tag[t][0] > 0]


def test_finished_bytes_count_before_usages_recorded_after_them():
    # A usage recorded after a flow finished is added after it, as before (float sums
    # depend on the order): 0.1 + 0.2 + 0.3 differs from 0.3 + 0.2 + 0.1 in the last bit.
    sim = Simulation()
    net = sim.network
    net.add_link("l", 1.0)
    net.transfer(["l"], 0.1)
    net.transfer(["l"], 0.2)
    sim.run()
    net.record_usage(net.solo_usage(["l"], 0.3))
    assert net.link_bytes("l") == (0.1 + 0.2) + 0.3


def test_factories_are_bound_to_the_environment_and_build_the_same_events():
    env = Simulation().env
    for name in ("timeout", "event", "process", "all_of", "any_of"):
        assert name in vars(env), name  # bound once, not a new bound method per call
    assert isinstance(env.timeout(1.0), simpy.Timeout)


def test_a_retired_event_is_dropped_without_moving_the_clock():
    sim = Simulation()
    env = sim.env
    seen = []
    env.timeout(1.0).callbacks.append(lambda _e: seen.append(env.now))
    late = env.timeout(5.0)
    late.retired = True
    late.callbacks.append(lambda _e: seen.append("retired ran"))
    sim.run()
    assert seen == [1.0]
    assert env.now == 1.0
    assert env.events_processed == 1


def test_a_failed_event_nobody_handles_crashes_the_run_with_a_copy():
    env = Simulation().env
    error = ValueError("boom")
    env.event().fail(error)
    with pytest.raises(ValueError, match="boom") as raised:
        env.run()
    assert raised.value is not error and raised.value.__cause__ is error


def test_run_until_an_event_stops_between_its_callbacks_and_resumes():
    env = Simulation().env
    calls = []
    stop = env.timeout(1.0)
    env.timeout(2.0).callbacks.append(lambda _e: calls.append("later"))
    assert env.run(until=stop) is None
    assert env.now == 1.0 and calls == []
    env.run()
    assert calls == ["later"]
    assert env.now == 2.0
