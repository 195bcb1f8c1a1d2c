"""Faults: routes around what is down, adaptive routing around what is degraded, NIC
re-mapping, capacity changes while flows run, and clear errors for bad fault specs."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams, Communicator
from distsim_gpu.simcore import Simulation
from distsim_gpu.simcore.errors import ConfigError, SimulationError, TopologyError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.faults import (
    apply_faults,
    check_faults_in_run,
    check_job_survives,
    fault_links,
    faults_from_list,
)
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig
from hypothesis import given, settings
from hypothesis import strategies as st


def tree(routing: str = "adaptive", nodes: int = 4):
    """Two leaves (16 NICs each), two spines: every leaf-to-leaf byte has two paths."""
    return build_cluster({"preset": "dgx-a100", "nodes": nodes,
                          "fabric": {"kind": "fat-tree", "nics_per_leaf": 16, "spines": 2,
                                     "routing": routing}})


def faulted(topo, *specs):
    return apply_faults(topo, faults_from_list(list(specs), topo))


def bottleneck_s_per_byte(topo, src, dst, rail=0):
    """Seconds per byte of a lone transfer on the route (its most loaded link)."""
    route = topo.route(src, dst, rail=rail)
    return max(w / topo.link(*i).bandwidth_bytes_per_s
               for i, w in zip(route.links, route.weights))


def all_reduce_s(topo, size=64 * 2**20):
    sim = Simulation()
    comm = Communicator(sim, topo, CommParams(protocol="simple"))
    proc = comm.collective("all_reduce", list(topo.gpus), size, algorithm="ring")
    sim.run()
    return proc.value.duration_s


def test_no_faults_is_the_same_topology():
    topo = tree()
    assert apply_faults(topo, ()) is topo


def test_down_link_is_routed_around_by_static_routing():
    topo = tree("dmodk")
    before = topo.route("n0.gpu0", "n3.gpu0", rail=0).links
    cut = next(i for i in before if i[0] == "leaf0")
    after = faulted(topo, {"target": "link", "name": f"{cut[0]} -> {cut[1]}"})
    links = after.route("n0.gpu0", "n3.gpu0", rail=0).links
    assert cut not in links and (cut[1], cut[0]) not in links
    assert any(i[0] == "leaf0" and i[1].startswith("spine") for i in links)


def test_degraded_link_with_spare_path_costs_nothing_under_adaptive_routing():
    topo = tree("adaptive")
    slow = faulted(topo, {"target": "link", "name": "leaf0 -> spine0", "kind": "degraded",
                          "bandwidth_factor": 0.01})
    assert ("leaf0", "spine0") not in slow.route("n0.gpu0", "n3.gpu0", rail=0).links
    # Converged: as fast as the healthy fabric, for a lone transfer and a whole ring.
    assert bottleneck_s_per_byte(slow, "n0.gpu0", "n3.gpu0") == pytest.approx(
        bottleneck_s_per_byte(topo, "n0.gpu0", "n3.gpu0"), rel=1e-12)
    assert all_reduce_s(slow) == pytest.approx(all_reduce_s(topo), rel=1e-9)


def test_static_routing_keeps_a_degraded_link():
    topo = tree("dmodk")
    name = "leaf0 -> spine0"
    slow = faulted(topo, {"target": "link", "name": name, "kind": "degraded",
                          "bandwidth_factor": 0.5, "added_latency_s": 1e-6})
    # Some destination's D-mod-K route still climbs through spine0, now at half speed.
    routes = [slow.route("n0.gpu0", f"n{n}.gpu{g}", rail=0) for n in (2, 3) for g in range(8)]
    through = [r for r in routes if ("leaf0", "spine0") in r.links]
    assert through
    assert slow.link("leaf0", "spine0").bandwidth_bytes_per_s == pytest.approx(
        0.5 * topo.link("leaf0", "spine0").bandwidth_bytes_per_s)
    healthy = topo.route(through[0].src, through[0].dst, rail=0)
    assert through[0].latency_s == pytest.approx(healthy.latency_s + 1e-6)


def test_nic_down_remaps_its_rail_to_the_nearest_nic():
    topo = tree("dmodk")
    after = faulted(topo, {"target": "nic", "name": "n0.nic0", "kind": "down"})
    route = after.route("n0.gpu0", "n3.gpu0", rail=0)
    devices = route.devices
    assert "n0.nic0" not in devices
    assert "n0.nic1" in devices  # the other NIC behind n0.gpu0's PCIe switch
    # Rails of healthy NICs are untouched.
    assert after.route("n0.gpu4", "n3.gpu4", rail=4).links == topo.route(
        "n0.gpu4", "n3.gpu4", rail=4).links
    # The ring all-reduce still runs, no faster than on the healthy fabric.
    assert all_reduce_s(after) >= all_reduce_s(topo) * (1 - 1e-9)


def test_nic_cable_down_is_the_nic_down():
    topo = tree("dmodk")
    after = faulted(topo, {"target": "link", "name": "n0.nic0 -> leaf0"})
    assert "n0.nic0" not in {d.name for d in after.devices()}


def test_partitioned_fabric_names_the_cut():
    topo = tree("dmodk")
    after = faulted(topo, {"target": "switch", "name": "spine0"},
                    {"target": "switch", "name": "spine1"})
    with pytest.raises(TopologyError, match=r"spine0 down.*spine1 down"):
        after.route("n0.gpu0", "n3.gpu0", rail=0)


def test_lost_gpu_stops_the_job_naming_it():
    topo = tree()
    faults = faults_from_list([{"target": "node", "name": "n2"}], topo)
    with pytest.raises(SimulationError, match=r"n2\.gpu0"):
        check_job_survives(faults, topo.gpus, topo)
    check_job_survives(faults, topo.gpus[:8], topo)  # a job on node 0 only runs on


@pytest.mark.parametrize(("spec", "key", "message"), [
    ({"target": "link", "name": "leaf0 -> spine7"}, "faults[0].name", "no link"),
    ({"target": "link", "name": "leaf0 -> spine0", "kind": "degraded",
      "bandwidth_factor": 0}, "faults[0].bandwidth_factor", r"\(0, 1\]"),
    ({"target": "link", "name": "leaf0 -> spine0", "kind": "degraded",
      "bandwidth_factor": -2}, "faults[0].bandwidth_factor", r"\(0, 1\]"),
    ({"target": "nic", "name": "n0.nic9"}, "faults[0].name", "n0.nic7"),
    ({"target": "cable", "name": "x"}, "faults[0].target", "link"),
    ({"target": "gpu", "name": "n0.gpu0", "kind": "degraded"}, "faults[0].kind", "straggler"),
    ({"target": "node", "name": "n9"}, "faults[0].name", "0..3"),
    ({"target": "nic", "name": "n0.nic0", "when": 1}, "faults[0].when", "at_s"),
    ({"name": "n0.nic0"}, "faults[0]", "target"),
])
def test_bad_fault_specs_are_clear_errors(spec, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        faults_from_list([spec], tree(), source="s.yaml")
    assert info.value.key == key
    assert info.value.source == "s.yaml"


def test_fault_after_the_run_is_an_error():
    topo = tree()
    faults = faults_from_list([{"target": "link", "name": "leaf0 -> spine0", "at_s": 2.0}],
                              topo)
    check_faults_in_run(faults, 2.0)
    with pytest.raises(ConfigError, match="after the run") as info:
        check_faults_in_run(faults, 1.5)
    assert info.value.key == "faults[0].at_s"


def test_faults_list_must_be_a_list():
    with pytest.raises(ConfigError, match="list"):
        faults_from_list({"target": "nic"}, tree())


@pytest.mark.parametrize("flows", [1, 300])  # from-scratch solves, and the incremental one
def test_capacity_change_while_flows_run(flows):
    """A link of capacity C halves at t1: a flow of S bytes alone... (or n sharing it)
    finishes at t1 + (S - r·t1) / (r/2) with r = C / n."""
    sim = Simulation()
    net = sim.network
    capacity, size, t1 = 1e9, 1e9, 0.25
    net.add_link("a", capacity)
    done = [net.transfer(["a"], size) for _ in range(flows)]

    def fault():
        yield sim.env.timeout(t1)
        net.set_capacity("a", capacity / 2)

    sim.env.process(fault())
    sim.run()
    rate = capacity / flows
    expected = t1 + (size - rate * t1) / (rate / 2)
    assert all(f.finish_s == pytest.approx(expected, rel=1e-9) for f in done)
    with pytest.raises(SimulationError):
        net.set_capacity("a", 0.0)
    with pytest.raises(SimulationError):
        net.set_capacity("b", 1.0)


def test_fault_links_of_a_nic_are_its_network_port():
    topo = tree()
    links = fault_links(topo, faults_from_list([{"target": "nic", "name": "n1.nic2"}],
                                               topo)[0])
    assert sorted(links) == [("leaf0", "n1.nic2"), ("n1.nic2", "leaf0")]


_TREES = {routing: tree(routing, nodes=4) for routing in ("adaptive", "dmodk", "ecmp")}
_FABRIC_LINKS = sorted({tuple(sorted(link.id)) for link in _TREES["dmodk"].links()
                        if link.kind == "network"})
_HEALTHY_S = {routing: all_reduce_s(topo) for routing, topo in _TREES.items()}


@settings(max_examples=15, deadline=None)
@given(routing=st.sampled_from(sorted(_TREES)), cut=st.sampled_from(_FABRIC_LINKS),
       kind=st.sampled_from(["down", "degraded"]), factor=st.floats(0.05, 1.0))
def test_removing_or_degrading_a_link_never_makes_a_ring_faster(routing, cut, kind, factor):
    spec = {"target": "link", "name": f"{cut[0]} -> {cut[1]}", "kind": kind}
    if kind == "degraded":
        spec["bandwidth_factor"] = factor
    assert all_reduce_s(faulted(_TREES[routing], spec)) >= _HEALTHY_S[routing] * (1 - 1e-9)


def iteration_s(topo, uniform):
    """A 3D-parallel iteration over the whole tree: TP in nodes, PP and DP across."""
    spec = IterationSpec(topo, uniform.model, ParallelConfig(tp=8, pp=2, dp=2),
                         TrainingConfig(micro_batch=1, global_batch=8), uniform.costs,
                         uniform.gpu, comm=CommParams(protocol="simple"))
    return simulate_iteration(spec).iteration_time_s


@settings(max_examples=6, deadline=None)
@given(cut=st.sampled_from(_FABRIC_LINKS), routing=st.sampled_from(["adaptive", "dmodk"]))
def test_removing_a_link_never_makes_an_iteration_faster(cut, routing, uniform):
    healthy = iteration_s(_TREES[routing], uniform)
    after = faulted(_TREES[routing], {"target": "link", "name": f"{cut[0]} -> {cut[1]}"})
    assert iteration_s(after, uniform) >= healthy * (1 - 1e-9)


@pytest.mark.parametrize("flows", [2, 300])
def test_capacity_down_and_back_with_a_bystander(flows):
    """Halved at t1, restored at t2: the flows on the link lose (t2 - t1)·r/2 bytes of
    progress; a flow on another link does not notice."""
    sim = Simulation()
    net = sim.network
    capacity, size, t1, t2 = 1e9, 1e9, 0.5, 1.5
    net.add_link("a", capacity)
    net.add_link("b", capacity)
    on_a = [net.transfer(["a"], size) for _ in range(flows)]
    bystander = net.transfer(["b"], size)

    def fault():
        yield sim.env.timeout(t1)
        net.set_capacity("a", capacity / 2)
        yield sim.env.timeout(t2 - t1)
        net.set_capacity("a", capacity)

    sim.env.process(fault())
    sim.run()
    rate = capacity / flows
    left = size - rate * t1 - rate / 2 * (t2 - t1)
    assert all(f.finish_s == pytest.approx(t2 + left / rate, rel=1e-9) for f in on_a)
    assert bystander.finish_s == pytest.approx(size / capacity, rel=1e-12)
