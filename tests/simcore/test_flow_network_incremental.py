"""FlowNetwork with many flows at once (the incremental solver) against the same run
solved from scratch at every change: the same finish times and link statistics."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from distsim_gpu.simcore import network as network_module
from distsim_gpu.simcore.network import FlowNetwork


def run(seed: int, num_flows: int, bursts: int = 1) -> tuple[list[float], dict]:
    """Random flows over a two-level tree of links (hosts → 4 uplinks → a core pair),
    most starting together at 0 (or at the start of one of ``bursts`` bursts 1000 s
    apart), some later, some after a latency."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    net = FlowNetwork(env)
    hosts = 24
    for h in range(hosts):
        net.add_link(("up", h), float(rng.choice([1.0, 2.0, 3.5])))
        net.add_link(("down", h), float(rng.choice([1.0, 2.0, 3.5])))
    for g in range(4):
        net.add_link(("agg", g), 6.0)
    net.add_link("core", 10.0)
    net.add_link("ideal", float("inf"))
    flows = []

    def start(delay: float, links: list, size: float, latency: float):
        yield env.timeout(delay)
        flows.append(net.transfer(links, size, latency))

    for i in range(num_flows):
        a, b = rng.choice(hosts, size=2, replace=False)
        links = [("up", int(a)), ("down", int(b)), "ideal"]
        if a // 6 != b // 6:
            links += [("agg", int(a) // 6), ("agg", int(b) // 6), "core"]
        delay = 0.0 if rng.random() < 0.7 else float(rng.uniform(0, 20))
        delay += 1000.0 * (i % bursts)
        latency = float(rng.choice([0.0, 0.5]))
        env.process(start(delay, links, float(rng.uniform(1, 30)), latency))
    env.run()
    return [f.finish_s for f in sorted(flows, key=lambda f: f.id)], net.link_stats()


@pytest.mark.parametrize(("seed", "bursts"), [(0, 1), (1, 1), (2, 1), (3, 2)])
def test_incremental_solves_give_the_finish_times_of_solves_from_scratch(seed, bursts,
                                                                          monkeypatch):
    # Two bursts: the incremental solver takes over, hands back when the network is
    # idle, and takes over again.
    fast_finish, fast_stats = run(seed, 600 * bursts, bursts)
    monkeypatch.setattr(network_module, "_INCREMENTAL_FROM", 10**9)
    slow_finish, slow_stats = run(seed, 600 * bursts, bursts)
    np.testing.assert_allclose(fast_finish, slow_finish, rtol=1e-9)
    for link, stats in slow_stats.items():
        mine = fast_stats[link]
        assert mine.bytes == pytest.approx(stats.bytes, rel=1e-9)
        assert mine.busy_s == pytest.approx(stats.busy_s, rel=1e-9, abs=1e-9)
        assert mine.saturated_s == pytest.approx(stats.saturated_s, rel=1e-6, abs=1e-6)


def test_the_incremental_solver_runs_only_while_many_flows_transfer(monkeypatch):
    made = []
    original = network_module.IncrementalMaxMin

    def spy(capacity):
        made.append(1)
        return original(capacity)

    monkeypatch.setattr(network_module, "IncrementalMaxMin", spy)
    run(0, 100)
    assert not made
    run(0, 600)
    assert len(made) == 1
    made.clear()
    run(3, 1200, bursts=2)
    assert len(made) == 2
