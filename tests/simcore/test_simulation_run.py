"""Simulation: a run owns its clock, network, tracer, rng and ids."""

from __future__ import annotations

import numpy as np
import pytest
from distsim_gpu.simcore import FlowNetwork, Simulation, Tracer
from distsim_gpu.simcore.errors import ConfigError


def test_same_seed_same_draws():
    a, b = Simulation(seed=42), Simulation(seed=42)
    assert np.array_equal(a.rng.random(8), b.rng.random(8))
    assert np.array_equal(a.rng.integers(0, 1000, 8), b.rng.integers(0, 1000, 8))


def test_different_seeds_different_draws():
    assert not np.array_equal(Simulation(seed=1).rng.random(8), Simulation(seed=2).rng.random(8))


def test_draws_do_not_depend_on_other_simulations():
    alone = Simulation(seed=7).rng.random(4)
    noisy = Simulation(seed=7)
    Simulation(seed=7).rng.random(1000)  # another run drawing in between
    assert np.array_equal(noisy.rng.random(4), alone)


def test_next_id_is_unique_and_per_instance():
    a, b = Simulation(), Simulation()
    assert [a.next_id() for _ in range(4)] == [0, 1, 2, 3]
    assert b.next_id() == 0
    assert a.next_id() == 4


def test_parts_are_wired_together():
    sim = Simulation(seed=3, trace=True)
    assert sim.seed == 3
    assert isinstance(sim.network, FlowNetwork) and sim.network.env is sim.env
    assert isinstance(sim.tracer, Tracer) and sim.tracer.enabled
    assert not Simulation().tracer.enabled


def test_run_returns_the_clock_and_moves_flows():
    sim = Simulation()
    sim.network.add_link("l", 4.0)
    flow = sim.network.transfer(["l"], 10.0, latency_s=0.5)
    assert sim.run(until=1.0) == 1.0
    assert sim.now == 1.0
    assert sim.run() == pytest.approx(3.0, rel=1e-12)
    assert flow.finish_s == pytest.approx(0.5 + 10.0 / 4.0, rel=1e-12)


def test_run_until_event():
    sim = Simulation()
    sim.network.add_link("l", 2.0)
    flow = sim.network.transfer(["l"], 6.0)
    assert sim.run(until=flow.done) == pytest.approx(3.0, rel=1e-12)


def test_environment_counts_processed_events():
    # CountingEnvironment "counts the events it processes": a run that finds an empty
    # schedule processed nothing.
    empty = Simulation()
    empty.run()
    assert empty.env.events_processed == 0
    sim = Simulation()
    sim.env.timeout(1.0)
    sim.env.timeout(2.0)
    sim.run()
    assert sim.env.events_processed == 2


@pytest.mark.parametrize("seed", ["a", -1, 1.5, True, None])
def test_a_seed_that_is_not_a_whole_number_is_a_clear_error(seed):
    with pytest.raises(ConfigError, match="seed must be a whole number >= 0") as error:
        Simulation(seed)
    assert error.value.key == "seed"


def test_numpy_integer_seeds_are_accepted():
    assert Simulation(np.int64(7)).seed == 7


@pytest.mark.parametrize("until", [0.0, -1.0, float("nan"), "1 s"])
def test_run_until_must_be_an_event_or_a_later_time(until):
    with pytest.raises(ConfigError, match="after now") as error:
        Simulation().run(until)
    assert error.value.key == "until"
