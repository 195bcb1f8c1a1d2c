"""A communicator's choices (algorithm, protocol, fidelity, collective) are checked at
the call, and a wrong one names the argument and what would be valid."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import Communicator
from distsim_gpu.collectives.algorithms import build_plan
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError
from distsim_gpu.topology import build_cluster


@pytest.fixture
def comm() -> Communicator:
    topo = build_cluster({"preset": "switch", "gpus": 4})
    return Communicator(Simulation(), topo)


@pytest.mark.parametrize(("call", "text"), [
    (lambda c, g: c.collective("all_reduce", g, 1e6, algorithm="rign"),
     "algorithm: unknown algorithm 'rign' (did you mean 'ring'? valid: auto, collnet, nvls, "
     "nvls_tree, pat, pxn, ring, tree)"),
    (lambda c, g: c.collective("all_reduce", g, 1e6, protocol="ll256"),
     "protocol: unknown protocol 'll256' (did you mean 'll128'? "
     "valid: auto, ll, ll128, simple)"),
    (lambda c, g: c.collective("all_reduce", g, 1e6, fidelity="flow"),
     "fidelity: unknown fidelity 'flow' (did you mean 'coflow'? valid: coflow, step)"),
    (lambda c, g: c.send(g[0], g[1], 1e6, protocol="fast"), "protocol: unknown protocol"),
    (lambda c, g: c.pairs_plan([(g[0], g[1])], 1e6, protocol="fast"),
     "protocol: unknown protocol 'fast'"),
])
def test_a_wrong_choice_names_the_argument_and_the_valid_ones(comm, call, text) -> None:
    with pytest.raises(ConfigError) as info:
        call(comm, list(comm.topology.gpus))
    assert str(info.value).startswith(text)


def test_an_unknown_collective_names_the_op(comm) -> None:
    with pytest.raises(ConfigError) as info:
        comm.estimate_s("all_reduc", list(comm.topology.gpus), 1e6)
    assert info.value.key == "op"
    assert str(info.value).startswith("op: unknown collective 'all_reduc' "
                                      "(did you mean 'all_reduce'?")


def test_build_plan_names_an_unknown_collective(comm) -> None:
    with pytest.raises(ConfigError) as info:
        build_plan(comm.topology, list(comm.topology.gpus), "allreduce", algorithm="ring",
                   protocol="simple", params=comm.params)
    assert str(info.value).startswith("op: unknown collective 'allreduce' (did you mean "
                                      "'all_reduce'?")
