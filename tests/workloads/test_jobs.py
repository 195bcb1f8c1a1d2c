"""Several jobs on one fabric: disjoint on a non-blocking tree each runs as alone; on one
shared bottleneck each gets half of it; placement; timed faults in a run."""

from __future__ import annotations

import pytest
from distsim_gpu.collectives import CommParams
from distsim_gpu.simcore.errors import ConfigError, SimulationError
from distsim_gpu.topology import build_cluster
from distsim_gpu.topology.faults import faults_from_list
from distsim_gpu.workloads.iteration.simulator import IterationSpec, simulate_iteration
from distsim_gpu.workloads.job.jobs import place_jobs, simulate_jobs, simulate_on_fabric
from distsim_gpu.workloads.strategy.parallel import ParallelConfig, TrainingConfig

from tests.conftest import UniformCosts


def fabric(oversubscription: float = 1.0, spines: int = 0):
    """Two leaves of two DGX A100 each; ``spines=1`` with 16:1 oversubscription leaves one
    uplink as fast as one NIC: a shared bottleneck between the leaves."""
    spec = {"kind": "fat-tree", "nics_per_leaf": 16, "routing": "dmodk",
            "oversubscription": oversubscription}
    if spines:
        spec["spines"] = spines
    return build_cluster({"preset": "dgx-a100", "nodes": 4, "fabric": spec})


def dp_job(topo, gpus, uniform):
    """Pure data parallelism, one gradient bucket: compute (µs) then one ring all-reduce."""
    return IterationSpec(topo.job_view(gpus), uniform.model,
                         ParallelConfig(dp=len(gpus), bucket_params=10**12),
                         TrainingConfig(micro_batch=1, global_batch=len(gpus)),
                         UniformCosts(1e-6, 2e-6), uniform.gpu,
                         comm=CommParams(protocol="simple", algorithm="ring").ideal())


def test_identical_jobs_on_disjoint_halves_of_a_non_blocking_fabric_run_as_alone(uniform):
    topo = fabric()
    result = simulate_jobs([("a", dp_job(topo, ["n0.gpu0", "n1.gpu0"], uniform)),
                            ("b", dp_job(topo, ["n2.gpu0", "n3.gpu0"], uniform))])
    for job in result.jobs:
        assert job.shared.iteration_time_s == pytest.approx(job.alone.iteration_time_s,
                                                            rel=1e-12)
        assert job.slowdown == pytest.approx(1.0, rel=1e-12)
    assert result.shared_links == 0


def test_identical_jobs_on_one_shared_bottleneck_each_get_half_of_it(uniform):
    topo = fabric(oversubscription=16, spines=1)
    result = simulate_jobs([("a", dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)),
                            ("b", dp_job(topo, ["n1.gpu0", "n3.gpu0"], uniform))])
    uplink = topo.link("leaf0", "spine0").bandwidth_bytes_per_s
    met = {m.link: m for m in result.meeting_links}
    assert ("leaf0", "spine0") in met
    per_job_bytes = met[("leaf0", "spine0")].bytes_by_job["a"]
    for job in result.jobs:
        # Alone the all-reduce moves its bytes at the uplink's rate; shared at half of it:
        # the iteration grows by exactly one more uplink-time of those bytes.
        extra = job.shared.iteration_time_s - job.alone.iteration_time_s
        assert extra == pytest.approx(per_job_bytes / uplink, rel=1e-6)
    assert met[("leaf0", "spine0")].saturated_s > 0


def test_jobs_are_deterministic(uniform):
    topo = fabric(oversubscription=16, spines=1)
    jobs = [("a", dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)),
            ("b", dp_job(topo, ["n1.gpu0", "n3.gpu0", "n1.gpu1", "n3.gpu1"], uniform))]
    first, second = simulate_jobs(jobs), simulate_jobs(jobs)
    assert first.to_dict() == second.to_dict()


def test_one_job_alone_matches_the_plain_iteration(uniform):
    topo = fabric()
    spec = dp_job(topo, list(topo.gpus), uniform)
    (result,) = simulate_on_fabric([spec])
    assert result.iteration_time_s == simulate_iteration(spec).iteration_time_s


def test_placement_packed_spread_and_explicit():
    topo = build_cluster({"preset": "dgx-a100", "nodes": 8, "fabric": "fat-tree"})
    placed = place_jobs(topo, [("a", 16, "packed"), ("b", 16, "spread"),
                               ("c", 2, ["n7.gpu6", "n7.gpu7"])])
    assert {topo.node_of(g) for g in placed["a"]} == {0, 1}
    assert {topo.node_of(g) for g in placed["b"]} == {2, 5}
    assert placed["c"] == ("n7.gpu6", "n7.gpu7")
    assert not set(placed["a"]) & set(placed["b"])
    with pytest.raises(ConfigError, match="already job"):
        place_jobs(topo, [("a", 1, ["n0.gpu0"]), ("b", 1, ["n0.gpu0"])])
    with pytest.raises(ConfigError, match=r"n0\.gpu1 is listed twice, as entries 1 and 2") as info:
        place_jobs(topo, [("a", 2, "packed"), ("b", 3, ["n0.gpu2", "n0.gpu1", "n0.gpu1"])])
    assert info.value.key == "jobs[1].placement[2]"
    with pytest.raises(ConfigError, match="needs 2 GPUs, the list gives 3"):
        place_jobs(topo, [("c", 2, ["n7.gpu5", "n7.gpu6", "n7.gpu7"])])
    with pytest.raises(ConfigError, match="free") as info:
        place_jobs(topo, [("a", 48, "packed"), ("b", 32, "spread")])
    assert info.value.key == "jobs[1]"
    with pytest.raises(ConfigError, match="placement"):
        place_jobs(topo, [("a", 8, "random")])


def test_timed_degraded_link_slows_the_run_and_late_faults_are_errors(uniform):
    topo = fabric(oversubscription=16, spines=1)
    spec = dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)
    (healthy,) = simulate_on_fabric([spec])
    t = healthy.iteration_time_s
    faults = faults_from_list([{"target": "link", "name": "leaf0 -> spine0",
                                "kind": "degraded", "bandwidth_factor": 0.5,
                                "at_s": t / 2}], topo)
    (slowed,) = simulate_on_fabric([spec], faults)
    # From t/2 on the rest of the all-reduce (nearly all of it) runs at half speed.
    assert slowed.iteration_time_s == pytest.approx(t + (t - t / 2), rel=1e-3)
    late = faults_from_list([{"target": "link", "name": "leaf0 -> spine0", "at_s": 2 * t}],
                            topo)
    with pytest.raises(ConfigError, match="after the run"):
        simulate_on_fabric([spec], late)


def test_timed_down_link_stalls_for_the_subnet_manager_delay(uniform):
    topo = fabric(oversubscription=8, spines=2)
    spec = dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)
    (healthy,) = simulate_on_fabric([spec])
    t = healthy.iteration_time_s
    up = next(i for i in topo.route("n0.gpu0", "n2.gpu0", rail=0).links if i[0] == "leaf0")
    faults = faults_from_list([{"target": "link", "name": f"{up[0]} -> {up[1]}",
                                "at_s": t / 2, "subnet_manager_delay_s": 0.1}], topo)
    (stalled,) = simulate_on_fabric([spec], faults)
    assert stalled.iteration_time_s == pytest.approx(t + 0.1, rel=1e-6)


def test_timed_fault_that_partitions_the_fabric_stops_the_job(uniform):
    topo = fabric(oversubscription=16, spines=1)  # one spine: its cables are cuts
    spec = dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)
    faults = faults_from_list([{"target": "link", "name": "leaf0 -> spine0", "at_s": 1e-3}],
                              topo)
    with pytest.raises(SimulationError, match=r"cuts n0\.gpu0 off from n2\.gpu0"):
        simulate_on_fabric([spec], faults)
    # Not a cut for a job inside leaf 0.
    inside = dp_job(topo, ["n0.gpu0", "n1.gpu0"], uniform)
    simulate_on_fabric([inside], faults_from_list(
        [{"target": "link", "name": "leaf0 -> spine0", "at_s": 1e-6}], topo))


def test_a_gpu_lost_during_the_run_stops_it(uniform):
    topo = fabric()
    spec = dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)
    faults = faults_from_list([{"target": "gpu", "name": "n2.gpu0", "at_s": 1e-3}], topo)
    with pytest.raises(SimulationError, match=r"n2\.gpu0"):
        simulate_on_fabric([spec], faults)


def test_timed_degraded_link_costs_nothing_under_adaptive_routing_with_a_spare_path(uniform):
    spec_tree = {"kind": "fat-tree", "nics_per_leaf": 16, "spines": 2, "oversubscription": 8}
    for routing, slower in (("adaptive", False), ("dmodk", True)):
        topo = build_cluster({"preset": "dgx-a100", "nodes": 4,
                              "fabric": {**spec_tree, "routing": routing}})
        spec = dp_job(topo, ["n0.gpu0", "n2.gpu0"], uniform)
        (healthy,) = simulate_on_fabric([spec])
        t = healthy.iteration_time_s
        up = next(i for i in topo.route("n0.gpu0", "n2.gpu0", rail=0).links
                  if i[0] == "leaf0")
        faults = faults_from_list([{"target": "link", "name": f"{up[0]} -> {up[1]}",
                                    "kind": "degraded", "bandwidth_factor": 0.1,
                                    "at_s": t / 2}], topo)
        (after,) = simulate_on_fabric([spec], faults)
        assert (after.iteration_time_s > t * 1.5) is slower
        if not slower:
            assert after.iteration_time_s == pytest.approx(t, rel=1e-9)
