"""Communicator.solo_usages: the link usage of a call that is timed, not run, for any plan."""

from __future__ import annotations

from dataclasses import replace

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.topology import build_cluster


@pytest.fixture
def comm() -> Communicator:
    topology = build_cluster({"preset": "switch", "gpus": 4, "link_bandwidth": "100 GB/s"})
    return Communicator(Simulation(), topology, CommParams(protocol="simple").ideal())


def test_a_coflow_of_two_steps_carries_the_bytes_of_both(comm):
    ring = comm.plan("all_reduce", comm.topology.gpus, algorithm="ring", protocol="simple")
    ((_, once),) = comm.solo_usages(ring, 1e8, fidelity="coflow")
    ((_, twice),) = comm.solo_usages(replace(ring, steps=ring.steps * 2), 1e8,
                                     fidelity="coflow")
    assert twice.bytes == pytest.approx(2 * once.bytes)
    assert twice.duration_s == pytest.approx(2 * once.duration_s)
    # Ring all-reduce: each GPU's link carries 2(n-1)/n of the size each way.
    assert once.bytes.max() == pytest.approx(2 * 3 / 4 * 1e8)


def test_a_call_on_one_gpu_uses_no_link(comm):
    alone = comm.plan("all_reduce", comm.topology.gpus[:1], algorithm="ring",
                      protocol="simple")
    ((latency_s, usage),) = comm.solo_usages(alone, 1e8, fidelity="coflow")
    assert (latency_s, usage.duration_s, usage.bytes.size) == (0.0, 0.0, 0)
