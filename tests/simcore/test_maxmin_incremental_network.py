"""FlowNetwork on the incremental solver's path (many flows at once): bytes conserved on
every link, and the rates a flow reports mid-run equal those of solves from scratch."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from distsim_gpu.simcore import network as network_module
from distsim_gpu.simcore.network import FlowNetwork


def build(seed: int, num_flows: int, samples: list[float] | None = None):
    """Random flows over hosts -> 4 uplinks -> core: most start at 0, the rest later
    (some at shared instants, some after a latency).  ``samples``: times at which every
    transferring flow's rate and bytes left are recorded."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    net = FlowNetwork(env)
    for h in range(16):
        net.add_link(("up", h), float(rng.choice([1.0, 2.0])))
        net.add_link(("down", h), float(rng.choice([1.0, 2.0])))
    for g in range(4):
        net.add_link(("agg", g), 4.0)
    net.add_link("core", 6.0)
    flows = []

    def start(delay: float, links: dict, size: float, latency: float):
        yield env.timeout(delay)
        flows.append(net.transfer(links, size, latency))

    for _ in range(num_flows):
        a, b = (int(x) for x in rng.choice(16, size=2, replace=False))
        links = {("up", a): 1.0, ("down", b): 1.0}
        if a // 4 != b // 4:
            links.update({("agg", a // 4): 1.0, ("agg", b // 4): 2.0, "core": 1.0})
        delay = 0.0 if rng.random() < 0.6 else float(rng.integers(1, 40))
        env.process(start(delay, links, float(rng.uniform(1, 20)),
                          float(rng.choice([0.0, 0.25]))))
    seen: list[list[tuple[int, float, float]]] = []

    def sample(at: float):
        yield env.timeout(at)
        seen.append([(f.id, f.rate_bytes_per_s, f.remaining_bytes) for f in flows
                     if f.finish_s is None and f.transfer_start_s is not None])

    for at in samples or []:
        env.process(sample(at))
    return env, net, flows, seen


def test_every_link_carries_the_integral_of_its_load():
    env, net, flows, _ = build(0, 700)
    carried: dict[int, float] = {}
    last: dict[int, tuple[float, float]] = {}

    def listener(now: float, links: list[int], loads: np.ndarray) -> None:
        for link, load in zip(links, loads.tolist()):
            since, before = last.get(link, (now, 0.0))
            carried[link] = carried.get(link, 0.0) + before * (now - since)
            last[link] = (now, load)

    net.add_listener(listener)
    env.run()
    assert net._incremental is None and net.solves > 700  # it ran, and handed back
    assert all(load == 0.0 for _, load in last.values())
    for index, link_id in enumerate(net.link_ids):
        assert carried.get(index, 0.0) == pytest.approx(net.link_bytes(link_id), rel=1e-9)
    assert sum(f.size_bytes for f in flows) == pytest.approx(
        sum(net.link_bytes(("up", h)) for h in range(16)), rel=1e-12)


def test_rates_read_mid_run_equal_solves_from_scratch(monkeypatch):
    # Flow.rate_bytes_per_s reads through to the network's arrays while the incremental
    # solver runs.
    times = [0.5, 3.0, 17.25]
    monkeypatch.setattr(network_module, "_INCREMENTAL_FROM", 64)
    env, _, _, fast = build(1, 300, times)
    env.run()
    monkeypatch.setattr(network_module, "_INCREMENTAL_FROM", 10**9)
    env, _, _, slow = build(1, 300, times)
    env.run()
    assert len(fast) == len(slow) == len(times)
    for mine, theirs in zip(fast, slow):
        assert len(mine) == len(theirs) > 64  # the incremental solver was running
        for (i, rate, left), (j, rate_s, _) in zip(mine, theirs):
            assert i == j
            assert rate == pytest.approx(rate_s, rel=1e-9)
            assert 0 < left < 20  # bytes left of a transfer under 20 bytes
